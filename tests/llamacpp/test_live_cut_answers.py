"""llama.cpp as vendored by llama-cpp-python 0.3.23 (the build that honours per-request draft settings) returns a
drafted answer cut short at the token limit: the text is the baseline's with its end missing, while ``usage`` and
``timings.predicted_n`` say the full ``max_tokens`` were produced and ``finish_reason`` is ``length``. Found on an
H200 (docs/gpu-runs/2026-12-02-h200-sharing-0.3.23: good-drafter trials judged lossy at tokens 249-252 of 256),
reproduced here on the CPU build with the tiny models. autotune's lossless check keeps such a config out (the user
would get less text) and now says what happened (``cut``), so the reader can tell a server defect from a drafter
that changed the answer."""

from __future__ import annotations

import socket
import subprocess
import time

import httpx
import pytest

from autotune import lossless
from autotune.backends import get_backend
from autotune.backends.llamacpp_flags import LLAMA_CPP_PYTHON_HONOURING_VERSION, find_honouring_llama_server
from tests.llamacpp.conftest import models_dir

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]

HONOURING = find_honouring_llama_server()
PROMPT = "List the prime numbers below one hundred and explain"
MAX_TOKENS = 64


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(argv: list[str], port: int) -> subprocess.Popen:
    proc = subprocess.Popen([*argv, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"llama-server exited with {proc.returncode}: {argv}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise AssertionError(f"llama-server not healthy within 120 s: {argv}")


def _answer(port: int, **extra) -> dict:
    body = {"prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0, **extra}
    r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=120)
    r.raise_for_status()
    return r.json()


@pytest.mark.skipif(
    HONOURING is None,
    reason=f"no llama-server of llama-cpp-python {LLAMA_CPP_PYTHON_HONOURING_VERSION}: scripts/llamacpp_setup.sh "
    "--honouring",
)
def test_the_honouring_build_cuts_drafted_answers_at_the_token_limit_and_the_check_says_so():
    m = models_dir()
    common = [str(HONOURING), "-m", str(m / "target.gguf"), "-t", "1", "-c", "2048", "--host", "127.0.0.1"]
    procs = []
    try:
        bport, sport = _free_port(), _free_port()
        procs.append(_start(common, bport))
        procs.append(
            _start([*common, "-md", str(m / "draft-good.gguf"), "--spec-draft-n-max", "16", "-td", "1"], sport)
        )
        base = _answer(bport)
        # the baseline's answer with its top-5 tokens per position, as autotune's reference pass asks for it
        backend = get_backend("llamacpp")
        path, body = backend.reference_request(PROMPT, max_tokens=MAX_TOKENS, top_n=5)
        ref = httpx.post(f"http://127.0.0.1:{bport}{path}", json=body, timeout=120)
        ref.raise_for_status()
        reference = backend.parse_reference(ref.json(), 0)
        drafted = {n: _answer(sport, **{"speculative.n_max": n}) for n in (1, 16)}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=20)
    btext = base["choices"][0]["text"]
    assert base["usage"]["completion_tokens"] == MAX_TOKENS
    cut = drafted[16]
    text = cut["choices"][0]["text"]
    # the defect: the full count and "length", but a strict prefix of the baseline's text
    assert cut["usage"]["completion_tokens"] == MAX_TOKENS and cut["choices"][0]["finish_reason"] == "length"
    assert len(text) < len(btext) and btext.startswith(text), (btext, text)
    assert cut["timings"]["draft_n"] > 0
    # one token a step drafts too, and its answer is whole here (the missing end grows with the draft length)
    assert len(drafted[1]["choices"][0]["text"]) > len(text)
    assert reference is not None and reference.text == btext
    record = lossless.check_outputs([text], [btext], [reference], tolerance=0.1, min_prefix=0.9)
    assert not record["ok"] and record["lossy"] == [0] and record["cut"] == [0]
    assert record["divergences"][0]["other_next"] == "" and record["divergences"][0]["baseline_next"]
    assert "cut short on [0]" in lossless.summary_line(record)
