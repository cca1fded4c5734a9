"""Replicas of a DP rank (TP / PP / CP peers) through the Python clients:
every replica of a rank iterates the same shares, ranks split the rows,
the share's one lease is acknowledged by replica 0, and bad replica
indexes are refused."""

import numpy as np
import pytest

import tdock
from conftest import grpo_spec


def replica_spec(name, lease_ms=0):
    return grpo_spec(name, prompts=8, n=1, consumers={
        "actor": {"columns": ["prompt_ids"], "policy": "balanced", "dp_size": 2,
                  "replicas": 3, "dispatch_size": 2, "lease_ms": lease_ms,
                  "micro_batch": {"max_tokens": 64}}})


def put_prompts(dock):
    dock.put(0, range(8), {"prompt_ids": [np.arange(r + 1, dtype=np.int32) for r in range(8)]})


def test_every_replica_iterates_its_ranks_shares(client, dock_name):
    dock = client.create_dock(replica_spec(dock_name, lease_ms=60000))
    assert dock.spec.consumers[0].replicas == 3
    put_prompts(dock)
    shares = {}  # (rank, replica) -> [(round, rows, micro-batch rows)]
    for replica in (1, 0, 2):  # replica 1 goes first: no replica is special
        for rank in (0, 1):
            got = []
            for b in dock.iter("actor", rank=rank, replica=replica, step=0):
                got.append((b.round, b.rows.tolist(),
                            [mb.rows.tolist() for mb in b.micro_batches]))
                if replica == 0:
                    assert dock.ack(b) == len(b)
            shares[(rank, replica)] = got
    for rank in (0, 1):
        assert shares[(rank, 0)] == shares[(rank, 1)] == shares[(rank, 2)]
    rows = [r for rank in (0, 1) for _, rs, _ in shares[(rank, 0)] for r in rs]
    assert sorted(rows) == list(range(8))
    status = dock.status()
    assert status.steps == []  # every replica took every share: released
    assert status.leases["actor"].in_flight == 0


def test_streaming_dataset_per_replica(client, dock_name):
    torch = pytest.importorskip("torch")
    import tdock.torch as tdock_torch
    dock = client.create_dock(replica_spec(dock_name))
    put_prompts(dock)
    seen = {}
    for replica in range(3):
        ds = tdock_torch.StreamingDataset(dock, "actor", rank=1, replica=replica, steps=[0],
                                          item=lambda b: b.rows.tolist())
        seen[replica] = list(ds)
    assert seen[0] == seen[1] == seen[2] and seen[0]
    assert isinstance(torch.tensor(seen[0][0]), torch.Tensor)


def test_bad_replica_is_refused(client, dock_name):
    dock = client.create_dock(replica_spec(dock_name))
    with pytest.raises(tdock.errors.InvalidArgument, match=r"replica 3 is out of range \[0, 3\)"):
        dock.get("actor", replica=3, wait=0)
    spec = replica_spec(dock_name + "f")
    spec["consumers"]["actor"]["policy"] = "fifo"
    del spec["consumers"]["actor"]["micro_batch"]
    with pytest.raises(tdock.errors.InvalidArgument, match="replicas 3 needs policy balanced"):
        client.create_dock(spec)
