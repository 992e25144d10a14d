"""Where each controller finds its cluster in a pod: without --kubeconfig or $KUBECONFIG, the
in-cluster service account (KUBERNETES_SERVICE_HOST/PORT, the CA and the rotated token of the
ServiceAccount mount) — for every controller (tidal-manager, tidal-console, tidal-agent and the NRI
plugin's pod lookups), all through tidal.kube's one client."""
from __future__ import annotations

import datetime
import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tidal.kube.client import KubeAPI, KubeconfigError
from tidal.agent.nri.main import NO_LOOKUPS, lookup_access
from tidal.kube import ClusterAccessError, connect, in_cluster_missing, in_cluster_server, resolve_kubeconfig
from tidal.manager.main import cluster_access

POD_ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def _ca_pem(name: str) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


@pytest.fixture
def account(tmp_path):
    """A ServiceAccount mount as the kubelet projects it."""
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text("token-1")
    (sa / "ca.crt").write_bytes(_ca_pem("cluster-ca"))
    (sa / "namespace").write_text("tidal-system")
    return sa


# -- resolution (pure) ---------------------------------------------------------------------------

@pytest.mark.parametrize("kubeconfig, env, files, expected", [
    ("/etc/kubeconfig", {}, (), "/etc/kubeconfig"),                # an explicit kubeconfig wins
    ("/etc/kubeconfig", POD_ENV, ("token", "ca.crt"), "/etc/kubeconfig"),
    (None, POD_ENV, ("token", "ca.crt"), None),                    # in a pod: the service account
    ("", POD_ENV, ("token", "ca.crt"), None),                      # KUBECONFIG= (set, empty)
    (None, {}, ("token", "ca.crt"), "KUBERNETES_SERVICE_HOST unset (not in a pod)"),
    (None, {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, ("token", "ca.crt"),
     "KUBERNETES_SERVICE_PORT unset (not in a pod)"),
    (None, POD_ENV, ("ca.crt",), "token (automountServiceAccountToken disabled?)"),
    (None, POD_ENV, ("token",), "ca.crt (automountServiceAccountToken disabled?)"),
])
def test_a_kubeconfig_else_the_pods_service_account_else_an_error_naming_what_is_missing(
        tmp_path, kubeconfig, env, files, expected):
    for name in files:
        (tmp_path / name).write_text("x")
    if expected is None or expected.startswith("/"):
        assert resolve_kubeconfig(kubeconfig, env, tmp_path) == expected
    else:
        with pytest.raises(ClusterAccessError, match="no --kubeconfig .* and no in-cluster configuration") as err:
            resolve_kubeconfig(kubeconfig, env, tmp_path)
        assert str(err.value).endswith(expected)
        assert in_cluster_missing(env, tmp_path).endswith(expected)


@pytest.mark.parametrize("host, server", [("10.96.0.1", "https://10.96.0.1:443"),
                                          ("fd00:10:96::1", "https://[fd00:10:96::1]:443")])
def test_in_cluster_server_brackets_ipv6(host, server):
    assert in_cluster_server({"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": "443"}) == server


# -- tidal-manager and tidal-console ---------------------------------------------------------------

def test_controllers_connect_with_the_service_account_and_reread_a_rotated_token(account):
    api = KubeAPI.from_kubeconfig(None, user_agent="tidal-manager", environ=POD_ENV, account=account)
    assert api.server == "https://10.96.0.1:443" and api.user_agent == "tidal-manager"
    assert api._headers(None)["Authorization"] == "Bearer token-1"
    (account / "token").write_text("token-2")  # the kubelet rotated it
    assert api._headers(None)["Authorization"] == "Bearer token-2"
    assert api._headers(None)["User-Agent"] == "tidal-manager"


def test_controllers_without_any_configuration_say_why(tmp_path, monkeypatch):
    with pytest.raises(ClusterAccessError, match="KUBERNETES_SERVICE_HOST unset"):
        KubeAPI.from_kubeconfig("", environ={}, account=tmp_path)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ClusterAccessError, match="no --kubeconfig .* and no in-cluster configuration"):
        connect(None, "tidal-console")


def test_manager_runs_its_leader_controllers_only_with_cluster_access(account):
    assert cluster_access(None, POD_ENV, account) is None
    assert cluster_access("/etc/kubeconfig", {}, account) is None
    assert cluster_access(None, {}, account).endswith("KUBERNETES_SERVICE_HOST unset (not in a pod)")


# -- tidal-agent: its own client -------------------------------------------------------------------

def test_agent_client_uses_the_service_account_and_reads_the_token_on_every_request(account):
    api = KubeAPI.in_cluster(account, POD_ENV)
    assert api.server == "https://10.96.0.1:443"
    assert api.ssl_context.verify_mode is ssl.CERT_REQUIRED
    assert api.ssl_context.get_ca_certs()[0]["subject"][0][0][1] == "cluster-ca"
    assert api._headers(None)["Authorization"] == "Bearer token-1"
    (account / "token").write_text("token-2\n")
    assert api._headers(None)["Authorization"] == "Bearer token-2"


@pytest.mark.parametrize("path", [None, ""])
def test_agent_without_a_kubeconfig_goes_in_cluster(path, account, monkeypatch):
    calls = []
    monkeypatch.setattr(KubeAPI, "in_cluster", classmethod(lambda cls: calls.append(cls) or "in-cluster"))
    assert KubeAPI.from_kubeconfig(path) == "in-cluster" and calls == [KubeAPI]


def test_agent_outside_a_pod_names_what_is_missing(account):
    with pytest.raises(KubeconfigError, match="KUBERNETES_SERVICE_HOST unset"):
        KubeAPI.in_cluster(account, {})
    (account / "token").unlink()
    with pytest.raises(KubeconfigError, match="token .automountServiceAccountToken disabled"):
        KubeAPI.in_cluster(account, POD_ENV)


# -- the NRI plugin's pod lookups ----------------------------------------------------------------

@pytest.mark.parametrize("kubeconfig, in_cluster, in_pod, expected", [
    (None, False, False, NO_LOOKUPS),                      # a process on the host: annotations only
    (None, False, True, (True, None)),                     # the DaemonSet's container, no flag needed
    (None, True, True, (True, None)),                      # --in-cluster
    ("/etc/kubeconfig", False, True, (True, "/etc/kubeconfig")),
    ("/etc/kubeconfig", False, False, (True, "/etc/kubeconfig")),
    ("", False, False, NO_LOOKUPS),                        # KUBECONFIG= (set, empty)
])
def test_nri_plugin_looks_pods_up_with_a_kubeconfig_or_the_pods_service_account(
        account, kubeconfig, in_cluster, in_pod, expected):
    env = POD_ENV if in_pod else {}
    assert lookup_access(kubeconfig, in_cluster, env, account) == expected


def test_nri_plugin_with_in_cluster_outside_a_pod_fails_at_start(account):
    with pytest.raises(ClusterAccessError, match="KUBERNETES_SERVICE_HOST unset"):
        lookup_access(None, True, {}, account)
