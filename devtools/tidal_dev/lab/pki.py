# SPDX-License-Identifier: Apache-2.0
"""The lab's PKI: a private CA, the API server's serving certificate, client
certificates for the admin and the controllers, and the service-account key.

Everything is ECDSA P-256 (fast to generate, accepted by every component) and lives
in ``<lab dir>/pki``; keys are written mode 0600. Existing material is reused, so a
restarted lab keeps working with kubeconfigs handed out before.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)
# The first address of the service range: the in-cluster `kubernetes` Service.
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
API_SERVICE_IP = "10.0.0.1"


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


def _write_private(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _load_key(path: Path):
    return serialization.load_pem_private_key(path.read_bytes(), password=None)


def ensure_ca(pki_dir: Path, name: str = "tidal-lab-ca") -> CertPair:
    pki_dir.mkdir(parents=True, exist_ok=True)
    pair = CertPair(pki_dir / f"{name}.crt", pki_dir / f"{name}.key")
    if pair.cert.exists() and pair.key.exists():
        return pair
    key = _new_key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY * 10)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_private(pair.key, _key_pem(key))
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return pair


def issue(ca: CertPair, out_dir: Path, name: str, common_name: str, *,
          organizations: tuple[str, ...] = (), dns_names: tuple[str, ...] = (),
          ip_addresses: tuple[str, ...] = (), server: bool = False, client: bool = False) -> CertPair:
    """Issue (or reuse) a leaf certificate signed by `ca`, named `<name>.crt/.key`.

    A webhook's serving certificate is `server=True` with its DNS names; a user or
    controller identity is `client=True` with the groups as `organizations`.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    pair = CertPair(out_dir / f"{name}.crt", out_dir / f"{name}.key")
    if pair.cert.exists() and pair.key.exists():
        return pair
    ca_key = _load_key(ca.key)
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    key = _new_key()
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attrs)).issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False,
                                     content_commitment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=False, crl_sign=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),
                       critical=False)
    )
    sans = [x509.DNSName(d) for d in dns_names] + [
        x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write_private(pair.key, _key_pem(key))
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return pair


@dataclass(frozen=True)
class LabPKI:
    ca: CertPair
    apiserver: CertPair
    admin: CertPair
    controller_manager: CertPair
    service_account_key: Path
    service_account_pub: Path
    scheduler: CertPair
    kube_proxy: CertPair
    kubelet_client: CertPair

    def node(self, name: str) -> CertPair:
        """A kubelet's client identity: the Node authorizer and NodeRestriction key on it."""
        return issue(self.ca, self.ca.cert.parent, f"node-{name}", f"system:node:{name}",
                     organizations=("system:nodes",), client=True)


def covers_ips(pair: CertPair, ips: tuple[str, ...]) -> bool:
    """True when the certificate's subject alternative names include every address of `ips`."""
    try:
        cert = x509.load_pem_x509_certificate(pair.cert.read_bytes())
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return False
    have = {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    return set(ips) <= have


def ensure_lab_pki(pki_dir: Path, api_host: str = "127.0.0.1") -> LabPKI:
    """The lab's identities; the API server's certificate also covers `api_host` (the lab
    bridge's address, where pods and kubelets reach it), reissued when it did not."""
    ca = ensure_ca(pki_dir)
    api_ips = tuple(dict.fromkeys(("127.0.0.1", api_host, API_SERVICE_IP)))
    stale = CertPair(pki_dir / "kube-apiserver.crt", pki_dir / "kube-apiserver.key")
    if stale.cert.exists() and not covers_ips(stale, api_ips):
        stale.cert.unlink()
    apiserver = issue(
        ca, pki_dir, "kube-apiserver", "kube-apiserver", server=True,
        dns_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                   "kubernetes.default.svc.cluster.local"),
        ip_addresses=api_ips)
    # system:masters bypasses RBAC: the lab's operator and the upstream components
    # that have no bootstrap RBAC of their own here (Volcano, kwok) use it.
    admin = issue(ca, pki_dir, "admin", "tidal-lab-admin", organizations=("system:masters",),
                  client=True)
    kcm = issue(ca, pki_dir, "kube-controller-manager", "system:kube-controller-manager",
                client=True)
    sa_key, sa_pub = pki_dir / "service-account.key", pki_dir / "service-account.pub"
    if not (sa_key.exists() and sa_pub.exists()):
        key = _new_key()
        _write_private(sa_key, _key_pem(key))
        sa_pub.write_bytes(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    scheduler = issue(ca, pki_dir, "kube-scheduler", "system:kube-scheduler", client=True)
    # Bound to the bootstrap ClusterRole system:node-proxier.
    kube_proxy = issue(ca, pki_dir, "kube-proxy", "system:kube-proxy", client=True)
    # The API server's identity towards kubelets (logs, exec, port-forward).
    kubelet_client = issue(ca, pki_dir, "kube-apiserver-kubelet-client", "kube-apiserver-kubelet-client",
                           organizations=("system:masters",), client=True)
    return LabPKI(ca, apiserver, admin, kcm, sa_key, sa_pub, scheduler, kube_proxy, kubelet_client)
