#!/usr/bin/python3
"""Writes the seed corpus of tdock_dock_fuzzer (tests/fuzz/corpus/): valid and
nearly valid inputs for each of its three paths, each file being one selector
byte (0: PutRequest, 1: CreateDockRequest, 2: YAML spec) and the bytes.

    PYTHONPATH=build/python /usr/bin/python3 tests/fuzz/make_corpus.py
"""

import pathlib
import struct

from tdock.v1 import dock_pb2

OUT = pathlib.Path(__file__).resolve().parent / "corpus"


def column(name, dtype, rows, fmt, item_size):
    offsets, data = [0], b""
    for row in rows:
        offsets.append(offsets[-1] + len(row) // item_size)
        data += struct.pack(f"<{len(row) // item_size}{fmt}", *[1] * (len(row) // item_size))
    return dock_pb2.PackedColumn(name=name, dtype=dtype, offsets=offsets, data=data)


def puts():
    ids = column("ids", dock_pb2.INT32, [b"x" * 8, b"x" * 4, b"", b"x" * 12], "i", 4)
    score = column("score", dock_pb2.FLOAT32, [b"x" * 4] * 4, "f", 4)
    text = dock_pb2.PackedColumn(name="text", dtype=dock_pb2.BYTES,
                                 offsets=[0, 5, 5, 8, 9], data=b"helloabcd")
    yield "put_ids", dock_pb2.PutRequest(dock="fuzz", step=0, rows=[0, 1, 2, 3], columns=[ids])
    yield "put_two_columns", dock_pb2.PutRequest(dock="fuzz", step=1, rows=[4, 5, 6, 7],
                                                 columns=[ids, score])
    yield "put_text_lease", dock_pb2.PutRequest(dock="fuzz", step=0, rows=[0, 1, 2, 3],
                                                columns=[text], ack_lease=1, wait_ms=0)
    bad = column("ids", dock_pb2.INT32, [b"x" * 8] * 2, "i", 4)
    bad.offsets[1] = 5
    yield "put_bad_offsets", dock_pb2.PutRequest(dock="fuzz", step=0, rows=[0, 1], columns=[bad])


def specs():
    spec = dock_pb2.DockSpec(
        name="seed", num_prompts=4, n_samples_per_prompt=2, steps_in_flight=2,
        length_columns=["ids"],
        columns=[dock_pb2.ColumnSpec(name="ids", dtype=dock_pb2.INT32, max_len=16),
                 dock_pb2.ColumnSpec(name="logp", dtype=dock_pb2.BFLOAT16, inner_shape=[3])],
        consumers=[dock_pb2.ConsumerSpec(
            name="actor", columns=["ids"], dp_size=2, policy=dock_pb2.BALANCED,
            cost=dock_pb2.CostModel(a=1, b=0.5),
            micro_batch=dock_pb2.MicroBatchSpec(max_tokens=32, round_to=4, padded=True)),
            dock_pb2.ConsumerSpec(name="reward", columns=["ids", "logp"], whole_groups=True,
                                  dispatch_size=4, lease_ms=100)])
    yield "create_dock", dock_pb2.CreateDockRequest(spec=spec)


YAML = """name: y
num_prompts: 3
n_samples_per_prompt: 2
length_columns: [a]
columns:
  a: {dtype: int32, max_len: 8}
  b: {dtype: float16, rewritable: true}
consumers:
  c: {columns: [a, b], dp_size: 3, policy: random, seed: 9}
  d: {columns: [a], policy: balanced, dp_size: 2, dispatch_size: 1,
      micro_batch: {max_tokens: 8, planner: packed, order: smallest_at_ends}}
"""


def main():
    OUT.mkdir(exist_ok=True)
    for name, message in puts():
        (OUT / name).write_bytes(b"\x00" + message.SerializeToString())
    for name, message in specs():
        (OUT / name).write_bytes(b"\x01" + message.SerializeToString())
    (OUT / "yaml_spec").write_bytes(b"\x02" + YAML.encode())
    (OUT / "yaml_list").write_bytes(b"\x02docks:\n  - " + YAML.replace("\n", "\n    ").encode())


if __name__ == "__main__":
    main()
