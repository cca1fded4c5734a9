"""tdock.server.LocalServer and `python -m tdock serve`: a local tdock-server
started from Python, found where the user says, reachable at the address it
reports, stopped cleanly, and never outliving the process that started it."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import tdock
from tdock.server import LocalServer, find_binary
from server_process import server_binary


def test_local_server_serves_and_stops_cleanly(dock_name):
    """A LocalServer on a free port answers a client at its address and
    exits 0 when stopped."""
    with LocalServer(binary=server_binary()) as server:
        assert server.running() and server.metrics_url.startswith("http://")
        with tdock.Client(server.address) as client:
            assert client.list_docks() == []
        code = server.stop()
    assert code == 0 and not server.running()


def test_missing_binary_is_named():
    with pytest.raises(tdock.errors.NotFound, match="'/nonexistent/tdock-server' is not"):
        find_binary("/nonexistent/tdock-server")
    env_free = {k: v for k, v in os.environ.items() if k != "TDOCK_SERVER_BIN"}
    code = "import tdock.server as s; s.find_binary()"
    out = subprocess.run([sys.executable, "-c", code], env={**env_free, "PATH": "/nonexistent"},
                         capture_output=True, text=True)
    assert out.returncode != 0 and "tdock-server not found" in out.stderr


def test_bad_flag_reports_the_servers_words():
    with pytest.raises(tdock.errors.Unavailable, match="did not start listening"):
        LocalServer(binary=server_binary(), args=["--durability=sometimes"]).start()


def test_python_m_tdock_serve_prints_address_and_stops_on_sigterm():
    """`python -m tdock serve` prints where the server listens and a line to
    connect with; a client connects there; SIGTERM stops both, exit 0."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tdock", "serve", "--server", server_binary(),
         "--listen", "127.0.0.1:0", "--metrics_listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert first.startswith("tdock-server listening on 127.0.0.1:")
        address = first.split()[3].rstrip(",")
        assert "tdock.Client(" in proc.stdout.readline()
        with tdock.Client(address) as client:
            assert client.list_docks() == []
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_server_dies_with_the_process_that_started_it():
    """The owner of a LocalServer is killed with SIGKILL (as a Ray worker or
    a crashed notebook would be): the server is gone too."""
    code = textwrap.dedent(f"""
        import time, tdock.server
        s = tdock.server.LocalServer(binary={server_binary()!r}).start()
        print(s.process.pid, flush=True)
        time.sleep(600)
    """)
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    server_pid = int(owner.stdout.readline())
    owner.kill()
    owner.wait()
    for _ in range(300):  # it exits on SIGTERM, draining calls it has none of
        try:
            os.kill(server_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(server_pid, signal.SIGKILL)
        pytest.fail("tdock-server outlived the process that started it")
