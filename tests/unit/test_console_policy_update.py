"""PUT /api/v1/policy merges the request's spec into the stored one (issue 20): the console's
dialog, or any client, no longer resets the fields it does not send.

Pure: `tidal.console.policy_update.desired_policy` is what the handler writes. The dialog's
payload is built as web/src/policy.js `readForm` builds it: every non-object field of the
schema under the dialog's sections, read from SECTIONS in policy.js itself.
"""
import re
from pathlib import Path

import pytest

from tidal.api.policy import ColocationPolicy, PolicyValidationError
from tidal.console.policy_update import desired_policy, merge_patch
from tidal.console.server import policy_schema

POLICY_JS = Path(__file__).resolve().parents[2] / "controllers/tidal/console/web/src/policy.js"

#: A stored spec with every section away from its defaults (and valid).
EVERY_SECTION_SET = {
    "loadAwareScheduling": {"enabled": False, "cpuThresholdPercent": 70, "memoryThresholdPercent": 75},
    "evictionWatermarks": {"enabled": False, "cpu": {"highPercent": 85, "lowPercent": 40},
                           "memory": {"highPercent": 70, "lowPercent": 20}},
    "beIsolation": {"cpuPriority": {"enabled": False}, "batchResources": {"enabled": False},
                    "cpuSuppression": {"enabled": False, "thresholdPercent": 55, "floorMillicores": 250}},
    "overselling": {"ratioPercent": 45, "predictor": "p95", "safetyMarginPercent": 5},
    "features": {"cpuBurst": {"enabled": False}, "memoryReclaim": {"enabled": False},
                 "cacheLimits": {"enabled": False}, "psiInterference": {"enabled": False, "resources": ["cpu"]},
                 "numaAffinity": {"enabled": True}, "egressBandwidth": {"enabled": True}},
}


def _stored() -> dict:
    spec = ColocationPolicy.from_spec(EVERY_SECTION_SET).to_spec()
    for path in ("loadAwareScheduling", "evictionWatermarks", "beIsolation", "overselling", "features"):
        assert spec[path] != ColocationPolicy().to_spec()[path], f"{path} must differ from its defaults"
    return spec


def _set(spec: dict, dotted: str, value) -> None:
    keys = dotted.split(".")[1:]
    for key in keys[:-1]:
        spec = spec.setdefault(key, {})
    spec[keys[-1]] = value


def _get(spec: dict, dotted: str):
    for key in dotted.split(".")[1:]:
        spec = spec[key]
    return spec


def _dialog_payload(policy_spec: dict, sections: list[str]) -> dict:
    payload: dict = {}
    for field in policy_schema()["fields"]:
        if field["type"] != "object" and any(field["path"].startswith(f"{p}.") for p in sections):
            _set(payload, field["path"], _get(policy_spec, field["path"]))
    return payload


def _sections_of_the_dialog() -> list[str]:
    block = POLICY_JS.read_text().split("const SECTIONS = [", 1)[1].split("];", 1)[0]
    return re.findall(r'\["(spec\.[A-Za-z.]+)"', block)


@pytest.mark.parametrize("sections", [
    pytest.param(None, id="the-dialog-as-it-is"),
    # The dialog before issue 20 had no beIsolation section: any client may leave sections out.
    pytest.param([s for s in ("spec.loadAwareScheduling", "spec.evictionWatermarks", "spec.overselling",
                              "spec.features.cpuBurst", "spec.features.memoryReclaim",
                              "spec.features.cacheLimits", "spec.features.psiInterference",
                              "spec.features.numaAffinity", "spec.features.egressBandwidth")],
                 id="a-dialog-without-beIsolation"),
])
def test_saving_the_dialog_changes_only_the_edited_field(sections):
    stored = _stored()
    sections = sections or _sections_of_the_dialog()
    payload = _dialog_payload(stored, sections)
    _set(payload, "spec.overselling.ratioPercent", 50)  # the one edit
    written = desired_policy(stored, payload).to_spec()
    expected = merge_patch(stored, {"overselling": {"ratioPercent": 50}})
    assert written == expected
    assert written["beIsolation"] == stored["beIsolation"]


def test_the_dialog_shows_every_section_of_the_spec():
    sections = _sections_of_the_dialog()
    leaves = [f["path"] for f in policy_schema()["fields"] if f["type"] != "object"]
    assert [p for p in leaves if not any(p.startswith(f"{s}.") for s in sections)] == []


def test_a_partial_spec_keeps_every_other_stored_field():
    stored = _stored()
    written = desired_policy(stored, {"features": {"psiInterference": {"avg10ThresholdPercent": 7.5}}}).to_spec()
    assert written == merge_patch(stored, {"features": {"psiInterference": {"avg10ThresholdPercent": 7.5}}})
    assert written["features"]["psiInterference"]["resources"] == ["cpu"]


def test_null_resets_a_field_to_its_default_and_lists_replace():
    stored = _stored()
    written = desired_policy(stored, {"overselling": {"ratioPercent": None},
                                      "features": {"psiInterference": {"resources": ["memory", "cpu"]}}}).to_spec()
    assert written["overselling"]["ratioPercent"] == ColocationPolicy().overselling.ratio_percent
    assert written["overselling"]["predictor"] == "p95"
    assert written["features"]["psiInterference"]["resources"] == ["memory", "cpu"]


def test_replace_resets_what_is_not_sent():
    stored = _stored()
    written = desired_policy(stored, {"overselling": {"ratioPercent": 50}}, replace=True).to_spec()
    assert written == merge_patch(ColocationPolicy().to_spec(), {"overselling": {"ratioPercent": 50}})


def test_no_stored_policy_merges_into_the_defaults():
    assert desired_policy(None, {"overselling": {"ratioPercent": 50}}).overselling.ratio_percent == 50


def test_the_merged_spec_is_validated_and_errors_name_the_field():
    stored = _stored()  # cpu watermarks 85 / 40: a low of 90 breaks the rule only once merged
    with pytest.raises(PolicyValidationError) as caught:
        desired_policy(stored, {"evictionWatermarks": {"cpu": {"lowPercent": 90}}})
    assert [e.path for e in caught.value.errors] == ["spec.evictionWatermarks.cpu.lowPercent"]


def test_merge_patch_is_rfc_7386_and_modifies_nothing():
    target = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    patch = {"a": {"b": None, "c": [3]}, "e": {"f": None}}
    assert merge_patch(target, patch) == {"a": {"c": [3]}, "d": 1, "e": {}}
    assert target == {"a": {"b": 1, "c": [1, 2]}, "d": 1} and patch["a"]["b"] is None
    assert merge_patch({"a": 1}, ["x"]) == ["x"]
