"""tdock.transferqueue: the TransferQueue API (``import transfer_queue as
tq``) over a tdock server, so code written for TransferQueue — verl's v1
trainer, its agent loop and worker bridge — runs on tdock unmodified.

    import tdock.transferqueue
    tdock.transferqueue.install()        # `import transfer_queue` is this module
    import transfer_queue as tq
    tq.init({"tdock": {"address": "127.0.0.1:50051"}})   # or TDOCK_ADDRESS=...
    tq.kv_batch_put(keys=["a", "b"], partition_id="train", fields=td, tags=[{...}, {...}])
    td = tq.kv_batch_get(keys=["a", "b"], partition_id="train", select_fields=["x"])

Partitions are docks, keys are row keys, fields are columns (made on first
put: see tdock._tq_store), tags are a json column merged on each put.
Every call is answered by the server, so processes share one view: a Ray
worker calls init() with no argument and finds the server in TDOCK_ADDRESS
(or the config of the first init in that process). The async twins run the
blocking call on a worker thread. See docs/transferqueue.md.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from typing import Any, Sequence

import torch

from tdock import _tq_checkpoint, errors
from tdock._tq_meta import BatchMeta, KVBatchMeta
from tdock._tq_store import TAG, Store

__all__ = ["BatchMeta", "KVBatchMeta", "TransferQueueClient", "async_kv_batch_get",
           "async_kv_batch_put", "async_kv_clear", "async_kv_list", "async_kv_put", "close",
           "get_client", "get_metrics_endpoint", "init", "install", "kv_batch_get",
           "kv_batch_put", "kv_clear", "kv_list", "kv_put", "load_checkpoint",
           "save_checkpoint"]

_lock = threading.Lock()
_store: Store | None = None
_conf: dict = {}


def install() -> None:
    """Makes `import transfer_queue` (and `from transfer_queue import ...`)
    resolve to this module in this process. Ray workers: call it in the
    worker too (a runtime_env worker_process_setup_hook), or put a
    transfer_queue.py that does `from tdock.transferqueue import *` on the path."""
    sys.modules["transfer_queue"] = sys.modules[__name__]


def _settings(conf: Any) -> dict:
    node = conf.get("tdock", None) if conf is not None and hasattr(conf, "get") else None
    out = dict(node.items()) if node is not None else {}
    unknown = set(out) - {"address", "prefix", "rows_per_step", "steps_in_flight", "timeout",
                          "metrics_endpoint"}
    if unknown:
        raise errors.InvalidArgument(
            f"transferqueue.init: unknown tdock settings {sorted(unknown)} (known: address, "
            "prefix, rows_per_step, steps_in_flight, timeout, metrics_endpoint)")
    return out


def init(conf: Any = None) -> Any:
    """Connects this process to the tdock server: `conf` (a dict or
    DictConfig) may hold a `tdock:` map (address, prefix, rows_per_step,
    steps_in_flight, timeout, metrics_endpoint); the address defaults to
    TDOCK_ADDRESS. A second init reuses the connection. Returns `conf`."""
    global _store, _conf
    settings = _settings(conf)
    with _lock:
        if _store is not None:
            return conf
        address = settings.get("address") or os.environ.get("TDOCK_ADDRESS")
        if not address:
            raise errors.InvalidArgument(
                "transferqueue.init: no tdock server address: set TDOCK_ADDRESS or pass "
                "{'tdock': {'address': 'host:port'}}")
        _store = Store(address, prefix=settings.get("prefix", "tq-"),
                       rows_per_step=int(settings.get("rows_per_step", 1 << 16)),
                       steps_in_flight=int(settings.get("steps_in_flight", 16)),
                       timeout=float(settings.get("timeout", 60.0)))
        _conf = settings
        os.environ.setdefault("TDOCK_ADDRESS", address)  # for processes started from here
    return conf


def _s() -> Store:
    if _store is None:
        init()
    return _store


def close() -> None:
    """Closes this process's connection (the server and its data stay)."""
    global _store
    with _lock:
        if _store is not None:
            _store.close()
        _store = None


def get_metrics_endpoint() -> str | None:
    """The server's Prometheus endpoint (host:port): tdock.metrics_endpoint
    of init's config, or TDOCK_METRICS_ENDPOINT; None when neither is set."""
    return _conf.get("metrics_endpoint") or os.environ.get("TDOCK_METRICS_ENDPOINT") or None


# ---- the key-value interface ---------------------------------------------------


def _keys(keys: Any, what: str = "keys") -> list[str]:
    if isinstance(keys, str):
        keys = [keys]
    if not isinstance(keys, (list, tuple)) or not all(isinstance(k, str) and k for k in keys):
        raise errors.InvalidArgument(f"transferqueue: {what} must be a non-empty string or a "
                                     f"list of them, got {keys!r}"[:300])
    if len(set(keys)) != len(keys):
        dup = sorted({k for k in keys if keys.count(k) > 1})
        raise errors.InvalidArgument(f"transferqueue: keys repeat: {dup[:8]}")
    return list(keys)


def kv_batch_put(keys: Sequence[str], partition_id: str, fields: Any = None,
                 tags: Sequence[dict] | None = None) -> KVBatchMeta:
    """Writes `fields` (a TensorDict of batch size len(keys)) and merges
    `tags` (one dict per key) into the keys' tags; new keys are created.
    Returns their KVBatchMeta (tags as stored, all fields of the partition)."""
    keys = _keys(keys)
    if fields is None and tags is None:
        raise errors.InvalidArgument("transferqueue.kv_batch_put: give fields, tags or both")
    if fields is not None:
        batch = fields.batch_size[0] if getattr(fields, "batch_size", None) else None
        if batch != len(keys):
            raise errors.InvalidArgument(
                f"transferqueue.kv_batch_put: {len(keys)} keys but fields of batch size "
                f"{list(getattr(fields, 'batch_size', []))}")
    if tags is not None:
        tags = list(tags)
        if len(tags) != len(keys) or not all(isinstance(t, dict) for t in tags):
            raise errors.InvalidArgument(
                f"transferqueue.kv_batch_put: tags must be one dict per key ({len(keys)} keys, "
                f"{len(tags)} tags)")
    where, names = _s().put(partition_id, keys, fields, tags)
    return KVBatchMeta(keys, [where[k][2] for k in keys], partition_id, names)


def kv_put(key: str, partition_id: str, fields: Any = None, tag: dict | None = None
           ) -> KVBatchMeta:
    """kv_batch_put of one key: `fields` a TensorDict of batch size 1 or a
    dict of one sample's values (tensors get the batch dimension)."""
    key = _keys(key, "key")
    if len(key) != 1:
        raise errors.InvalidArgument(f"transferqueue.kv_put: one key, got {key}")
    if isinstance(fields, dict):
        from tensordict import NonTensorStack, TensorDict
        batch = {}
        for name, value in fields.items():
            if isinstance(value, torch.Tensor) and value.is_nested:
                raise errors.InvalidArgument(
                    f"transferqueue.kv_put: field '{name}' is nested: use kv_batch_put")
            batch[name] = value.unsqueeze(0) if isinstance(value, torch.Tensor) \
                else NonTensorStack(value)
        fields = TensorDict(batch, batch_size=[1])
    return kv_batch_put(key, partition_id, fields, None if tag is None else [tag])


def kv_batch_get(keys: Any, partition_id: str, select_fields: Any = None) -> Any:
    """A TensorDict of the keys' fields, in the keys' order: `select_fields`
    (a name or a list), or the fields every key has. Dense fields come back
    as tensors, ragged ones as jagged nested tensors, Python values as a
    NonTensorStack. errors.NotFound names a key the partition lacks."""
    keys = _keys(keys)
    store = _s()
    dock = store.dock(partition_id, create=False)
    if dock is None:
        raise errors.NotFound(f"transferqueue: no partition '{partition_id}'")
    where = store.lookup(dock, keys)
    missing = [k for k in keys if k not in where]
    if missing:
        raise errors.NotFound(f"transferqueue: partition '{partition_id}' has no keys "
                              f"{missing[:8]}{' ...' if len(missing) > 8 else ''}")
    fields = [select_fields] if isinstance(select_fields, str) else select_fields
    return store.get(dock, [where[k][:2] for k in keys], fields, keys)


def kv_list(partition_id: str | None = None) -> dict[str, dict[str, dict]]:
    """{partition_id: {key: tag}} of one partition (absent: {}) or all."""
    store = _s()
    pids = store.partitions() if partition_id is None else [partition_id]
    out = {}
    for pid in pids:
        dock = store.dock(pid, create=False)
        if dock is not None:
            out[pid] = store.tags(dock)
    return out


def kv_clear(keys: Any, partition_id: str) -> None:
    """Removes the keys (their fields and tags); keys not there are skipped."""
    _s().clear(partition_id, _keys(keys))


async def async_kv_put(key: str, partition_id: str, fields: Any = None,
                       tag: dict | None = None) -> KVBatchMeta:
    return await asyncio.to_thread(kv_put, key, partition_id, fields, tag)


async def async_kv_batch_put(keys: Sequence[str], partition_id: str, fields: Any = None,
                             tags: Sequence[dict] | None = None) -> KVBatchMeta:
    return await asyncio.to_thread(kv_batch_put, keys, partition_id, fields, tags)


async def async_kv_batch_get(keys: Any, partition_id: str, select_fields: Any = None) -> Any:
    return await asyncio.to_thread(kv_batch_get, keys, partition_id, select_fields)


async def async_kv_list(partition_id: str | None = None) -> dict:
    return await asyncio.to_thread(kv_list, partition_id)


async def async_kv_clear(keys: Any, partition_id: str) -> None:
    await asyncio.to_thread(kv_clear, keys, partition_id)


# ---- the client's BatchMeta interface ----------------------------------------------


class TransferQueueClient:
    """get_client()'s object: samples by BatchMeta (global indexes)."""

    def kv_retrieve_meta(self, keys: Any, partition_id: str, create: bool = False) -> BatchMeta:
        """The keys' BatchMeta: global indexes, tags, and the fields all of
        them have. create=True makes the keys missing (with an empty tag)."""
        keys = _keys(keys)
        store = _s()
        if create:
            kv_batch_put(keys, partition_id, tags=[{} for _ in keys])
        dock = store.dock(partition_id, create=False)
        where = store.lookup(dock, keys) if dock is not None else {}
        missing = [k for k in keys if k not in where]
        if missing:
            raise errors.NotFound(f"transferqueue: partition '{partition_id}' has no keys "
                                  f"{missing[:8]}")
        written = {(s, r.row): set(r.written) for s, r in store.listing(dock)}
        sets = [written.get(where[k][:2], set()) for k in keys]
        fields = sorted(set.intersection(*sets) - {TAG}) if sets else []
        return BatchMeta([store.global_index(dock, *where[k][:2]) for k in keys],
                         [partition_id] * len(keys), fields, {},
                         [dict(where[k][2]) for k in keys])

    def kv_retrieve_keys(self, global_indexes: Sequence[int], partition_id: str) -> list[str]:
        store = _s()
        dock = store.dock(partition_id, create=False)
        if dock is None:
            raise errors.NotFound(f"transferqueue: no partition '{partition_id}'")
        out = []
        for index in global_indexes:
            step, row = store.step_row(dock, index)
            out += dock.read(step, [row], [TAG]).keys
        return out

    def get_data(self, metadata: BatchMeta) -> Any:
        """A TensorDict of the metadata's fields of its samples."""
        from tensordict import TensorDict
        if metadata.size == 0:
            return TensorDict({}, batch_size=[0])
        pid, dock = self._one_partition(metadata)
        sr = [_s().step_row(dock, i) for i in metadata.global_indexes]
        return _s().get(dock, sr, list(metadata.field_names), [str(i) for i in sr])

    def put(self, data: Any, metadata: BatchMeta) -> BatchMeta:
        """Writes `data` (batch size metadata.size) to the metadata's samples;
        returns the metadata with the fields written added."""
        if data.batch_size[0] != metadata.size:
            raise errors.InvalidArgument(
                f"transferqueue.put: data of batch size {list(data.batch_size)} for "
                f"{metadata.size} samples")
        pid, dock = self._one_partition(metadata)
        keys = self.kv_retrieve_keys(metadata.global_indexes, pid)
        kv_batch_put(keys, pid, data)
        fields = list(metadata.field_names) + [f for f in data.keys()
                                               if f not in metadata.field_names]
        return BatchMeta(metadata.global_indexes, metadata.partition_ids, fields,
                         dict(metadata.extra_info), metadata.get_all_custom_meta())

    def _one_partition(self, metadata: BatchMeta):
        pids = set(metadata.partition_ids)
        if len(pids) != 1:
            raise errors.InvalidArgument(
                f"transferqueue: a BatchMeta of one partition is needed, got {sorted(pids)}")
        pid = pids.pop()
        dock = _s().dock(pid, create=False)
        if dock is None:
            raise errors.NotFound(f"transferqueue: no partition '{pid}'")
        return pid, dock

    async def async_kv_retrieve_meta(self, keys: Any, partition_id: str,
                                     create: bool = False) -> BatchMeta:
        return await asyncio.to_thread(self.kv_retrieve_meta, keys, partition_id, create)

    async def async_kv_retrieve_keys(self, global_indexes: Sequence[int],
                                     partition_id: str) -> list[str]:
        return await asyncio.to_thread(self.kv_retrieve_keys, global_indexes, partition_id)

    async def async_get_data(self, metadata: BatchMeta) -> Any:
        return await asyncio.to_thread(self.get_data, metadata)

    async def async_put(self, data: Any, metadata: BatchMeta) -> BatchMeta:
        return await asyncio.to_thread(self.put, data, metadata)


_client = TransferQueueClient()


def get_client() -> TransferQueueClient:
    _s()
    return _client


# ---- checkpoints ---------------------------------------------------------------


def save_checkpoint(path: str, metadata: dict | None = None) -> None:
    """Writes every partition's keys, tags and fields, and `metadata`, to
    `path`/tdock_tq.pt as data (tdock._tq_checkpoint's layout, never a
    pickle). The metadata may hold what a Python-value field may;
    errors.InvalidArgument names a part that it cannot, and nothing is
    written. For durability across server restarts without checkpoints,
    run the server with --data_dir instead."""
    store = _s()
    state = {"metadata": dict(metadata or {}), "partitions": {}}
    for pid in store.partitions():
        dock = store.dock(pid, create=False)
        groups: dict[tuple, list] = {}
        for step, r in store.listing(dock):
            groups.setdefault(tuple(sorted(set(r.written) - {TAG})), []).append((step, r))
        tags = store.tags(dock)
        saved = []
        for fields, rows in groups.items():
            keys = [r.key for _, r in rows]
            td = store.get(dock, [(s, r.row) for s, r in rows], list(fields), keys) \
                if fields else None
            saved.append({"keys": keys, "tags": [tags[k] for k in keys],
                          "fields": _tq_checkpoint.stored_fields(td)})
        state["partitions"][pid] = saved
    _tq_checkpoint.write(path, state)


def load_checkpoint(path: str) -> dict:
    """Puts back what save_checkpoint wrote (keys there now are overwritten
    field by field, their tags merged); returns the checkpoint's metadata.
    Reading parses data only: a file that is not a tdock checkpoint (a
    pickle, a torch.save file) raises errors.DataLoss, one of an unknown
    format version errors.InvalidArgument, both before anything is written."""
    state = _tq_checkpoint.read(path)
    puts = [(pid, g["keys"], _tq_checkpoint.fields_tensordict(g["fields"], len(g["keys"])),
             g["tags"]) for pid, groups in state["partitions"].items() for g in groups
            if g["keys"]]
    for pid, keys, fields, tags in puts:
        kv_batch_put(keys, pid, fields, tags)
    return state["metadata"]
