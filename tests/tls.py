"""Throwaway certificates for tests, made by the openssl command (scripts/setup.sh installs it): a CA and a server
certificate for 127.0.0.1 and localhost signed by it, valid for a day (or expired)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Certificates", "make_certificates"]


@dataclass(frozen=True)
class Certificates:
    ca: Path
    cert: Path
    key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(directory: Path, name: str = "server", *, days: int = 1) -> Certificates:
    """DIR/ca.crt (made unless there is one: a CA copied there signs) and a certificate `name` signed by it, valid
    `days` from now (-1: expired a day ago)."""
    directory.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    if not (directory / "ca.crt").exists():
        _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
                 "-subj", "/CN=mirrorwatch test CA", cwd=directory)  # fmt: skip
    (directory / f"{name}.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=directory)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", f"{name}.crt", "-days", str(days), "-extfile", f"{name}.ext", cwd=directory)  # fmt: skip
    return Certificates(directory / "ca.crt", directory / f"{name}.crt", directory / f"{name}.key")
