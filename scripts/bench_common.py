"""What the benchmark scripts share and that needs no autotune import (``bench_overhead.py --before`` measures
another checkout's package, which may predate the APIs ``bench_search.py`` uses)."""

from __future__ import annotations

import os
import pickle
import threading
from pathlib import Path
from typing import Any

BEGIN = "<!-- begin {} -->"
END = "<!-- end {} -->"


def replace_section(path: Path, key: str, body: str) -> None:
    """Replace (or append) the block between the section's markers; the rest of the file is kept."""
    text = path.read_text() if path.exists() else "# Benchmarks\n\n"
    b, e = BEGIN.format(key), END.format(key)
    block = f"{b}\n{body.rstrip()}\n{e}\n"
    if b in text and e in text:
        text = text[: text.index(b)] + block + text[text.index(e) + len(e) + 1 :]
    else:
        text = text.rstrip() + "\n\n" + block
    path.write_text(text)


class KeptRuns:
    """Finished benchmark runs kept in a folder, one pickle per run key, so a run cut short (a time limit, another
    machine) is continued by the same command: ``get`` gives a kept run's result (None when not kept), ``keep``
    writes one atomically (a temporary name, then a rename: a killed writer leaves no half file). Safe from threads
    and processes, as long as two writers do not keep the same key at once."""

    def __init__(self, folder: Path | str) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def _path(self, key: tuple[Any, ...]) -> Path:
        name = "-".join(str(k) for k in key)
        if not name or any(c in name for c in "/\\\0") or name.startswith("."):
            raise ValueError(f"a run key must make a plain file name but got {key!r}")
        return self.folder / f"{name}.pkl"

    def get(self, key: tuple[Any, ...]) -> Any | None:
        path = self._path(key)
        return pickle.loads(path.read_bytes()) if path.exists() else None

    def keep(self, key: tuple[Any, ...], value: Any) -> None:
        path = self._path(key)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(pickle.dumps(value))
        os.replace(tmp, path)
