"""A data dir written by an older server (tests/persist/compat/b4ed15a.*,
made by make_data_dir.py with the server of commit b4ed15a) opens under this
one with every dock, step, row, cell, key, version, hand-out, lease, drop,
seal and reservation as the older server showed them, except what its
recorded deadline ended since: the reservation, asked for 24 hours (the
longest there is) when the data dir was made, has expired, so its rows not
written were dropped as expired when this server opened it."""

import copy
import json
import pathlib
import sys
import tarfile
import time

import numpy as np
import pytest

import tdock

COMPAT = pathlib.Path(__file__).resolve().parents[1] / "persist" / "compat"
sys.path.insert(0, str(COMPAT))
sys.path.insert(0, str(COMPAT.parents[1]))
from make_data_dir import observe  # noqa: E402
from server_process import drain, start_server, stop_server  # noqa: E402

# make_data_dir.py's reservation: 24 hours from when the data dir was made.
RESERVATION_SECONDS = 86_400


def expired_reservation(was):
    """What the "admission" dock shows once its reservation (rows 0-3 of step
    1, rows 0 and 1 written) has expired: rows 2 and 3 dropped as expired,
    no reservation live; the rest as it was."""
    now = copy.deepcopy(was)
    now["reservations_live"] = 0
    now["dropped"]["expired"] = 2
    step = next(s for s in now["steps"] if s["step"] == 1)
    step["dropped"]["expired"] = 2
    for row in step["rows"]:
        if row[0] in (2, 3):
            row[3] = "expired"
    return now


def observe_settled(dock, want, timeout=60.0):
    """The dock as observe() sees it once the expiry, which the server rings
    as it opens, has been recorded (at most `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    seen = observe(dock)
    while seen != want and time.monotonic() < deadline:
        time.sleep(0.1)
        seen = observe(dock)
    return seen


def test_a_data_dir_of_b4ed15a_opens_as_it_was(tmp_path):
    with tarfile.open(COMPAT / "b4ed15a.tar.gz") as tar:
        made = max(m.mtime for m in tar.getmembers())
        tar.extractall(tmp_path)
    if time.time() < made + RESERVATION_SECONDS + 60:
        pytest.fail("the clock says the archive's reservation has not expired yet: "
                    "this test expects it expired (the archive was made "
                    f"{time.ctime(made)})")
    expected = json.loads((COMPAT / "b4ed15a.json").read_text())
    expected["admission"] = expired_reservation(expected["admission"])
    proc, address = start_server(f"--data_dir={tmp_path / 'data'}")
    drain(proc)
    try:
        with tdock.Client(address, timeout=30.0) as client:
            assert sorted(d.name for d in client.list_docks()) == sorted(expected)
            for name, want in expected.items():
                assert observe_settled(client.dock(name), want) == want, name
            # The reservation's rows 2 and 3 are dropped: a write of them is
            # refused, saying why; rows 0 and 1 kept their writes and the
            # reservation's version.
            adm = client.dock("admission")
            with pytest.raises(tdock.errors.Expired) as refused:
                adm.put(1, [2, 3], {"ids": [np.arange(3, dtype=np.int32)] * 2})
            assert refused.value.drop_reason == "expired"
            batch = adm.get("reader", step=1, count=2)
            assert batch.rows.tolist() == [0, 1]
            assert batch.versions.tolist() == [1, 1]
    finally:
        stop_server(proc)
