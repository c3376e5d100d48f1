"""Log-probabilities over HTTP: SGLang's native format and the OpenAI ones, from a real simulator process, equal to
the in-process reference; near ties between a baseline and a speculative server."""

from __future__ import annotations

import httpx
import pytest

from autotune.config import ReferenceOutput, TokenChoice
from autotune.seam import VirtualClock
from autotune.sim import FIELD_REPORT_PROMPTS
from autotune.sim.engine import SimEngine
from autotune.sim.launch import parse_launch_args
from autotune.sim.runner import ModelRunner
from autotune.sim.text import NEAR_TIE_MARGIN, VOCAB, near_tie_position

from .helpers import KIMI, StandInBackend, make_space, sim_process, spec

pytestmark = pytest.mark.slow

INDEX = 3
PROMPT = FIELD_REPORT_PROMPTS[INDEX][1]
N = 120
TOP = 5
SCALE = 20.0  # slow enough that HTTP overhead stays small against the simulated generation time
BASELINE = ["--model-path", "kimi-k25", "--enable-metrics", "--near-ties", "1.0"]
SPECULATIVE = [
    *BASELINE,
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "custom-10k",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "4",
    "--speculative-num-draft-tokens",
    "16",
]
NATIVE = {
    "text": PROMPT,
    "sampling_params": {"max_new_tokens": N, "temperature": 0},
    "return_logprob": True,
    "top_logprobs_num": TOP,
    "return_text_in_logprobs": True,
}


def native_reference(body: dict) -> ReferenceOutput:
    """A /generate answer with return_logprob read the way a client reads SGLang's."""
    meta = body["meta_info"]
    tokens = tuple(
        TokenChoice(text, lp, tuple((t, tlp) for tlp, _, t in top))
        for (lp, _, text), top in zip(meta["output_token_logprobs"], meta["output_top_logprobs"], strict=True)
    )
    return ReferenceOutput(index=INDEX, text=body["text"], tokens=tokens)


def in_process_reference(config) -> ReferenceOutput:
    r = ModelRunner(make_space(max_tokens=N, near_ties=1.0), StandInBackend(), VirtualClock())
    s = r.launch(config)
    ref = s.reference(INDEX, TOP)
    s.close()
    return ref


def metric(client: httpx.Client, url: str, name: str) -> float:
    for line in client.get(url + "/metrics", timeout=2).text.splitlines():
        if line.startswith(f"sglang:{name}{{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no metric {name}")


def test_baseline_serves_logprobs_in_every_format(tmp_path) -> None:
    with sim_process(BASELINE, tmp_path, time_scale=SCALE) as sim, httpx.Client() as c:
        sim.wait_healthy()
        url = sim.url
        plain = c.post(url + "/generate", json={**NATIVE, "return_logprob": False}, timeout=10).json()
        assert set(plain["meta_info"]) == {"id", "prompt_tokens", "completion_tokens", "finish_reason", "e2e_latency"}

        body = c.post(url + "/generate", json=NATIVE, timeout=10).json()
        ref = native_reference(body)
        assert ref == in_process_reference(spec(None))  # the same answer in-process and over HTTP
        assert ref.text == plain["text"] and len(ref.tokens) == N == body["meta_info"]["completion_tokens"]
        assert [VOCAB[i] for _, i, _ in body["meta_info"]["output_token_logprobs"]] == [t.text for t in ref.tokens]
        at = near_tie_position(PROMPT, 1.0)
        assert ref.tokens[at].margin == pytest.approx(NEAR_TIE_MARGIN, abs=1e-9)
        # it took the simulated generation time (wall seconds x time scale = hardware seconds)
        expected_s = SimEngine(parse_launch_args(["--scenario", KIMI, *BASELINE]), 0).expected_ms(PROMPT, N) / 1000
        assert body["meta_info"]["e2e_latency"] * SCALE == pytest.approx(expected_s, rel=0.25)

        no_text = c.post(url + "/generate", json={**NATIVE, "return_text_in_logprobs": False}, timeout=10).json()
        assert no_text["meta_info"]["output_token_logprobs"][0][2] is None
        assert no_text["meta_info"]["output_token_logprobs"][0][:2] == body["meta_info"]["output_token_logprobs"][0][:2]

        comp = c.post(
            url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": N, "temperature": 0, "logprobs": TOP}
        ).json()
        lp = comp["choices"][0]["logprobs"]
        assert lp["tokens"] == [t.text for t in ref.tokens]
        assert lp["token_logprobs"] == [t.logprob for t in ref.tokens]
        assert [list(d.items()) for d in lp["top_logprobs"]] == [list(t.top) for t in ref.tokens]
        assert lp["text_offset"][0] == 0 and lp["text_offset"][-1] == len(ref.text) - len(ref.tokens[-1].text)

        chat = c.post(
            url + "/v1/chat/completions",
            json={
                "messages": [{"role": "user", "content": PROMPT}],
                "max_tokens": N,
                "temperature": 0,
                "logprobs": True,
                "top_logprobs": TOP,
            },
        ).json()
        content = chat["choices"][0]["logprobs"]["content"]
        assert [(e["token"], e["logprob"]) for e in content] == [(t.text, t.logprob) for t in ref.tokens]
        assert [[(a["token"], a["logprob"]) for a in e["top_logprobs"]] for e in content] == [
            list(t.top) for t in ref.tokens
        ]
        assert all(bytes(e["bytes"]) == e["token"].encode() for e in content)

        unasked = c.post(url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 8, "temperature": 0}).json()
        assert unasked["choices"][0]["logprobs"] is None

        # refused before anything is generated: streamed log-probabilities, invalid counts
        tokens_before = metric(c, url, "generation_tokens_total")
        for path, bad in (
            ("/generate", {**NATIVE, "stream": True}),
            ("/generate", {**NATIVE, "top_logprobs_num": -2}),
            ("/v1/completions", {"prompt": PROMPT, "max_tokens": 8, "logprobs": 2, "stream": True}),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}),
        ):
            r = c.post(url + path, json=bad, timeout=10)
            assert r.status_code == 400 and r.json()["error"], (path, bad)
        assert metric(c, url, "generation_tokens_total") == tokens_before == 5 * N + 8  # every answered request


def test_speculative_server_takes_the_runner_up_at_the_near_tie(tmp_path) -> None:
    refs = []
    for flags in (BASELINE, SPECULATIVE):
        with sim_process(flags, tmp_path, time_scale=SCALE) as sim, httpx.Client() as c:
            sim.wait_healthy()
            refs.append(native_reference(c.post(sim.url + "/generate", json=NATIVE, timeout=10).json()))
            assert metric(c, sim.url, "generation_tokens_total") == N
    base, fast = refs
    assert fast == in_process_reference(spec("custom-10k", 3, 4, 16))
    at = near_tie_position(PROMPT, 1.0)
    words = [t.text for t in base.tokens], [t.text for t in fast.tokens]
    assert words[0][:at] == words[1][:at] and words[0][at] != words[1][at]
    assert base.tokens[at].top[0][0] == words[0][at] and base.tokens[at].top[1][0] == words[1][at]
    assert base.tokens[at].margin == pytest.approx(NEAR_TIE_MARGIN, abs=1e-9)
