"""Writing files so that a reader never sees half of one: write a temporary file next to it, then rename."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "atomic_write"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path next to ``path`` for the block to write; renamed onto ``path`` when the block ends, removed
    when it raises. The name is this process and thread's own (``.NAME.PID.THREAD.tmp``): workers sharing a folder
    may write the same file at the same moment, and the last rename wins whole."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write(path: str | os.PathLike[str], data: str | bytes, *, fsync: bool = False) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically; with ``fsync`` the data reaches the disk before the
    rename (a record that must survive the machine going down)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(raw)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
