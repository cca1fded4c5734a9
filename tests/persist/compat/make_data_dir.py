"""Writes a data dir with an older tdock-server, for the compatibility test.

    TDOCK_SERVER_BIN=/path/to/old/tdock-server PYTHONPATH=build/python \
        .venv/bin/python tests/persist/compat/make_data_dir.py tests/persist/compat/NAME

starts that server on a fresh --data_dir (sync durability), builds docks that
hold every kind of record (cells with keys and versions, rewritable cells, a
released step, hand-outs, a lease in flight, a drop, a seal, a reservation
with rows still to write, an added consumer and column, the dock's version),
reads what the server then says of them, stops it, and writes NAME.tar.gz
(the data dir) and NAME.json (what it said). test_compat_data.py starts the
current server on that data dir and expects the same answers.
"""

import json
import pathlib
import sys
import tarfile
import tempfile

import numpy as np

import tdock

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from server_process import drain, start_server, stop_server  # noqa: E402

SPEC = {
    "num_prompts": 4, "n_samples_per_prompt": 2, "steps_in_flight": 2,
    "length_columns": ["ids"],
    "columns": {"ids": {"dtype": "int32"},
                "note": {"dtype": "int32", "rewritable": True}},
    "consumers": {
        "reader": {"columns": ["ids"], "dispatch_size": 3},
        "leased": {"columns": ["ids"], "dispatch_size": 2, "lease_ms": 86_400_000},
        "bounded": {"columns": ["ids"], "dispatch_size": 8, "max_staleness": 2},
    },
}


def ids(rows, step):
    return [np.arange(r + 2, dtype=np.int32) + 100 * step for r in rows]


def build(client):
    # "history": a released step, a step with every kind of row state.
    dock = client.create_dock({"name": "history", **SPEC})
    dock.set_version(3)
    dock.put(0, range(8), {"ids": ids(range(8), 0)}, versions=3)
    for consumer in ("reader", "leased", "bounded"):
        for _ in range(8):
            batch = dock.get(consumer, step=0)
            if batch.lease is not None:
                dock.ack(batch)
            if batch.end_of_step:
                break
    rows = list(range(8))
    dock.put(1, rows, {"ids": ids(rows, 1)}, keys=[f"s1r{r}" for r in rows],
             versions=[3, 3, 2, 2, 1, 1, 3, 3])
    dock.put(1, [0, 1], {"note": [np.array([7], np.int32)] * 2})
    dock.put(1, [0], {"note": [np.array([8], np.int32)]})  # a rewrite
    dock.get("reader", step=1)                  # 3 rows handed out
    dock.get("leased", step=1)                  # a lease in flight
    dock.drop(1, [7], reason="filtered")
    dock.add_column("extra", {"dtype": "float32"})
    dock.add_consumer("late", {"columns": ["ids"], "dispatch_size": 4})

    # "admission": a sealed step and a reservation with rows still to write.
    adm = client.create_dock({"name": "admission", **SPEC})
    adm.set_version(1)
    adm.put(0, [0, 1, 2], {"ids": ids([0, 1, 2], 0)}, versions=1)
    adm.seal(0)
    r = adm.reserve(4, version=1, deadline=86_400)
    adm.put(r.step, r.rows[:2], {"ids": ids(r.rows[:2], r.step)}, reservation=r)
    return [dock, adm]


def observe(dock):
    """What the server says of a dock: status, every live step's rows and
    cells."""
    st = dock.status()
    out = {
        "version": st.version,
        "dropped": st.dropped,
        "reservations_live": st.reservations_live,
        "leases": {k: [v.in_flight, v.rows_in_flight] for k, v in st.leases.items()},
        "columns": [c.name for c in dock.spec.columns],
        "consumers": [c.name for c in dock.spec.consumers],
        "steps": [],
    }
    for s in st.steps:
        rows = dock.list_rows(s.step)
        cells = {}
        for row in rows:
            for column in row.written:
                if row.dropped:
                    continue
                batch = dock.read(s.step, [row.row], [column])
                cells[f"{row.row}/{column}"] = batch.row(column, 0).tolist()
        out["steps"].append({
            "step": s.step, "ready": s.ready, "consumed": s.consumed,
            "sealed": s.sealed, "dropped": s.dropped,
            "rows": [[r.row, r.key, r.version, r.dropped, sorted(r.written),
                      sorted(r.taken)] for r in rows],
            "cells": cells,
        })
    return out


def main():
    name = pathlib.Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = pathlib.Path(tmp) / "data"
        proc, address = start_server(f"--data_dir={data_dir}", "--durability=sync")
        drain(proc)
        try:
            with tdock.Client(address, timeout=30.0) as client:
                docks = build(client)
                # The spec as the client fetched it before columns and
                # consumers were added: fetch it again.
                observed = {d.name: observe(client.dock(d.name)) for d in docks}
        finally:
            stop_server(proc)
        with tarfile.open(name.with_suffix(".tar.gz"), "w:gz") as tar:
            tar.add(data_dir, arcname="data")
    name.with_suffix(".json").write_text(json.dumps(observed, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
