"""The tdock-server binary: its /metrics endpoint after real traffic, and a
graceful SIGTERM (a parked Get ends with UNAVAILABLE, the server exits 0)."""

import re
import signal
import threading
import time
import urllib.request

import numpy as np
import pytest

import tdock
from conftest import drain, grpo_spec, start_server


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
