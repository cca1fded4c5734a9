"""Fixtures: a real tdock-server on a free loopback port, and clients of it.

TDOCK_SERVER_BIN names the server binary (ctest sets it; default
build/server/tdock-server). The tdock package comes from PYTHONPATH (ctest
points it at <build>/python).
"""

import itertools
import os
import pathlib
import re
import subprocess
import threading
import time

import pytest

import tdock

REPO = pathlib.Path(__file__).resolve().parents[2]
_names = itertools.count()


def start_server(*args):
    """Starts tdock-server on 127.0.0.1:0 with its metrics on a free port;
    returns (process, address); process.metrics_url is the /metrics URL."""
    binary = os.environ.get("TDOCK_SERVER_BIN",
                            str(REPO / "build" / "server" / "tdock-server"))
    proc = subprocess.Popen([binary, "--listen", "127.0.0.1:0",
                             "--metrics_listen=127.0.0.1:0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    deadline = time.monotonic() + 30
    proc.metrics_url = None  # the server logs it before "listening on"
    for line in proc.stdout:
        m = re.search(r"tdock-server metrics on (\S+)", line)
        if m:
            proc.metrics_url = m.group(1)
        m = re.search(r"tdock-server listening on (\S+)", line)
        if m:
            return proc, m.group(1)
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError(f"{binary} did not start listening")


def drain(proc):
    """Reads the server's log in the background so it never blocks on a
    full pipe."""
    threading.Thread(target=proc.stdout.read, daemon=True).start()


def stop_server(proc):
    proc.terminate()
    try:
        assert proc.wait(timeout=30) == 0, "tdock-server did not exit cleanly"
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.fixture(scope="session")
def server():
    proc, address = start_server()
    drain(proc)
    yield address
    stop_server(proc)


@pytest.fixture
def client(server):
    with tdock.Client(server, timeout=30.0) as c:
        yield c


@pytest.fixture
def dock_name():
    """A dock name no other test uses."""
    return f"t{next(_names)}_{os.getpid()}"


def grpo_spec(name, *, prompts=4, n=2, consumers=None, columns=None, **extra):
    """A small GRPO-shaped dock spec dict."""
    spec = {
        "name": name, "num_prompts": prompts, "n_samples_per_prompt": n,
        "steps_in_flight": 2, "length_columns": ["prompt_ids", "response_ids"],
        "columns": columns or {
            "prompt_ids": {"dtype": "int32"},
            "response_ids": {"dtype": "int32", "max_len": 4096},
            "rewards": {"dtype": "float32", "max_len": 1},
        },
        "consumers": consumers or {
            "reward": {"columns": ["prompt_ids", "response_ids"],
                       "whole_groups": True, "dispatch_size": n},
        },
    }
    spec.update(extra)
    return spec
