"""Reference answers (top log-probabilities per token) in each server's format, parsed into ``ReferenceOutput``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from autotune import lossless
from autotune.backends.llamacpp import LlamaCppBackend
from autotune.backends.sglang import SGLangBackend
from autotune.backends.streams import parse_openai_logprobs
from autotune.backends.vllm import VLLMBackend

LLAMA_SAMPLES = Path(__file__).resolve().parents[1] / "llamacpp" / "samples"


def recorded_llama() -> dict:
    return json.loads((LLAMA_SAMPLES / "reference-n_probs-0.3.36.json").read_text())


def test_recorded_llama_server_answer_parses_exactly():
    sample = recorded_llama()
    ref = LlamaCppBackend().parse_reference(sample["response"], 1)
    assert ref is not None and ref.index == 1
    assert ref.text == sample["response"]["choices"][0]["text"]
    assert "".join(t.text for t in ref.tokens) == ref.text  # offsets are exact
    assert len(ref.tokens) == 96
    for t in ref.tokens:
        assert len(t.top) == 5 and [lp for _, lp in t.top] == sorted((lp for _, lp in t.top), reverse=True)
        assert t.top[0][0] == t.text and math.isclose(t.top[0][1], t.logprob)  # greedy: the chosen token is top 1
    first = ref.tokens[0]
    assert (first.text, first.top[1][0]) == ("while", "group")
    assert first.margin == pytest.approx(-1.5708043575286865 + 1.647857427597046)


def test_a_flip_at_the_recorded_answers_closest_tie_is_numerics_and_a_far_one_lossy():
    ref = LlamaCppBackend().parse_reference(recorded_llama()["response"], 0)
    assert ref is not None
    j = min(range(len(ref.tokens)), key=lambda i: ref.tokens[i].margin)
    tok = ref.tokens[j]
    start = sum(len(t.text) for t in ref.tokens[:j])
    flipped = ref.text[:start] + tok.top[1][0] + " something else entirely"
    tol = tok.margin * 1.5
    assert lossless.classify(ref.text, flipped, ref, tol).kind == "numerics"
    k = max(range(len(ref.tokens)), key=lambda i: ref.tokens[i].margin)  # the most confident position
    start = sum(len(t.text) for t in ref.tokens[:k])
    wrong = ref.text[:start] + ref.tokens[k].top[1][0] + " something else"
    assert ref.tokens[k].margin > 1.0
    assert lossless.classify(ref.text, wrong, ref, tol).kind == "lossy"


def test_llama_request_asks_for_n_probs_and_no_prompt_cache():
    path, body = LlamaCppBackend().reference_request("hi", max_tokens=7, top_n=5)
    assert path == "/v1/completions"
    assert body["n_probs"] == 5 and "logprobs" not in body and body["stream"] is False
    assert body["temperature"] == 0.0 and body["cache_prompt"] is False and body["max_tokens"] == 7


def test_a_character_split_across_tokens_belongs_to_the_token_that_completes_it():
    e_acute = list("é".encode())  # two bytes
    content = [
        {"token": "caf", "bytes": list(b"caf"), "logprob": -0.1, "top_logprobs": []},
        {"token": "", "bytes": e_acute[:1], "logprob": -0.2, "top_logprobs": []},
        {"token": "", "bytes": e_acute[1:], "logprob": -0.3, "top_logprobs": []},
        {"token": " au", "bytes": list(b" au"), "logprob": -0.4, "top_logprobs": []},
    ]
    obj = {"choices": [{"text": "café au", "logprobs": {"content": content}}]}
    ref = parse_openai_logprobs(obj, 0)
    assert ref is not None and [t.text for t in ref.tokens] == ["caf", "", "é", " au"]


def test_sglang_generate_answer_with_logprobs():
    b = SGLangBackend()
    path, body = b.reference_request("hi", max_tokens=8, top_n=3)
    assert path == "/generate" and body["return_logprob"] and body["top_logprobs_num"] == 3
    assert body["return_text_in_logprobs"] and body["stream"] is False
    answer = {
        "text": " the cat",
        "meta_info": {
            "output_token_logprobs": [[-0.1, 5, " the"], [-0.7, 9, " cat"]],
            "output_top_logprobs": [
                [[-0.1, 5, " the"], [-2.0, 6, " a"], [-3.0, 7, " an"]],
                [[-0.7, 9, " cat"], [-0.704, 10, " dog"], [-4.0, 11, " cow"]],
            ],
        },
    }
    ref = b.parse_reference(answer, 2)
    assert ref is not None and ref.text == " the cat" and [t.text for t in ref.tokens] == [" the", " cat"]
    assert ref.tokens[1].margin == pytest.approx(0.004)
    assert lossless.classify(ref.text, " the dog ran", ref, 0.05).kind == "numerics"
    assert b.parse_reference({"text": "x", "meta_info": {}}, 0) is None  # no log-probabilities in it


def test_vllm_legacy_completions_logprobs():
    b = VLLMBackend()
    path, body = b.reference_request("hi", max_tokens=8, top_n=2)
    assert path == "/v1/completions" and body["logprobs"] == 2 and body["stream"] is False
    answer = {
        "choices": [
            {
                "text": " the cat",
                "logprobs": {
                    "tokens": [" the", " cat"],
                    "token_logprobs": [-0.1, -0.7],
                    "top_logprobs": [{" a": -2.0, " the": -0.1}, {" dog": -0.704, " cat": -0.7}],
                    "text_offset": [0, 4],
                },
            }
        ]
    }
    ref = b.parse_reference(answer, 0)
    assert ref is not None and ref.tokens[1].top[0] == (" cat", -0.7) and ref.tokens[1].margin == pytest.approx(0.004)
    assert b.parse_reference({"choices": [{"text": "x", "logprobs": None}]}, 0) is None


def test_chat_answers_carry_the_content_list():
    path, body = SGLangBackend().reference_request("hi", max_tokens=4, top_n=2, api="chat")
    assert path == "/v1/chat/completions" and body["logprobs"] is True and body["top_logprobs"] == 2
    answer = {
        "choices": [
            {
                "message": {"content": "ok"},
                "logprobs": {
                    "content": [{"token": "ok", "logprob": -0.5, "top_logprobs": [{"token": "ok", "logprob": -0.5}]}]
                },
            }
        ]
    }
    ref = parse_openai_logprobs(answer, 0)
    assert ref is not None and ref.text == "ok" and ref.tokens[0].top == (("ok", -0.5),)
