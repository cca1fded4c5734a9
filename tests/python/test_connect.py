"""Connecting on a busy host, and again after a restart.

A rollout host runs its CPUs flat out: a server (or the client itself) may
not be scheduled for a second or more while a connection is being made. The
client's connection attempts must outlast that, while a client whose server
went away still tries again within `max_reconnect_backoff`.
"""

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

import tdock
from server_process import drain, start_server, stop_server

# One child process: makes its Client, says "ready", waits for a line on
# stdin, says "calling", makes its first call and prints "ok" or the error's
# class and message.
_FIRST_CALL = """
import sys, tdock
address, options = sys.argv[1], eval(sys.argv[2])
try:
    with tdock.Client(address, **options) as client:
        print("ready", flush=True)
        sys.stdin.readline()
        print("calling", flush=True)
        client.list_docks()
    print("ok", flush=True)
except tdock.errors.TdockError as e:
    print(type(e).__name__, e, flush=True)
"""


class _Lines:
    """A child's output lines, read by a thread of their own, so that the
    test waits for each with a bound instead of hanging."""

    def __init__(self, proc):
        self._lines = queue.Queue()
        threading.Thread(target=self._read, args=(proc.stdout,), daemon=True).start()

    def _read(self, stream):
        for line in stream:
            self._lines.put(line.strip())
        self._lines.put(None)

    def next(self, timeout=120.0):
        line = self._lines.get(timeout=timeout)
        assert line is not None, "the client process ended without an answer"
        return line

_SPIN = "while True: pass"


def first_calls_while_server_is_stopped(address, server, options, *, until_answered,
                                        processes=8):
    """Starts `processes` client processes and, once each has made its
    Client, keeps every CPU busy with spinning processes; stops the server
    (SIGSTOP, waiting until every thread of it is stopped: the kernel still
    accepts the connections, the server answers none) and lets every client
    make its call. The server is resumed 1 s
    after every client said it is calling or, with `until_answered`, once
    every client has its answer. Returns each client's answer."""
    clients = [subprocess.Popen([sys.executable, "-c", _FIRST_CALL, address, repr(options)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for _ in range(processes)]
    spinners = []
    lines = [_Lines(c) for c in clients]
    try:
        for out in lines:  # imported and made their Client: the calls start together
            assert out.next() == "ready"
        spinners = [subprocess.Popen([sys.executable, "-c", _SPIN])
                    for _ in range(os.cpu_count() or 2)]
        server.send_signal(signal.SIGSTOP)
        try:
            wait_stopped(server.pid)
            for c in clients:
                c.stdin.write("go\n")
                c.stdin.flush()
            for out in lines:
                assert out.next() == "calling"
            if until_answered:
                return [out.next() for out in lines]
            time.sleep(1.0)
        finally:
            server.send_signal(signal.SIGCONT)
        return [out.next() for out in lines]
    finally:
        for s in spinners:
            s.kill()
            s.wait()
        for c in clients:
            if c.poll() is None:
                c.kill()
            c.wait()


def wait_stopped(pid, timeout=60.0):
    """Waits until every thread of `pid` is stopped. A SIGSTOP stops a
    process only once one of its threads is scheduled to take it: on a busy
    host the others meanwhile go on serving calls."""
    deadline = time.monotonic() + timeout
    while True:
        states = []
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                pass  # a thread that has exited
        if states and all(state in ("T", "t") for state in states):
            return
        assert time.monotonic() < deadline, f"tdock-server threads not stopped: {states}"
        time.sleep(0.01)


@pytest.fixture
def own_server():
    proc, address = start_server()
    drain(proc)
    yield proc, address
    stop_server(proc)


def test_first_calls_outlast_a_server_that_is_not_scheduled(own_server):
    """8 processes make their first call at once, every CPU busy, while the
    server is not scheduled (from before their calls until 1 s after the
    last began): each call connects when the server runs again and succeeds
    (a connection attempt may take up to `connect_timeout`, 20 s by
    default). With a 0.1 s connect timeout (what the client used before) the
    same calls, the server kept stopped until they are answered, fail: the
    test reproduces the busy host. Each fails as UNAVAILABLE (its attempts
    gave up) or, where the call's deadline came first on the loaded host,
    DEADLINE_EXCEEDED; none is answered."""
    proc, address = own_server
    answers = first_calls_while_server_is_stopped(address, proc, {}, until_answered=False)
    assert answers == ["ok"] * len(answers), "\n".join(answers)
    old = first_calls_while_server_is_stopped(address, proc, {"connect_timeout": 0.1},
                                              until_answered=True)
    assert all(a.startswith(("Unavailable", "DeadlineExceeded")) for a in old), "\n".join(old)


def test_a_new_client_connects_at_once_while_another_backs_off(own_server, tmp_path):
    """A client keeps calling a server that is away until its reconnect
    backoff is long (up to 5 s here); the server comes back. A new client in
    the same process, made with the same options, connects at once: it does
    not share the first client's connection and its backoff (the first
    client's own calls fail until its next attempt)."""
    proc, address = own_server
    stop_server(proc)
    options = {"max_reconnect_backoff": 5.0, "timeout": 10.0}
    waiting = tdock.Client(address, **options)
    deadline = time.monotonic() + 4.0
    while time.monotonic() < deadline:  # the backoff grows toward 5 s
        with pytest.raises(tdock.errors.Unavailable):
            waiting.list_docks()
        time.sleep(0.05)
    restarted, restarted_address = start_server(f"--listen={address}")
    drain(restarted)
    try:
        assert restarted_address == address
        with tdock.Client(address, **options) as fresh:
            assert fresh.list_docks() == []
    finally:
        waiting.close()
        stop_server(restarted)


def test_connect_timeout_must_be_positive():
    with pytest.raises(tdock.errors.InvalidArgument, match="connect_timeout must be > 0"):
        tdock.Client("127.0.0.1:1", connect_timeout=0)
