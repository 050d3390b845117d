"""The OpenDSR processor's signing key and certificate: every OpenDSR answer is signed with them.

OpenDSR (section 4) signs a processor's answers and callbacks with the key of an X.509 certificate issued by
a trusted CA to the processor's domain, under FIPS 186-4: RSA (PKCS#1 v1.5) or ECDSA, over a SHA-256 digest.
The operator places both files in the coordinator's secrets directory, outside any checkout and store
(``$FEDFORGET_SECRETS``, else ``${XDG_CONFIG_HOME:-~/.config}/fedforget``, as the receipt key):
``opendsr-key.pem`` (owner-only, 0600: refused while group or others may read or write it) and
``opendsr-cert.pem`` (the certificate, then any intermediates). Nothing is generated here: a certificate the
controller can check must come from a CA. The processor's domain is the certificate's first DNS name
(else its common name): the ``X-OpenDSR-Processor-Domain`` header, the ``extensions`` key and the host of
the certificate URL the discovery document gives.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedforget.store.bounded_read import read_bounded
from fedforget.store.secret_files import MAX_SECRET_BYTES, open_to_others, secrets_dir

KEY_FILE = "opendsr-key.pem"
CERT_FILE = "opendsr-cert.pem"
#: a certificate chain is public and larger than a key; still bounded
MAX_CERT_BYTES = 2**20


class SigningUnavailable(RuntimeError):
    """The key or certificate is missing or unusable; the message says which file and what to do."""


def key_path() -> Path:
    return secrets_dir() / KEY_FILE


def cert_path() -> Path:
    return secrets_dir() / CERT_FILE


def canonical_json(obj: Any) -> bytes:
    """The bytes fedforget sends and signs: keys sorted, no spaces, ASCII only (one body, one signature)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


@dataclass(frozen=True)
class Signer:
    """A loaded key and certificate chain (PEM), with the domain the certificate was issued to."""

    key: Any
    cert_pem: bytes
    domain: str

    def sign(self, data: bytes) -> str:
        """The base64 signature of ``data``'s SHA-256 digest: RSA PKCS#1 v1.5 or ECDSA (DER), per the key."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

        if isinstance(self.key, rsa.RSAPrivateKey):
            raw = self.key.sign(data, padding.PKCS1v15(), hashes.SHA256())
        else:
            raw = self.key.sign(data, ec.ECDSA(hashes.SHA256()))
        return base64.b64encode(raw).decode()


def _domain_of(cert: Any) -> str:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = names.get_values_for_type(x509.DNSName)
        if dns:
            return str(dns[0])
    except x509.ExtensionNotFound:
        pass
    common = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not common:
        raise SigningUnavailable(f"{cert_path()} names no domain (no DNS name, no common name); use a certificate "
                                 "issued to the processor's OpenDSR domain")
    return str(common[0].value)


def load_signer() -> Signer:
    """The key and certificate in the secrets directory, checked: owner-only key, RSA or EC, matching the
    certificate's public key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    kpath, cpath = key_path(), cert_path()
    for path in (kpath, cpath):
        if not path.is_file():
            raise SigningUnavailable(f"no OpenDSR {'key' if path == kpath else 'certificate'} at {path}; place the "
                                     f"CA-issued certificate at {cpath} and its key at {kpath} (0600)")
    if open_to_others(kpath):
        raise SigningUnavailable(f"the OpenDSR key {kpath} is open to group or others; chmod 600 {kpath}")
    try:
        key = serialization.load_pem_private_key(read_bounded(kpath, MAX_SECRET_BYTES, "OpenDSR key"), None)
        cert_pem = read_bounded(cpath, MAX_CERT_BYTES, "OpenDSR certificate")
        cert = x509.load_pem_x509_certificates(cert_pem)[0]
    except (ValueError, TypeError, OSError) as exc:
        raise SigningUnavailable(f"cannot read the OpenDSR key or certificate ({' '.join(str(exc).split())[:200]}); "
                                 f"{kpath}: an unencrypted PEM RSA or EC key, {cpath}: PEM certificates") from None
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise SigningUnavailable(f"the OpenDSR key {kpath} is neither RSA nor ECDSA (FIPS 186-4, as OpenDSR asks)")
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(serialization.Encoding.DER, spki) != \
            cert.public_key().public_bytes(serialization.Encoding.DER, spki):
        raise SigningUnavailable(f"the OpenDSR key {kpath} is not the key of the certificate {cpath}")
    return Signer(key, cert_pem, _domain_of(cert))
