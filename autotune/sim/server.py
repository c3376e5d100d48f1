"""The simulated server: a real HTTP process with SGLang's endpoints, logs and timing, or vLLM's endpoints and
Prometheus counters (``--engine vllm``). Everything it serves comes from ``SimEngine``; wall-clock times are hardware
times divided by ``--time-scale``. The ``Scheduler`` thread runs the continuous batch (``sim.batch``) against the
monotonic clock and hands each step's tokens to the requests' streams.

Log-probabilities (token ids are indices in ``autotune.sim.text.VOCAB``), answered as the engines answer them:

- SGLang ``/generate`` (``return_logprob``, ``top_logprobs_num``, ``return_text_in_logprobs``): ``meta_info``'s
  ``output_token_logprobs`` ``[[logprob, token_id, text], ...]`` and ``output_top_logprobs`` (only when
  ``top_logprobs_num`` > 0); ``text`` is None without ``return_text_in_logprobs``.
- ``/v1/completions`` (``logprobs: N``): ``tokens``, ``token_logprobs``, ``top_logprobs`` (a dict per token, the
  chosen one always in it) and ``text_offset``.
- ``/v1/chat/completions`` (``logprobs: true``, ``top_logprobs: N``): ``choices[0].logprobs.content``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import secrets
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NotRequired, TypedDict

from autotune.config import TokenChoice
from autotune.sim.batch import Seq, Step
from autotune.sim.engine import Generation, SimEngine
from autotune.sim.launch import SGLANG_VERSION, VLLM_VERSION, ResolvedArgs, SimLaunchError, parse_launch_args
from autotune.sim.text import token_id

#: longest wall wait for the scheduler's next tokens before a stream gives up (a bound, never reached normally)
STREAM_WAIT_S = 3600.0

log = logging.getLogger("autotune.sim")


class SpecMeta(TypedDict, total=False):
    """SGLang's speculative fields of ``meta_info`` (and ``sglext``); none without speculation."""

    spec_accept_length: float
    spec_accept_rate: float
    spec_verify_ct: int
    spec_correct_drafts_histogram: list[int]


class InternalState(TypedDict):
    avg_spec_accept_length: float | None
    last_gen_throughput: float


class SimInfo(TypedDict):
    """What the simulator adds to ``/server_info``: the scenario, the clock, the draws and the injected faults."""

    scenario: str
    time_scale: float
    seed: int
    launch_index: int
    faults: list[str]
    drafter: str | None


class ServerInfo(TypedDict):
    """SGLang's ``/server_info``, as far as the simulator plays it."""

    server_args: dict[str, object]
    version: str
    launch_command: str
    internal_states: list[InternalState]
    sim: SimInfo


#: SGLang's ``[logprob, token_id, text]`` (text None without ``return_text_in_logprobs``)
LogprobTriple = list[float | int | str | None]


class NativeLogprobs(TypedDict):
    """The ``meta_info`` fields SGLang adds for ``return_logprob``."""

    output_token_logprobs: list[LogprobTriple]
    output_top_logprobs: NotRequired[list[list[LogprobTriple]]]


class CompletionLogprobs(TypedDict):
    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float | None]]
    text_offset: list[int]


class ChatToken(TypedDict):
    token: str
    logprob: float | None
    bytes: list[int]


class ChatChosen(ChatToken):
    top_logprobs: list[ChatToken]


class ChatLogprobs(TypedDict):
    content: list[ChatChosen]


class Usage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class Choice(TypedDict, total=False):
    """One of an OpenAI answer's ``choices``: ``message`` (chat) or ``text``; a streamed chunk's ``delta`` (chat)
    or ``text``."""

    index: int
    finish_reason: str | None
    logprobs: CompletionLogprobs | ChatLogprobs | None
    message: dict[str, str]
    delta: dict[str, str]
    text: str


class Answer(TypedDict):
    """An OpenAI completion (or chunk); ``sglext``: SGLang's extension, on the final one (vLLM has none)."""

    id: str
    object: str
    created: int
    model: str
    choices: list[Choice]
    usage: Usage | None
    sglext: NotRequired[SpecMeta]


class SimServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, args: ResolvedArgs, engine: SimEngine) -> None:
        self.args = args
        self.engine = engine
        self.decode_log = DecodeLog(engine)
        self.scheduler = Scheduler(engine, self.decode_log)
        self.ready_at = math.inf
        self.launch_command = ""
        super().__init__((args.host, args.port), _Handler)

    @property
    def ready(self) -> bool:
        return time.monotonic() >= self.ready_at

    def die(self, line: str) -> None:
        log.error(line)
        logging.shutdown()
        sys.stderr.flush()
        os._exit(1)


class _Truncate(Exception):
    pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: SimServer
    arrived = 0.0

    def parse_request(self) -> bool:
        # a request's clock starts when its request line has been read, before Python parses its headers (~0.2 ms)
        self.arrived = time.monotonic()
        return super().parse_request()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s - %s", self.address_string(), format % args)

    # -- plumbing --------------------------------------------------------------------------------------------------
    def _json(self, code: int, obj: Any) -> None:
        self._text(code, json.dumps(obj), "application/json")

    def _text(self, code: int, text: str, ctype: str = "text/plain; charset=utf-8") -> None:
        body = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> dict[str, Any]:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b"{}"
        obj = json.loads(raw or b"{}")
        if not isinstance(obj, dict):
            raise ValueError("the request body must be a JSON object")
        return obj

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _send_event(self, payload: str) -> None:
        data = f"data: {payload}\n\n".encode()
        self.wfile.write(b"%x\r\n%b\r\n" % (len(data), data))

    def _end_stream(self) -> None:
        # [DONE] and the chunked body's terminator in one write: the client sees the response end with [DONE]
        data = b"data: [DONE]\n\n"
        self.wfile.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(data), data))

    # -- routes ----------------------------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0]
        srv = self.server
        if srv.args.engine == "vllm":
            self._vllm_get(path)
        elif path in ("/health", "/health_generate", "/ready"):
            self._text(200 if srv.ready else 503, "")
        elif path in ("/server_info", "/get_server_info"):
            if not srv.ready:
                self._json(503, {"error": "server is starting"})
                return
            self._json(200, self._server_info())
        elif path == "/get_model_info" or path == "/model_info":
            self._json(200, {"model_path": srv.args.model_path, "is_generation": True})
        elif path == "/v1/models":
            self._models("sglang")
        elif path == "/metrics":
            if not srv.args.enable_metrics:
                self._text(404, "metrics are disabled; launch with --enable-metrics\n")
            else:
                self._text(200, self._metrics(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._json(404, {"error": f"not found: {path}"})

    def _vllm_get(self, path: str) -> None:
        """vLLM's OpenAI server: /health, /version, /v1/models and /metrics (always served)."""
        srv = self.server
        if path == "/health":
            self._text(200 if srv.ready else 503, "")
        elif not srv.ready:
            self._json(503, {"error": "server is starting"})
        elif path == "/version":
            self._json(200, {"version": VLLM_VERSION})
        elif path == "/v1/models":
            self._models("vllm")
        elif path == "/metrics":
            self._text(200, self._vllm_metrics(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0]
        served: tuple[str, ...] = ("/v1/completions", "/v1/chat/completions")
        if self.server.args.engine == "sglang":
            served += ("/generate",)
        if path not in served:
            self._json(404, {"error": f"not found: {path}"})
            return
        if not self.server.ready:
            self._json(503, {"error": "server is starting"})
            return
        try:
            body = self._body()
        except ValueError as e:
            self._json(400, {"error": f"invalid JSON body: {e}"})
            return
        try:
            if path == "/generate":
                self._generate(body)
            else:
                self._openai(body, chat=path.endswith("chat/completions"))
        except _Truncate:
            self.close_connection = True
            try:
                self.connection.shutdown(2)
            except OSError:
                pass
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # -- helpers ---------------------------------------------------------------------------------------------------
    def _models(self, owner: str) -> None:
        self._json(200, {"object": "list", "data": [{"id": self._model_name(), "object": "model", "owned_by": owner}]})

    def _model_name(self) -> str:
        a = self.server.args
        return a.served_model_name or a.model_path

    def _server_info(self) -> ServerInfo:
        srv = self.server
        a = srv.args
        return {
            "server_args": a.server_args(),
            "version": SGLANG_VERSION,
            "launch_command": srv.launch_command,
            "internal_states": [
                {
                    "avg_spec_accept_length": srv.engine.avg_accept_length if a.speculative else None,
                    "last_gen_throughput": srv.decode_log.last_throughput,
                }
            ],
            "sim": {
                "scenario": a.scenario.name,
                "time_scale": a.time_scale,
                "seed": a.seed,
                "launch_index": srv.engine.launch_index,
                "faults": [str(f) for f in a.faults],
                "drafter": a.drafter.name if a.drafter else None,
            },
        }

    def _metrics(self) -> str:
        e = self.server.engine
        shape = e.shape
        name = self._model_name().replace('"', "")
        label = f'{{model_name="{name}"}}'
        acc_len = e.avg_accept_length if shape else 0.0
        rate = acc_len / shape.num_draft_tokens if shape else 0.0
        series = (
            ("spec_accept_length", "gauge", acc_len, "The average acceptance length of speculative decoding."),
            ("spec_accept_rate", "gauge", rate, "The average acceptance rate of speculative decoding."),
            ("spec_num_steps", "gauge", shape.steps if shape else 0, "speculative_num_steps."),
            ("spec_num_draft_tokens", "gauge", shape.num_draft_tokens if shape else 0, "speculative_num_draft_tokens."),
            ("spec_verify_calls_total", "counter", e.verify_ct if shape else 0, "Number of verification rounds."),
            ("generation_tokens_total", "counter", e.generation_tokens, "Number of generation tokens processed."),
            ("gen_throughput", "gauge", self.server.decode_log.last_throughput, "The generation throughput (token/s)."),
        )
        return "".join(
            f"# HELP sglang:{n} {h}\n# TYPE sglang:{n} {k}\nsglang:{n}{label} {v}\n" for n, k, v, h in series
        )

    def _vllm_metrics(self) -> str:
        """vLLM 0.33.0's spec-decode counters (``SpecDecodingProm``, labels ``model_name`` and ``engine``; the
        per-position one also ``position``, 0..K-1) and its generation-token counter; no spec-decode series without
        a ``--speculative-config``."""
        e = self.server.engine
        name = self._model_name().replace('"', "")
        label = f'model_name="{name}",engine="0"'
        lines: list[str] = []

        def counter(metric: str, help_: str, series: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP vllm:{metric}_total {help_}")
            lines.append(f"# TYPE vllm:{metric}_total counter")
            lines.extend(f"vllm:{metric}_total{{{label}{extra}}} {float(v)}" for extra, v in series)

        with e._lock:
            d = e.drafts
            counter("generation_tokens", "Number of generation tokens processed.", [("", e.generation_tokens)])
            if e.shape is not None:
                counter("spec_decode_num_drafts", "Number of spec decoding drafts.", [("", d.drafts)])
                counter("spec_decode_num_draft_tokens", "Number of draft tokens.", [("", d.draft_tokens)])
                counter("spec_decode_num_accepted_tokens", "Number of accepted tokens.", [("", d.accepted)])
                k = e.shape.num_draft_tokens - 1
                per_pos = [*d.accepted_per_pos, *[0] * k][:k]
                counter(
                    "spec_decode_num_accepted_tokens_per_pos",
                    "Accepted tokens per draft position.",
                    [(f',position="{i}"', v) for i, v in enumerate(per_pos)],
                )
        return "\n".join(lines) + "\n"

    def _begin(
        self,
        parse: Callable[[Mapping[str, object]], int | None],
        body: Mapping[str, object],
        prompt: str,
        max_new: int,
        temperature: float,
    ) -> tuple[Generation, str | None, int | None] | None:
        """Plan the request: (its generation, its fault, the top log-probabilities asked for), or None when it was
        answered already: a 400 (invalid log-probability fields, or log-probabilities on a streamed request, which
        the simulator does not serve) or a simulated HTTP 500."""
        try:
            top_n = parse(body)
        except LogprobRequestError as e:
            self._json(400, {"error": str(e)})
            return None
        if top_n is not None and body.get("stream"):
            error = "log-probabilities are not simulated on streamed requests; ask for them with stream false"
            self._json(400, {"error": error})
            return None
        engine = self.server.engine
        n = engine.next_request()
        fault = engine.request_fault(n)
        gen = engine.generate(prompt, max_new, temperature=temperature, request_index=n)
        if fault == "http500":
            log.error("Request %d failed (simulated HTTP 500)", gen.request_index)
            self._json(500, {"object": "error", "message": "Internal server error (simulated)", "code": 500})
            return None
        return gen, fault, top_n

    def _stream_rounds(self, gen: Generation, fault: str | None, emit: Any) -> float:
        """Hand the request to the batch scheduler and emit its tokens as its steps end: the first token after
        the prefill step, then each decode step's (steps that end within COALESCE_S wall of each other come as
        one chunk). Returns wall seconds from the request's arrival."""
        srv = self.server
        plan = gen.plan
        t0 = self.arrived
        pieces = gen.pieces
        seq = srv.engine.seq(gen)
        steps = int(plan.tokens.size) + 1
        stop_after = steps // 3 if fault in ("truncate", "crash") else None
        q = srv.scheduler.submit(seq, t0)
        sent = 0
        try:
            while True:
                try:
                    last_round, k, finished = q.get(timeout=STREAM_WAIT_S)
                except queue.Empty:
                    raise _Truncate() from None
                if stop_after is not None and last_round >= max(stop_after, 1):
                    if fault == "crash":
                        srv.die(
                            f"Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory access was "
                            f"encountered (request {gen.request_index})"
                        )
                    log.error("Stream of request %d aborted (simulated truncated stream)", gen.request_index)
                    raise _Truncate()
                chunk = pieces[sent : sent + k]
                sent += k
                emit("".join(chunk), sent, finished)
                if finished:
                    break
        finally:
            srv.scheduler.cancel(seq)
        return time.monotonic() - t0

    def _spec_meta(self, gen: Generation) -> SpecMeta:
        shape = self.server.engine.shape
        p = gen.plan
        if shape is None:
            return {}
        acc = p.accept_length
        meta: SpecMeta = {
            "spec_accept_length": acc,
            "spec_accept_rate": acc / shape.num_draft_tokens,
            "spec_verify_ct": p.verify_ct,
        }
        # SGLang 0.5.23 (TokenizerManager._calculate_spec_decoding_metrics): only when not empty
        if hist := p.correct_drafts_histogram:
            meta["spec_correct_drafts_histogram"] = hist
        return meta

    @staticmethod
    def _finish_reason(gen: Generation) -> dict[str, str | int | None]:
        if gen.finish_reason == "length":
            return {"type": "length", "length": gen.plan.completion_tokens}
        return {"type": gen.finish_reason, "matched": None}

    def _generate(self, body: dict[str, Any]) -> None:
        sp = body.get("sampling_params") or {}
        text = body.get("text")
        if not isinstance(text, str):
            self._json(400, {"error": "'text' must be a string"})
            return
        max_new = int(sp.get("max_new_tokens", 128))
        begun = self._begin(native_request, body, text, max_new, float(sp.get("temperature", 1.0)))
        if begun is None:
            return
        gen, fault, top_n = begun
        p = gen.plan
        rid = uuid.uuid4().hex
        if not body.get("stream"):
            logprobs: NativeLogprobs | None = None
            if top_n is not None:  # built before the wait, so the answer leaves on time
                with_text = bool(body.get("return_text_in_logprobs"))
                logprobs = native_meta(gen.choices(top_n), top_n, with_text=with_text)
            wall = self._stream_rounds(gen, fault, lambda *_: None)
            self.server.engine.record(p)
            meta: dict[str, object] = {
                "id": rid,
                "prompt_tokens": p.prompt_tokens,
                "completion_tokens": p.completion_tokens,
                "finish_reason": self._finish_reason(gen),
                "e2e_latency": wall,
                **self._spec_meta(gen),
                **(logprobs or {}),
            }
            self._json(200, {"text": gen.text, "meta_info": meta})
            return
        self._start_stream()
        t0 = self.arrived

        def emit(_delta: str, sent: int, final: bool) -> None:
            meta: dict[str, object] = {
                "id": rid,
                "prompt_tokens": p.prompt_tokens,
                "completion_tokens": sent,
                "finish_reason": self._finish_reason(gen) if final else None,
            }
            if final:
                meta.update({"e2e_latency": time.monotonic() - t0, **self._spec_meta(gen)})
            self._send_event(json.dumps({"text": "".join(gen.pieces[:sent]), "meta_info": meta}))

        self._stream_rounds(gen, fault, emit)
        self.server.engine.record(p)
        self._end_stream()

    def _openai(self, body: dict[str, Any], chat: bool) -> None:
        if chat:
            msgs = body.get("messages")
            if not isinstance(msgs, list) or not msgs:
                self._json(400, {"error": "'messages' must be a non-empty list"})
                return
            prompt = "\n".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict))
        else:
            given = body.get("prompt")
            if isinstance(given, list) and len(given) == 1:
                given = given[0]
            if not isinstance(given, str):
                self._json(400, {"error": "'prompt' must be a string"})
                return
            prompt = given
        max_new = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        temperature = float(body.get("temperature", 1.0))
        begun = self._begin(chat_request if chat else completions_request, body, prompt, max_new, temperature)
        if begun is None:
            return
        gen, fault, top_n = begun
        p = gen.plan
        cid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        usage: Usage = {
            "prompt_tokens": p.prompt_tokens,
            "completion_tokens": p.completion_tokens,
            "total_tokens": p.prompt_tokens + p.completion_tokens,
        }
        # SGLang's extension of the OpenAI answer (vLLM has none)
        sglext = self._spec_meta(gen) if self.server.args.engine == "sglang" else None

        def answer(obj: str, choices: list[Choice], usage: Usage | None, final: bool) -> Answer:
            out: Answer = {
                "id": cid,
                "object": obj,
                "created": created,
                "model": self._model_name(),
                "choices": choices,
                "usage": usage,
            }
            if final and sglext is not None:
                out["sglext"] = sglext
            return out

        if not body.get("stream"):
            lp: CompletionLogprobs | ChatLogprobs | None = None
            if top_n is not None:  # built before the wait, so the answer leaves on time
                lp = (
                    chat_logprobs(gen.choices(top_n), top_n)
                    if chat
                    else completions_logprobs(gen.choices(top_n), top_n)
                )
            self._stream_rounds(gen, fault, lambda *_: None)
            self.server.engine.record(p)
            choice: Choice = {"index": 0, "finish_reason": gen.finish_reason, "logprobs": lp}
            if chat:
                choice["message"] = {"role": "assistant", "content": gen.text}
            else:
                choice["text"] = gen.text
            self._json(200, answer("chat.completion" if chat else "text_completion", [choice], usage, True))
            return
        obj = "chat.completion.chunk" if chat else "text_completion"
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self._start_stream()

        def emit(delta: str, _sent: int, final: bool) -> None:
            reason = gen.finish_reason if final else None
            choice: Choice = {"index": 0, "logprobs": None, "finish_reason": reason}
            if chat:
                choice["delta"] = {"content": delta}
            else:
                choice["text"] = delta
            self._send_event(json.dumps(answer(obj, [choice], None, final)))

        self._stream_rounds(gen, fault, emit)
        self.server.engine.record(p)
        if include_usage:
            self._send_event(json.dumps(answer(obj, [], usage, True)))
        self._end_stream()


def _setup_logging() -> None:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="[%(asctime)s] %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        force=True,
    )


def _sleep_until(deadline: float, stop: threading.Event) -> bool:
    """Wait until the monotonic ``deadline``; False if told to stop first."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        if stop.wait(min(left, 0.5)):
            return False


def _wait(stop: threading.Event) -> None:
    while not stop.wait(0.5):
        pass


def main(argv: list[str]) -> int:
    """Run the simulated server until SIGTERM/SIGINT. Returns the exit code."""
    _setup_logging()
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("Received signal %d, shutting down.", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        args = parse_launch_args(argv)
    except SimLaunchError as e:
        for line in e.log.splitlines():
            log.error(line)
        return e.returncode
    for line in args.log:
        log.warning(line)
    launch_index = args.launch_index if args.launch_index is not None else secrets.randbits(31)
    engine = SimEngine(args, launch_index)
    startup = engine.startup()
    try:
        server = SimServer(args, engine)
    except OSError as e:
        log.error(
            "ERROR: [Errno %s] error while attempting to bind on address (%r, %d): %s",
            e.errno,
            args.host,
            args.port,
            e.strerror,
        )
        return 1
    launcher = ["vllm", "serve"] if args.engine == "vllm" else ["python3", "-m", "sglang.launch_server"]
    server.launch_command = " ".join([*launcher, *argv])
    # serve_forever checks for shutdown every poll_interval: a short one makes SIGTERM -> exit quick
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    t0 = time.monotonic()
    scale = args.time_scale
    code = 0
    try:
        lines = list(startup.log)
        # spread the startup log over the (scaled) startup time: first half immediately, the rest at the end
        half = max(len(lines) - 2, 1)
        for line in lines[:half]:
            log.info(line)
        if startup.error is not None:
            if _sleep_until(t0 + startup.seconds / scale, stop):
                for line in startup.error.log.splitlines()[len(lines[:half]) :]:
                    log.error(line)
                code = startup.error.returncode
        elif startup.never_healthy:
            for line in lines[half:]:
                log.info(line)
            _wait(stop)
        elif _sleep_until(t0 + startup.seconds / scale, stop):
            server.ready_at = time.monotonic()
            for line in lines[half:]:
                log.info(line)
            _wait(stop)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        logging.shutdown()
    return code


class LogprobRequestError(ValueError):
    """A request's log-probability fields are invalid (the server answers 400 with this message)."""


def _count(v: object, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise LogprobRequestError(f"'{name}' must be a non-negative integer, got {v!r}")
    return v


def native_request(body: Mapping[str, object]) -> int | None:
    """``/generate``: the number of top log-probabilities asked for, or None when ``return_logprob`` is off."""
    if not body.get("return_logprob"):
        return None
    n = body.get("top_logprobs_num")
    return 0 if n is None else _count(n, "top_logprobs_num")


def completions_request(body: Mapping[str, object]) -> int | None:
    """``/v1/completions``: ``logprobs`` (an integer; null or false: not asked)."""
    v = body.get("logprobs")
    if v is None or v is False:
        return None
    return _count(v, "logprobs")


def chat_request(body: Mapping[str, object]) -> int | None:
    """``/v1/chat/completions``: ``top_logprobs`` when ``logprobs`` is true, else None."""
    asked = body.get("logprobs")
    top = body.get("top_logprobs")
    if asked is None or asked is False:
        if top not in (None, 0):
            raise LogprobRequestError("'top_logprobs' needs 'logprobs': true")
        return None
    if asked is not True:
        raise LogprobRequestError(f"'logprobs' must be true or false, got {asked!r}")
    return 0 if top is None else _count(top, "top_logprobs")


def _triple(text: str, logprob: float | None, with_text: bool) -> LogprobTriple:
    return [logprob, token_id(text), text if with_text else None]


def native_meta(choices: Sequence[TokenChoice], top_n: int, *, with_text: bool) -> NativeLogprobs:
    """The ``meta_info`` fields SGLang adds for ``return_logprob`` (output tokens only)."""
    meta: NativeLogprobs = {"output_token_logprobs": [_triple(c.text, c.logprob, with_text) for c in choices]}
    if top_n > 0:
        meta["output_top_logprobs"] = [[_triple(t, lp, with_text) for t, lp in c.top[:top_n]] for c in choices]
    return meta


def completions_logprobs(choices: Sequence[TokenChoice], top_n: int) -> CompletionLogprobs:
    """``choices[0].logprobs`` of a legacy completion."""
    offsets, at = [], 0
    tops = []
    for c in choices:
        offsets.append(at)
        at += len(c.text)
        top: dict[str, float | None] = {t: lp for t, lp in c.top[:top_n]}
        top.setdefault(c.text, c.logprob)  # the chosen token is always listed, as vLLM does
        tops.append(top)
    return {
        "tokens": [c.text for c in choices],
        "token_logprobs": [c.logprob for c in choices],
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def _chat_entry(text: str, logprob: float | None) -> ChatToken:
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}


def chat_logprobs(choices: Sequence[TokenChoice], top_n: int) -> ChatLogprobs:
    """``choices[0].logprobs`` of a chat completion."""
    return {
        "content": [
            {
                "token": c.text,
                "logprob": c.logprob,
                "bytes": list(c.text.encode("utf-8")),
                "top_logprobs": [_chat_entry(t, lp) for t, lp in c.top[:top_n]],
            }
            for c in choices
        ]
    }


#: rounds due within this many wall-clock seconds of each other are streamed as one chunk
COALESCE_S = 0.002
#: running requests up to which the coalescing window is COALESCE_S; above, it grows in proportion
COALESCE_BATCH = 8

DECODE_LOG_INTERVAL = 40


class DecodeLog:
    """SGLang's periodic ``Decode batch`` line: every 40 decode rounds, over the interval (hardware time)."""

    def __init__(self, engine: SimEngine) -> None:
        self.engine = engine
        self.lock = threading.Lock()
        self.rounds = 0
        self.tokens = 0
        self.hw_ms = 0.0
        self.last_throughput = 0.0
        self.running = 1

    def add(self, tokens: int, hw_ms: float, running: int = 1) -> None:
        with self.lock:
            self.running = running
            self.rounds += 1
            self.tokens += tokens
            self.hw_ms += hw_ms
            if self.rounds < DECODE_LOG_INTERVAL:
                return
            thr = self.tokens / (self.hw_ms / 1000.0) if self.hw_ms > 0 else 0.0
            self.last_throughput = thr
            shape = self.engine.shape
            acc_len = self.tokens / self.rounds
            if shape is not None:
                acc_rate = acc_len / shape.num_draft_tokens
                spec = f"accept len: {acc_len:.2f}, accept rate: {acc_rate:.2f}, "
            else:
                spec = ""
            log.info(
                "Decode batch, #running-req: %d, #token: %d, token usage: 0.01, %scuda graph: %s, "
                "gen throughput (token/s): %.2f, #queue-req: 0",
                self.running,
                self.tokens,
                spec,
                self.engine.args.cuda_graph,
                thr,
            )
            self.rounds, self.tokens, self.hw_ms = 0, 0, 0.0


class Scheduler:
    """The continuous-batching scheduler thread (``autotune.sim.batch.Batcher`` against the monotonic clock).

    Steps are chained deadline after deadline (a late wake-up does not shift the next step), starting at the
    arrival of the request that ends an idle spell; each step's requests get their tokens when it ends. Decode
    steps due within ``COALESCE_S`` wall of each other are delivered together at the last one's time (at high
    time scales per-chunk Python overhead would otherwise make streams fall behind; with more than
    ``COALESCE_BATCH`` requests running the window grows in proportion, as each step writes a chunk per request);
    a prefill step is always delivered on its own, and requests arriving meanwhile join at the next step."""

    def __init__(self, engine: SimEngine, decode_log: DecodeLog) -> None:
        self.batcher = engine.batcher()
        self.scale = engine.args.time_scale
        self.decode_log = decode_log
        self.cond = threading.Condition()
        self.queues: dict[int, queue.SimpleQueue[tuple[int, int, bool]]] = {}
        self.arrivals: dict[int, float] = {}
        self.last_end = 0.0
        self._pending: Step | None = None  # computed, delivered with the next group
        self.thread = threading.Thread(target=self._run, name="sim-scheduler", daemon=True)
        self.thread.start()

    def submit(self, seq: Seq, arrived: float) -> queue.SimpleQueue[tuple[int, int, bool]]:
        q: queue.SimpleQueue[tuple[int, int, bool]] = queue.SimpleQueue()
        with self.cond:
            self.queues[id(seq)] = q
            self.arrivals[id(seq)] = arrived
            self.batcher.add(seq)
            self.cond.notify()
        return q

    def cancel(self, seq: Seq) -> None:
        with self.cond:
            self.batcher.cancel(seq)
            self.queues.pop(id(seq), None)
            self.arrivals.pop(id(seq), None)

    def _group(self, t: float) -> tuple[float, list[Step]]:
        """Steps from wall time ``t`` on, to be delivered together (called with the lock held): the first step,
        then the next ones while they end within ``COALESCE_S`` of the first (a step computed past that waits for
        the next group); a prefill step, or requests waiting, end the group."""
        group: list[Step] = []
        first_end = None
        # a wider window for big batches: every step writes one chunk per running request
        window = COALESCE_S * max(1.0, len(self.batcher.running) / COALESCE_BATCH)
        while True:
            step, self._pending = (self._pending, None) if self._pending is not None else (self.batcher.step(), None)
            if step is None:
                break
            end = t + step.ms / 1000.0 / self.scale
            if first_end is not None and (step.prefill or end - first_end > window):
                self._pending = step
                break
            t = end
            group.append(step)
            if first_end is None:
                first_end = end
            if step.prefill or self.batcher.waiting:
                break
        return t, group

    def _run(self) -> None:
        try:
            self._loop()
        except Exception as e:  # a broken scheduler is a crashed server, never a silent hang
            log.error("Scheduler hit an exception: %s: %s", type(e).__name__, e)
            logging.shutdown()
            os._exit(1)

    def _loop(self) -> None:
        t: float | None = None
        while True:
            with self.cond:
                while self.batcher.idle and self._pending is None:
                    t = None
                    self.cond.wait()
                if t is None:
                    arrived = min((self.arrivals.get(id(s), 0.0) for s in self.batcher.waiting), default=0.0)
                    t = max(arrived, self.last_end)
                t, group = self._group(t)
            delay = t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.last_end = t
            with self.cond:
                out: dict[int, list[int | bool]] = {}
                for step in group:
                    for em in step.emissions:
                        cur = out.setdefault(id(em.seq), [0, 0, False])
                        cur[0], cur[1], cur[2] = em.round, int(cur[1]) + em.tokens, em.finished
                    if not step.prefill:
                        self.decode_log.add(sum(em.tokens for em in step.emissions), step.ms, step.batch)
                for key, (rnd, k, fin) in out.items():
                    q = self.queues.get(key)
                    if q is not None:
                        q.put((int(rnd), int(k), bool(fin)))
                    if fin:
                        self.queues.pop(key, None)
                        self.arrivals.pop(key, None)
