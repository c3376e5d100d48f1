from __future__ import annotations

import math
from pathlib import Path

from autotune.backends.streams import metric_total, parse_prometheus, series_key

SAMPLES = Path(__file__).with_name("samples")


def test_parse_recorded_vllm_metrics():
    m = parse_prometheus((SAMPLES / "vllm_metrics_before.txt").read_text())
    key = series_key(
        "vllm:spec_decode_num_drafts_total", {"engine": "0", "model_name": "meta-llama/Llama-3.1-8B-Instruct"}
    )
    assert m[key] == 1204.0
    assert metric_total(m, "vllm:spec_decode_num_accepted_tokens_total") == 2210.0
    assert metric_total(m, "vllm:spec_decode_num_accepted_tokens_per_pos_total") == 951 + 740 + 519
    assert metric_total(m, "python_gc_objects_collected_total") == 14922 + 3378
    assert metric_total(m, "vllm:missing") is None
    bucket = series_key(
        "vllm:time_to_first_token_seconds_bucket",
        {"engine": "0", "le": "+Inf", "model_name": "meta-llama/Llama-3.1-8B-Instruct"},
    )
    assert m[bucket] == 8.0


def test_edge_cases():
    text = "\n".join(
        [
            "# HELP x something",
            "plain 3",
            'lab{b="2",a="1"} 4.5 1700000000000',
            'esc{path="C:\\\\dir",q="say \\"hi\\""} 1',
            "nan_metric NaN",
            "inf_metric +Inf",
            "garbage line here",
            "sglang:spec_accept_length 2.5",
            "",
        ]
    )
    m = parse_prometheus(text)
    assert m["plain"] == 3.0
    assert m['lab{a="1",b="2"}'] == 4.5
    assert m['esc{path="C:\\dir",q="say "hi""}'] == 1.0
    assert math.isnan(m["nan_metric"]) and m["inf_metric"] == math.inf
    assert m["sglang:spec_accept_length"] == 2.5
    assert metric_total(m, "nan_metric") is None  # non-finite values don't count
    assert "garbage" not in m
