"""TLS, mutual TLS and the bearer token with a real tdock-server process:
the Python client, tdockctl and the GRPO example reach a secured server with
the right settings and are refused without them; the token never shows in
the server's output or in errors. Certificates come from
tests/security/make_test_certs.sh, made per test module."""

import os
import subprocess
import sys
import threading

import pytest

import tdock
from conftest import REPO, start_server, stop_server

TOKEN = "py-s3cret-token-42"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    subprocess.run(["bash", str(REPO / "tests/security/make_test_certs.sh"), str(d)],
                   check=True)
    (d / "token").write_text(TOKEN + "\n")
    return d


class Logged:
    """A started server whose output is kept (to look for the token)."""

    def __init__(self, *args):
        self.proc, self.address = start_server(*args)
        self.lines = []
        self._reader = threading.Thread(
            target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self._reader.start()

    def stop(self):
        stop_server(self.proc)
        self._reader.join(10)
        return "".join(self.lines)


@pytest.fixture
def secured(pki):
    """TLS + mutual TLS + token."""
    server = Logged(f"--tls_cert={pki / 'server.pem'}", f"--tls_key={pki / 'server.key'}",
                    f"--tls_client_ca={pki / 'ca.pem'}",
                    f"--auth_token_file={pki / 'token'}")
    yield server
    assert TOKEN not in server.stop()


def tls(pki, client="client"):
    return tdock.Tls(ca=str(pki / "ca.pem"), cert=str(pki / f"{client}.pem"),
                     key=str(pki / f"{client}.key"))


def test_python_client_needs_cert_and_token(pki, secured):
    """The right certificate and token get through; a missing token is
    Unauthenticated (its message without the token); a client certificate of
    another CA, or none, is refused in the handshake (Unavailable)."""
    with tdock.Client(secured.address, tls=tls(pki), token=TOKEN) as c:
        assert c.list_docks() == []
    with tdock.Client(secured.address, tls=tls(pki), token="wrong", timeout=5) as c:
        with pytest.raises(tdock.errors.Unauthenticated) as e:
            c.list_docks()
        assert "wrong" not in str(e.value) and TOKEN not in str(e.value)
    with tdock.Client(secured.address, tls=tls(pki, "other_client"), token=TOKEN,
                      timeout=5) as c:
        with pytest.raises(tdock.errors.Unavailable):
            c.list_docks()
    with tdock.Client(secured.address, tls=tdock.Tls(ca=str(pki / "ca.pem")),
                      token=TOKEN, timeout=5) as c:
        with pytest.raises(tdock.errors.Unavailable):
            c.list_docks()


def tdockctl(*args, env=None):
    binary = os.environ.get("TDOCK_CTL_BIN", str(REPO / "build/client/tdockctl"))
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60,
                          env=env)


def test_tdockctl_flags_and_env_token(pki, secured):
    """tdockctl with --tls_ca/--tls_cert/--tls_key and --token_file (or
    TDOCK_TOKEN) lists docks; without a token it exits 1 with UNAUTHENTICATED."""
    flags = ["--server", secured.address, f"--tls_ca={pki / 'ca.pem'}",
             f"--tls_cert={pki / 'client.pem'}", f"--tls_key={pki / 'client.key'}"]
    ok = tdockctl(*flags, f"--token_file={pki / 'token'}", "list")
    assert ok.returncode == 0, ok.stderr
    env = {k: v for k, v in os.environ.items() if k != "TDOCK_TOKEN"}
    denied = tdockctl(*flags, "list", env=env)
    assert denied.returncode == 1 and "UNAUTHENTICATED" in denied.stderr
    assert TOKEN not in denied.stderr
    via_env = tdockctl(*flags, "list", env=dict(env, TDOCK_TOKEN=TOKEN))
    assert via_env.returncode == 0, via_env.stderr
    health = tdockctl(*flags, "health", env=env)  # the health service is open
    assert health.returncode == 0, health.stderr


def test_example_pipeline_over_tls_with_token(pki, secured):
    """The GRPO example runs against the secured server with its TLS and
    token flags."""
    r = subprocess.run(
        [sys.executable, str(REPO / "examples/grpo_pipeline.py"), "--server",
         secured.address, "--steps", "2", "--prompts", "4", "--n", "2", "--dp", "2",
         "--time_scale", "0", "--quiet", f"--tls_ca={pki / 'ca.pem'}",
         f"--tls_cert={pki / 'client.pem'}", f"--tls_key={pki / 'client.key'}",
         f"--token_file={pki / 'token'}"],
        capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert r.returncode == 0, r.stdout + r.stderr
    assert TOKEN not in r.stdout + r.stderr
