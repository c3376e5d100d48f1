"""Writing files so that a reader never sees half of one: write a temporary file next to it, then rename."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path


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


def output_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be written as a new or replaced file (one phrase), or None as far as can be told before
    trying: a directory, no such directory to hold it, a directory this process may not write to."""
    target = Path(path)
    if target.is_dir():
        return "it is a directory"
    folder = target.parent
    if not folder.is_dir():
        return f"no such directory {folder}"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the directory {folder} is not writable"
    return None


def atomic_write_all(files: dict[Path, str]) -> None:
    """Write every file (path -> text) or none: each to its temporary file first, then all renamed; an error
    before the renames (OSError) leaves no file written and no temporary file behind."""
    with contextlib.ExitStack() as stack:
        for path, text in files.items():
            tmp = stack.enter_context(atomic_path(path))
            try:
                tmp.write_bytes(text.encode("utf-8"))
            except OSError as e:  # named by the file it was for, not its temporary name
                raise OSError(e.errno, e.strerror, str(path)) from e
