"""The Python client and the C++ client (through tdockctl) read each other's
data: cells one writes come back to the other value for value, and both see
the same batch metadata framing (rows, token counts, micro-batches)."""

import json
import os
import subprocess

import numpy as np

from conftest import REPO, grpo_spec


def tdockctl(server, *args):
    binary = os.environ.get("TDOCK_CTL_BIN", str(REPO / "build/client/tdockctl"))
    done = subprocess.run([binary, "--server", server, "--json", *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else None


def _cells(rng, rows, longest):
    return [rng.integers(-50_000, 50_000, rng.integers(0, longest)).astype(np.int32)
            for _ in range(rows)]


def test_python_put_is_read_by_the_cpp_client(server, client, dock_name):
    consumers = {"reward": {"columns": ["prompt_ids", "response_ids", "rewards"],
                            "dispatch_size": 8,
                            "micro_batch": {"max_tokens": 400}}}
    dock = client.create_dock(grpo_spec(dock_name, prompts=4, n=2, consumers=consumers))
    rng = np.random.default_rng(7)
    prompts, responses = _cells(rng, 8, 60), _cells(rng, 8, 300)
    rewards = [np.array([r / 4], dtype=np.float32) for r in range(8)]
    dock.put(0, range(8), {"prompt_ids": prompts, "response_ids": responses,
                           "rewards": rewards})

    got = tdockctl(server, "get", dock_name, "reward", "--step", "0", "--count", "8")
    assert sorted(got["rows"]) == list(range(8))
    assert got["end_of_step"]
    for i, row in enumerate(got["rows"]):
        assert got["columns"]["prompt_ids"][i] == prompts[row].tolist()
        assert got["columns"]["response_ids"][i] == responses[row].tolist()
        assert got["columns"]["rewards"][i] == rewards[row].tolist()
        assert got["token_counts"][i] == len(prompts[row]) + len(responses[row])
    # The plan tiles the rows, in order, each under the budget.
    assert got["micro_batches"][0]["begin"] == 0
    assert got["micro_batches"][-1]["end"] == 8
    assert all(mb["tokens"] <= 400 or mb["end"] - mb["begin"] == 1
               for mb in got["micro_batches"])
    assert got["balance"]["tokens"] == sum(got["token_counts"])


def test_cpp_put_is_read_by_the_python_client(server, client, dock_name, tmp_path):
    dock = client.create_dock(grpo_spec(dock_name, prompts=2, n=2))
    rng = np.random.default_rng(8)
    prompts, responses = _cells(rng, 4, 40), _cells(rng, 4, 2000)
    files = []
    for name, cells in (("prompt_ids", prompts), ("response_ids", responses)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps([c.tolist() for c in cells]))
        files += ["--column", f"{name}={path}"]
    tdockctl(server, "put", dock_name, "--step", "0", "--rows", "0-3", *files)

    batch = dock.get("reward", step=0, count=4, wait=5)
    assert sorted(batch.rows.tolist()) == [0, 1, 2, 3]
    for i, row in enumerate(batch.rows):
        np.testing.assert_array_equal(batch.row("prompt_ids", i), prompts[row])
        np.testing.assert_array_equal(batch.row("response_ids", i), responses[row])
        assert batch.token_counts[i] == len(prompts[row]) + len(responses[row])
