"""A server's log file: its last lines, and whether they say the server ran out of memory."""

from __future__ import annotations

import os
import re
from pathlib import Path

_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|out of memory", re.IGNORECASE)


def log_tail(path: str | Path | None, lines: int = 40, max_bytes: int = 64 * 1024) -> str:
    """The last ``lines`` lines of a log file ('' when unreadable)."""
    if not path:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def looks_like_oom(text: str) -> bool:
    return bool(_OOM.search(text))
