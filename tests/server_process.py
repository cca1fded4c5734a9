"""tdock-server as a child process, for the Python test suites.

TDOCK_SERVER_BIN names the server binary (ctest sets it; default
build/server/tdock-server).
"""

import os
import pathlib
import re
import subprocess
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


def server_binary():
    return os.environ.get("TDOCK_SERVER_BIN",
                          str(REPO / "build" / "server" / "tdock-server"))


def start_server(*args):
    """Starts tdock-server on 127.0.0.1:0 with its metrics on a free port;
    returns (process, address); process.metrics_url is the /metrics URL."""
    binary = server_binary()
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
    proc.wait()
    raise RuntimeError(f"{binary} did not start listening")


def start_sharded(shards=2, *args, shard_args=()):
    """Starts a controller (with `args`) and `shards` shards of it (with
    `shard_args`), each on its own node name; returns (processes, the
    controller's address). The shards' logs are drained."""
    controller, address = start_server("--role=controller", *args)
    procs = [controller]
    try:
        for i in range(1, shards + 1):
            shard, _ = start_server("--role=shard", f"--controller={address}",
                                    f"--shard_id={i}", f"--node=node-{i}", *shard_args)
            drain(shard)
            procs.append(shard)
    except Exception:
        for proc in procs:
            proc.kill()
            proc.wait()
        raise
    return procs, address


def drain(proc):
    """Reads the server's log in the background so it never blocks on a
    full pipe."""
    threading.Thread(target=proc.stdout.read, daemon=True).start()


def stop_server(proc):
    """SIGTERM, then checks the server exited 0; kills it if it did not."""
    proc.terminate()
    try:
        assert proc.wait(timeout=30) == 0, "tdock-server did not exit cleanly"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
