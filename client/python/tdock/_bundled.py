"""The binaries a tdock wheel carries (scripts/build-wheel.sh): tdock-server
and tdockctl in tdock/_bin/, their shared libraries in tdock.libs/ beside the
package (found through the RUNPATH auditwheel gave them). A client installed
from the source directory carries none: bundled() is then None.

The wheel's `tdock-server` and `tdockctl` commands are server_main and
ctl_main: each replaces its own process with the bundled binary, so signals,
exit codes and a parent-death signal reach the binary itself.
"""

from __future__ import annotations

import os
import sys

__all__ = ["bundled", "ctl_main", "server_main"]

_BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin")


def bundled(name: str) -> str | None:
    """The path of the bundled binary `name`, or None if this install has
    none (or it is not executable)."""
    path = os.path.join(_BIN, name)
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def _exec(name: str) -> None:
    path = bundled(name)
    if path is None:
        sys.exit(f"{name}: this tdock install carries no {name} ({_BIN}/{name} "
                 "is missing); install a wheel built by scripts/build-wheel.sh")
    os.execv(path, [name] + sys.argv[1:])


def server_main() -> None:
    _exec("tdock-server")


def ctl_main() -> None:
    _exec("tdockctl")
