"""Request logs made by the tests (never downloaded): a clean production-like log, and logs made to trip each
validity guard."""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = (
    "the a of to and in is it that for on with as was by at be this from or have an not are but which one all "
    "were when we there can been has more if will would what so out up about into than them some could time these "
    "two may then do first any my now such like our over man me even most made after also did many before must "
    "through back years where much your way well down should because each just those people how too little state "
    "good very make world still own see men work long get here between both life being under never day same "
    "another know while last might us great old year off come since against go came right used take three server "
    "model token draft accept latency memory queue batch request answer prompt cache kernel graph thread buffer "
    "function return value error list string number file table column index query result report summary letter"
).split()
CATEGORIES = ("code", "chat", "summarization")
SYSTEM = "You are a helpful assistant. Answer briefly and precisely, and say so when you do not know."


def ask(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words)).capitalize() + "?"


def chat_line(
    rng: random.Random,
    i: int,
    *,
    ask_text: str | None = None,
    category: str | None = "auto",
    finish: str = "stop",
    answer: str | None = None,
    thinking: bool | None = None,
) -> dict:
    n_in = int(rng.lognormvariate(3.4, 0.7)) + 4
    max_tokens = rng.choice((256, 512, 1024))
    out_tokens = rng.randint(20, max_tokens - 1) if finish == "stop" else max_tokens
    body: dict = {
        "model": "m",
        "messages": [{"role": "system", "content": SYSTEM}]
        + (
            [{"role": "user", "content": ask(rng, 6)}, {"role": "assistant", "content": ask(rng, 9)}]
            if i % 5 == 0
            else []
        )
        + [{"role": "user", "content": ask_text or ask(rng, n_in)}],
        "max_tokens": max_tokens,
        "temperature": rng.choice((0.0, 0.6, 1.0)),
        "top_p": rng.choice((0.9, 0.95, 1.0)),
    }
    if thinking is not None:
        body["chat_template_kwargs"] = {"enable_thinking": thinking}
    line = {
        "custom_id": f"req-{i}",
        "body": body,
        "response": {
            "body": {
                "choices": [
                    {"message": {"role": "assistant", "content": answer or ask(rng, 30)}, "finish_reason": finish}
                ],
                "usage": {"prompt_tokens": n_in + 30, "completion_tokens": out_tokens},
            }
        },
    }
    if category:
        line["metadata"] = {"category": CATEGORIES[i % 3] if category == "auto" else category}
    return line


def write_jsonl(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def clean_log(path: Path, n: int = 1200, seed: int = 0, categories: bool = True) -> Path:
    rng = random.Random(seed)
    return write_jsonl(path, [chat_line(rng, i, category="auto" if categories else None) for i in range(n)])


def flattering_log(path: Path, n: int = 1200, requests: int = 24) -> Path:
    """A log whose subset (``requests`` picked, seed 0) the simulator's drafter likes and whose rest it does not: no
    request names a category but the first (so the strata are length and category, never the text), the subset's
    asks name code (the simulator infers category code: high acceptance) and the rest's ask for a poem without a code
    or summary word (category creative: low). The asks change after the pick, which their text never steered (the
    logged token counts give the lengths); the pick is checked to stay the same."""
    from autotune.traffic import pick_subset, read_requests

    rng = random.Random(0)
    lines = [chat_line(rng, i, category="chat" if i == 0 else None) for i in range(n)]
    picked = pick_subset(read_requests(write_jsonl(path, lines)), requests, seed=0).picked
    chosen = set(picked)
    for i, line in enumerate(lines):
        for m in line["body"]["messages"][1:]:
            text = m["content"].replace("function", "answer").replace("summary", "letter")
            m["content"] = text
        last = line["body"]["messages"][-1]
        last["content"] += " Write it in python." if i in chosen else " Make it a poem."
    write_jsonl(path, lines)
    assert pick_subset(read_requests(path), requests, seed=0).picked == picked
    return path
