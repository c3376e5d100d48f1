"""The streaming benchmark client: one prompt, one streamed request, one ``PromptResult``.

Backend-agnostic: the backend builds the request (``Backend.request``) and reads each streamed JSON chunk
(``Backend.parse_chunk``). The client
- times the request at the socket, on the injected clock: ``seconds`` from the first write of the request's bytes to
  the arrival of the last chunk that carried new text, ``ttft_s`` to the first one (arrival: when the socket read
  returned, noted by ``_TimedStream``, so HTTP parsing and the client's own per-chunk work are not counted),
- splits SSE lines itself on the raw bytes (LF, CRLF or CR; httpx's ``iter_lines`` also splits on U+2028...),
- reads each response to its end, also after ``[DONE]``, so the connection is reused by the next request,
- takes token counts from the server (usage / meta_info), never from counting chunks, and acceptance from the final
  chunk or from /metrics deltas around the request (``Backend.acceptance_from_metrics_deltas``),
- retries ``BenchmarkSpec.retries`` times on HTTP 5xx, connection errors, malformed chunks and truncated streams (no
  ``[DONE]`` or no final token count); 4xx answers and timeouts are not retried. Then it raises ``BenchmarkError``.

Every request has a limit: httpx's timeouts, plus an overall ``request_timeout_s`` checked between chunks. The seam
to the network is an httpx transport (``transport=``, default ``timed_transport``); a response without a
``_TimedStream`` is timed at the response iterator.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpcore  # httpx's transport (a dependency of httpx): its network stream is where bytes arrive
import httpx

from autotune.acceptance import AcceptPositions
from autotune.backends.base import Backend
from autotune.backends.streams import ChunkInfo, ChunkParser, parse_prometheus
from autotune.config import PromptResult, ReferenceOutput
from autotune.errors import BenchmarkError
from autotune.seam import Clock, MonotonicClock

if TYPE_CHECKING:
    from autotune.space import Space
    from autotune.space.model import Prompt


class _Retryable(Exception):
    """A failure worth another attempt (5xx, connection error, truncated or malformed stream)."""


@dataclass
class _Stream:
    text: str = ""
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    accept_length: float | None = None
    positions: AcceptPositions | None = None
    finish_reason: str | None = None
    final: bool = False
    done: bool = False
    first_token_t: float | None = None
    last_token_t: float | None = None

    def add(self, info: ChunkInfo, now: float) -> None:
        if info.text:
            new_text = info.text if info.cumulative else self.text + info.text
            if new_text != self.text:
                if self.first_token_t is None:
                    self.first_token_t = now
                self.last_token_t = now
                self.text = new_text
        if info.completion_tokens is not None:
            self.completion_tokens = info.completion_tokens
        if info.prompt_tokens is not None:
            self.prompt_tokens = info.prompt_tokens
        if info.accept_length is not None:
            self.accept_length = info.accept_length
        if info.positions is not None:
            self.positions = info.positions
        if info.finish_reason is not None:
            self.finish_reason = info.finish_reason
        if info.final:
            self.final = True


class _TimedStream(httpcore.NetworkStream):
    """A connection's network stream that notes on the client's clock when each request starts going out (the
    first write after a read: HTTP/1.1 without pipelining writes a request only after the previous response was
    read) and when each read returned, i.e. when the bytes it returns had all arrived."""

    def __init__(self, inner: httpcore.NetworkStream, now: Callable[[], float]) -> None:
        self._inner = inner
        self._now = now
        self._wrote = False
        self.sent_t: float | None = None
        self.read_t: float | None = None

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self._inner.read(max_bytes, timeout)
        self.read_t = self._now()
        self._wrote = False
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not self._wrote:
            self._wrote = True
            self.sent_t = self._now()
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        return _TimedStream(self._inner.start_tls(ssl_context, server_hostname, timeout), self._now)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _TimedBackend(httpcore.NetworkBackend):
    """httpcore's network backend, with every TCP connection's stream wrapped in a ``_TimedStream`` (the client
    never connects through a unix socket)."""

    def __init__(self, inner: httpcore.NetworkBackend, now: Callable[[], float]) -> None:
        self._inner = inner
        self._now = now

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return _TimedStream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options), self._now)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def timed_transport(
    now: Callable[[], float], *, network_backend: httpcore.NetworkBackend | None = None
) -> httpx.HTTPTransport:
    """httpx's own transport, its connections' streams timed on ``now`` (``network_backend``: whose streams are timed;
    default httpx's own). httpx has no public setting for httpcore's network backend: the pool's is wrapped in place
    (should a future httpx rename these, the client is timed at the response iterator instead)."""
    transport = httpx.HTTPTransport(trust_env=False)
    pool = getattr(transport, "_pool", None)
    inner = getattr(pool, "_network_backend", None)
    if pool is not None and isinstance(inner, httpcore.NetworkBackend):
        pool._network_backend = _TimedBackend(network_backend or inner, now)
    return transport


def _sse_lines(buf: bytes, data: bytes) -> tuple[list[bytes], bytes]:
    """Complete SSE lines in ``buf + data`` (ends: LF, CRLF or CR) and the incomplete rest."""
    if b"\r" in data:  # a CRLF split across reads only adds an empty line, which SSE ignores
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    lines = (buf + data).split(b"\n")
    return lines, lines.pop()


class BenchmarkClient:
    """One HTTP client per server session. Use as a context manager or call ``close()``."""

    def __init__(
        self,
        base_url: str,
        backend: Backend,
        *,
        max_tokens: int = 1024,
        temperature: float = 0.0,
        api: str = "completions",
        retries: int = 2,
        model: str | None = None,
        request_timeout_s: float = 600.0,
        connect_timeout_s: float = 10.0,
        retry_delay_s: float = 0.5,
        clock: Clock | None = None,
        chunk_parser: ChunkParser | None = None,
        transport: httpx.BaseTransport | None = None,
        max_connections: int = 100,
    ) -> None:
        self.backend = backend
        self.parse_chunk: ChunkParser = chunk_parser or backend.parse_chunk  # per launch: Backend.chunk_parser
        self.max_tokens = int(max_tokens)
        self.temperature = float(temperature)
        self.api = api
        self.retries = int(retries)
        self.model = model
        self.request_timeout_s = float(request_timeout_s)
        self.retry_delay_s = float(retry_delay_s)
        self.clock: Clock = clock or MonotonicClock()

        # trust_env=False: a proxy configured in the environment must not sit between us and a local server
        self._http = httpx.Client(
            base_url=base_url,
            timeout=httpx.Timeout(
                connect=connect_timeout_s, read=request_timeout_s, write=connect_timeout_s, pool=connect_timeout_s
            ),
            trust_env=False,
            transport=transport if transport is not None else timed_transport(self._now),
            # every stream of a load level has its own connection, kept alive for the next request
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )

    @classmethod
    def for_space(
        cls,
        space: Space,
        backend: Backend,
        base_url: str,
        *,
        clock: Clock | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> BenchmarkClient:
        b = space.benchmark
        return cls(
            base_url,
            backend,
            max_tokens=b.max_tokens,
            temperature=b.temperature,
            api=b.api,
            retries=b.retries,
            model=space.server.model_path or None,
            request_timeout_s=space.server.request_timeout_s,
            clock=clock,
            chunk_parser=backend.chunk_parser(space),
            transport=transport,
            max_connections=max(100, max(b.concurrency) + 4),
        )

    def _now(self) -> float:
        return self.clock.now()  # the clock may be replaced after construction

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> BenchmarkClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _get(self, path: str, timeout_s: float) -> httpx.Response | None:
        """``GET path``; None when there is no answer. A pooled keep-alive connection that the server closed just
        as it was reused (seen with llama-server) is retried once, on a fresh connection; a refused or timed-out
        connection is not (health polling has its own loop)."""
        for attempt in range(2):
            try:
                return self._http.get(path, timeout=httpx.Timeout(timeout_s))
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
                if attempt:
                    return None
            except httpx.HTTPError:
                return None
        return None

    def status(self, path: str, *, timeout_s: float) -> int | None:
        """HTTP status of ``GET path`` (None: no answer within ``timeout_s``)."""
        resp = self._get(path, timeout_s)
        return None if resp is None else resp.status_code

    def get_json(self, path: str, *, timeout_s: float = 10.0, fallbacks: tuple[str, ...] = ()) -> Any | None:
        """JSON from ``GET path`` (trying ``fallbacks`` on 404); None when unavailable."""
        for p in (path, *fallbacks):
            resp = self._get(p, timeout_s)
            if resp is None:
                return None
            if resp.status_code == 404:
                continue
            if resp.status_code != 200:
                return None
            try:
                return resp.json()
            except ValueError:
                return None
        return None

    def metrics(self, *, timeout_s: float = 10.0) -> dict[str, float] | None:
        """The server's /metrics as {series: value}; None when unavailable."""
        if not self.backend.metrics_path:
            return None
        resp = self._get(self.backend.metrics_path, timeout_s)
        if resp is None or resp.status_code != 200:
            return None
        return parse_prometheus(resp.text)

    def measure(
        self,
        prompt_index: int,
        prompt_text: str,
        *,
        max_tokens: int | None = None,
        alone: bool = True,
        request: Prompt | None = None,
    ) -> PromptResult:
        """Stream one completion for ``prompt_text`` (``max_tokens``: the client's unless given; ``alone``: no other
        request of this client is in flight, so a per-request /metrics window is this request's own; ``request``: a
        logged request's own answer limit, sampling, chat turns and thinking switch, where it has them); seconds are
        this clock's (wall) seconds. Safe to call from several threads at once (a load level's streams)."""
        reasons: list[str] = []
        for attempt in range(self.retries + 1):
            if attempt:
                self.clock.sleep(self.retry_delay_s * attempt)
            try:
                return self._measure_once(prompt_index, prompt_text, max_tokens, alone, request)
            except _Retryable as e:
                reasons.append(str(e))
        raise BenchmarkError(f"prompt {prompt_index}: failed after {len(reasons)} attempt(s): " + "; ".join(reasons))

    def _measure_once(
        self,
        index: int,
        prompt_text: str,
        max_tokens: int | None = None,
        alone: bool = True,
        request: Prompt | None = None,
    ) -> PromptResult:
        own = request.max_tokens if request is not None and request.max_tokens is not None else self.max_tokens
        path, body = self.backend.request(
            prompt_text,
            max_tokens=own if max_tokens is None else min(int(max_tokens), own),
            temperature=self.temperature if request is None or request.temperature is None else request.temperature,
            api=self.api,
            model=self.model,
            request=request,
        )
        scrape = self.backend.acceptance_from_metrics_deltas or (self.backend.positions_from_metrics_deltas and alone)
        before = self.metrics() if scrape else None
        s = _Stream()
        http_request = self._http.build_request("POST", path, json=body)
        t0 = self.clock.now()
        deadline = t0 + self.request_timeout_s
        try:
            resp = self._http.send(http_request, stream=True)
            try:
                stream = resp.extensions.get("network_stream")
                timed = stream if isinstance(stream, _TimedStream) else None
                if timed is not None and timed.sent_t is not None:
                    t0 = timed.sent_t  # connection set-up and the client's own work before sending are not timed
                if resp.status_code >= 400:
                    detail = _short(resp.read())
                    if resp.status_code >= 500:
                        raise _Retryable(f"HTTP {resp.status_code} from {path}: {detail}")
                    raise BenchmarkError(f"prompt {index}: HTTP {resp.status_code} from {path}: {detail}")
                rest = b""
                for data in resp.iter_bytes():
                    # when these bytes arrived (the read that returned them), before any parsing
                    now = timed.read_t if timed is not None and timed.read_t is not None else self.clock.now()
                    if now > deadline:
                        if s.done:
                            break  # complete; a server still sending after [DONE] only costs its connection
                        raise BenchmarkError(f"prompt {index}: no complete answer within {self.request_timeout_s:g} s")
                    lines, rest = _sse_lines(rest, data)
                    for line in lines:
                        self._line(line, now, s)
                if rest:
                    self._line(rest, self.clock.now(), s)  # a last line without its newline
            finally:
                resp.close()
        except httpx.TimeoutException as e:
            if not (s.done and s.final):  # else: only reading past [DONE] timed out, the answer was complete
                if isinstance(e, httpx.ConnectTimeout):
                    raise _Retryable(f"connect timeout: {e}") from None
                raise BenchmarkError(f"prompt {index}: timed out ({type(e).__name__}: {e})") from None
        except httpx.TransportError as e:
            if not (s.done and s.final):  # else: dropped after [DONE], the answer was complete
                raise _Retryable(f"{type(e).__name__}: {e}") from None
        end = self.clock.now()
        if not s.done:
            raise _Retryable("stream ended without [DONE] (truncated)")
        if not s.final or s.completion_tokens is None:
            raise _Retryable("stream ended without the final token count (truncated)")
        accept, positions = s.accept_length, s.positions
        if (accept is None or positions is None) and before is not None:
            after = self.metrics()
            if after is not None:
                if accept is None:
                    accept = self.backend.acceptance_from_metrics(before, after)
                if positions is None:
                    positions = self.backend.positions_from_metrics(before, after)
        last = s.last_token_t if s.last_token_t is not None else end
        return PromptResult(
            index=index,
            completion_tokens=int(s.completion_tokens),
            seconds=max(last - t0, 0.0),
            ttft_s=(s.first_token_t - t0) if s.first_token_t is not None else None,
            prompt_tokens=s.prompt_tokens,
            accept_length=accept,
            text=s.text,
            finish_reason=s.finish_reason,
            positions=positions,
        )

    def reference(
        self, prompt_index: int, prompt_text: str, top_n: int, *, request: Prompt | None = None
    ) -> ReferenceOutput | None:
        """One non-streamed temperature-0 answer with the ``top_n`` most likely tokens per position (not timed; the
        lossless check's reference; ``request``: a logged request's own answer limit, chat turns and thinking
        switch, as ``measure`` sends them). Retried like ``measure`` on 5xx and connection errors; None when the
        server answers without log-probabilities (or refuses the request with a 4xx: it does not support them)."""
        own = request.max_tokens if request is not None and request.max_tokens is not None else self.max_tokens
        path, body = self.backend.reference_request(
            prompt_text, max_tokens=own, top_n=top_n, api=self.api, model=self.model, request=request
        )
        reasons: list[str] = []
        for attempt in range(self.retries + 1):
            if attempt:
                self.clock.sleep(self.retry_delay_s * attempt)
            try:
                resp = self._http.post(path, json=body)
            except httpx.TimeoutException as e:
                raise BenchmarkError(
                    f"prompt {prompt_index}: reference request timed out ({type(e).__name__}: {e})"
                ) from None
            except httpx.TransportError as e:
                reasons.append(f"{type(e).__name__}: {e}")
                continue
            if resp.status_code >= 500:
                reasons.append(f"HTTP {resp.status_code} from {path}: {_short(resp.content)}")
                continue
            if resp.status_code >= 400:
                return None
            try:
                obj = resp.json()
            except ValueError:
                reasons.append(f"malformed answer {_short(resp.content)}")
                continue
            return self.backend.parse_reference(obj, prompt_index) if isinstance(obj, dict) else None
        raise BenchmarkError(
            f"prompt {prompt_index}: reference request failed after {len(reasons)} attempt(s): " + "; ".join(reasons)
        )

    def _line(self, line: bytes, now: float, s: _Stream) -> None:
        """One SSE line (``now``: when it arrived): ``data:`` lines are chunks until ``[DONE]``; others are skipped."""
        line = line.strip()
        if not line.startswith(b"data:") or s.done:
            return  # blank separators, comments, event:/id: lines; anything after [DONE] is only read to the end
        data = line[len(b"data:") :].strip()
        if data == b"[DONE]":
            s.done = True
            return
        try:
            obj = json.loads(data.decode("utf-8", "replace"))
        except ValueError:
            raise _Retryable(f"malformed chunk {_short(data)}") from None
        if not isinstance(obj, dict):
            raise _Retryable(f"unexpected chunk {_short(data)}")
        info = self.parse_chunk(obj)
        if info.error:
            raise _Retryable(f"server error in stream: {info.error}")
        s.add(info, now)


def _short(raw: bytes, limit: int = 200) -> str:
    text = raw.decode("utf-8", "replace").strip().replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."
