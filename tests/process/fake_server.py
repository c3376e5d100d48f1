"""A stand-in server for process lifecycle tests (stdlib only; started as a real child process).

Usage: fake_server.py --mode MODE [--delay S] [SGLang-style flags: --port P --host H ...]

Modes:
- healthy:      /health answers 503 for --delay seconds, then 200
- oom:          prints a CUDA out-of-memory traceback after --delay seconds and exits 1
- crash:        exits 3 after --delay seconds with a plain error
- never:        /health answers 503 forever
- ignore-term:  healthy, but ignores SIGTERM (must be SIGKILLed)
- spawn-child:  healthy; starts a child in its process group and a grandchild in a new session, both
                ignoring SIGTERM; their pids go to $FAKE_CHILDREN (one per line)
- die-on-generate: healthy; exits 5 on the first /generate request

Endpoints: /health, /server_info (echoes the speculative flags), /generate (SGLang-style SSE, cumulative
text, several tokens per chunk, final meta_info with spec_accept_length), /metrics.
$FAKE_DUMP, when set, receives the full argv as JSON. ``--help`` prints flag names and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

if "--help" in sys.argv[1:]:
    print("usage: fake_server [--disable-cuda-graph] [--port PORT] ...")
    sys.exit(0)

if os.environ.get("FAKE_DUMP"):
    with open(os.environ["FAKE_DUMP"], "w", encoding="utf-8") as f:
        json.dump(sys.argv, f)

p = argparse.ArgumentParser()
p.add_argument("--mode", default="healthy")
p.add_argument("--delay", type=float, default=0.3)
p.add_argument("--host", default="127.0.0.1")
p.add_argument("--port", type=int, required=True)
p.add_argument("--speculative-algorithm")
p.add_argument("--speculative-num-steps", type=int)
p.add_argument("--speculative-eagle-topk", type=int)
p.add_argument("--speculative-num-draft-tokens", type=int)
p.add_argument("--disable-cuda-graph", action="store_true")
args, _unknown = p.parse_known_args()

START = time.monotonic()
print(f"fake server starting in mode {args.mode}", flush=True)

if args.mode in ("oom", "crash"):
    time.sleep(args.delay)
    if args.mode == "oom":
        print("Traceback (most recent call last):", flush=True)
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", flush=True)
        sys.exit(1)
    print("RuntimeError: something else broke", flush=True)
    sys.exit(3)

if args.mode in ("ignore-term", "spawn-child"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

if args.mode == "spawn-child":
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    child = subprocess.Popen([sys.executable, "-c", stubborn])
    grandchild = subprocess.Popen([sys.executable, "-c", stubborn], start_new_session=True)
    if os.environ.get("FAKE_CHILDREN"):
        with open(os.environ["FAKE_CHILDREN"], "w", encoding="utf-8") as f:
            f.write(f"{child.pid}\n{grandchild.pid}\n")

ACCEPT = 2.5 if args.speculative_algorithm else None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a: object) -> None:
        pass

    def _json(self, code: int, obj: object) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        ready = args.mode != "never" and time.monotonic() - START >= args.delay
        if self.path == "/health":
            self._json(200 if ready else 503, {"ok": ready})
        elif self.path == "/server_info":
            self._json(
                200,
                {
                    "speculative_algorithm": args.speculative_algorithm,
                    "speculative_num_steps": args.speculative_num_steps,
                    "speculative_eagle_topk": args.speculative_eagle_topk,
                    "speculative_num_draft_tokens": args.speculative_num_draft_tokens,
                    "disable_cuda_graph": args.disable_cuda_graph,
                    "version": "0.5.23-fake",
                },
            )
        elif self.path == "/metrics":
            body = b"# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length 2.5\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers.get("Content-Length") or 0)
        req = json.loads(self.rfile.read(n) or b"{}")
        if self.path != "/generate":
            self._json(404, {"error": "not found"})
            return
        if args.mode == "die-on-generate":
            os._exit(5)
        max_new = int(req.get("sampling_params", {}).get("max_new_tokens", 8))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        words = [f"w{i} " for i in range(max_new)]
        sent = 0
        text = ""
        while sent < max_new:
            step = min(3, max_new - sent)
            text += "".join(words[sent : sent + step])
            sent += step
            meta: dict[str, object] = {"prompt_tokens": 5, "completion_tokens": sent, "finish_reason": None}
            if sent == max_new:
                meta["finish_reason"] = {"type": "length", "length": max_new}
                if ACCEPT:
                    meta["spec_accept_length"] = ACCEPT
                    meta["spec_verify_ct"] = max(1, round(max_new / ACCEPT))
            self.wfile.write(f"data: {json.dumps({'text': text, 'meta_info': meta})}\n\n".encode())
            self.wfile.flush()
            time.sleep(0.01)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


server = ThreadingHTTPServer((args.host, args.port), Handler)
server.daemon_threads = True
print("The server is fired up and ready to roll!", flush=True)
server.serve_forever()
