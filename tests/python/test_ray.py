"""tdock.ray on a real local Ray: tdock-server started as a named actor
(placed by custom resource and by node), reached from actors in other
processes through a pickled handle and by name, stopped cleanly, and never
outliving its actor."""

import os
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import tdock  # noqa: E402
import tdock.ray  # noqa: E402
from conftest import grpo_spec  # noqa: E402
from server_process import server_binary  # noqa: E402


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    ray.init(num_cpus=2, resources={"tdock": 1}, include_dashboard=False,
             object_store_memory=200 << 20, log_to_driver=False,
             _temp_dir=str(tmp_path_factory.mktemp("ray")))
    yield
    ray.shutdown()


def process_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def wait_gone(pid, seconds=30):
    deadline = time.monotonic() + seconds
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not process_alive(pid)


@ray.remote(num_cpus=0)
class Producer:
    def write(self, server, dock, rows):
        d = server.dock(dock)  # connects here, in this actor's process
        d.put(0, rows, {"prompt_ids": [np.full(3, r, np.int32) for r in rows]})
        return os.getpid()


@ray.remote(num_cpus=0)
class Trainer:
    def drain(self, server_name, dock):
        server = tdock.ray.get_server(server_name)  # found by name
        rows = []
        for b in server.dock(dock).iter("trainer", step=0, wait=30):
            rows += [int(b.row("prompt_ids", i)[0]) for i in range(len(b))]
        return os.getpid(), sorted(rows)


def test_actors_in_other_processes_share_one_server(local_ray, dock_name):
    """The server runs in an actor placed by the custom resource 'tdock';
    two Producer actors, handed the pickled handle, each write half of a
    step; a Trainer actor that finds the server by name reads every row
    once. Five processes: driver, server actor, two producers, trainer."""
    name = f"tdock-{dock_name}"
    server = tdock.ray.start_server(name, binary=server_binary(), num_cpus=0,
                                    resources={"tdock": 1})
    try:
        dock = server.client().create_dock(grpo_spec(
            dock_name, prompts=8, n=1, length_columns=["prompt_ids"],
            columns={"prompt_ids": {"dtype": "int32"}},
            consumers={"trainer": {"columns": ["prompt_ids"], "dispatch_size": 4}}))
        producers = [Producer.remote(), Producer.remote()]
        trainer = Trainer.remote()
        drained = trainer.drain.remote(name, dock.name)
        pids = ray.get([producers[0].write.remote(server, dock.name, [0, 1, 2, 3]),
                        producers[1].write.remote(server, dock.name, [4, 5, 6, 7])])
        trainer_pid, rows = ray.get(drained)
        assert rows == list(range(8))
        server_actor_pid = ray.get(server.actor.pid.remote())
        assert len({os.getpid(), server_actor_pid, trainer_pid, *pids}) == 5
    finally:
        assert server.stop() == 0


def test_placement_names_and_lifetime(local_ray):
    """Placed on a node by id, the actor reports that node; a second server
    of the same name is refused, an unknown name is NotFound; killing the
    actor takes its tdock-server with it."""
    node = ray.get_runtime_context().get_node_id()
    server = tdock.ray.start_server("tdock-placed", binary=server_binary(),
                                    num_cpus=0, node_id=node)
    actor = server.actor
    assert ray.get(actor.node_id.remote()) == node
    assert server.client().list_docks() == []
    with pytest.raises(tdock.errors.AlreadyExists, match="'tdock-placed' already exists"):
        tdock.ray.start_server("tdock-placed", binary=server_binary(), num_cpus=0)
    with pytest.raises(tdock.errors.NotFound, match="no Ray actor named 'nobody'"):
        tdock.ray.get_server("nobody")
    pid = ray.get(actor.pid.remote())
    ray.kill(actor)
    assert wait_gone(pid), "tdock-server outlived its actor"


def test_a_server_that_cannot_start_is_reported(local_ray):
    """A server that exits at once, and an actor no node can take, are
    errors that say so, not waits without end."""
    with pytest.raises(tdock.errors.Unavailable, match="did not start"):
        tdock.ray.start_server("tdock-broken", binary=server_binary(), num_cpus=0,
                               args=["--durability=sometimes"])
    with pytest.raises(tdock.errors.DeadlineExceeded, match="no node could take it"):
        tdock.ray.start_server("tdock-nowhere", binary=server_binary(), num_cpus=0,
                               resources={"gpu_box": 1}, timeout=2)
