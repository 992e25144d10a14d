# SPDX-License-Identifier: Apache-2.0
"""The OpenAPI 3.0 document of the console's REST API, served at ``/api/v1/openapi.json``.

Written by hand next to the handlers it describes; ``tests/console/test_schemathesis.py`` calls
every operation with generated input and checks each answer against this document.
"""
from __future__ import annotations

from typing import Any

from tidal.api.node_mode import Mode
from tidal.console.overview import PENDING_REASONS, TIDAL_EVENT_REASONS

__all__ = ["openapi_document"]

API_VERSION = "v1"


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict) -> dict:
    return {**schema, "nullable": True}


_INT = {"type": "integer"}
_NUM = {"type": "number"}
_STR = {"type": "string"}
_BOOL = {"type": "boolean"}
_RESOURCES = {"type": "object", "required": ["cpuMillicores", "memoryBytes"],
              "properties": {"cpuMillicores": _INT, "memoryBytes": _INT}}
_FIELD_ERROR = {"type": "object", "required": ["field", "message"],
                "properties": {"field": _STR, "message": _STR}}
_MODE_NAMES = [str(m) for m in Mode]
_MODE = {"type": "string", "enum": _MODE_NAMES,
         "description": "A node's mode: off (neither label), colocation (colocation.tidal.io/colocation=true), "
                        "oversubscription (colocation.tidal.io/oversubscription=true), or both."}
_LINES = {"type": "array", "items": _STR}
_COUNT = {"type": "integer", "minimum": 0}
_PENDING_REASON = {"type": "string", "enum": list(PENDING_REASONS),
                   "description": "Why a BE pod is Pending: " + "; ".join(f"{k}: {v}" for k, v in
                                                                       PENDING_REASONS.items()) + "."}

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object", "required": ["error"],
        "properties": {"error": {
            "type": "object", "required": ["code", "message"],
            "properties": {"code": _INT, "message": _STR,
                           "fields": {"type": "array", "items": _FIELD_ERROR,
                                      "description": "Each invalid field with the rule it breaks."}}}},
    },
    "WhoAmI": {
        "type": "object", "required": ["username", "groups", "permissions"],
        "properties": {
            "username": _STR, "groups": {"type": "array", "items": _STR},
            "permissions": {"type": "object", "required": ["readNodes", "readPolicy", "writeNodes", "writePolicy"],
                            "properties": {k: _BOOL for k in ("readNodes", "readPolicy", "writeNodes",
                                                               "writePolicy")}}},
    },
    "Node": {
        "type": "object",
        "required": ["name", "ready", "readyMessage", "unschedulable", "colocation", "oversubscription",
                     "mode", "evicting", "allocatable", "batch", "podsByQoS", "capabilities", "featureSupport",
                     "profile"],
        "properties": {
            "name": _STR, "ready": _BOOL, "readyMessage": _STR, "unschedulable": _BOOL,
            "colocation": {**_BOOL, "description": "The colocation switch (label colocation.tidal.io/colocation, "
                                                  "alias volcano.sh/colocation): mode.colocation."},
            "oversubscription": {**_BOOL, "description": "The oversubscription switch (label "
                                                        "colocation.tidal.io/oversubscription, alias "
                                                        "volcano.sh/oversubscription): mode.oversubscription."},
            "mode": _ref("NodeMode"),
            "evicting": {**_BOOL, "description": "Taint colocation.tidal.io/offline-evicting is on."},
            "allocatable": _RESOURCES,
            "batch": {"type": "object", "required": ["allocatable", "requested", "breakdown"],
                      "properties": {"allocatable": _RESOURCES, "requested": _RESOURCES,
                                     "breakdown": _nullable({"type": "object",
                                                             "description": "NodeProfile status.oversell, "
                                                                            "written by the oversell master."})}},
            "podsByQoS": {"type": "object", "required": ["HLS", "LS", "BE", "none"],
                          "properties": {k: _INT for k in ("HLS", "LS", "BE", "none")}},
            "capabilities": {"type": "array", "items": {
                "type": "object", "required": ["name", "supported", "reason"],
                "properties": {"name": _STR, "supported": _BOOL, "reason": _STR}}},
            "featureSupport": {
                "type": "array", "description": "Per policy section that needs kernel or hardware support, "
                                                "whether this node has it (null: its agent did not report "
                                                "the capabilities) and why not, from the capabilities above.",
                "items": {"type": "object", "required": ["section", "supported", "reason", "needs"],
                          "properties": {"section": {**_STR, "description": "e.g. spec.features.cpuBurst"},
                                         "supported": _nullable(_BOOL),
                                         "reason": {**_STR, "description": "The probe's reasons, "
                                                                           "capability: reason each."},
                                         "needs": {"type": "array", "items": _STR,
                                                   "description": "Capability names, as the agent's "
                                                                  "probe writes them."}}}},
            "profile": {"type": "object", "required": ["present", "observedAt", "appliedGeneration", "replayed"],
                        "properties": {"present": _BOOL, "observedAt": _nullable(_STR),
                                       "appliedGeneration": _nullable(_INT),
                                       "replayed": {**_BOOL, "description": "Written by tidal-agent replay "
                                                                            "(condition Replayed=True): the "
                                                                            "capabilities are the replaying "
                                                                            "machine's."}}},
        },
    },
    "NodeMode": {
        "type": "object", "additionalProperties": False,
        "required": ["name", "colocation", "oversubscription", "oversellTypes", "meaning", "evictionRule", "sources",
                     "conflicts", "problems", "agentMode", "evictionAllowed", "evictionReason"],
        "properties": {
            "name": _MODE, "colocation": _BOOL, "oversubscription": _BOOL,
            "oversellTypes": {"type": "array", "items": {"type": "string", "enum": ["cpu", "memory"]},
                              "description": "Annotation colocation.tidal.io/oversell-types (alias "
                                             "volcano.sh/oversubscription-types); default both."},
            "meaning": {**_STR, "description": "What the mode means for BE pods, one line."},
            "evictionRule": {**_STR, "description": "When BE pods are evicted in this mode."},
            "sources": {"type": "object", "additionalProperties": _STR,
                        "description": "Per switch (and oversellTypes), the label or annotation it was read "
                                       "from: a Tidal name, a volcano.sh alias, or default."},
            "conflicts": {**_LINES, "description": "A Tidal name and its alias disagree (Tidal's wins)."},
            "problems": {**_LINES, "description": "Values not understood (counted as absent)."},
            "agentMode": {**_nullable(_MODE), "description": "The mode the node's agent reports acting on "
                                                              "(NodeProfile status.mode.name); null: not reported."},
            "evictionAllowed": {**_nullable(_BOOL), "description": "The agent's word: whether watermark eviction "
                                                                    "may act now (null: not reported)."},
            "evictionReason": {**_nullable(_STR), "description": "Why eviction may or may not act now."}},
    },
    "ModeChoice": {
        "type": "object", "additionalProperties": False, "required": ["name", "meaning", "evictionRule"],
        "properties": {"name": _MODE, "meaning": _STR, "evictionRule": _STR},
    },
    "NodeList": {"type": "object", "required": ["items", "modes"],
                 "properties": {"items": {"type": "array", "items": _ref("Node")},
                                "modes": {"type": "array", "items": _ref("ModeChoice"), "minItems": 4, "maxItems": 4,
                                          "description": "The four modes the switch offers, with their meaning."}}},
    "ColocationRequest": {
        "description": "The mode to set; or, the older form, enabled: true (= colocation+oversubscription, "
                       "the mode in which BE pods get oversold resources) or false (= off). Exactly one of "
                       "the two fields.",
        "oneOf": [{"type": "object", "required": ["mode"], "additionalProperties": False,
                   "properties": {"mode": _MODE}},
                  {"type": "object", "required": ["enabled"], "additionalProperties": False,
                   "properties": {"enabled": {**_BOOL, "description": "Deprecated form: true = "
                                                                      "colocation+oversubscription, false = off."}}}],
    },
    "ColocationResult": {
        "type": "object",
        "required": ["node", "mode", "meaning", "colocation", "oversubscription", "changed", "message", "warnings"],
        "properties": {"node": _STR,
                       "mode": {**_nullable(_MODE), "description": "The node's mode now (its unchanged mode when "
                                                                   "refused; null: no such node)."},
                       "meaning": {**_STR, "description": "What the node will now do, one line (the mode's "
                                                          "meaning)."},
                       "colocation": _BOOL, "oversubscription": _BOOL, "changed": _BOOL,
                       "message": {**_STR, "description": "e.g. \"node X set to mode colocation+oversubscription: "
                                                          "...\", or why not."},
                       "warnings": {**_LINES, "description": "Why the node is not in the requested mode (a "
                                                             "volcano.sh alias label the console does not write), "
                                                             "and label conflicts."},
                       "error": {"type": "object", "required": ["code", "message"],
                                 "properties": {"code": _INT, "message": _STR},
                                 "description": "Present when the switch was refused."}},
    },
    "Policy": {
        "type": "object", "required": ["name", "exists", "generation", "resourceVersion", "spec", "errors"],
        "properties": {"name": _STR, "exists": _BOOL, "generation": _nullable(_INT),
                       "resourceVersion": _nullable(_STR),
                       "spec": {"type": "object", "description": "ColocationPolicy spec, defaults applied."},
                       "errors": {"type": "array", "items": _FIELD_ERROR},
                       "message": _STR},
    },
    "PolicyUpdate": {
        "type": "object", "required": ["spec"], "additionalProperties": False,
        "properties": {"spec": {"type": "object", "description": "A JSON merge patch (RFC 7386) of the stored "
                                                                 "ColocationPolicy spec: fields not sent keep their "
                                                                 "stored value, objects merge key by key, lists and "
                                                                 "other values replace, null resets a field to its "
                                                                 "default. With ?replace=true the spec replaces the "
                                                                 "stored one and fields not sent take their defaults."},
                       "resourceVersion": {**_STR, "nullable": True,
                                           "description": "Optimistic concurrency: refuse with 409 when the "
                                                          "policy changed since (null or absent: no check)."}},
    },
    "PolicySchema": {
        "type": "object", "required": ["fields", "rules"],
        "properties": {
            "fields": {"type": "array", "items": {
                "type": "object", "required": ["path", "type", "description", "default"],
                "properties": {"path": _STR, "type": _STR, "description": _STR, "default": {},
                               "minimum": _NUM, "maximum": _NUM, "enum": {"type": "array", "items": _STR}}}},
            "rules": {"type": "array", "items": {"type": "object", "required": ["path", "message"],
                                                 "properties": {"path": _STR, "message": _STR}}}},
    },
    "Rollout": {
        "type": "object", "required": ["generation", "totalNodes", "appliedNodes", "nodes", "conditions"],
        "properties": {
            "generation": _nullable(_INT), "totalNodes": _INT, "appliedNodes": _INT,
            "nodes": {"type": "array", "items": {
                "type": "object", "additionalProperties": False,
                "required": ["name", "mode", "appliedGeneration", "upToDate", "reason", "replayed"],
                "properties": {"name": _STR, "mode": _MODE, "appliedGeneration": _nullable(_INT),
                               "upToDate": _BOOL, "reason": {**_STR, "description": "Why the node lags "
                                                                                   "(empty: up to date)."},
                               "replayed": {**_BOOL, "description": "Its NodeProfile is written by "
                                                                    "tidal-agent replay."}}}},
            "conditions": {"type": "array", "description": "The policy reconciler's conditions (policy status).",
                           "items": {"type": "object", "required": ["type", "status", "reason", "message"],
                                     "properties": {k: _STR for k in ("type", "status", "reason", "message")}}}},
    },
    "Overview": {
        "type": "object", "additionalProperties": False,
        "required": ["nodes", "bePods", "events", "limits", "pendingReasons"],
        "properties": {
            "nodes": {"type": "array", "items": {
                "type": "object", "additionalProperties": False,
                "required": ["name", "mode", "ready", "unschedulable", "evicting", "batch", "bePods", "agentReported",
                             "replayed", "problems"],
                "properties": {
                    "name": _STR, "mode": _MODE, "ready": _BOOL, "unschedulable": _BOOL,
                    "evicting": {**_BOOL, "description": "Taint colocation.tidal.io/offline-evicting is on."},
                    "batch": {"type": "object", "required": ["allocatable", "requested", "why"],
                              "properties": {"allocatable": _RESOURCES,
                                             "requested": {**_RESOURCES, "description": "By the BE pods bound to "
                                                                                      "the node."},
                                             "why": {
                                                 "type": "object", "additionalProperties": False,
                                                 "required": ["cpuMillicores", "memoryBytes", "notes"],
                                                 "description": "The oversell master's reason per resource "
                                                                "(NodeProfile status.oversell; null before it "
                                                                "decided the node) and its notes.",
                                                 "properties": {"cpuMillicores": _nullable(_STR),
                                                                "memoryBytes": _nullable(_STR),
                                                                "notes": _LINES}}}},
                    "bePods": {"type": "object", "additionalProperties": False, "required": ["running", "starting"],
                               "properties": {"running": _COUNT,
                                              "starting": {**_COUNT, "description": "Bound, containers not "
                                                                                    "running yet."}}},
                    "agentReported": {**_BOOL, "description": "The node has a NodeProfile (its agent reported)."},
                    "replayed": {**_BOOL, "description": "The NodeProfile is written by tidal-agent replay (a "
                                                         "demo node): condition Replayed=True."},
                    "problems": {**_LINES, "description": "What the node's agent cannot apply (NodeProfile "
                                                          "status.policy.problems), e.g. features its kernel "
                                                          "lacks."}}}},
            "bePods": {
                "type": "object", "additionalProperties": False,
                "required": ["running", "pending", "pendingByReason", "pendingPods", "truncated"],
                "properties": {
                    "running": _COUNT, "pending": _COUNT,
                    "pendingByReason": {"type": "object", "additionalProperties": _COUNT,
                                        "description": "Pending BE pods per reason (keys: pendingReasons)."},
                    "pendingPods": {"type": "array", "description": "Oldest first, at most limits.pendingPods.",
                                    "items": {"type": "object", "additionalProperties": False,
                                              "required": ["namespace", "name", "created", "node", "reason",
                                                           "message", "schedulerMessage"],
                                              "properties": {
                                                  "namespace": _STR, "name": _STR,
                                                  "created": {**_STR, "description": "creationTimestamp"},
                                                  "node": {**_nullable(_STR), "description": "Bound node, if any."},
                                                  "reason": _PENDING_REASON,
                                                  "message": {**_STR, "description": "Names the nodes and "
                                                                                     "amounts."},
                                                  "schedulerMessage": {**_STR, "description": "The scheduler's "
                                                                       "PodScheduled=False message, verbatim "
                                                                       "(empty: none)."}}}},
                    "truncated": {**_BOOL, "description": "More pods are pending than pendingPods lists."}}},
            "events": {
                "type": "object", "additionalProperties": False, "required": ["items", "truncated"],
                "properties": {
                    "items": {"type": "array", "description": "Newest first, at most limits.events.",
                              "items": {"type": "object", "additionalProperties": False,
                                        "required": ["reason", "type", "message", "time", "count", "object",
                                                     "source", "node"],
                                        "properties": {
                                            "reason": {"type": "string", "enum": list(TIDAL_EVENT_REASONS)},
                                            "type": _STR, "message": _STR,
                                            "time": {**_STR, "description": "lastTimestamp (or eventTime), "
                                                                            "RFC 3339; empty when absent."},
                                            "count": _INT,
                                            "object": {"type": "object", "required": ["kind", "namespace", "name"],
                                                       "properties": {"kind": _STR, "namespace": _STR,
                                                                      "name": _STR}},
                                            "source": {**_STR, "description": "The component that wrote it."},
                                            "node": {**_STR, "description": "The node it concerns, when known."}}}},
                    "truncated": {**_BOOL, "description": "More Tidal Events exist than items lists."}}},
            "limits": {"type": "object", "additionalProperties": False, "required": ["pendingPods", "events"],
                       "properties": {"pendingPods": _COUNT, "events": _COUNT}},
            "pendingReasons": {"type": "object", "additionalProperties": _STR,
                               "description": "Every pending reason with what it means."}},
    },
    "Workflow": {
        "type": "object", "additionalProperties": False, "required": ["steps"],
        "properties": {"steps": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["title", "link", "docs", "text", "snippets"],
            "properties": {
                "title": _STR,
                "link": {**_nullable(_STR), "description": "A page of the console (#/policy), or null."},
                "docs": {**_nullable(_STR), "description": "Tidal's documentation page (a path in the "
                                                          "repository), or null."},
                "text": _LINES,
                "snippets": {"type": "array", "items": {
                    "type": "object", "additionalProperties": False,
                    "required": ["title", "language", "source", "text"],
                    "properties": {"title": _STR, "language": {"type": "string", "enum": ["yaml", "toml"]},
                                   "source": {**_STR, "description": "The role that writes it, or example."},
                                   "text": _STR}}}}}}},
    },
    "Monitoring": {
        "type": "object", "required": ["scope", "node", "nodes", "start", "end", "step", "panels"],
        "properties": {
            "scope": {"type": "string", "enum": ["cluster", "node"]}, "node": _nullable(_STR),
            "nodes": {**_LINES, "description": "The nodes the charts are filtered to (empty: the whole cluster)."},
            "start": _NUM, "end": _NUM, "step": _NUM,
            "panels": {"type": "array", "items": {
                "type": "object", "required": ["name", "title", "unit", "query", "series"],
                "properties": {
                    "name": _STR, "title": _STR,
                    "unit": {"type": "string", "enum": ["millicores", "bytes", "pods", "percent", "count"]},
                    "query": {**_STR, "description": "PromQL"},
                    "series": {"type": "array", "items": {
                        "type": "object", "required": ["name", "labels", "points"],
                        "properties": {"name": _STR, "labels": {"type": "object",
                                                                "additionalProperties": _STR},
                                       "points": {"type": "array", "items": {
                                           "type": "array", "minItems": 2, "maxItems": 2,
                                           "items": _nullable(_NUM)}}}}}}}}},
    },
}

_ERR = {"content": {"application/json": {"schema": _ref("Error")}}}


_MALFORMED = {"description": "bad request: the field and the rule are named (JSON); a request the HTTP "
                             "parser refuses (e.g. invalid header bytes) gets a plain-text answer",
              "content": {"application/json": {"schema": _ref("Error")}, "text/plain": {"schema": _STR}}}


def _responses(ok: str, *codes: int) -> dict:
    out: dict[str, Any] = {"200": {"description": "OK", "content": {"application/json": {"schema": _ref(ok)}}},
                           "400": _MALFORMED,
                           "401": {"description": "no bearer token, or the API server did not accept it", **_ERR},
                           "403": {"description": "the SubjectAccessReview did not allow the caller", **_ERR},
                           "502": {"description": "the API server or Prometheus failed", **_ERR}}
    for code in codes:
        if code == 400:
            continue
        out[str(code)] = {"description": {404: "not found", 409: "conflict or refused",
                                          413: "the body is larger than 1 MiB",
                                          422: "invalid (each field and rule is named)"}[code], **_ERR}
    return out


_DRY_RUN = {"name": "dryRun", "in": "query", "required": False, "schema": {"type": "string", "enum": ["All"]},
            "description": "Validate and let the API server run the write without persisting it."}
_REPLACE = {"name": "replace", "in": "query", "required": False,
            "schema": {"type": "string", "enum": ["true", "false"], "default": "false"},
            "description": "true: the request's spec replaces the stored spec (fields not sent take their "
                           "defaults); false (default): it is merged into the stored spec."}
_NODE_NAME = {"name": "name", "in": "path", "required": True,
              "schema": {"type": "string", "maxLength": 253,
                         "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"},
              "description": "Node name (lowercase RFC 1123 subdomain)."}
_NODES_FILTER = {
    "name": "nodes", "in": "query", "required": False,
    "schema": {"type": "string", "maxLength": 100 * 254,
               "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
                          r"(,[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)*$"},
    "description": "Comma-separated node names (at most 100): the charts of these nodes only, one line per node "
                   "where a chart can; absent: the whole cluster."}
_RANGE = [
    {"name": "start", "in": "query", "required": False,
     "schema": {"type": "string"}, "description": "Unix seconds or RFC 3339; default end - 1 h."},
    {"name": "end", "in": "query", "required": False,
     "schema": {"type": "string"}, "description": "Unix seconds or RFC 3339; default now."},
    {"name": "step", "in": "query", "required": False,
     "schema": {"type": "string"}, "description": "Seconds between points (>= 1); default about 240 points."},
]


def openapi_document() -> dict[str, Any]:
    json_body = lambda name: {"required": True,  # noqa: E731
                              "content": {"application/json": {"schema": _ref(name)}}}
    return {
        "openapi": "3.0.3",
        "info": {"title": "tidal-console", "version": API_VERSION,
                 "description": "Colocation state of the nodes, the ColocationPolicy and monitoring through "
                                "Prometheus. Callers authenticate with a Kubernetes bearer token; every call "
                                "is authorised by a SubjectAccessReview (read: list nodeprofiles / get "
                                "colocationpolicies; write: patch nodes / update colocationpolicies)."},
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": {
            "/api/v1/whoami": {"get": {"operationId": "whoami", "summary": "The caller and what it may do",
                                       "responses": _responses("WhoAmI")}},
            "/api/v1/overview": {"get": {
                "operationId": "overview",
                "summary": "The cluster's state: per node its mode, batch resources and BE pods; BE pods "
                           "pending and why; Tidal's recent Events (needs list on nodeprofiles, nodes, pods "
                           "and events)",
                "responses": _responses("Overview")}},
            "/api/v1/workflow": {"get": {
                "operationId": "workflow",
                "summary": "The colocation workflow with the configuration the roles write and an example BE Job",
                "responses": _responses("Workflow")}},
            "/api/v1/nodes": {"get": {"operationId": "listNodes", "summary": "Nodes with their colocation state",
                                      "responses": _responses("NodeList")}},
            "/api/v1/nodes/{name}": {"get": {"operationId": "getNode", "parameters": [_NODE_NAME],
                                             "responses": _responses("Node", 400, 404)}},
            "/api/v1/nodes/{name}/colocation": {"put": {
                "operationId": "setColocation", "summary": "Set a node's mode (off, colocation, oversubscription "
                                                      "or colocation+oversubscription)",
                "parameters": [_NODE_NAME, _DRY_RUN], "requestBody": json_body("ColocationRequest"),
                "responses": {**_responses("ColocationResult", 400, 413, 422),
                              "404": {"description": "no such node",
                                      "content": {"application/json": {"schema": _ref("ColocationResult")}}},
                              "409": {"description": "refused: the node is not Ready or is cordoned",
                                      "content": {"application/json": {"schema": _ref("ColocationResult")}}}}}},
            "/api/v1/policy": {
                "get": {"operationId": "getPolicy", "responses": _responses("Policy")},
                "put": {"operationId": "putPolicy",
                        "summary": "Merge the request's spec into the policy (or replace it), validate, write",
                        "parameters": [_DRY_RUN, _REPLACE],
                        "requestBody": json_body("PolicyUpdate"),
                        "responses": _responses("Policy", 400, 409, 413, 422)}},
            "/api/v1/policy/schema": {"get": {"operationId": "policySchema",
                                              "responses": _responses("PolicySchema")}},
            "/api/v1/policy/rollout": {"get": {"operationId": "policyRollout",
                                               "responses": _responses("Rollout")}},
            "/api/v1/monitoring/cluster": {"get": {"operationId": "clusterMonitoring",
                                                   "parameters": [_NODES_FILTER, *_RANGE],
                                                   "responses": _responses("Monitoring", 400)}},
            "/api/v1/monitoring/nodes/{name}": {"get": {"operationId": "nodeMonitoring",
                                                        "parameters": [_NODE_NAME, *_RANGE],
                                                        "responses": _responses("Monitoring", 400)}},
            "/api/v1/openapi.json": {"get": {"operationId": "openapi", "security": [],
                                             "responses": {"200": {"description": "this document",
                                                                   "content": {"application/json": {
                                                                       "schema": {"type": "object"}}}}}}},
        },
        "components": {"schemas": SCHEMAS,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                                      "description": "A Kubernetes token (e.g. a "
                                                                     "ServiceAccount token)."}}},
    }
