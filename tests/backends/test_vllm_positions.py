"""vLLM's per-position acceptance at the Prometheus seam: a real HTTP server answers a streamed completion and
serves /metrics as vLLM 0.33.0 writes it (samples made by vLLM's own ``SpecDecodingProm`` on a fresh prometheus
registry: tests/servers/vllm_metrics_gen.py), the counters moving while the request runs; the client reads the
per-position counters' deltas around the request, as it reads the accepted / drafts counters."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from autotune.acceptance import AcceptPositions, acceptance_profile
from autotune.backends.streams import parse_prometheus
from autotune.backends.vllm import VLLMBackend
from autotune.client import BenchmarkClient

SAMPLES = Path(__file__).with_name("samples")
BEFORE = (SAMPLES / "vllm-0.33.0_metrics_before.txt").read_text()
AFTER = (SAMPLES / "vllm-0.33.0_metrics_after.txt").read_text()
STREAM = (SAMPLES / "vllm_completions_stream.txt").read_bytes()
#: what vllm_metrics_gen.py fed vLLM's counters between the two samples: 100 drafts of 3 tokens, 40 fully
#: accepted, 25 with 2 accepted, 20 with 1, 15 with none
DRAFTS, PER_POS = 100, (85, 65, 40)


class _VLLM:
    """/metrics shows ``BEFORE`` until a completion was answered, then ``AFTER``."""

    def __init__(self) -> None:
        state = self
        self.answered = 0
        self.scrapes = 0

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                state.scrapes += 1
                body = (AFTER if state.answered else BEFORE).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(STREAM)))
                self.end_headers()
                self.wfile.write(STREAM)
                state.answered += 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> _VLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def test_the_samples_are_vllm_0_33_0s_counters():
    after = parse_prometheus(AFTER)
    labels = 'engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",position="2"'
    key = "vllm:spec_decode_num_accepted_tokens_per_pos_total{" + labels + "}"
    assert key in after
    assert any(k.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_created{") for k in after)


def test_a_measured_request_carries_the_per_position_deltas():
    with _VLLM() as server:
        client = BenchmarkClient(server.url, VLLMBackend(), retries=0)
        try:
            r = client.measure(0, "The quick")
        finally:
            client.close()
    assert server.answered == 1
    assert r.positions == AcceptPositions(DRAFTS, PER_POS)
    assert r.positions.rates == pytest.approx([0.85, 0.65, 0.40])
    # the per-position counters and the accepted counter count the same tokens: the profile at full depth is the
    # mean accepted per draft, so 1 + it is the acceptance length the client reports
    assert r.accept_length == pytest.approx(1 + acceptance_profile(r.positions.rates)[-1])
    assert r.to_dict()["accept_positions"] == {"drafts": DRAFTS, "accepted": list(PER_POS)}


def test_positions_from_metrics_edges():
    b = VLLMBackend()
    before, after = parse_prometheus(BEFORE), parse_prometheus(AFTER)
    assert b.positions_from_metrics(before, before) is None  # no draft in between
    assert b.positions_from_metrics({}, {}) is None  # a baseline server: no speculative counters
    assert b.positions_from_metrics(after, before) is None  # counters went back: a restarted server
    # two engines: each position summed over them
    doubled = dict(after)
    for k, v in after.items():
        if 'engine="0"' in k:
            doubled[k.replace('engine="0"', 'engine="1"')] = v
    zero = {k: 0.0 for k in doubled}
    got = b.positions_from_metrics(zero, doubled)
    assert (
        got is not None
        and got.drafts == 2 * 107
        and got.accepted[0]
        == 2
        * int(
            after[
                next(
                    k
                    for k in after
                    if k.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total") and 'position="0"' in k
                )
            ]
        )
    )


class _PositionsOnly(VLLMBackend):
    """llama-server's arrangement: acceptance from the answer itself, only the per-position counts from /metrics."""

    acceptance_from_metrics_deltas = False
    positions_from_metrics_deltas = True


def test_per_position_scrapes_only_for_a_request_alone():
    """Where /metrics is read only for the per-position counts (llama-server), a request among concurrent ones (a
    load level's streams) is not wrapped in scrapes: the windows would overlap, and each scrape is one more request
    to the server being measured."""
    with _VLLM() as server:
        client = BenchmarkClient(server.url, _PositionsOnly(), retries=0)
        try:
            alone = client.measure(0, "The quick")
            assert server.scrapes == 2 and alone.positions == AcceptPositions(DRAFTS, PER_POS)
            among = client.measure(0, "The quick", alone=False)
        finally:
            client.close()
    assert server.answered == 2 and server.scrapes == 2  # none around the second
    assert among.positions is None and among.accept_length is None
