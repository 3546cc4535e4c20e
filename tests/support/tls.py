"""A throw-away certificate authority and server certificate, for Redis over TLS in tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.waiting import PATIENCE_S


def make_certificates(folder: Path) -> Path:
    """A throw-away CA and a server certificate for 127.0.0.1 signed by it; the CA's path."""
    folder.mkdir()

    def openssl(*args: str) -> None:
        subprocess.run(
            ["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=PATIENCE_S
        )

    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=toolpool-test-ca",
    )
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost")
    (folder / "ext.cnf").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    )
    return folder / "ca.crt"


def tls_server_args(ca: Path, port: int) -> list[str]:
    """redis-server's arguments for TLS on ``port`` with the certificates ``make_certificates``
    made beside ``ca`` (clients are not asked for a certificate of their own)."""
    return [
        "--tls-port",
        str(port),
        "--tls-cert-file",
        str(ca.parent / "server.crt"),
        "--tls-key-file",
        str(ca.parent / "server.key"),
        "--tls-ca-cert-file",
        str(ca),
        "--tls-auth-clients",
        "no",
    ]
