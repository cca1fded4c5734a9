"""tdock.torch: a consumer's batches as a torch IterableDataset.

    dataset = tdock.torch.StreamingDataset(dock, "actor_update", rank=dp_rank)
    for td in dataset.loader():           # a torch DataLoader
        loss = model(td["input_ids"]) ...

Each item is one Get's batch (by default as a TensorDict: Batch.to_tensordict).
Iteration waits as long as it takes for rows (or `wait` seconds, then
errors.WaitTimeout), rides out a server restart (Dock.iter), and ends after
`steps` steps. A DataLoader of it needs `batch_size=None` (a batch is already a
batch) and `collate_fn=tdock.torch.as_is` (the default one would take a
TensorDict apart row by row); `loader()` makes it so. DataLoader workers must
be started by spawn or forkserver (loader() does so), since gRPC does not
survive fork: each worker unpickles the Dock into its own client, and the
workers take batches of the same rank in turn.
"""

from __future__ import annotations

import itertools
import os
import time
import warnings
from typing import Any, Callable, Iterable, Iterator

import torch.utils.data

from tdock import errors
from tdock._calls import _RETRY_PAUSE
from tdock.batch import Batch

__all__ = ["StreamingDataset", "as_is"]


def as_is(item: Any) -> Any:
    """A DataLoader collate_fn that passes items through unchanged."""
    return item


class StreamingDataset(torch.utils.data.IterableDataset):
    """The batches `consumer`'s rank `rank` is handed, step after step.

    replica: with `replicas` in the consumer's spec, which of the rank's
      replicas (its TP / PP / CP peers) this is; each replica iterates the
      rank's shares, the same rows, once each. A share has one lease, which
      replica 0 acknowledges (the others do not, whatever `ack` says).

    steps: None (every step, without end), a number of steps (each the
      oldest step with rows for this rank), or the step numbers to drain.
    count, wait: as Dock.iter (wait None: as long as it takes).
    columns, device: what Batch.to_tensordict takes.
    item: makes the yielded item from a Batch (default Batch.to_tensordict;
      `lambda b: b` yields the Batch itself, micro-batches and all).
    ack: for a consumer with leases, a batch is acknowledged when the next
      item is asked for (the loop body is done with it), before the next Get;
      one abandoned mid-way comes back when its lease expires, and so does
      one whose lease ended before the acknowledgement (a warning says so).
      False: the caller acknowledges (have `item` return the Batch).
      With DataLoader workers, a batch is acknowledged when the worker
      fetches ahead, not when the loop body is done: use num_workers=0 for a
      leased consumer whose leases should cover the training step.
    """

    def __init__(self, dock: Any, consumer: str, rank: int = 0, *,
                 steps: int | Iterable[int] | None = None, count: int | None = None,
                 wait: float | None = None, columns: Iterable[str] | None = None,
                 device: Any = None, item: Callable[[Batch], Any] | None = None,
                 ack: bool = True, replica: int = 0):
        super().__init__()
        if isinstance(steps, int) and steps < 0:
            raise errors.InvalidArgument(f"steps must be >= 0, got {steps}")
        if rank < 0:
            raise errors.InvalidArgument(f"rank must be >= 0, got {rank}")
        if replica < 0:
            raise errors.InvalidArgument(f"replica must be >= 0, got {replica}")
        self.dock, self.consumer, self.rank, self.replica = dock, consumer, rank, replica
        self.steps = steps if steps is None or isinstance(steps, int) else list(steps)
        self.count, self.wait, self.ack = count, wait, ack
        self.columns = None if columns is None else list(columns)
        self.device = device
        self.item = item
        self._pid = os.getpid()

    def __setstate__(self, state: dict) -> None:
        # Unpickled (a worker started by spawn): the Dock is this process's.
        self.__dict__.update(state, _pid=os.getpid())

    def __iter__(self) -> Iterator[Any]:
        if os.getpid() != self._pid:
            raise errors.FailedPrecondition(
                "StreamingDataset iterated in a process forked from the one that "
                "made it: gRPC does not survive fork; start DataLoader workers with "
                "multiprocessing_context='spawn' (StreamingDataset.loader() does)")
        dock = self.dock
        for step in self._steps():
            for batch in dock.iter(self.consumer, rank=self.rank, step=step,
                                   count=self.count, wait=self.wait, replica=self.replica):
                if self.ack:  # this loop acknowledges it: a Put of its results needs no ack=
                    dock._leases.ended([batch])
                yield self._item(batch)
                # Asked for the next item: the loop body is done with this one.
                if self.ack and self.replica == 0:
                    _ack(dock, batch)

    def loader(self, **kwargs: Any) -> torch.utils.data.DataLoader:
        """A torch DataLoader of this dataset (batch_size=None,
        collate_fn=as_is, workers started by spawn); kwargs go to the
        DataLoader (num_workers, pin_memory, ...)."""
        kwargs.setdefault("collate_fn", as_is)
        if kwargs.get("num_workers", 0) > 0:
            kwargs.setdefault("multiprocessing_context", "spawn")
        return torch.utils.data.DataLoader(self, batch_size=None, **kwargs)

    def _steps(self) -> Iterable[int | None]:
        if self.steps is None:
            return itertools.repeat(None)
        if isinstance(self.steps, int):
            return itertools.repeat(None, self.steps)
        return self.steps

    def _item(self, batch: Batch) -> Any:
        if self.item is not None:
            return self.item(batch)
        return batch.to_tensordict(self.columns, device=self.device)


def _ack(dock: Any, batch: Batch) -> None:
    """Acknowledges `batch`, waiting for a server that went away (up to the
    client's reconnect_timeout). A lease that ended meanwhile is a warning:
    one that expired (the server was away or the loop body ran long) has its
    rows handed out again; the server's message says how any other ended
    (an Ack retried after a restart finds it acknowledged already)."""
    if batch.lease is None:
        return
    since = time.monotonic()
    while True:
        try:
            dock.ack(batch)
            return
        except errors.Unavailable:
            if time.monotonic() - since > dock.client.reconnect_timeout:
                raise
            time.sleep(_RETRY_PAUSE)
        except errors.FailedPrecondition as e:
            again = "; its rows are handed out again" if isinstance(e, errors.Expired) else ""
            warnings.warn(f"{dock!r} consumer '{batch.consumer}' rank {batch.rank}: "
                          f"{e}{again}", stacklevel=3)
            return
