"""tdock.ray.start_cluster on a two-node Ray cluster (ray.cluster_utils on
this machine): a controller and a shard on each node; actors on each node
put through their node's shard (each shard takes in payload, the controller
none) and a trainer reads every row back; once a node leaves the cluster,
its rows' cells are gone and a Get of them says so, while the other node's
rows are still read."""

import os
import socket
import time
import urllib.request

import numpy as np
import pytest

from conftest import SHARDED  # noqa: E402

ray = pytest.importorskip("ray")
# It starts its own controller and shards: once is enough.
pytestmark = pytest.mark.skipif(SHARDED, reason="runs its own sharded deployment")
from ray._common.utils import get_default_ray_temp_dir  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import tdock  # noqa: E402
import tdock.ray  # noqa: E402
from conftest import grpo_spec  # noqa: E402
from server_process import server_binary  # noqa: E402


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    # Cluster writes its address into Ray's default temp dir (/tmp/ray)
    # whatever temp_dir says, and fails where that does not exist yet (a new
    # host, or one where no Ray has run with its defaults).
    os.makedirs(get_default_ray_temp_dir(), exist_ok=True)
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"node_a": 1}, "include_dashboard": False,
        "object_store_memory": 100 << 20,
        "temp_dir": str(tmp_path_factory.mktemp("ray"))})
    worker = cluster.add_node(num_cpus=1, resources={"node_b": 1},
                              object_store_memory=100 << 20)
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    yield cluster, worker
    ray.shutdown()
    cluster.shutdown()


@ray.remote(num_cpus=0)
class Producer:
    def write(self, cluster, dock, rows):
        cluster.dock(dock).put(0, rows, {"prompt_ids": [np.full(2, r, np.int32) for r in rows]})
        return ray.get_runtime_context().get_node_id()


def wait_refused(address, seconds=120):
    """Until nothing listens at `address` (the removed node's shard has
    stopped): a synchronization point, not a timing assertion."""
    host, port = address.rsplit(":", 1)
    give_up = time.monotonic() + seconds
    while time.monotonic() < give_up:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
        except OSError:
            return
        time.sleep(0.05)
    raise AssertionError(f"the shard at {address} still listens")


def payload_in(url):
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    (line,) = [x for x in text.splitlines()
               if x.startswith('tdock_payload_bytes_total{direction="in"}')]
    return float(line.rsplit(" ", 1)[1])


def test_a_shard_on_each_node_keeps_that_nodes_rows(two_nodes):
    cluster, worker = two_nodes
    head = ray.get_runtime_context().get_node_id()  # the driver's node, which stays
    handle = tdock.ray.start_cluster("tdock-two", binary=server_binary(), num_cpus=0,
                                     controller_node_id=head)
    try:
        nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert sorted(s.node for s in handle.client().shards()) == sorted(nodes)
        dock = handle.client().create_dock(grpo_spec(
            "two", prompts=2, n=2, length_columns=["prompt_ids"],
            columns={"prompt_ids": {"dtype": "int32"}},
            consumers={"trainer": {"columns": ["prompt_ids"], "whole_groups": True,
                                   "dispatch_size": 2}}))
        # Group 0 from node a, group 1 from node b.
        wrote = ray.get([
            Producer.options(resources={"node_a": 0.1}).remote().write.remote(
                handle, dock.name, [0, 1]),
            Producer.options(resources={"node_b": 0.1}).remote().write.remote(
                handle, dock.name, [2, 3])])
        assert len(set(wrote)) == 2
        assert all(payload_in(s.metrics_url) > 0 for s in handle.shards)
        assert payload_in(handle.controller.metrics_url) == 0
        # Node b leaves: its shard, and its rows' cells, go with it.
        (gone,) = [s for s in handle.shards if s.name.endswith(wrote[1])]
        cluster.remove_node(worker)
        wait_refused(gone.address)
        # Node a's rows are read; node b's were handed out and are lost.
        first = dock.get("trainer", wait=10)
        assert [int(first.row("prompt_ids", i)[0]) for i in range(2)] == [0, 1]
        with pytest.raises(tdock.errors.DataLoss, match=r"rows \[2, 3\].*shard"):
            dock.get("trainer", wait=10)
    finally:
        handle.stop()


def test_a_cluster_with_data_dirs_comes_back_when_its_actors_die(two_nodes, tmp_path):
    """start_cluster with data dirs: the controller's actor killed (its
    process, and with it its server) is started again by Ray on the same
    port and comes back from its journal; a shard's, on its node's data dir,
    as the same incarnation with its cells; the rows put before both are
    read back after."""
    head = ray.get_runtime_context().get_node_id()
    handle = tdock.ray.start_cluster(
        "tdock-again", binary=server_binary(), num_cpus=0, controller_node_id=head,
        shard_resource="node_a", data_dir=str(tmp_path / "controller"),
        shard_data_dir=str(tmp_path / "shards"))
    try:
        client = handle.client()
        dock = client.create_dock(grpo_spec(
            "again", prompts=2, n=2, length_columns=["prompt_ids"],
            columns={"prompt_ids": {"dtype": "int32"}},
            consumers={"trainer": {"columns": ["prompt_ids"], "dispatch_size": 4}}))
        dock.put(0, range(4), {"prompt_ids": [np.full(2, r, np.int32) for r in range(4)]})
        (shard,) = handle.shards
        before = client.shards(refresh=True)[0]
        for server in (handle.controller, shard):
            pid = ray.get(server.actor.pid.remote())
            ray.kill(server.actor, no_restart=False)
            give_up = time.monotonic() + 120
            while True:  # the actor back with a new server: a synchronization point
                try:
                    if ray.get(server.actor.pid.remote(), timeout=10) != pid:
                        break
                except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                    pass
                assert time.monotonic() < give_up, f"{server.name} did not come back"
                time.sleep(0.1)
        assert ray.get(handle.controller.actor.address.remote()) == handle.address
        give_up = time.monotonic() + 120
        while True:  # the shard registered again from its new address
            try:
                after = client.shards(refresh=True)[0]
                if after.address != before.address:
                    break
            except tdock.errors.Unavailable:
                pass  # the controller back, its shard not yet registered
            assert time.monotonic() < give_up, "the shard never registered again"
            time.sleep(0.1)
        assert after.incarnation == before.incarnation
        b = client.dock("again").get("trainer", wait=10)
        assert sorted(int(b.row("prompt_ids", i)[0]) for i in range(len(b))) == [0, 1, 2, 3]
    finally:
        handle.stop()
