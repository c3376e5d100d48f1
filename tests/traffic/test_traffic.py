"""Request logs in (#45): every format read with each request's own sampling and lengths, bad logs refused with
the file, line and field; a representative subset; each validity guard silent on a clean log and firing on one
made to trip it."""

from __future__ import annotations

import json
import math
import random

import pytest

from autotune.errors import SpaceError
from autotune.traffic import (
    FLATTERS_DRAFTER,
    UNREPRESENTATIVE,
    Turn,
    acceptance_check,
    draw_holdout,
    guards,
    holdout_check,
    pick_subset,
    random_token_score,
    read_requests,
    representativeness,
)

from .logs import SYSTEM, ask, chat_line, clean_log, write_jsonl


def test_openai_chat_and_completions_bodies_keep_their_own_sampling_and_answers(tmp_path):
    log = write_jsonl(
        tmp_path / "log.jsonl",
        [
            {
                "request": {
                    "messages": [
                        {"role": "system", "content": "Be brief."},
                        {
                            "role": "user",
                            "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}],
                        },
                        {"role": "assistant", "content": "Hi."},
                        {"role": "user", "content": "Write a haiku."},
                    ],
                    "max_completion_tokens": 64,
                    "temperature": 0.7,
                    "top_p": 0.9,
                    "chat_template_kwargs": {"enable_thinking": False},
                },
                "response": {
                    "choices": [
                        {"message": {"content": "Leaves fall", "reasoning_content": "think"}, "finish_reason": "stop"}
                    ],
                    "usage": {"prompt_tokens": 31, "completion_tokens": 5},
                },
                "category": "creative",
            },
            {"prompt": "def f(x):", "max_tokens": 128, "id": "c1"},
        ],
    )
    chat, comp = read_requests(log)
    assert chat.messages == (
        Turn("system", "Be brief."),
        Turn("user", "Hello there"),
        Turn("assistant", "Hi."),
        Turn("user", "Write a haiku."),
    )
    assert (chat.max_tokens, chat.temperature, chat.top_p, chat.thinking, chat.category) == (
        64,
        0.7,
        0.9,
        False,
        "creative",
    )
    assert (chat.response, chat.finish_reason, chat.output_tokens, chat.input_tokens, chat.reasoned) == (
        "Leaves fall",
        "stop",
        5,
        31,
        True,
    )
    assert chat.ask == "Write a haiku." and chat.line == 1 and chat.id == "r0"
    assert comp.prompt == "def f(x):" and comp.messages is None and comp.max_tokens == 128 and comp.id == "c1"
    assert comp.temperature is None and comp.response is None and comp.line == 2


@pytest.mark.parametrize("form", ["array", "jsonl"])
def test_sharegpt_conversations_end_at_the_last_human_turn(tmp_path, form):
    convs = [
        {
            "id": "a",
            "conversations": [
                {"from": "system", "value": "S"},
                {"from": "human", "value": "Q1"},
                {"from": "gpt", "value": "A1"},
                {"from": "human", "value": "Q2"},
                {"from": "gpt", "value": "A2 <think>x</think>"},
            ],
        },
        {"id": "b", "conversations": [{"from": "human", "value": "only"}]},
    ]
    path = tmp_path / f"sg.{form}"
    path.write_text(json.dumps(convs, indent=1) if form == "array" else "\n".join(map(json.dumps, convs)))
    a, b = read_requests(path)
    assert [t.role for t in a.messages] == ["system", "user", "assistant", "user"] and a.ask == "Q2"
    assert a.response == "A2 <think>x</think>" and a.reasoned and b.response is None
    assert (a.line, b.line) == ((2, 27) if form == "array" else (1, 2))


@pytest.mark.parametrize(
    ("lines", "where", "said"),
    [
        (['{"messages": [{"role": "user", "content": "x"}]}', "{not json"], ":2: ", "invalid JSON"),
        (
            ['{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}'],
            "temperature",
            "a number from 0 to 2",
        ),
        (['{"messages": [{"role": "system", "content": "x"}]}'], "messages", "at least one user turn"),
        (
            ['{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}'],
            "messages[0].content[0].type",
            "cannot be replayed",
        ),
        (['{"messages": [{"role": "robot", "content": "x"}]}'], "messages[0].role", "one of assistant"),
        (['{"max_tokens": 5}'], ":1: ", "found neither"),
        (['{"prompt": "a", "max_tokens": 0}'], "max_tokens", "at least 1"),
        (['{"id": "x", "prompt": "a"}', '{"id": "x", "prompt": "b"}'], ":2: ", "used twice (first on line 1)"),
        ([], "log.jsonl", "has no requests"),
    ],
)
def test_a_bad_log_names_the_file_line_and_field(tmp_path, lines, where, said):
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines))
    with pytest.raises(SpaceError) as e:
        read_requests(path)
    msg = str(e.value)
    assert str(path) in msg and where in msg and said in msg


def test_a_missing_log_is_a_clear_error(tmp_path):
    with pytest.raises(SpaceError, match="does not exist"):
        read_requests(tmp_path / "nope.jsonl")


def test_a_subset_of_a_large_log_keeps_each_strata_share_and_its_length_distribution(tmp_path):
    reqs = read_requests(clean_log(tmp_path / "log.jsonl", n=1500))
    sub = pick_subset(reqs, 60, seed=3)
    assert len(sub.picked) == 60 and len(set(sub.picked)) == 60 and sub.by == "category"
    for (_inp, _out, _cat), (in_log, picked) in sub.strata.items():
        assert abs(picked - 60 * in_log / 1500) < 1  # largest remainders: within one of its proportional share
    assert pick_subset(reqs, 60, seed=3).picked == sub.picked  # seeded
    rep = representativeness(reqs, sub)
    assert rep["input_tokens"]["ks_p"] > 0.05 and rep["output_tokens"]["ks_p"] > 0.05
    assert all(abs(c["log"] - c["subset"]) < 0.05 for c in rep["categories"].values())
    # the same check tells a biased pick: the 60 shortest requests
    shortest = sorted(range(len(reqs)), key=lambda i: reqs[i].input_len)[:60]
    biased = representativeness(reqs, type(sub)(tuple(sorted(shortest)), sub.strata, sub.by, sub.buckets))
    assert biased["input_tokens"]["ks_p"] < 1e-6 and biased["input_tokens"]["ks_distance"] > 0.5


def test_the_holdout_is_a_seeded_draw_from_the_rest_of_the_log(tmp_path):
    reqs = read_requests(clean_log(tmp_path / "log.jsonl", n=300))
    sub = pick_subset(reqs, 40)
    held = draw_holdout(len(reqs), sub, 40)
    assert len(held) == 40 and not set(held) & set(sub.picked) and held == sorted(held)
    assert draw_holdout(len(reqs), sub, 40) == held and draw_holdout(len(reqs), sub, 40, seed=2) != held
    assert len(draw_holdout(len(reqs), sub, 1000)) == 260  # as many as the rest has, at most
    assert draw_holdout(len(reqs), sub, 0) == []


def test_the_holdout_check_warns_only_when_the_subset_is_off_by_more_than_min_gain():
    from scipy.stats import ttest_ind

    rng = random.Random(0)
    rest = [100 * rng.lognormvariate(0, 0.1) for _ in range(32)]
    same = [100 * rng.lognormvariate(0, 0.1) for _ in range(32)]  # drawn alike (this draw: 0.7% apart)
    clean = holdout_check(same, rest, min_gain=0.02)
    assert clean is not None and clean.warning is None
    assert clean.ratio.low < 1 < clean.ratio.high and clean.subset.n == clean.rest.n == 32
    # the ratio's interval is Welch's two-sample t-interval of the log tok/s
    ci = ttest_ind([math.log(x) for x in same], [math.log(x) for x in rest], equal_var=False).confidence_interval()
    assert (math.log(clean.ratio.low), math.log(clean.ratio.high)) == pytest.approx((ci.low, ci.high))
    fast = holdout_check([x * 1.2 for x in same], rest, min_gain=0.02)
    assert fast is not None and fast.warning and "faster on the subset" in fast.warning
    assert f"WARNING {UNREPRESENTATIVE}" in fast.text() and fast.to_dict()["warning"] == fast.warning
    assert list(fast.to_dict()) == ["subset_tok_per_s", "rest_tok_per_s", "ratio", "min_gain", "warning", "text"]
    assert fast.text().startswith("baseline tok/s on the subset ") and "ratio 1." in fast.text()
    slow = holdout_check([x / 1.2 for x in same], rest, min_gain=0.02)
    assert slow is not None and slow.warning and "slower on the subset" in slow.warning
    # off by 5%, but the study looks for 10% gains: no warning
    near = holdout_check([x * 1.05 for x in same], rest, min_gain=0.10)
    assert near is not None and near.warning is None
    assert holdout_check([100.0], rest, min_gain=0.02) is None  # too few to compare


def test_the_acceptance_check_warns_only_when_the_rest_accepts_clearly_less_than_the_subset():
    """Accepted draft tokens a round (acceptance length - 1), ratio subset / rest: a warning only when its whole
    interval lies above 1 + min_gain (the subset flatters the drafter); a subset that under-sells it says nothing."""
    rng = random.Random(0)
    rest = [1 + rng.uniform(2.5, 3.5) for _ in range(24)]
    same = [1 + rng.uniform(2.5, 3.5) for _ in range(24)]
    clean = acceptance_check(7, same, rest, min_gain=0.02)
    assert clean is not None and clean.warning is None and clean.ratio.low < 1 < clean.ratio.high
    assert clean.subset.point == pytest.approx(sum(same) / 24 - 1)  # the mean of accepted tokens, not of lengths
    assert clean.ratio.point == pytest.approx(clean.subset.point / clean.rest.point)
    flattered = acceptance_check(7, [1 + (x - 1) * 1.3 for x in rest], rest, min_gain=0.02)
    assert flattered is not None and flattered.warning and "fewer draft tokens a round on the rest" in flattered.warning
    assert flattered.ratio.low > 1.02 and flattered.ratio.point == pytest.approx(1.3)
    assert f"WARNING {FLATTERS_DRAFTER}" in flattered.text() and flattered.to_dict()["trial"] == 7
    keys = ["trial", "subset_accepted_per_round", "rest_accepted_per_round", "ratio", "min_gain", "warning", "text"]
    assert list(flattered.to_dict()) == keys
    head = f"trial 7's accepted draft tokens a round on the subset {flattered.subset.point:.2f} ["
    assert flattered.text().startswith(head)
    undersold = acceptance_check(7, [1 + (x - 1) / 1.3 for x in rest], rest, min_gain=0.02)
    assert undersold is not None and undersold.warning is None and undersold.ratio.high < 1
    # 10% apart, but the study looks for 20% gains: no warning
    near = acceptance_check(7, [1 + (x - 1) * 1.1 for x in rest], rest, min_gain=0.20)
    assert near is not None and near.warning is None
    assert acceptance_check(7, [4.0, None], rest, min_gain=0.02) is None  # one reported: too few
    assert acceptance_check(7, [1.0, 1.0, 1.0], rest, min_gain=0.02) is None  # nothing accepted: no ratio


def test_without_categories_the_strata_are_text_clusters(tmp_path):
    rng = random.Random(0)
    topics = {
        "code": "def return value function error list string index query",
        "cook": "salt pepper onion oven bake boil stir flour sugar",
    }
    lines = []
    for i in range(300):
        words = topics["code" if i % 4 else "cook"].split()
        lines.append(chat_line(rng, i, ask_text=" ".join(rng.choice(words) for _ in range(25)), category=None))
    reqs = read_requests(write_jsonl(tmp_path / "log.jsonl", lines))
    sub = pick_subset(reqs, 40, seed=0, clusters=2)
    assert sub.by == "text clusters"
    cook = sum(1 for i in sub.picked if "salt" in reqs[i].ask or "oven" in reqs[i].ask or "bake" in reqs[i].ask)
    assert cook == 10  # a quarter of the log, a quarter of the subset


def test_the_guards_are_silent_on_a_clean_log(tmp_path):
    reqs = read_requests(clean_log(tmp_path / "log.jsonl", n=1200))
    assert guards(reqs, api="chat") == []


def _fired(lines, **kw):
    return [g.name for g in guards(lines, **kw)]


def test_each_guard_fires_on_a_log_made_to_trip_it(tmp_path):
    rng = random.Random(1)
    base = [chat_line(rng, i) for i in range(400)]

    dup = [chat_line(rng, i, ask_text=base[i % 50]["body"]["messages"][-1]["content"]) for i in range(400)]
    assert _fired(read_requests(write_jsonl(tmp_path / "d.jsonl", dup))) == ["near-duplicates"]

    pieces = ["hijo", "Dre", "ICAgICAg", "ывает", "ngth", "XTkw", "的", "strm", "ометр", "Ġthe", "zzkq", "bRtY"]
    junk = [chat_line(rng, i, ask_text=" ".join(rng.choice(pieces) for _ in range(40))) for i in range(400)]
    assert "random-tokens" in _fired(read_requests(write_jsonl(tmp_path / "r.jsonl", junk)))

    tpl = [
        chat_line(
            rng,
            i,
            ask_text="Translate the following sentence into French and answer with the translation only: "
            + ask(rng, 3),
        )
        for i in range(400)
    ]
    assert _fired(read_requests(write_jsonl(tmp_path / "t.jsonl", tpl))) == ["templated"]

    cut = [chat_line(rng, i, finish="length" if i % 10 < 7 else "stop") for i in range(400)]
    assert _fired(read_requests(write_jsonl(tmp_path / "f.jsonl", cut))) == ["forced-length"]

    clean = read_requests(write_jsonl(tmp_path / "c.jsonl", base))
    assert _fired(clean, api="completions") == ["no-chat-template"]

    think = [chat_line(rng, i, answer="<think>hmm</think> " + ask(rng, 20)) for i in range(400)]
    assert _fired(read_requests(write_jsonl(tmp_path / "k.jsonl", think))) == ["thinking-mode"]
    asked = [chat_line(rng, i, answer="<think>hmm</think> " + ask(rng, 20), thinking=True) for i in range(400)]
    assert _fired(read_requests(write_jsonl(tmp_path / "k2.jsonl", asked))) == []


def test_random_token_score_tells_decoded_random_ids_from_prose_and_code():
    assert random_token_score("The kettle on the stove began to whistle, and the old man looked up from his paper") == 0
    code = (
        "def fibonacci(n):\n    if n < 2:\n        return n\n"
        "    return fibonacci(n - 1) + fibonacci(n - 2)  # getUserName HTTPServer"
    )
    assert random_token_score(code) == 0
    assert random_token_score("hijo Dre Reader accomplish bodied ICAgICAg ывает strcmp ометр XTkw ngth 的 sdk") > 0.3
    assert random_token_score(SYSTEM) == 0


def _results(accepts, tokens):
    from autotune.config import PromptResult

    return [
        PromptResult(index=i, completion_tokens=100, seconds=1.0, ttft_s=None, prompt_tokens=n, accept_length=a)
        for i, (a, n) in enumerate(zip(accepts, tokens, strict=True))
    ]


def test_acceptance_far_below_fires_on_a_length_third_or_a_reference_and_is_silent_otherwise():
    from autotune.traffic import ACCEPTANCE_FAR_BELOW, acceptance_guards

    tokens = [100 * (i + 1) for i in range(9)]
    collapses = _results([4.0, 4.1, 3.9, 4.0, 3.8, 4.2, 1.3, 1.2, 1.4], tokens)  # the longest third: 0.3 accepted
    (g,) = acceptance_guards([("d", 7, collapses)])
    assert g.name == ACCEPTANCE_FAR_BELOW and "d (trial 7): acceptance length 1.30 on the long inputs" in g.text
    even = _results([4.0, 4.1, 3.9, 4.0, 3.8, 4.2, 3.0, 2.9, 3.1], tokens)  # 2.0 of 3.0 accepted: not far below
    assert acceptance_guards([("d", 7, even)]) == []
    (r,) = acceptance_guards([("d", 7, even)], {"d": 8.0})  # 2.67 accepted against 7 elsewhere
    assert "against the 8.00 it reaches elsewhere" in r.text
    assert acceptance_guards([("d", 7, even)], {"d": 5.0, "other": 9.0}) == []  # 2.67 of 4: not far below
    assert acceptance_guards([("d", 7, _results([None] * 9, tokens))], {"d": 9.0}) == []  # nothing reported
