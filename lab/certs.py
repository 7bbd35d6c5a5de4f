"""A throwaway certificate authority for the lab's mutual-TLS scenarios, made with ``openssl`` at run time.

Nothing here is committed: every run makes a new CA (valid one day) and the two workload certificates
Istio would issue — SPIFFE identities in the SAN, the server's also naming the SNI the client sidecar sends.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from envoy_dissector.lab.envoy import LabError, TlsFiles


def _openssl(*args: str, cwd: Path) -> None:
    tool = shutil.which("openssl")
    if tool is None:
        raise LabError("the mesh scenario needs the openssl command (Debian package openssl)")
    done = subprocess.run([tool, *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise LabError(f"openssl {args[0]} failed: {done.stderr.strip()[-400:]}")


def _issue(directory: Path, name: str, san: str) -> TlsFiles:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/O=envoy-dissector lab/CN={name}",
             cwd=directory)
    (directory / f"{name}.ext").write_text(f"subjectAltName={san}\nextendedKeyUsage=serverAuth,clientAuth\n",
                                           encoding="utf-8")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "1", "-out", f"{name}.crt", "-extfile", f"{name}.ext", cwd=directory)
    return TlsFiles(ca=directory / "ca.crt", cert=directory / f"{name}.crt", key=directory / f"{name}.key")


def make_mesh_certificates(directory: Path, *, server_sni: str) -> tuple[TlsFiles, TlsFiles]:
    """A CA and two workload certificates in ``directory``: (client sidecar's, server sidecar's)."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "ca.key", "-out", "ca.crt", "-days", "1", "-subj", "/O=envoy-dissector lab/CN=lab-ca",
             cwd=directory)
    client = _issue(directory, "client", "URI:spiffe://cluster.local/ns/shop/sa/client")
    server = _issue(directory, "server", f"URI:spiffe://cluster.local/ns/shop/sa/app,DNS:{server_sni}")
    return client, server
