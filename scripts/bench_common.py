"""What the benchmark scripts share and that needs no autotune import (``bench_overhead.py --before`` measures
another checkout's package, which may predate the APIs ``bench_search.py`` uses)."""

from __future__ import annotations

from pathlib import Path

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
