"""BenchmarkClient against a real tiny HTTP server (stdlib, in a thread, port 0)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpcore
import httpx
import pytest

from autotune.backends.sglang import SGLangBackend
from autotune.backends.vllm import VLLMBackend
from autotune.client import BenchmarkClient, timed_transport
from autotune.errors import BenchmarkError

Script = Callable[["Handler", int], None]


class Server:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict]] = []
        self.script: dict[str, Script] = {}
        self.stop = threading.Event()
        self.lock = threading.Lock()
        outer = self

        class H(Handler):
            server_ref = outer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def count(self, path: str) -> int:
        with self.lock:
            return sum(1 for m, p, _ in self.requests if p == path and m == "POST")

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_ref: Server

    def log_message(self, *a: object) -> None:
        pass

    def _dispatch(self, method: str) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else {}
        srv = self.server_ref
        with srv.lock:
            srv.requests.append((method, self.path, body))
            nth = sum(1 for m, p, _ in srv.requests if p == self.path and m == method)
        fn = srv.script.get(f"{method} {self.path}")
        if fn is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        fn(self, nth)

    def do_GET(self) -> None:  # noqa: N802
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    # helpers for scripts
    def start_sse(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def event(self, obj: object) -> None:
        data = obj if isinstance(obj, str) else json.dumps(obj)
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()

    def plain(self, code: int, text: str) -> None:
        raw = text.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def make_client(server: Server, backend=None, **kw) -> BenchmarkClient:
    kw.setdefault("retries", 2)
    kw.setdefault("retry_delay_s", 0.01)
    kw.setdefault("request_timeout_s", 5.0)
    kw.setdefault("max_tokens", 10)
    return BenchmarkClient(server.url, backend or SGLangBackend(), **kw)


def generate_ok(h: Handler, _n: int, *, first_delay: float = 0.0, accept: float | None = 2.5) -> None:
    """10 tokens in 3 chunks (4 + 4 + 2 tokens per chunk), cumulative text."""
    h.start_sse()
    if first_delay:
        time.sleep(first_delay)
    text = ""
    for i, (words, done) in enumerate([(["a", "b", "c", "d"], 4), (["e", "f", "g", "h"], 8), (["i", "j"], 10)]):
        text += "".join(w + " " for w in words)
        meta: dict = {"prompt_tokens": 7, "completion_tokens": done, "finish_reason": None}
        if i == 2:
            meta["finish_reason"] = {"type": "length", "length": 10}
            if accept is not None:
                meta["spec_accept_length"] = accept
                meta["spec_verify_ct"] = 4
        h.event({"text": text, "meta_info": meta})
        time.sleep(0.02)
    h.event("[DONE]")


def test_sse_several_tokens_per_chunk(server):
    server.script["POST /generate"] = lambda h, n: generate_ok(h, n, first_delay=0.15)
    with make_client(server) as c:
        r = c.measure(3, "hello")
    assert r.index == 3
    assert r.completion_tokens == 10  # from meta_info, not the 3 chunks
    assert r.text == "a b c d e f g h i j "
    assert r.accept_length == 2.5 and r.finish_reason == "length" and r.prompt_tokens == 7
    assert 0.15 <= r.ttft_s < r.seconds < 2
    assert r.seconds - r.ttft_s >= 0.035  # two more chunks 20 ms apart
    method, path, body = server.requests[0]
    assert body == {"text": "hello", "sampling_params": {"max_new_tokens": 10, "temperature": 0.0}, "stream": True}


def test_baseline_has_no_acceptance(server):
    server.script["POST /generate"] = lambda h, n: generate_ok(h, n, accept=None)
    with make_client(server) as c:
        assert c.measure(0, "x").accept_length is None


def test_retries_on_500_then_succeeds(server):
    def script(h: Handler, n: int) -> None:
        if n <= 2:
            h.plain(500, "internal error: scheduler busy")
        else:
            generate_ok(h, n)

    server.script["POST /generate"] = script
    with make_client(server, retries=2) as c:
        assert c.measure(0, "x").completion_tokens == 10
    assert server.count("/generate") == 3


def test_500_forever_fails_after_bounded_retries(server):
    server.script["POST /generate"] = lambda h, n: h.plain(503, "overloaded")
    with make_client(server, retries=2) as c, pytest.raises(BenchmarkError) as ei:
        c.measure(5, "x")
    assert server.count("/generate") == 3
    assert "prompt 5" in str(ei.value) and "HTTP 503" in str(ei.value) and "3 attempt" in str(ei.value)


def test_4xx_is_not_retried(server):
    server.script["POST /generate"] = lambda h, n: h.plain(400, "bad sampling params")
    with make_client(server) as c, pytest.raises(BenchmarkError, match="HTTP 400"):
        c.measure(0, "x")
    assert server.count("/generate") == 1


def truncated_no_done(h: Handler, _n: int) -> None:
    h.start_sse()
    h.event({"text": "a b ", "meta_info": {"completion_tokens": 2, "finish_reason": None}})


def test_truncated_stream_never_counted(server):
    server.script["POST /generate"] = truncated_no_done
    with make_client(server, retries=1) as c, pytest.raises(BenchmarkError, match="truncated"):
        c.measure(0, "x")
    assert server.count("/generate") == 2


def test_truncated_then_ok(server):
    server.script["POST /generate"] = lambda h, n: truncated_no_done(h, n) if n == 1 else generate_ok(h, n)
    with make_client(server, retries=1) as c:
        assert c.measure(0, "x").completion_tokens == 10


def test_done_without_final_count_is_truncated(server):
    def script(h: Handler, _n: int) -> None:
        h.start_sse()
        h.event({"text": "a", "meta_info": {"completion_tokens": 1, "finish_reason": None}})
        h.event("[DONE]")

    server.script["POST /generate"] = script
    with make_client(server, retries=0) as c, pytest.raises(BenchmarkError, match="final token count"):
        c.measure(0, "x")


def test_connection_dropped_mid_chunked_body_is_retried(server):
    def script(h: Handler, n: int) -> None:
        if n == 1:
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            h.wfile.write(b'40\r\ndata: {"text": "a"')  # promises 64 bytes, sends fewer, then closes
            h.wfile.flush()
            h.close_connection = True
        else:
            generate_ok(h, n)

    server.script["POST /generate"] = script
    with make_client(server, retries=1) as c:
        assert c.measure(0, "x").completion_tokens == 10
    assert server.count("/generate") == 2


def test_malformed_chunk_is_retried_then_fails(server):
    def script(h: Handler, _n: int) -> None:
        h.start_sse()
        h.event("{not json")
        h.event("[DONE]")

    server.script["POST /generate"] = script
    with make_client(server, retries=1) as c, pytest.raises(BenchmarkError, match="malformed chunk"):
        c.measure(0, "x")
    assert server.count("/generate") == 2


def test_error_inside_stream(server):
    def script(h: Handler, _n: int) -> None:
        h.start_sse()
        h.event({"error": {"message": "CUDA error: illegal memory access"}})
        h.event("[DONE]")

    server.script["POST /generate"] = script
    with make_client(server, retries=0) as c, pytest.raises(BenchmarkError, match="illegal memory access"):
        c.measure(0, "x")


def test_slow_response_hits_read_timeout_not_retried(server):
    def script(h: Handler, _n: int) -> None:
        server.stop.wait(3)  # no headers for 3 s

    server.script["POST /generate"] = script
    with make_client(server, request_timeout_s=0.3, retries=2) as c:
        t0 = time.monotonic()
        with pytest.raises(BenchmarkError, match="timed out"):
            c.measure(0, "x")
    assert time.monotonic() - t0 < 2
    assert server.count("/generate") == 1


def test_trickling_stream_hits_overall_deadline(server):
    def script(h: Handler, _n: int) -> None:
        h.start_sse()
        for i in range(100):
            if server.stop.is_set():
                return
            h.event({"text": "x" * (i + 1), "meta_info": {"completion_tokens": i + 1, "finish_reason": None}})
            time.sleep(0.05)

    server.script["POST /generate"] = script
    with make_client(server, request_timeout_s=0.4) as c:
        t0 = time.monotonic()
        with pytest.raises(BenchmarkError, match="no complete answer within"):
            c.measure(0, "x")
    assert time.monotonic() - t0 < 2


def test_connection_refused_retried_then_fails():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = BenchmarkClient(f"http://127.0.0.1:{port}", SGLangBackend(), retries=1, retry_delay_s=0.01)
    with c, pytest.raises(BenchmarkError, match="2 attempt"):
        c.measure(0, "x")


def openai_stream(h: Handler, _n: int) -> None:
    h.start_sse()
    for piece in [" The", " quick brown", " fox jumps"]:
        h.event({"choices": [{"index": 0, "text": piece, "finish_reason": None}], "usage": None})
    h.event({"choices": [{"index": 0, "text": " over", "finish_reason": "length"}], "usage": None})
    h.event({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 7, "total_tokens": 11}})
    h.event("[DONE]")


def test_openai_stream_with_metrics_delta_acceptance(server):
    state = {"drafts": 100.0, "accepted": 150.0}

    def metrics(h: Handler, _n: int) -> None:
        h.plain(
            200,
            "# TYPE vllm:spec_decode_num_drafts_total counter\n"
            f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {state["drafts"]}\n'
            f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {state["accepted"]}\n',
        )

    def completions(h: Handler, n: int) -> None:
        state["drafts"] += 4
        state["accepted"] += 6
        openai_stream(h, n)

    server.script["GET /metrics"] = metrics
    server.script["POST /v1/completions"] = completions
    with make_client(server, VLLMBackend(), model="m") as c:
        r = c.measure(1, "x")
    assert r.completion_tokens == 7 and r.text == " The quick brown fox jumps over"
    assert r.finish_reason == "length" and r.prompt_tokens == 4
    assert r.accept_length == pytest.approx(1 + 6 / 4)
    body = next(b for m, p, b in server.requests if p == "/v1/completions")
    assert body["stream_options"] == {"include_usage": True} and body["model"] == "m"


def test_get_json_falls_back_on_404_and_status(server):
    server.script["GET /get_server_info"] = lambda h, n: h.plain(200, json.dumps({"version": "0.4.0"}))
    server.script["GET /health"] = lambda h, n: h.plain(503 if n == 1 else 200, "")
    with make_client(server) as c:
        assert c.get_json("/server_info", fallbacks=("/get_server_info",)) == {"version": "0.4.0"}
        assert c.get_json("/nothing") is None
        assert c.status("/health", timeout_s=1) == 503
        assert c.status("/health", timeout_s=1) == 200


def chunked_ok(h: Handler, _n: int, *, stall_after_done: float = 0.0) -> None:
    """One final chunk and [DONE] as HTTP/1.1 chunked transfer on a keep-alive connection (as SGLang streams)."""
    h.send_response(200)
    h.send_header("Content-Type", "text/event-stream")
    h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()
    meta = {"prompt_tokens": 3, "completion_tokens": 2, "finish_reason": {"type": "length", "length": 2}}
    for ev in (json.dumps({"text": "a b ", "meta_info": meta}), "[DONE]"):
        data = f"data: {ev}\n\n".encode()
        h.wfile.write(b"%x\r\n%b\r\n" % (len(data), data))
    if stall_after_done:
        time.sleep(stall_after_done)
        h.close_connection = True
        return
    h.wfile.write(b"0\r\n\r\n")


def test_responses_read_to_the_end_so_the_connection_is_reused(server):
    ports: list[int] = []

    def script(h: Handler, n: int) -> None:
        ports.append(h.client_address[1])
        chunked_ok(h, n)

    server.script["POST /generate"] = script
    with make_client(server) as c:
        for _ in range(3):
            assert c.measure(0, "x").completion_tokens == 2
    assert len(ports) == 3 and len(set(ports)) == 1  # one TCP connection for all three requests


def test_server_stalling_after_done_still_counts(server):
    server.script["POST /generate"] = lambda h, n: chunked_ok(h, n, stall_after_done=1.0)
    with make_client(server, request_timeout_s=0.3, retries=0) as c:
        r = c.measure(0, "x")
    assert r.completion_tokens == 2 and r.text == "a b "
    assert server.count("/generate") == 1


class _ManualClock:
    """Moves only when a test (or its server, from its thread) sets ``t``."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def _chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in pieces)


_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
_META = {"prompt_tokens": 3, "completion_tokens": 2, "finish_reason": {"type": "length", "length": 2}}


def _sse(obj: object) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


class _SlowConnect(httpcore.NetworkBackend):
    """httpcore's own sockets, each connection's set-up taking 50 s on the manual clock."""

    def __init__(self, clock: _ManualClock) -> None:
        self.inner = httpcore.SyncBackend()
        self.clock = clock

    def connect_tcp(self, *a, **kw) -> httpcore.NetworkStream:
        self.clock.t += 50.0
        return self.inner.connect_tcp(*a, **kw)

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


def test_timed_from_the_first_write_of_the_request(server):
    # a slow connection set-up (50 s on the manual clock) is not timed: the clock starts when the request's first
    # byte is written (50), not before the pool and connect (0); the response arrives at 60
    clock = _ManualClock()

    def script(h: Handler, _n: int) -> None:
        clock.t = 60.0
        h.wfile.write(_HEAD + _chunked(_sse({"text": "a b ", "meta_info": _META}), _sse(b"[DONE]")) + b"0\r\n\r\n")

    server.script["POST /generate"] = script
    transport = timed_transport(clock.now, network_backend=_SlowConnect(clock))  # the seam, not a global patch
    with make_client(server, clock=clock, request_timeout_s=1000.0, transport=transport) as c:
        r = c.measure(0, "x")
    assert r.seconds == 10.0 and r.ttft_s == 10.0


def test_last_token_timed_when_its_bytes_arrive_not_after_parsing(server):
    # both tokens' chunks arrive in one read at 1.0 (one write); parsing each chunk takes 100 s on the manual clock:
    # the last token is timed at its bytes' arrival, not after the parsing of the chunks before it (101)
    clock = _ManualClock()

    class SlowParse(SGLangBackend):
        def parse_chunk(self, obj):
            clock.t += 100.0
            return super().parse_chunk(obj)

    def script(h: Handler, _n: int) -> None:
        clock.t = 1.0
        first = {"text": "a ", "meta_info": {**_META, "completion_tokens": 1, "finish_reason": None}}
        body = _chunked(_sse(first), _sse({"text": "a b ", "meta_info": _META}), _sse(b"[DONE]"))
        h.wfile.write(_HEAD + body + b"0\r\n\r\n")

    server.script["POST /generate"] = script
    with make_client(server, SlowParse(), clock=clock, request_timeout_s=1000.0) as c:
        r = c.measure(0, "x")
    assert r.text == "a b " and r.completion_tokens == 2
    assert r.ttft_s == 1.0 and r.seconds == 1.0


def test_event_split_across_reads_is_timed_when_its_last_bytes_arrive(server):
    # the last chunk's event is cut in the middle of its JSON (inside one HTTP chunk); its second half is sent at
    # 10.0: the token is timed then, and the split line is joined, not taken as malformed
    clock = _ManualClock()

    def script(h: Handler, _n: int) -> None:
        last = _sse({"text": "a b ", "meta_info": _META})
        piece = _sse({"text": "a ", "meta_info": {**_META, "completion_tokens": 1, "finish_reason": None}}) + last
        cut = len(piece) - len(last) // 2
        clock.t = 5.0
        h.wfile.write(_HEAD + b"%x\r\n" % len(piece) + piece[:cut])
        time.sleep(0.05)
        clock.t = 10.0
        h.wfile.write(piece[cut:] + b"\r\n" + _chunked(_sse(b"[DONE]")) + b"0\r\n\r\n")

    server.script["POST /generate"] = script
    with make_client(server, clock=clock, request_timeout_s=1000.0, retries=0) as c:
        r = c.measure(0, "x")
    assert r.text == "a b " and r.completion_tokens == 2
    assert r.seconds == 10.0 and r.ttft_s in (5.0, 10.0)


def test_unicode_line_separators_inside_text_are_not_line_ends(server):
    # SSE lines end only at LF, CR or CRLF; a server may send U+2028, U+0085... unescaped inside JSON strings
    text = "a\u2028b\x85c\u2029d\x1c "

    def script(h: Handler, _n: int) -> None:
        ev = json.dumps({"text": text, "meta_info": _META}, ensure_ascii=False).encode()
        h.wfile.write(_HEAD + _chunked(_sse(ev), _sse(b"[DONE]")) + b"0\r\n\r\n")

    server.script["POST /generate"] = script
    with make_client(server, retries=0) as c:
        r = c.measure(0, "x")
    assert r.text == text and r.completion_tokens == 2


def test_crlf_and_cr_line_ends(server):
    # SSE allows CRLF and CR line ends too (sse-starlette writes CRLF); a CRLF may be split across two reads
    def script(h: Handler, _n: int) -> None:
        first = json.dumps({"text": "a ", "meta_info": {**_META, "completion_tokens": 1, "finish_reason": None}})
        last = json.dumps({"text": "a b ", "meta_info": _META})
        h.wfile.write(_HEAD + _chunked(f": ping\r\ndata: {first}\r".encode()))
        time.sleep(0.02)
        h.wfile.write(_chunked(f"\n\r\ndata: {last}\r\rdata: [DONE]\r\r".encode()) + b"0\r\n\r\n")

    server.script["POST /generate"] = script
    with make_client(server, retries=0) as c:
        r = c.measure(0, "x")
        assert r.text == "a b " and r.completion_tokens == 2 and r.ttft_s is not None and r.ttft_s <= r.seconds
        assert c.measure(0, "x").text == "a b "  # and the connection is reused after such a response
    assert server.count("/generate") == 2


def test_metrics_retries_once_when_the_server_drops_the_connection(server):
    """A keep-alive connection the server closes as the client reuses it (seen with llama-server): the scrape is
    retried on a fresh connection instead of returning None; a second drop gives None."""

    def metrics(h: Handler, n: int) -> None:
        if n in (1, 3, 4):
            h.close_connection = True  # no response at all: the client sees the connection closed
            return
        h.plain(200, 'vllm:spec_decode_num_drafts_total{engine="0"} 12\n')

    server.script["GET /metrics"] = metrics
    with make_client(server, VLLMBackend(), model="m") as c:
        first = c.metrics()
        assert first is not None and list(first.values()) == [12.0]
        assert sum(1 for m, p, _ in server.requests if p == "/metrics") == 2
        assert c.metrics() is None  # dropped twice in a row: unavailable, not an exception


# -- the transport seam: httpx.MockTransport, no socket ---------------------------------------------------------


def _mock_client(handler: Callable[[httpx.Request], httpx.Response], **kw) -> BenchmarkClient:
    kw.setdefault("retries", 1)
    kw.setdefault("retry_delay_s", 0.0)
    kw.setdefault("max_tokens", 10)
    return BenchmarkClient("http://server.invalid", SGLangBackend(), transport=httpx.MockTransport(handler), **kw)


def test_a_given_transport_is_used_and_timed_at_the_response_iterator():
    # no _TimedStream behind a MockTransport: the request is timed from before sending (0) to the iteration that
    # gave the last token's bytes (the handler answers at 5 on the manual clock)
    clock = _ManualClock()
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        clock.t = 5.0
        body = _sse({"text": "a b ", "meta_info": _META}) + _sse(b"[DONE]")
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=body)

    with _mock_client(handler, clock=clock) as c:
        r = c.measure(2, "hello")
    assert r.index == 2 and r.text == "a b " and r.completion_tokens == 2 and r.finish_reason == "length"
    assert r.seconds == 5.0 and r.ttft_s == 5.0
    assert [(q.method, q.url.path) for q in seen] == [("POST", "/generate")]
    assert json.loads(seen[0].content)["text"] == "hello"


def test_mock_transport_retries_a_5xx_and_serves_small_requests():
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(f"{request.method} {request.url.path}")
        if request.url.path == "/health":
            return httpx.Response(200)
        if request.url.path == "/get_server_info":
            return httpx.Response(200, json={"version": "0.4.0"})
        if request.url.path == "/generate" and calls.count("POST /generate") == 1:
            return httpx.Response(503, text="overloaded")
        if request.url.path == "/generate":
            return httpx.Response(200, content=_sse({"text": "a b ", "meta_info": _META}) + _sse(b"[DONE]"))
        return httpx.Response(404)

    with _mock_client(handler) as c:
        assert c.status("/health", timeout_s=1) == 200
        assert c.get_json("/server_info", fallbacks=("/get_server_info",)) == {"version": "0.4.0"}
        assert c.measure(0, "x").completion_tokens == 2
    assert calls.count("POST /generate") == 2
