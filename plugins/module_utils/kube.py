# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Connection options shared by every cluster module and the client built from them.

The options mirror kubernetes.core's (``kubeconfig``, ``context``, ``host``, ``api_key``,
``validate_certs``, ``ca_cert``, ``client_cert``, ``client_key``) and are documented once in the
``tidal.colocation.auth`` doc fragment; a unit test keeps both in step. Like kubernetes.core, each
option falls back to its ``K8S_AUTH_*`` environment variable, then to ``$KUBECONFIG``, then to the
in-cluster service account.
"""

from __future__ import annotations

import traceback

from ansible.module_utils.basic import env_fallback, missing_required_lib

from ansible_collections.tidal.colocation.plugins.module_utils.errors import ModuleError

try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.client import exceptions as k8s_exceptions
    ApiException = k8s_exceptions.ApiException
    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR = None
except ImportError:
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()

    class ApiException(Exception):  # type: ignore[no-redef]
        """Stand-in so `except ApiException` parses without the client; never raised."""

        status = 0
        body = ""


AUTH_ARG_SPEC = {
    "kubeconfig": {"type": "path", "fallback": (env_fallback, ["K8S_AUTH_KUBECONFIG"])},
    "context": {"type": "str", "fallback": (env_fallback, ["K8S_AUTH_CONTEXT"])},
    "host": {"type": "str", "fallback": (env_fallback, ["K8S_AUTH_HOST"])},
    "api_key": {"type": "str", "no_log": True, "fallback": (env_fallback, ["K8S_AUTH_API_KEY"])},
    "validate_certs": {"type": "bool", "aliases": ["verify_ssl"],
                       "fallback": (env_fallback, ["K8S_AUTH_VERIFY_SSL"])},
    "ca_cert": {"type": "path", "aliases": ["ssl_ca_cert"],
                "fallback": (env_fallback, ["K8S_AUTH_SSL_CA_CERT"])},
    "client_cert": {"type": "path", "aliases": ["cert_file"],
                    "fallback": (env_fallback, ["K8S_AUTH_CERT_FILE"])},
    "client_key": {"type": "path", "aliases": ["key_file"], "no_log": False,
                   "fallback": (env_fallback, ["K8S_AUTH_KEY_FILE"])},
}


def argument_spec(**module_options):
    """The module's argument_spec: its own options plus the shared connection options."""
    spec = {name: dict(option) for name, option in AUTH_ARG_SPEC.items()}
    spec.update(module_options)
    return spec


def require_kubernetes(module):
    """Fail the module with install instructions when the kubernetes client is missing."""
    try:
        check_kubernetes()
    except ModuleError as err:
        module.fail_json(**err.result)


def check_kubernetes():
    """Raise `ModuleError` with install instructions when the kubernetes client is missing."""
    if not HAS_KUBERNETES:
        raise ModuleError(missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR)


def api_client(module):
    """`build_api_client` for a module that fails on its own: fails the module on an error."""
    try:
        return build_api_client(module.params)
    except ModuleError as err:
        module.fail_json(**err.result)


def build_api_client(params):
    """A kubernetes ApiClient from the module's connection options; raises `ModuleError`.

    Order: ``host`` (+ ``api_key`` or client certificates) when given; otherwise the kubeconfig
    (``kubeconfig`` option, ``$KUBECONFIG``, ``~/.kube/config``) with ``context``; otherwise the
    in-cluster service account.
    """
    check_kubernetes()
    configuration = k8s_client.Configuration()
    try:
        if params.get("host"):
            configuration.host = params["host"]
        else:
            try:
                k8s_config.load_kube_config(config_file=params.get("kubeconfig"),
                                            context=params.get("context"),
                                            client_configuration=configuration)
            except k8s_config.ConfigException:
                if params.get("kubeconfig"):
                    raise
                k8s_config.load_incluster_config(client_configuration=configuration)
    except (k8s_config.ConfigException, OSError) as err:
        raise ModuleError("cannot load the Kubernetes client configuration: %s" % err)
    if params.get("api_key"):
        configuration.api_key = {"authorization": "Bearer " + params["api_key"]}
    if params.get("validate_certs") is not None:
        configuration.verify_ssl = params["validate_certs"]
    if params.get("ca_cert"):
        configuration.ssl_ca_cert = params["ca_cert"]
    if params.get("client_cert"):
        configuration.cert_file = params["client_cert"]
    if params.get("client_key"):
        configuration.key_file = params["client_key"]
    return k8s_client.ApiClient(configuration)


def api_error_message(err):
    """The API server's message of an ApiException (its Status.message), else the exception."""
    import json
    try:
        return json.loads(err.body).get("message") or str(err)
    except (TypeError, ValueError, AttributeError):
        return str(err)


def api_error_causes(err):
    """The messages of the causes in an ApiException's Status (``details.causes``), e.g. the
    PodDisruptionBudget that refused an eviction; [] when there are none."""
    import json
    try:
        causes = ((json.loads(err.body) or {}).get("details") or {}).get("causes") or []
    except (TypeError, ValueError, AttributeError):
        return []
    return [cause["message"] for cause in causes if isinstance(cause, dict) and cause.get("message")]
