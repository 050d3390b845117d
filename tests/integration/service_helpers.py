"""Shared set-up of the forget-service tests: a trained FedSGT store, tokens, a client on the app."""

from __future__ import annotations

import datetime
import ipaddress
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn
from fastapi.testclient import TestClient

from fedforget.launch import free_port
from fedforget.service.app import create_app
from fedforget.service.server import SERVER_BOUNDS
from fedforget.service.tokens import create_token
from fedforget.store.copy import copy_store

from .helpers import train_in_process

#: the domain the test CA certifies for the OpenDSR signing key
OPENDSR_DOMAIN = "opendsr.processor.test"
CHAINS = {"method": "fedsgt", "chains.groups": 3, "chains.budget": 3, "slices-per-client": 2}


def train_service_store(path: Path) -> Path:
    train_in_process(path, 3, **CHAINS)
    return path


def private_copy(trained: Path, parent: Path) -> Path:
    return copy_store(trained, parent / "store")


def tokens(store: Path) -> dict[str, str]:
    """One token per scope, named after it, plus one with every scope ('all')."""
    out = {scope: create_token(store, scope.replace(":", "-"), [scope])[0]
           for scope in ("forget:write", "status:read", "predict")}
    out["all"] = create_token(store, "all", ["forget:write", "status:read", "predict"])[0]
    return out


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def client(store: Path) -> TestClient:
    return TestClient(create_app(store))


class Running:
    """uvicorn serving the app in a thread of this process, with the bounds `fedforget serve` runs with;
    stopped on exit."""

    def __init__(self, store: Path) -> None:
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(create_app(store), host="127.0.0.1", port=self.port,
                                                    log_level="warning", **SERVER_BOUNDS))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.time() + 60
        while not self.server.started:
            assert time.time() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.05)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A self-signed EC certificate for 127.0.0.1 and its key, as PEM files in ``folder``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def private_ca(folder: Path, rsa_key: bool = False) -> Any:
    """A CA and a certificate it issues to OPENDSR_DOMAIN; the processor's key and certificate go to ``folder``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import NameOID

    from fedforget.service.opendsr_signing import CERT_FILE, KEY_FILE

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test controller trust CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True).sign(ca_key, hashes.SHA256()))
    key = rsa.generate_private_key(65537, 2048) if rsa_key else ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, OPENDSR_DOMAIN)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(OPENDSR_DOMAIN)]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    key_file = folder / KEY_FILE
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_file.chmod(0o600)
    (folder / CERT_FILE).write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    return ca
