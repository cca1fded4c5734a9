"""Dock specs from dicts and YAML files, in the server's ``--config`` format.

The structure is the one of ``examples/quickstart.yaml``: ``columns`` and
``consumers`` are maps from name to settings, enums are lower-case names.
Values may be Python's, numpy's scalars and arrays, or OmegaConf's
(DictConfig, ListConfig: a verl config's nodes); the spec holds Python's.
Errors raise ``tdock.errors.InvalidArgument`` naming the key path
(``consumers.reward.policy: unknown policy 'lifo' ...``). Checks that need the
whole spec (unknown column names, dispatch sizes, ...) are the server's: it
answers CreateDock with the same kind of message.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Sequence
from typing import Any, Callable, Mapping

import numpy as np

from tdock import dtypes, errors
from tdock.v1 import dock_pb2

_POLICIES = {"fifo": dock_pb2.FIFO, "random": dock_pb2.RANDOM,
             "balanced": dock_pb2.BALANCED}
_PLANNERS = {"balanced": dock_pb2.PLANNER_BALANCED,
             "packed": dock_pb2.PLANNER_PACKED}
_ORDERS = {"heavy_first": dock_pb2.HEAVY_FIRST,
           "smallest_at_ends": dock_pb2.SMALLEST_AT_ENDS}
_STALE = {"leave": dock_pb2.STALE_LEAVE, "drop": dock_pb2.STALE_DROP}
_PADS = {"none": dock_pb2.PAD_NONE, "repeat": dock_pb2.PAD_REPEAT}
_ROW_ORDERS = {"default": dock_pb2.ROW_ORDER_DEFAULT,
               "oldest_version": dock_pb2.ORDER_OLDEST_VERSION,
               "index": dock_pb2.ORDER_INDEX}


def _fail(path: str, what: str):
    raise errors.InvalidArgument(f"{path or 'spec'}: {what}")


def _type_name(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, Mapping):
        return "a map"
    if _is_list(value):
        return "a list"
    # The type too: the string '2' and the number 2 print alike.
    kind = type(value)
    name = kind.__name__ if kind.__module__ == "builtins" \
        else f"{kind.__module__}.{kind.__name__}"
    return f"'{value}' ({name})"


def _is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))


def _is_list(value: Any) -> bool:
    """A list, a tuple, OmegaConf's ListConfig or a 1-D numpy array."""
    if isinstance(value, np.ndarray):
        return value.ndim == 1
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


# Numbers are checked by kind (numbers.Integral, numbers.Real), so numpy's
# scalars pass as Python's do; what a spec holds is always Python's own type.

def _int(value: Any, path: str) -> int:
    if _is_bool(value) or not isinstance(value, numbers.Integral):
        _fail(path, f"expected an integer, got {_type_name(value)}")
    return int(value)


def _float(value: Any, path: str) -> float:
    if _is_bool(value) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value):
        _fail(path, f"expected a finite number, got {_type_name(value)}")
    return float(value)


def _bool(value: Any, path: str) -> bool:
    if not _is_bool(value):
        _fail(path, f"expected true or false, got {_type_name(value)}")
    return bool(value)


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        _fail(path, f"expected a string, got {_type_name(value)}")
    return str(value)


def _list(value: Any, path: str, item: Callable[[Any, str], Any]) -> list:
    if not _is_list(value):
        _fail(path, f"expected a list, got {_type_name(value)}")
    return [item(v, f"{path}[{i}]") for i, v in enumerate(value)]


def _enum(names: Mapping[str, int], what: str) -> Callable[[Any, str], int]:
    def read(value: Any, path: str) -> int:
        name = _str(value, path)
        if name.lower() not in names:
            _fail(path, f"unknown {what} '{name}' (one of {', '.join(names)})")
        return names[name.lower()]
    return read


def _fields(node: Any, path: str, readers: Mapping[str, Callable],
            required: tuple = ()) -> None:
    """Calls readers[key](value, path.key) for each entry of the map."""
    if node is None:
        node = {}
    if not isinstance(node, Mapping):
        _fail(path, f"expected a map, got {_type_name(node)}")
    for key, value in node.items():
        child = f"{path}.{key}" if path else str(key)
        if key not in readers:
            _fail(child, f"unknown key '{key}' (known keys: {', '.join(readers)})")
        readers[key](value, child)
    for key in required:
        if key not in node:
            _fail(path, f"missing key '{key}'")


def _setter(msg, field: str, read: Callable[[Any, str], Any]):
    def apply(value: Any, path: str) -> None:
        parsed = read(value, path)
        if isinstance(parsed, list):
            getattr(msg, field).extend(parsed)
        else:
            setattr(msg, field, parsed)
    return apply


def _column(node: Any, path: str, col: dock_pb2.ColumnSpec) -> None:
    _fields(node, path, {
        "dtype": lambda v, p: _column_type(col, v, p),
        "inner_shape": _setter(col, "inner_shape",
                               lambda v, p: _list(v, p, _int)),
        "max_len": _setter(col, "max_len", _int),
        "rewritable": _setter(col, "rewritable", _bool),
    }, required=("dtype",))


def _column_type(col: dock_pb2.ColumnSpec, value: Any, path: str) -> None:
    col.dtype, col.encoding = dtypes.parse(_str(value, path), path)


def _micro_batch(node: Any, path: str, mb: dock_pb2.MicroBatchSpec) -> None:
    _fields(node, path, {
        "max_tokens": _setter(mb, "max_tokens", _int),
        "max_rows": _setter(mb, "max_rows", _int),
        "round_to": _setter(mb, "round_to", _int),
        "count_multiple": _setter(mb, "count_multiple", _int),
        "min_count": _setter(mb, "min_count", _int),
        "planner": _setter(mb, "planner", _enum(_PLANNERS, "planner")),
        "order": _setter(mb, "order", _enum(_ORDERS, "order")),
        "padded": _setter(mb, "padded", _bool),
        "same_count_across_ranks": _setter(mb, "same_count_across_ranks", _bool),
    }, required=("max_tokens",))


def _seal_when(spec: dock_pb2.DockSpec, node: Any, path: str) -> None:
    when = spec.seal_when
    _fields(node, path, {
        "consumer": _setter(when, "consumer", _str),
        "groups": _setter(when, "groups", _int),
        "carry": _setter(when, "carry", _bool),
        "carry_columns": _setter(when, "carry_columns", lambda v, p: _list(v, p, _str)),
    }, required=("consumer", "groups"))


def _cost(node: Any, path: str, cost: dock_pb2.CostModel) -> None:
    # A key left out keeps its default: a = 1, b = 0.
    cost.a, cost.b = 1.0, 0.0
    _fields(node, path, {"a": _setter(cost, "a", _float),
                         "b": _setter(cost, "b", _float)})


def column_spec(name: str, node: Any, path: str = "") -> dock_pb2.ColumnSpec:
    """A ColumnSpec from its settings map (the value under its name)."""
    col = dock_pb2.ColumnSpec(name=name)
    _column(node, path, col)
    return col


def consumer_spec(name: str, node: Any, path: str = "") -> dock_pb2.ConsumerSpec:
    """A ConsumerSpec from its settings map (the value under its name)."""
    c = dock_pb2.ConsumerSpec(name=name)
    _fields(node, path, {
        "columns": _setter(c, "columns", lambda v, p: _list(v, p, _str)),
        "dispatch_size": _setter(c, "dispatch_size", _int),
        "dp_size": _setter(c, "dp_size", _int),
        "whole_groups": _setter(c, "whole_groups", _bool),
        "policy": _setter(c, "policy", _enum(_POLICIES, "policy")),
        "seed": _setter(c, "seed", _int),
        "lease_ms": _setter(c, "lease_ms", _int),
        "replicas": _setter(c, "replicas", _int),
        "optional": _setter(c, "optional", _bool),
        "max_staleness": _setter(c, "max_staleness", _int),
        "stale": _setter(c, "stale", _enum(_STALE, "stale policy")),
        "order": _setter(c, "order", _enum(_ROW_ORDERS, "row order")),
        "pad": _setter(c, "pad", _enum(_PADS, "pad")),
        "cost": lambda v, p: _cost(v, p, c.cost),
        "micro_batch": lambda v, p: _micro_batch(v, p, c.micro_batch),
    })
    return c


def _named(node: Any, path: str, make: Callable[[str, Any, str], None]) -> None:
    if node is None:
        return
    if not isinstance(node, Mapping):
        _fail(path, f"expected a map, got {_type_name(node)}")
    for key, value in node.items():
        make(_str(key, path), value, f"{path}.{key}")


def dock_spec(node: Any, path: str = "") -> dock_pb2.DockSpec:
    """A DockSpec from a dict in the YAML format."""
    if isinstance(node, dock_pb2.DockSpec):
        return node
    if not isinstance(node, Mapping):
        _fail(path, f"expected a dock spec map, got {_type_name(node)}")
    spec = dock_pb2.DockSpec()

    def column(name: str, value: Any, p: str) -> None:
        col = spec.columns.add(name=name)
        _column(value, p, col)

    def consumer(name: str, value: Any, p: str) -> None:
        spec.consumers.append(consumer_spec(name, value, p))

    _fields(node, path, {
        "name": _setter(spec, "name", _str),
        "num_prompts": _setter(spec, "num_prompts", _int),
        "n_samples_per_prompt": _setter(spec, "n_samples_per_prompt", _int),
        "steps_in_flight": _setter(spec, "steps_in_flight", _int),
        "length_columns": _setter(spec, "length_columns",
                                  lambda v, p: _list(v, p, _str)),
        "columns": lambda v, p: _named(v, p, column),
        "consumers": lambda v, p: _named(v, p, consumer),
        "preallocate_bytes": _setter(spec, "preallocate_bytes", _int),
        "memory_limit_bytes": _setter(spec, "memory_limit_bytes", _int),
        "chunk_bytes": _setter(spec, "chunk_bytes", _int),
        "seal_when": lambda v, p: _seal_when(spec, v, p),
        "retain_steps": _setter(spec, "retain_steps", _bool),
        "add_columns_on_write": _setter(spec, "add_columns_on_write", _bool),
        "max_rows_per_step": _setter(spec, "max_rows_per_step", _int),
    })
    return spec


def load(spec: Any) -> list[dock_pb2.DockSpec]:
    """Dock specs from a dict, a DockSpec, or a YAML file path (one dock, or
    several under ``docks:``)."""
    if isinstance(spec, (str, os.PathLike)):
        import yaml  # only needed for files
        try:
            with open(spec, encoding="utf-8") as f:
                node = yaml.safe_load(f)
        except OSError as e:
            raise errors.InvalidArgument(f"cannot read dock spec {spec}: {e}")
        except yaml.YAMLError as e:
            raise errors.InvalidArgument(f"{spec}: YAML error: {e}")
        if isinstance(node, Mapping) and "docks" in node:
            if set(node) != {"docks"}:
                _fail("", "'docks:' must be the only top-level key")
            return _list(node["docks"], "docks", dock_spec)
        return [dock_spec(node)]
    return [dock_spec(spec)]
