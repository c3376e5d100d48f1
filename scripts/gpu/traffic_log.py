"""A request log for the GPU harness's request-log study (``run.sh study`` with ``STUDY_TRAFFIC``), made on the
machine (nothing downloaded): OpenAI chat request bodies as JSON lines, the batch API's ``{custom_id, body}`` with
``metadata.category``.

    python3 scripts/gpu/traffic_log.py OUT.jsonl [--n 120] [--seed 0] [--flatter REQUESTS]

- clean (default): ``n`` requests of three categories (code, chat, summarization: a long text to summarize), a
  system turn, every fifth an earlier turn, ``max_tokens`` 48/64/96 and temperature 0 / 0.7 / 1.0 (so a study
  over it samples, and the temperature-0 lossless check runs on the winner);
- ``--flatter REQUESTS``: the same log, then the ``REQUESTS`` that ``benchmark.requests: REQUESTS`` picks
  (``autotune.traffic.pick_subset``, seed 0) ask for python code at temperature 0 and the rest ask for a poem at
  temperature 1.0, each ask kept at its length so the pick stays the same (checked): a subset that flatters the
  drafter, as a code-heavy sample of a chat-heavy, hotter production would.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

WORDS = (
    "the a of to and in is it that for on with as was by at be this from or have an not are but which one all "
    "were when we there can been has more if will would what so out up about into than them some could time these "
    "two may then do first any my now such like our over man me even most made after also did many before must "
    "through back years where much your way well down should because each just those people how too little state "
    "good very make world still own see men work long get here between both life being under never day same "
    "another know while last might us great old year off come since against go came right used take three"
).split()
CODE_WORDS = "function list string number file table column index query result value error return loop".split()
CATEGORIES = ("code", "chat", "summarization")
SYSTEM = "You are a helpful assistant. Answer briefly and precisely."


def _words(rng: random.Random, n: int, pool: list[str] = WORDS) -> str:
    return " ".join(rng.choice(pool) for _ in range(n))


def _ask(rng: random.Random, category: str) -> str:
    if category == "code":
        return f"Write a python function that takes a {_words(rng, 3, CODE_WORDS)} and returns {_words(rng, 6)}."
    if category == "summarization":
        return "Summarize this text in three sentences: " + _words(rng, rng.randint(60, 220)).capitalize() + "."
    return _words(rng, rng.randint(8, 30)).capitalize() + "?"


def clean(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        category = CATEGORIES[i % 3]
        messages = [{"role": "system", "content": SYSTEM}]
        if i % 5 == 0:
            messages += [
                {"role": "user", "content": _ask(rng, "chat")},
                {"role": "assistant", "content": _words(rng, 12)},
            ]
        messages.append({"role": "user", "content": _ask(rng, category)})
        body = {
            "model": "target",
            "messages": messages,
            "max_tokens": rng.choice((48, 64, 96)),
            "temperature": rng.choice((0.0, 0.7, 1.0)),
            "top_p": rng.choice((0.95, 1.0)),
        }
        lines.append({"custom_id": f"req-{i}", "body": body, "metadata": {"category": category}})
    return lines


def _same_length(text: str, length: int) -> str:
    """``text`` cut or padded (with its own words again) to ``length`` characters."""
    out = text
    while len(out) < length:
        out += " " + text
    return out[:length]


def flatter(lines: list[dict], requests: int, path: Path) -> list[dict]:
    """``lines`` rewritten so the subset ``benchmark.requests: requests`` picks asks for code at temperature 0 and
    the rest for a poem at temperature 1.0, each ask at its own length (the pick, by length and category, stays)."""
    from autotune.traffic import pick_subset, read_requests

    write(path, lines)
    picked = pick_subset(read_requests(path), requests, seed=0).picked
    chosen = set(picked)
    rng = random.Random(1)
    for i, line in enumerate(lines):
        last = line["body"]["messages"][-1]
        if i in chosen:
            new = f"Write a python function that returns the {_words(rng, 3, CODE_WORDS)}: def f(x): return x"
            line["body"]["temperature"] = 0.0
        else:
            new = f"Write a short poem about {_words(rng, 4)}, with rhyme and feeling, in four lines."
            line["body"]["temperature"] = 1.0
        last["content"] = _same_length(new, len(last["content"]))
    write(path, lines)
    again = pick_subset(read_requests(path), requests, seed=0).picked
    if again != picked:
        raise SystemExit(f"traffic_log.py: the flattering rewrite moved the pick ({picked} -> {again})")
    return lines


def write(path: Path, lines: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--n", type=int, default=120, help="requests in the log (default 120)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--flatter", type=int, default=0, metavar="REQUESTS", help="plant a flattering subset of this size")
    a = p.parse_args(argv)
    out = Path(a.out)
    lines = clean(a.n, a.seed)
    if a.flatter:
        flatter(lines, a.flatter, out)
    else:
        write(out, lines)
    temps = sorted({x["body"]["temperature"] for x in lines})
    print(f"wrote {out}: {len(lines)} chat requests, temperatures {temps}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
