"""A data dir written by an older server (tests/persist/compat/b4ed15a.*,
made by make_data_dir.py with the server of commit b4ed15a) opens under this
one with every dock, step, row, cell, key, version, hand-out, lease, drop,
seal and reservation as the older server showed them; the reserved rows still
take their writes."""

import json
import pathlib
import sys
import tarfile

import numpy as np

import tdock

COMPAT = pathlib.Path(__file__).resolve().parents[1] / "persist" / "compat"
sys.path.insert(0, str(COMPAT))
sys.path.insert(0, str(COMPAT.parents[1]))
from make_data_dir import observe  # noqa: E402
from server_process import drain, start_server, stop_server  # noqa: E402


def test_a_data_dir_of_b4ed15a_opens_as_it_was(tmp_path):
    with tarfile.open(COMPAT / "b4ed15a.tar.gz") as tar:
        tar.extractall(tmp_path)
    expected = json.loads((COMPAT / "b4ed15a.json").read_text())
    proc, address = start_server(f"--data_dir={tmp_path / 'data'}")
    drain(proc)
    try:
        with tdock.Client(address, timeout=30.0) as client:
            assert sorted(d.name for d in client.list_docks()) == sorted(expected)
            for name, was in expected.items():
                assert observe(client.dock(name)) == was, name
            # The reservation's rows 2 and 3 (of 0-3) not yet written still
            # take their writes, which carry its version.
            adm = client.dock("admission")
            adm.put(1, [2, 3], {"ids": [np.arange(3, dtype=np.int32)] * 2})
            batch = adm.get("reader", step=1, count=4)
            assert batch.rows.tolist() == [0, 1, 2, 3]
            assert batch.versions.tolist() == [1, 1, 1, 1]
    finally:
        stop_server(proc)
