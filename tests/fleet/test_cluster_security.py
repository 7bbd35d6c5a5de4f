"""The fleet's local Dask cluster lets in only the run's own client (issue 33, item 1).

A real cluster (scheduler, nanny and worker processes) from :func:`local_cluster`: every socket it opens is on
127.0.0.1 and demands the run's client certificate (a TLS handshake without one, or with another
self-signed one, gets nothing; a plain Dask client cannot connect, so cannot submit); no socket answers
HTTP (Dask's scheduler otherwise serves 8787 even with ``dashboard_address=None``); with the run's
credentials a client runs tasks. The CLI refuses an unauthenticated scheduler and reaches a TLS one with
``--tls-*`` files.
"""
from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

pytest.importorskip("distributed", reason='fleet mode needs the [fleet] extra (dask[distributed])')
pytest.importorskip("cryptography", reason='fleet mode needs the [fleet] extra (cryptography)')

from distributed import Client, SpecCluster
from distributed.security import Security

from envoy_dissector.fleet.cluster import local_cluster

REPO = Path(__file__).resolve().parents[2]
INPUT = str(REPO / "fixtures" / "envoy" / "keepalive" / "envoy.log.gz")


def _listening() -> set[tuple[str, int]]:
    """(address, port) of every TCP socket this process and its children listen on."""
    found: set[tuple[str, int]] = set()
    me = psutil.Process()
    for proc in (me, *me.children(recursive=True)):
        try:
            conns = proc.net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        found |= {(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN}
    return found


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[SpecCluster, set[tuple[str, int]]]]:
    before = _listening()
    made = local_cluster(1)
    with Client(made) as client:
        client.wait_for_workers(1)
    try:
        yield made, _listening() - before
    finally:
        made.close()


def _comm_ports(made: SpecCluster) -> set[int]:
    """Ports of the scheduler, the nannies and the workers (Dask's own comms)."""
    info = made.scheduler_info
    addresses = [made.scheduler_address, *info["workers"], *(w["nanny"] for w in info["workers"].values())]
    return {int(a.rsplit(":", 1)[1]) for a in addresses}


def test_every_socket_is_a_tls_comm_on_loopback(cluster: tuple[SpecCluster, set[tuple[str, int]]]) -> None:
    made, opened = cluster
    assert made.scheduler_address.startswith("tls://127.0.0.1:")
    assert opened, "the cluster opened no socket: the test would prove nothing"
    assert {ip for ip, _ in opened} == {"127.0.0.1"}
    assert {port for _, port in opened} == _comm_ports(made)  # no HTTP server beside them
    assert 8787 not in {port for _, port in opened}


def _answer_without_certificate(port: int, certificate: Security | None) -> bytes:
    """What a TLS client without the run's certificate gets back for an HTTP request (b"" if refused)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if certificate is not None:  # a certificate of another CA
        cert = Path(os.environ.get("TMPDIR", "/tmp")) / f"foreign-{os.getpid()}.pem"
        cert.write_text(certificate.tls_client_cert + certificate.tls_client_key)
        try:
            context.load_cert_chain(cert)
        finally:
            cert.unlink()
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        try:
            with context.wrap_socket(raw) as tls:
                tls.sendall(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                while chunk := tls.recv(4096):
                    received += chunk
        except (ssl.SSLError, ConnectionError):
            pass
    return received


@pytest.mark.parametrize("foreign", [False, True], ids=["no-certificate", "foreign-certificate"])
def test_no_socket_answers_without_the_runs_certificate(
        cluster: tuple[SpecCluster, set[tuple[str, int]]], foreign: bool) -> None:
    _, opened = cluster
    certificate = Security.temporary() if foreign else None
    for _, port in sorted(opened):
        assert _answer_without_certificate(port, certificate) == b"", port
        with socket.create_connection(("127.0.0.1", port), timeout=10) as plain:  # plain HTTP
            plain.sendall(b"GET /info/main/workers.html HTTP/1.0\r\n\r\n")
            plain.settimeout(10)
            try:
                answer = plain.recv(4096)
            except (ConnectionError, TimeoutError):
                answer = b""
            assert not answer.startswith(b"HTTP/"), port


def test_a_client_without_the_credentials_cannot_submit(cluster: tuple[SpecCluster, set[tuple[str, int]]],
                                                         tmp_path: Path) -> None:
    made, _ = cluster
    marker = tmp_path / "ran"
    tcp_address = made.scheduler_address.replace("tls://", "tcp://")
    attempts = [(made.scheduler_address, None), (made.scheduler_address, Security.temporary()),
                (tcp_address, None)]
    for address, security in attempts:
        for _ in range(3):
            try:
                with Client(address, security=security, timeout="3s") as intruder:
                    intruder.submit(marker.write_text, "code ran").result()
            except (OSError, TimeoutError, TypeError):
                break  # refused: what the cluster must do
            except AssertionError:
                # distributed's client gives its IO loop 10 s to start (utils.LoopRunner) and asserts: on a
                # loaded machine that is the client failing to start, not the cluster refusing it; try again
                continue
            pytest.fail(f"a client without the run's credentials submitted code over {address}")
        else:
            pytest.fail(f"no client could be started to try {address} (three IO loops failed to start)")
    assert not marker.exists()


def test_the_runs_credentials_run_tasks(cluster: tuple[SpecCluster, set[tuple[str, int]]]) -> None:
    made, _ = cluster
    with Client(made.scheduler_address, security=made.security, timeout="30s") as client:
        assert client.submit(sum, [1, 2, 3], pure=False).result() == 6


def _fleet(*args: str) -> subprocess.CompletedProcess[str]:
    # a refused handshake is retried until Dask's connect timeout (30 s by default)
    env = {**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "5s"}
    return subprocess.run([sys.executable, "-m", "envoy_dissector.cli", "fleet", INPUT, *args],
                          capture_output=True, text=True, check=False, timeout=300, env=env)


def test_cli_refuses_an_unauthenticated_scheduler(tmp_path: Path) -> None:
    done = _fleet("-o", str(tmp_path / "out"), "--scheduler", "tcp://127.0.0.1:8786")
    assert done.returncode == 64, done.stderr
    assert "no authentication" in done.stderr and "Traceback" not in done.stderr
    done = _fleet("-o", str(tmp_path / "out"), "--scheduler", "tls://127.0.0.1:8786")
    assert done.returncode == 64 and "--tls-ca-file" in done.stderr, done.stderr


def _pem_files(security: Security, folder: Path) -> list[str]:
    """``--tls-ca-file CA --tls-cert CERT --tls-key KEY`` holding ``security``'s credentials (0600 files)."""
    folder.mkdir()
    args = []
    for option, pem in (("--tls-ca-file", security.tls_ca_file), ("--tls-cert", security.tls_client_cert),
                        ("--tls-key", security.tls_client_key)):
        path = folder / option.strip("-")
        path.touch(mode=0o600)
        path.write_text(str(pem))
        args += [option, str(path)]
    return args


def test_cli_reaches_a_tls_scheduler_with_its_files(cluster: tuple[SpecCluster, set[tuple[str, int]]],
                                                    tmp_path: Path) -> None:
    made, _ = cluster
    out = tmp_path / "out"
    done = _fleet("-o", str(out), "-q", "--scheduler", made.scheduler_address,
                  *_pem_files(made.security, tmp_path / "ours"))
    assert done.returncode == 0, done.stderr
    assert (out / "summary.json").is_file()
    foreign = _fleet("-o", str(tmp_path / "other"), "--scheduler", made.scheduler_address,
                     *_pem_files(Security.temporary(), tmp_path / "foreign"))
    assert foreign.returncode == 69, foreign.stderr
    assert "cannot use the Dask scheduler" in foreign.stderr and "Traceback" not in foreign.stderr
    assert not (tmp_path / "other" / "summary.json").exists()
