import ipaddress
import stat

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tidal_dev.lab.pki import API_SERVICE_IP, ensure_lab_pki


def _cert(path):
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_lab_pki_issues_verifiable_certificates_for_each_identity(tmp_path):
    pki = ensure_lab_pki(tmp_path)
    ca = _cert(pki.ca.cert)
    for pair in (pki.apiserver, pki.admin, pki.controller_manager):
        leaf = _cert(pair.cert)
        leaf.verify_directly_issued_by(ca)
        assert stat.S_IMODE(pair.key.stat().st_mode) == 0o600
    admin = _cert(pki.admin.cert)
    assert admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    assert ExtendedKeyUsageOID.CLIENT_AUTH in admin.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    kcm = _cert(pki.controller_manager.cert)
    assert kcm.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:kube-controller-manager"


def test_api_server_certificate_covers_loopback_and_the_in_cluster_names(tmp_path):
    pki = ensure_lab_pki(tmp_path)
    sans = _cert(pki.apiserver.cert).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    assert ipaddress.ip_address(API_SERVICE_IP) in sans.get_values_for_type(x509.IPAddress)
    assert "kubernetes.default.svc" in sans.get_values_for_type(x509.DNSName)


def test_existing_pki_is_reused_so_issued_kubeconfigs_stay_valid(tmp_path):
    first = ensure_lab_pki(tmp_path)
    before = first.admin.cert.read_bytes(), first.service_account_key.read_bytes()
    second = ensure_lab_pki(tmp_path)
    assert (second.admin.cert.read_bytes(), second.service_account_key.read_bytes()) == before
