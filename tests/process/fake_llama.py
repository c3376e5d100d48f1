"""A stand-in llama-server for shared-start tests (stdlib only; started as a real child process).

Usage: fake_llama.py --honour yes|no [llama-server flags: --port P --spec-draft-n-max N ...]

/health answers 200; /props reports the launch's draft values; /v1/completions streams OpenAI chunks and a final
chunk with ``timings`` as llama-server does: 40 tokens, in decode steps drafting n_max tokens each (n_max: the
request's ``speculative.n_max`` with ``--honour yes``, else the launch's ``--spec-draft-n-max``) and accepting one.
Every request's body is appended to $FAKE_BODIES (one JSON line each) when set.
"""

from __future__ import annotations

import argparse
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

p = argparse.ArgumentParser()
p.add_argument("--honour", default="yes")
p.add_argument("--port", type=int, default=0)
p.add_argument("--host", default="127.0.0.1")
p.add_argument("--spec-draft-n-max", type=int, default=3)
args, _ = p.parse_known_args()
TOKENS = 40


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _json(self, obj, code=200):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self._json({"status": "ok"})
        elif self.path == "/props":
            params = {"speculative.n_max": args.spec_draft_n_max, "speculative.n_min": 0, "speculative.p_min": 0.0}
            self._json({"model_path": "t", "total_slots": 1, "default_generation_settings": {"params": params}})
        else:
            self._json({}, 404)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if os.environ.get("FAKE_BODIES"):
            with open(os.environ["FAKE_BODIES"], "a", encoding="utf-8") as f:
                f.write(json.dumps(body) + "\n")
        n_max = (
            int(body.get("speculative.n_max", args.spec_draft_n_max)) if args.honour == "yes" else args.spec_draft_n_max
        )
        tokens = min(int(body.get("max_tokens", TOKENS)), TOKENS)
        steps = (tokens + 1) // 2  # one accepted draft token plus the step's own: two tokens a step
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for _ in range(steps):
            self.wfile.write(b'data: {"choices":[{"text":"ab","index":0}]}\n\n')
        timings = {"predicted_n": tokens, "draft_n": n_max * steps, "draft_n_accepted": tokens - steps}
        final = {
            "choices": [{"text": "", "finish_reason": "length", "index": 0}],
            "timings": timings,
            "usage": {"completion_tokens": tokens, "prompt_tokens": 5},
        }
        self.wfile.write(b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n")


ThreadingHTTPServer((args.host, args.port), H).serve_forever()
