"""tdock.server: a tdock-server binary run as a child process.

    with tdock.server.LocalServer(data_dir="/tmp/tdock") as server:
        client = tdock.Client(server.address)

The binary is `binary`, else $TDOCK_SERVER_BIN, else the one a tdock wheel
carries (tdock/_bin/, scripts/build-wheel.sh), else `tdock-server` on PATH:
explicit settings first, then the binary installed with this client (built
from the same proto), then whatever PATH holds.
Started on a free loopback port by default; `address` is where it listens
(read from its "listening on" line). On Linux the server gets SIGTERM if the
process that started it dies, so it never outlives its owner (a Ray actor,
a test, a notebook).
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Iterable

from tdock import errors
from tdock._bundled import bundled

__all__ = ["LocalServer", "find_binary"]

_LISTENING = re.compile(r"tdock-server listening on (\S+)")
_METRICS = re.compile(r"tdock-server metrics on (\S+)")
_PR_SET_PDEATHSIG = 1


def find_binary(binary: str | None = None) -> str:
    """The tdock-server to run: `binary`, $TDOCK_SERVER_BIN, the wheel's
    bundled one, or PATH's (in that order)."""
    path = (binary or os.environ.get("TDOCK_SERVER_BIN") or bundled("tdock-server")
            or shutil.which("tdock-server"))
    if not path:
        raise errors.NotFound(
            "tdock-server not found: give its path (binary=..., --server), set "
            "TDOCK_SERVER_BIN, install a tdock wheel that carries it "
            "(scripts/build-wheel.sh), or put it on PATH (it is built into "
            "build/server/tdock-server)")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise errors.NotFound(f"tdock-server '{path}' is not an executable file")
    return path


# Loaded here, not between fork and exec, where only the call may run.
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: SIGTERM when the parent dies.
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class LocalServer:
    """A tdock-server child process (see the module comment).

    listen: where it listens (default a free loopback port); metrics_listen:
    its /metrics endpoint (default a free loopback port; "" for none);
    data_dir: persistence (--data_dir); config: a YAML spec file of docks to
    create at start; args: further flags (`--durability=async`, ...);
    log: a file object for the server's log (default: read and dropped).
    """

    def __init__(self, *, binary: str | None = None, listen: str = "127.0.0.1:0",
                 metrics_listen: str | None = "127.0.0.1:0", data_dir: str | None = None,
                 config: str | None = None, args: Iterable[str] = (),
                 log=None, start_timeout: float = 60.0):
        self.binary = find_binary(binary)
        argv = [self.binary, f"--listen={listen}"]
        if metrics_listen is not None:
            argv.append(f"--metrics_listen={metrics_listen}")
        if data_dir is not None:
            argv.append(f"--data_dir={data_dir}")
        if config is not None:
            argv.append(f"--config={config}")
        self.argv = argv + list(args)
        self.address: str | None = None
        self.metrics_url: str | None = None
        self._log = log
        self._start_timeout = start_timeout
        self.process: subprocess.Popen | None = None

    def start(self) -> "LocalServer":
        """Starts the server and waits until it listens."""
        if self.process is not None:
            raise errors.FailedPrecondition(f"tdock-server already started at {self.address}")
        self._listening = threading.Event()
        self._lines: list[str] = []
        started = threading.Event()
        failed: list[BaseException] = []
        # The parent-death signal follows the thread that started the child:
        # start it from a thread that lives as long as the server does.
        owner = threading.Thread(target=self._own, args=(started, failed),
                                 name="tdock-server", daemon=True)
        owner.start()
        started.wait()
        if failed:
            raise failed[0]
        deadline = time.monotonic() + self._start_timeout
        while not self._listening.wait(0.05):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                code = self.process.wait()
                owner.join(5)
                self.process = None
                raise errors.Unavailable(
                    f"{self.binary} did not start listening (exit code {code}): "
                    + "".join(self._lines[-20:]).strip())
        return self

    def _own(self, started: threading.Event, failed: list) -> None:
        try:
            self.process = subprocess.Popen(
                self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        except OSError as e:
            failed.append(errors.Unavailable(f"cannot run {self.binary}: {e}"))
            return
        finally:
            started.set()
        # Reads the log to its end, so the server never blocks on a full pipe.
        for line in self.process.stdout:
            if not self._listening.is_set():
                self._lines.append(line)
                m = _METRICS.search(line)
                if m:
                    self.metrics_url = m.group(1)
                m = _LISTENING.search(line)
                if m:
                    self.address = m.group(1)
                    self._listening.set()
            if self._log is not None:
                self._log.write(line)
                self._log.flush()

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (the server drains its calls and exits), SIGKILL after
        `timeout` seconds; returns its exit code."""
        if self.process is None:
            return 0
        proc, self.process = self.process, None
        if proc.poll() is None:
            proc.terminate()
            try:
                return proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
        return proc.wait()

    def __enter__(self) -> "LocalServer":
        return self.start() if self.process is None else self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"at {self.address}" if self.running() else "stopped"
        return f"LocalServer({self.binary} {state})"
