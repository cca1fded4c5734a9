"""Fixtures: a real tdock-server on a free loopback port, and clients of it.

TDOCK_SERVER_BIN names the server binary (ctest sets it; default
build/server/tdock-server). The tdock package comes from PYTHONPATH (ctest
points it at <build>/python). With TDOCK_TEST_TOPOLOGY=sharded the shared
server is a controller with two shards (docs/scale-out.md), each on a node of
its own, so that Puts are spread over both by hash.
"""

import itertools
import os
import pathlib
import sys

import pytest

import tdock

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from server_process import (REPO, drain, start_server, start_sharded,  # noqa: E402,F401
                            stop_server)

_names = itertools.count()

# `import transfer_queue` is tdock.transferqueue in this suite, before any test
# module imports verl (verl binds transfer_queue, or a stand-in, when first
# imported): test_transferqueue.py runs verl's TransferQueue code over tdock.
try:
    import tdock.transferqueue
    tdock.transferqueue.install()
except ImportError:  # no torch: test_transferqueue.py is skipped
    pass


SHARDED = os.environ.get("TDOCK_TEST_TOPOLOGY", "standalone") == "sharded"


@pytest.fixture(scope="session")
def server():
    if SHARDED:
        # Their cells in shared memory: the clients here (transport auto)
        # write and read them there (tdock._shm); TDOCK_TEST_SHM=0: gRPC.
        shm = os.environ.get("TDOCK_TEST_SHM", "1") != "0"
        procs, address = start_sharded(shard_args=("--shm_dir=/dev/shm",) if shm else ())
        drain(procs[0])
    else:
        proc, address = start_server()
        drain(proc)
        procs = [proc]
    yield address
    for proc in reversed(procs):  # the shards first, then the controller
        stop_server(proc)


@pytest.fixture
def client(server):
    with tdock.Client(server, timeout=30.0) as c:
        yield c


@pytest.fixture
def dock_name(server):
    """A dock name no other test uses; the dock, if the test made one on the
    shared server, is deleted after it (the server holds at most
    --max_docks)."""
    name = f"t{next(_names)}_{os.getpid()}"
    yield name
    with tdock.Client(server, timeout=30.0) as c:
        try:
            c.delete_dock(name)
        except tdock.errors.NotFound:
            pass


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
