"""Write vLLM's ``/metrics`` text before and after some drafts, by vLLM's own code (run with the Python of the venv
``scripts/vllm_setup.sh`` makes; never imported by autotune or pytest's interpreter).

Usage: python vllm_metrics_gen.py OUT_DIR  -> OUT_DIR/before.txt, OUT_DIR/after.txt

vLLM 0.33.0's ``SpecDecodingProm`` (vllm/v1/spec_decode/metrics.py: the drafts, draft tokens and accepted tokens
counters and ``vllm:spec_decode_num_accepted_tokens_per_pos`` with a ``position`` label, labels ``model_name`` and
``engine`` as ``PrometheusStatLogger`` gives them, vllm/v1/metrics/loggers.py) on a fresh prometheus registry, fed
``SpecDecodingStats.observe_draft`` of drafts of 3 tokens, written by ``prometheus_client.generate_latest`` (what
vLLM's ``/metrics`` serves). tests/backends/samples/vllm-0.33.0_metrics_{before,after}.txt are its output;
tests/servers/test_vllm_parser.py runs it again and compares.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

K = 3
#: accepted tokens of each draft before the first scrape, and between the two (100 drafts)
BEFORE = [3, 1, 0, 2, 3, 3, 1]
BETWEEN = [3] * 40 + [2] * 25 + [1] * 20 + [0] * 15


def main(out: str) -> int:
    import prometheus_client
    from vllm.v1.spec_decode.metrics import SpecDecodingProm, SpecDecodingStats

    registry = prometheus_client.CollectorRegistry()

    class Counter(prometheus_client.Counter):  # vLLM's counters, on this registry instead of the global one
        def __init__(self, *a: object, **k: object) -> None:
            super().__init__(*a, registry=registry, **k)

    class Spec:  # the one field SpecDecodingProm reads of the SpeculativeConfig
        num_speculative_tokens = K

    SpecDecodingProm._counter_cls = Counter
    prom = SpecDecodingProm(Spec(), ["model_name", "engine"], {0: ["meta-llama/Llama-3.1-8B-Instruct", "0"]})

    def observe(accepted: list[int]) -> None:
        stats = SpecDecodingStats.new(K)
        for n in accepted:
            stats.observe_draft(K, n)
        prom.observe(stats, 0)

    observe(BEFORE)
    before = prometheus_client.generate_latest(registry).decode()
    observe(BETWEEN)
    after = prometheus_client.generate_latest(registry).decode()
    with open(os.path.join(out, "before.txt"), "w", encoding="utf-8") as f:
        f.write(before)
    with open(os.path.join(out, "after.txt"), "w", encoding="utf-8") as f:
        f.write(after)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
