"""SGLang's launch rules as the simulator applies them."""

from __future__ import annotations

import pytest

from autotune.sim.launch import Fault, SimLaunchError, parse_launch_args
from autotune.sim.scenario import load_scenario

KIMI = ["--scenario", "kimi-k25-rtxpro6000", "--model-path", "kimi-k25"]
LLAMA = ["--scenario", "llama31-8b-h100", "--model-path", "llama-3.1-8b-instruct"]


def spec(algo: str = "EAGLE3", drafter: str = "custom-10k", *knobs: int) -> list[str]:
    out = ["--speculative-algorithm", algo, "--speculative-draft-model-path", drafter]
    for flag, v in zip(
        ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens"), knobs, strict=False
    ):
        if v is not None:
            out += [flag, str(v)]
    return out


def test_baseline_defaults() -> None:
    a = parse_launch_args(KIMI)
    assert not a.speculative and a.cuda_graph
    sa = a.server_args()
    assert sa["speculative_algorithm"] is None and sa["disable_cuda_graph"] is False
    assert a.startup_s() == pytest.approx(420 + 60)


def test_full_triple_and_resolved_fields() -> None:
    a = parse_launch_args([*KIMI, *spec("eagle3", "aq-medai", 3, 4, 16), "--disable-cuda-graph", "--tp-size", "8"])
    sa = a.server_args()
    assert (
        sa["speculative_algorithm"],
        sa["speculative_num_steps"],
        sa["speculative_eagle_topk"],
        sa["speculative_num_draft_tokens"],
    ) == ("EAGLE3", 3, 4, 16)
    assert sa["disable_cuda_graph"] is True and sa["tp_size"] == 8
    assert a.drafter is not None and a.drafter.name == "aq-medai"
    assert a.startup_s() == pytest.approx(420 + 45)


def test_nextn_is_eagle() -> None:
    assert parse_launch_args([*KIMI, *spec("nextn", "custom-10k", 3, 1, 4)]).speculative_algorithm == "EAGLE"


def test_unknown_algorithm_fails() -> None:
    with pytest.raises(SimLaunchError) as e:
        parse_launch_args([*KIMI, *spec("MEDUSA", "custom-10k", 3, 1, 4)])
    assert "Unknown speculative algorithm name: MEDUSA" in e.value.log
    assert e.value.returncode != 0


@pytest.mark.parametrize(
    "argv_tail,auto",
    [
        (KIMI, (3, 1, 4)),
        (LLAMA, (5, 4, 8)),
    ],
)
def test_none_of_three_auto_chooses(argv_tail: list[str], auto: tuple[int, int, int]) -> None:
    drafter = "custom-10k" if "kimi-k25" in argv_tail else "eagle3-llama31-8b"
    a = parse_launch_args([*argv_tail, *spec("EAGLE3", drafter)])
    assert (a.speculative_num_steps, a.speculative_eagle_topk, a.speculative_num_draft_tokens) == auto
    assert any("auto-chose" in line for line in a.log)


@pytest.mark.parametrize("knobs", [(4, None, None), (4, 2, None), (4, None, 8)])
def test_steps_without_topk_or_draft_tokens_fails(knobs: tuple[int | None, ...]) -> None:
    with pytest.raises(SimLaunchError) as e:
        parse_launch_args([*KIMI, *spec("EAGLE3", "custom-10k", *knobs)])
    assert "AssertionError" in e.value.log


def test_topk_or_draft_without_steps_fails() -> None:
    with pytest.raises(SimLaunchError) as e:
        parse_launch_args(
            [
                *KIMI,
                "--speculative-algorithm",
                "EAGLE3",
                "--speculative-draft-model-path",
                "custom-10k",
                "--speculative-eagle-topk",
                "4",
            ]
        )
    assert "AssertionError" in e.value.log


def test_topk1_rewrites_draft_tokens_with_warning() -> None:
    a = parse_launch_args([*KIMI, *spec("EAGLE3", "custom-10k", 4, 1, 16)])
    assert a.speculative_num_draft_tokens == 5
    assert a.server_args()["speculative_num_draft_tokens"] == 5
    assert any("adjusted" in line and "was 16, now 5" in line for line in a.log)


@pytest.mark.parametrize(
    "s,k,n,ok",
    [(3, 4, 37, True), (3, 4, 38, False), (2, 2, 7, True), (2, 2, 8, False), (5, 8, 64, True), (1, 3, 5, False)],
)
def test_tree_upper_bound(s: int, k: int, n: int, ok: bool) -> None:
    argv = [*KIMI, *spec("EAGLE3", "custom-10k", s, k, n)]
    if ok:
        assert parse_launch_args(argv).speculative_num_draft_tokens == n
    else:
        with pytest.raises(SimLaunchError) as e:
            parse_launch_args(argv)
        assert "too large" in e.value.log and e.value.returncode == 1


@pytest.mark.parametrize(
    "flags",
    [
        ["--disable-cuda-graph"],
        ["--disable-decode-cuda-graph"],
        ["--cuda-graph-backend-decode", "disabled"],
        ["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph"],
    ],
)
def test_cuda_graph_off_spellings(flags: list[str]) -> None:
    a = parse_launch_args([*KIMI, *flags])
    assert not a.cuda_graph and a.server_args()["disable_cuda_graph"] is True


def test_unknown_flags_are_ignored_with_a_log_line() -> None:
    a = parse_launch_args(
        [
            *KIMI,
            "--mem-fraction-static",
            "0.8",
            "--trust-remote-code",
            "--context-length=8192",
            "--enable-metrics",
            "--port",
            "31000",
        ]
    )
    assert a.enable_metrics and a.port == 31000
    joined = "\n".join(a.log)
    assert "--mem-fraction-static 0.8" in joined and "--trust-remote-code" in joined and "--context-length" in joined


def test_draft_model_alias_and_directories() -> None:
    sc = load_scenario("kimi-k25-rtxpro6000")
    d = sc.drafters["aq-medai"].dir
    a = parse_launch_args(
        [
            "--scenario",
            sc.name,
            "--model-path",
            sc.target_dir,
            "--speculative-algorithm",
            "EAGLE3",
            "--speculative-draft-model",
            d,
            "--speculative-num-steps",
            "3",
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            "4",
        ]
    )
    assert a.drafter is not None and a.drafter.name == "aq-medai"
    assert a.server_args()["speculative_draft_model_path"] == d


def test_unknown_paths_fail_like_sglang(tmp_path: object) -> None:
    with pytest.raises(SimLaunchError) as e:
        parse_launch_args([*KIMI, *spec("EAGLE3", "/nowhere/drafter", 3, 1, 4)])
    assert "Can't load the configuration of '/nowhere/drafter'" in e.value.log
    with pytest.raises(SimLaunchError) as e:
        parse_launch_args(["--scenario", "kimi-k25-rtxpro6000", "--model-path", "/nowhere/model"])
    assert "config.json" in e.value.log


def test_scenario_required_and_known() -> None:
    with pytest.raises(SimLaunchError) as e:
        parse_launch_args(["--model-path", "x"])
    assert "--scenario is required" in str(e.value)
    with pytest.raises(SimLaunchError) as e:
        parse_launch_args(["--scenario", "nope", "--model-path", "x"])
    assert "kimi-k25-rtxpro6000" in str(e.value)


def test_faults_parse() -> None:
    a = parse_launch_args([*KIMI, "--fault", "http500:2", "--fault", "oom-above:16", "--fault", "crash-startup"])
    assert [str(f) for f in a.faults] == ["http500:2", "oom-above:16", "crash-startup"]
    assert Fault.parse("crash-after:0") == Fault("crash-after", 0)
    for bad in ("explode", "http500", "crash-startup:3", "truncate:x"):
        with pytest.raises(ValueError):
            Fault.parse(bad)
    with pytest.raises(SimLaunchError):
        parse_launch_args([*KIMI, "--fault", "explode"])


def test_missing_value_and_bad_int() -> None:
    with pytest.raises(SimLaunchError) as e:
        parse_launch_args([*KIMI, "--port"])
    assert e.value.returncode == 2
    with pytest.raises(SimLaunchError) as e:
        parse_launch_args([*KIMI, *spec("EAGLE3", "custom-10k", 3, 1, 4), "--speculative-num-steps", "x"])
    assert "invalid int value" in e.value.log


def test_faults_scoped_to_a_drafter_apply_only_to_its_servers() -> None:
    from autotune.sim.launch import parse_launch_args

    base = [
        "--scenario",
        "kimi-k25-rtxpro6000",
        "--model-path",
        "kimi-k25",
        "--fault",
        "crash-after:3@aq-medai",
        "--fault",
        "http500:2",
        "--fault",
        "truncate:4@none",
    ]
    spec = [
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
        "--speculative-draft-model-path",
    ]
    assert {str(f) for f in parse_launch_args(base).faults} == {"http500:2", "truncate:4@none"}
    assert {str(f) for f in parse_launch_args([*base, *spec, "aq-medai"]).faults} == {
        "crash-after:3@aq-medai",
        "http500:2",
    }
    assert {str(f) for f in parse_launch_args([*base, *spec, "custom-10k"]).faults} == {"http500:2"}


def test_help_prints_usage_and_starts_nothing() -> None:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "autotune.sim", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    assert "--scenario" in r.stdout and "--disable-cuda-graph" in r.stdout and "kimi-k25-rtxpro6000" in r.stdout
