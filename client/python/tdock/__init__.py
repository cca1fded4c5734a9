"""tdock: the Python client of the tdock transfer dock.

    import tdock
    client = tdock.Client("127.0.0.1:50051")
    dock = client.create_dock("examples/grpo.yaml")   # or client.dock("grpo")
    dock.put(step, rows, {"response_ids": [np.array([...], np.int32), ...]})
    for batch in dock.iter("actor_logprob", rank=rank):
        ids, cu_seqlens = batch.packed("response_ids")
        for mb in batch.micro_batches:
            padded, mask = mb.padded("response_ids", multiple_of=8)

See Client, Dock and Batch; errors are in tdock.errors; tdock.aio has the
same client for asyncio.
"""

from tdock import aio, errors
from tdock._calls import DROP_REASONS
from tdock.batch import BalanceStats, Batch, Column, MicroBatchInfo
from tdock.client import (Client, Dock, DockStatus, DockSummary, Lease, NackAll, PutAck,
                          Reservation, RowState, StalenessStatus, StepStatus, Tls)
from tdock.columns import Packed, Padded

__version__ = "0.2.0"

__all__ = [
    "DROP_REASONS", "BalanceStats", "Batch", "Client", "Column", "Dock", "DockStatus",
    "DockSummary", "Lease", "MicroBatchInfo", "NackAll", "Packed", "Padded", "PutAck",
    "Reservation", "RowState", "StalenessStatus", "StepStatus", "Tls",
    "aio", "errors", "__version__",
]
