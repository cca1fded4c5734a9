"""The tdock-server binary: its /metrics endpoint after real traffic, and a
graceful SIGTERM (a parked Get ends with UNAVAILABLE, the server exits 0)."""

import re
import signal
import socket
import threading
import time
import urllib.request

import numpy as np
import pytest

import tdock
from conftest import drain, grpo_spec, start_server, stop_server


def test_metrics_endpoint_counts_rows_and_calls():
    proc, address = start_server()
    drain(proc)
    try:
        metrics = proc.metrics_url
        with tdock.Client(address) as c:
            dock = c.create_dock(grpo_spec("m", prompts=2, n=2))
            dock.put(0, range(4), {"prompt_ids": [[1]] * 4,
                                   "response_ids": [np.arange(3, dtype=np.int32)] * 4})
            assert len(dock.get("reward", step=0, count=2, wait=5)) == 2
        text = urllib.request.urlopen(metrics, timeout=10).read().decode()
        assert re.search(r'^tdock_rows_written_total\{dock="m",column="prompt_ids"\} 4$',
                         text, re.M)
        assert re.search(r'^tdock_rows_handed_out_total\{dock="m",consumer="reward"\} 2$',
                         text, re.M)
        assert re.search(r'^tdock_requests_total\{code="OK",method="Put"\} 1$', text, re.M)
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0


def test_sigterm_ends_parked_get_with_unavailable_and_exits_0():
    proc, address = start_server("--shutdown_grace=5s")
    drain(proc)
    client = tdock.Client(address)
    dock = client.create_dock(grpo_spec("s"))
    outcome = {}

    def parked_get():
        started = time.monotonic()
        try:
            dock.get("reward", step=0, wait=60)  # nothing will come
            outcome["result"] = "returned"
        except tdock.errors.TdockError as e:
            outcome["result"] = e
        outcome["seconds"] = time.monotonic() - started

    getter = threading.Thread(target=parked_get)
    getter.start()
    deadline = time.monotonic() + 10
    while dock.status().waiters.get("reward", 0) == 0:  # parked for sure
        assert time.monotonic() < deadline, "the Get never parked"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    getter.join(timeout=30)
    assert not getter.is_alive(), "the parked Get hung after SIGTERM"
    assert isinstance(outcome["result"], tdock.errors.Unavailable), outcome
    assert outcome["seconds"] < 20
    assert proc.wait(timeout=30) == 0
    client.close()


def test_half_open_connection_is_closed_at_the_handshake_timeout():
    """A client that sends half of the HTTP/2 preface and nothing more is
    disconnected once --handshake_timeout passes, instead of holding its
    socket (and the server's shutdown) indefinitely."""
    proc, address = start_server("--handshake_timeout=300ms")
    drain(proc)
    try:
        host, port = address.rsplit(":", 1)
        with socket.create_connection((host, int(port))) as s:
            s.sendall(b"PRI * HTTP/2.0\r\n")  # the preface is 24 bytes
            s.settimeout(20)
            while s.recv(4096):  # the server's settings, then the close
                pass
    finally:
        stop_server(proc)


def test_idle_server_stops_promptly_on_sigterm():
    """SIGTERM on an idle server (metrics endpoint on) ends the process at
    once: nothing waits out a poll interval. Five starts, each stop well
    under a second."""
    for _ in range(5):
        proc, _ = start_server()
        drain(proc)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert time.monotonic() - started < 1.0
