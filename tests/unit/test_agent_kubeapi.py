"""KubeAPI's credentials (its requests are exercised against the lab by every agent lab test)."""
import base64

import pytest
import yaml
from tidal.kube.client import ApiError, KubeAPI, KubeconfigError


def _kubeconfig(tmp_path, user, cluster=None, current="c"):
    config = {"apiVersion": "v1", "kind": "Config", "current-context": current,
              "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
              "clusters": [{"name": "k", "cluster": cluster or {"server": "http://127.0.0.1:1"}}],
              "users": [{"name": "u", "user": user}]}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def test_token_and_token_file_become_a_bearer_header(tmp_path):
    api = KubeAPI.from_kubeconfig(_kubeconfig(tmp_path, {"token": "abc"}))
    assert api._headers(None)["Authorization"] == "Bearer abc" and api.server == "http://127.0.0.1:1"
    (tmp_path / "token").write_text("rotated-1\n")
    api = KubeAPI.from_kubeconfig(_kubeconfig(tmp_path, {"tokenFile": "token"}), user_agent="tidal-agent")
    assert api._headers(None)["Authorization"] == "Bearer rotated-1"
    (tmp_path / "token").write_text("rotated-2\n")  # re-read on every request
    assert api._headers("application/json") == {"Accept": "application/json", "User-Agent": "tidal-agent",
                                                "Authorization": "Bearer rotated-2",
                                                "Content-Type": "application/json"}


@pytest.mark.parametrize("user, current, message", [
    ({"exec": {"command": "aws"}}, "c", "authenticates with 'exec'; Tidal supports client certificates"),
    ({"auth-provider": {"name": "gcp"}}, "c", "authenticates with 'auth-provider'"),
    ({}, "missing", "current-context 'missing' is not among its contexts"),
])
def test_unsupported_kubeconfigs_are_refused_with_the_reason(tmp_path, user, current, message):
    with pytest.raises(KubeconfigError, match=message):
        KubeAPI.from_kubeconfig(_kubeconfig(tmp_path, user, current=current))


def test_in_cluster_needs_the_service_environment(monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeconfigError, match="KUBERNETES_SERVICE_HOST unset"):
        KubeAPI.from_kubeconfig(None)


def test_api_error_carries_the_status_and_the_server_message():
    err = ApiError(409, "Conflict", '{"kind":"Status","message":"the object has been modified"}')
    assert err.status == 409 and str(err) == "409 Conflict: the object has been modified"
    assert str(ApiError(503, "Service Unavailable", "<html>")) == "503 Service Unavailable"


def test_inline_certificate_data_is_written_privately_and_loaded(tmp_path):
    """kubeadm-style kubeconfigs carry the CA and the client certificate inline (the lab's name
    files: that path runs in every agent lab test)."""
    import os
    import ssl
    import tempfile

    from tidal_dev.lab.pki import ensure_lab_pki
    pki = ensure_lab_pki(tmp_path / "pki")
    b64 = lambda p: base64.b64encode(p.read_bytes()).decode()  # noqa: E731
    path = _kubeconfig(tmp_path, {"client-certificate-data": b64(pki.admin.cert), "client-key-data": b64(pki.admin.key)},
                       cluster={"server": "https://127.0.0.1:1", "certificate-authority-data": b64(pki.ca.cert)})
    api = KubeAPI.from_kubeconfig(path)
    assert isinstance(api.ssl_context, ssl.SSLContext) and api.ssl_context.verify_mode is ssl.CERT_REQUIRED
    assert api.ssl_context.get_ca_certs()[0]["subject"][0][0][1] == "tidal-lab-ca"
    with pytest.raises(ssl.SSLError):  # a key that does not match the certificate is refused
        bad = _kubeconfig(tmp_path, {"client-certificate-data": b64(pki.admin.cert),
                                     "client-key-data": b64(pki.apiserver.key)},
                          cluster={"server": "https://127.0.0.1:1", "certificate-authority-data": b64(pki.ca.cert)})
        KubeAPI.from_kubeconfig(bad)
    # the inline secrets were only on disk while being loaded
    assert not [f for f in os.listdir(tempfile.gettempdir()) if f.startswith("tidal-agent-")]
