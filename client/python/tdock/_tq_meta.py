"""BatchMeta and KVBatchMeta: TransferQueue's metadata types, for
tdock.transferqueue.

KVBatchMeta names samples by key (what verl's trainer passes around);
BatchMeta names them by global index (what workers read and write through
the client). A tdock global index is ``step * max_rows_per_step + row`` of
the partition's dock: the server's own name of the row, stable while the
row lives. Both are plain values: copying one copies no data.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Sequence

__all__ = ["BatchMeta", "KVBatchMeta"]


def _split(n: int, chunks: int) -> list[tuple[int, int]]:
    """[begin, end) of `chunks` parts of n items as torch.chunk cuts them
    (ceil-sized parts; fewer parts when n is small)."""
    if chunks <= 0:
        raise ValueError(f"chunks must be positive, got {chunks}")
    size = -(-n // chunks) if n else 0
    if size == 0:
        return [(0, 0)] * chunks
    return [(b, min(b + size, n)) for b in range(0, n, size)]


@dataclasses.dataclass
class KVBatchMeta:
    """Samples of one partition by key: their tags (one dict per key), the
    fields known to be written, and extra_info carried with the batch."""
    keys: list = dataclasses.field(default_factory=list)
    tags: list = dataclasses.field(default_factory=list)
    partition_id: str | None = None
    fields: list | None = None
    extra_info: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        self.keys = list(self.keys)
        self.tags = list(self.tags) if self.tags else [{} for _ in self.keys]
        if len(self.tags) != len(self.keys):
            raise ValueError(f"KVBatchMeta: {len(self.keys)} keys but {len(self.tags)} tags")

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def size(self) -> int:
        return len(self.keys)

    def chunk(self, chunks: int) -> list["KVBatchMeta"]:
        return [KVBatchMeta(self.keys[b:e], self.tags[b:e], self.partition_id,
                            copy.copy(self.fields), copy.deepcopy(self.extra_info))
                for b, e in _split(len(self), chunks)]

    @classmethod
    def concat(cls, metas: Sequence["KVBatchMeta"]) -> "KVBatchMeta":
        if not metas:
            raise ValueError("KVBatchMeta.concat: no metas")
        pids = {m.partition_id for m in metas}
        if len(pids) != 1:
            raise ValueError(f"KVBatchMeta.concat: metas of different partitions {sorted(map(str, pids))}")
        fields = metas[0].fields
        return cls([k for m in metas for k in m.keys], [t for m in metas for t in m.tags],
                   metas[0].partition_id, copy.copy(fields), copy.deepcopy(metas[0].extra_info))


@dataclasses.dataclass
class BatchMeta:
    """Samples by global index (one partition id per sample), the fields to
    read or written, extra_info, and each sample's tag (custom_meta)."""
    global_indexes: list = dataclasses.field(default_factory=list)
    partition_ids: list = dataclasses.field(default_factory=list)
    field_names: list = dataclasses.field(default_factory=list)
    extra_info: dict = dataclasses.field(default_factory=dict)
    custom_meta: list = dataclasses.field(default_factory=list)

    def __post_init__(self):
        self.global_indexes = [int(i) for i in self.global_indexes]
        self.partition_ids = list(self.partition_ids)
        if len(self.partition_ids) != len(self.global_indexes):
            raise ValueError(f"BatchMeta: {len(self.global_indexes)} global indexes but "
                             f"{len(self.partition_ids)} partition ids")
        self.field_names = list(self.field_names)
        self.custom_meta = list(self.custom_meta) or [{} for _ in self.global_indexes]

    def __len__(self) -> int:
        return len(self.global_indexes)

    @property
    def size(self) -> int:
        return len(self.global_indexes)

    @property
    def is_ready(self) -> bool:
        return True  # built from the server's record of written cells

    def select_fields(self, fields: Sequence[str] | str) -> "BatchMeta":
        """The same samples with only `fields` (each must be known)."""
        fields = [fields] if isinstance(fields, str) else list(fields)
        unknown = [f for f in fields if f not in self.field_names]
        if unknown:
            raise ValueError(f"BatchMeta.select_fields: fields {unknown} are not in the batch "
                             f"(fields: {self.field_names})")
        return dataclasses.replace(self, field_names=fields,
                                   extra_info=copy.deepcopy(self.extra_info))

    def update_custom_meta(self, tags: Sequence[dict]) -> None:
        if len(tags) != self.size:
            raise ValueError(f"BatchMeta.update_custom_meta: {len(tags)} tags for {self.size} samples")
        for mine, new in zip(self.custom_meta, tags):
            mine.update(new)

    def get_all_custom_meta(self) -> list[dict]:
        return copy.deepcopy(self.custom_meta)

    def chunk(self, chunks: int) -> list["BatchMeta"]:
        return [BatchMeta(self.global_indexes[b:e], self.partition_ids[b:e],
                          list(self.field_names), copy.deepcopy(self.extra_info),
                          copy.deepcopy(self.custom_meta[b:e]))
                for b, e in _split(len(self), chunks)]

    @classmethod
    def concat(cls, metas: Sequence["BatchMeta"]) -> "BatchMeta":
        """One BatchMeta of all samples in order; fields those all have;
        extra_info merged (later ones win)."""
        metas = [m for m in metas if m.size] or list(metas[:1])
        if not metas:
            return cls()
        fields = [f for f in metas[0].field_names if all(f in m.field_names for m in metas)]
        extra: dict[str, Any] = {}
        for m in metas:
            extra.update(m.extra_info)
        return cls([i for m in metas for i in m.global_indexes],
                   [p for m in metas for p in m.partition_ids], fields, extra,
                   [t for m in metas for t in m.custom_meta])
