"""Smoke tests of the benchmark scripts with tiny settings: they run, and their outputs have the documented structure
and sane values. No wall-clock assertions (the figures themselves are benchmarks, not tests)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))

import bench_loop  # noqa: E402
import bench_overhead  # noqa: E402
import bench_search  # noqa: E402
import bench_statistics  # noqa: E402


def test_bench_search_tiny(tmp_path):
    methods = ["grid", "tuner", "tuner_no_prune", "random", "tuner_prev"]
    rc = bench_search.main(
        [
            *("--seeds", "1", "--jobs", "1", "--scenarios", "llama-edge", "--methods", *methods),
            *("--landscapes", "0", "--out", str(tmp_path)),
        ]
    )
    assert rc == 0
    data = json.loads((tmp_path / "benchmarks.json").read_text())
    sc = data["search"]["scenarios"]["llama-edge"]
    gt = sc["ground_truth"]
    assert gt["grid_points"] > 0 and gt["within_2pct_points"] >= 1
    assert gt["optimum"]["tok_per_s"] > max(gt["baselines"].values())  # speculation wins here
    assert gt["right_verdicts"] == ["speculation-wins"]
    assert set(sc["methods"]) == set(methods)
    for key in ("gpu_time_ratio_vs_grid", "hit_rate_2pct", "false_prune_rate"):
        assert key in sc
    assert 0 <= sc["hit_rate_2pct"] <= 1 and 0 <= sc["false_prune_rate"] <= 1
    assert sc["gpu_time_ratio_vs_grid"] > 0
    grid = sc["methods"]["grid"]
    assert grid["server_starts_median"] == gt["grid_points"]  # one start per feasible point
    for name, m in sc["methods"].items():
        assert 0 < m["time_to_2pct_median_s"] <= m["total_median_s"] * (1 + 1e-9) or m["never_within_2pct"], name
        assert 0 <= m["regret_median"] <= 1
    for r in sc["runs"]:
        assert r["charged"]["startup"] > 0 and r["charged"]["generate"] > 0  # the clock charged starts and tokens
        if r["method"] != "grid":
            assert r["pruned"] <= r["measured_speculative"]
            assert r["verdict"] in ("speculation-wins", "baseline-wins", "inconclusive")
        if r["method"] in ("tuner_no_prune", "random"):
            assert r["pruned"] == 0
    md = (tmp_path / "benchmarks.md").read_text()
    assert "<!-- begin search -->" in md and "| grid |" in md and "llama-edge" in md


def test_bench_scenarios_resolve():
    bench_search.scenarios()  # scripts/bench_scenarios/ besides the shipped scenarios
    for name in bench_search.SCENARIOS:
        space = bench_search.load(name)
        assert bench_search.grid_points(space, bench_search.SGLangBackend())


def test_replace_section_keeps_other_sections(tmp_path):
    p = tmp_path / "b.md"
    bench_search.replace_section(p, "a", "A1")
    bench_search.replace_section(p, "b", "B1")
    bench_search.replace_section(p, "a", "A2")
    text = p.read_text()
    assert "A2" in text and "B1" in text and "A1" not in text


@pytest.mark.slow
def test_kept_runs_continue_a_cut_benchmark(tmp_path):
    """``bench_common.KeptRuns`` (bench_methods.py --resume, bench_load.py --cache): what was kept comes back, in
    another instance too (a rerun), a key is one plain file and a write leaves no temporary file behind."""
    from bench_common import KeptRuns

    kept = KeptRuns(tmp_path / "runs")
    assert kept.get(("tuner", "llama-load", 3)) is None
    kept.keep(("tuner", "llama-load", 3), {"gpu_s": 12.5, "levels": [1, 8]})
    kept.keep(("chat", 0), {"winner": "eagle3"})
    again = KeptRuns(tmp_path / "runs")
    assert again.get(("tuner", "llama-load", 3)) == {"gpu_s": 12.5, "levels": [1, 8]}
    assert again.get(("chat", 0)) == {"winner": "eagle3"} and again.get(("chat", 1)) is None
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["chat-0.pkl", "tuner-llama-load-3.pkl"]
    with pytest.raises(ValueError, match="plain file name"):
        kept.keep(("../x",), 1)


def test_bench_loop_tiny(tmp_path):
    """Two short studies of this checkout, alternated as before/after (after an untimed run that compiles each
    package): each run's CPU seconds are recorded, the two outputs compare equal (the same package), and only its
    own section and key are written."""
    (tmp_path / "benchmarks.json").write_text(json.dumps({"search": {"kept": True}}))
    rc = bench_loop.main(["--runs", "1", "--n-trials", "6", "--before", str(SCRIPTS.parent), "--out", str(tmp_path)])
    assert rc == 0
    data = json.loads((tmp_path / "benchmarks.json").read_text())
    assert data["search"] == {"kept": True}
    loop = data["loop"]
    assert loop["same_output"] is True and set(loop["cpu_s"]) == {"before", "after"}
    assert all(len(xs) == 1 and xs[0] > 0 for xs in loop["cpu_s"].values())
    assert loop["bytecode"].startswith("cached")
    assert "<!-- begin loop -->" in (tmp_path / "benchmarks.md").read_text()


def test_bench_overhead_tiny(tmp_path):
    rc = bench_overhead.main(
        ["--trials", "2", "--rates", "2000", "--requests", "2", "--max-tokens", "128", "--out", str(tmp_path)]
    )
    assert rc == 0
    data = json.loads((tmp_path / "benchmarks.json").read_text())["overhead"]
    o = data["overhead"]
    assert o["trials_launched"] >= 1 and o["bare_start_median_s"] > 0
    assert o["median_s"]["launch"] > 0 and o["median_s"]["close"] >= 0
    assert "overhead_per_trial_median_s" in o and data["before"] is None
    (c,) = data["client"]
    assert c["requests"] == 2 and c["measured_tok_per_s_median"] > 0
    assert abs(c["server_lag_median"]) < 1  # the server's own timing is a sane fraction of its schedule
    assert abs(c["reference_error_median"]) < 1  # the raw-socket reader read the same streams to the end
    assert "<!-- begin overhead -->" in (tmp_path / "benchmarks.md").read_text()


def test_generated_landscapes_are_plausible_reproducible_and_benchmarked(tmp_path):
    """Two generated landscapes, one seed: the generator's draws are the same from their index, plausible (the
    ground truth's baseline and best speedup in range), and the distribution section is written."""
    a, b = bench_search.landscape("gen-000"), bench_search.landscape("gen-001")
    again = bench_search.bench_landscapes.generate(
        0, bench_search.load_space(str(bench_search.ROOT / "spaces/llama-8b-eagle3.yaml")), bench_search._plausible
    )
    assert a.scenario.graphs_on == again.scenario.graphs_on and a.space.search == again.space.search
    assert a.what != b.what
    rc = bench_search.main(
        [
            *("--scenarios", "--landscapes", "2", "--landscape-seeds", "1", "--jobs", "1"),
            *("--landscape-methods", "grid", "tuner", "--out", str(tmp_path)),
        ]
    )
    assert rc == 0
    data = json.loads((tmp_path / "benchmarks.json").read_text())["search_generated"]
    assert set(data["scenarios"]) == {"gen-000", "gen-001"}
    for sc in data["scenarios"].values():
        gt = sc["ground_truth"]
        base = max(gt["baselines"].values())
        assert 15 <= base <= 600 and 0.5 <= gt["best_speculative"]["speedup_vs_own_baseline"] <= 4.0
        assert sc["methods"]["grid"]["server_starts_median"] == gt["grid_points"]
    d = data["distribution"]["tuner"]
    assert d["landscapes"] == 2 and d["runs"] == 2 and 0 <= d["hit_rate_2pct"] <= 1
    assert 0 < d["ratio_vs_full_grid"]["0.5"] <= 1
    md = (tmp_path / "benchmarks.md").read_text()
    assert "<!-- begin search-generated -->" in md and "gen-001" in md


def test_bench_statistics_tiny(tmp_path):
    """Every statistical property measured with a few draws and one small coverage study: the figures are shares
    and round counts in range, each row carries its bound, and only its own section and key are written (the rules
    themselves: tests/verdict/test_sequential.py, test_coverage.py, test_baseline_check.py, tests/study/
    test_surrogate.py)."""
    (tmp_path / "benchmarks.json").write_text(json.dumps({"search": {"kept": True}}))
    rc = bench_statistics.main(
        ["--scale", "0.002", "--seeds", "1", "--trials", "6", "--jobs", "1", "--out", str(tmp_path)]
    )
    assert rc == 0
    data = json.loads((tmp_path / "benchmarks.json").read_text())
    assert data["search"] == {"kept": True}
    props = data["statistics"]["properties"]
    assert set(props) == {*bench_statistics.PROPERTIES, "interval_coverage"}
    for key, p in props.items():
        assert p["what"] and p["text"] and p["bound"] and isinstance(p["holds"], bool), key
    assert 0 <= props["looks_at_the_bar"]["figures"]["false_win"] <= 1
    assert 3 <= props["first_look_after_three_rounds"]["figures"]["clear_rounds"] <= 8
    cov = props["interval_coverage"]["figures"]
    assert cov["studies"] == 1 and cov["covered"] + len(cov["misses"]) == 1
    md = (tmp_path / "benchmarks.md").read_text()
    assert "<!-- begin statistics -->" in md and "| The race's tie end |" in md


def test_generated_method_landscapes_are_reproducible_and_summarised():
    import bench_method_landscapes as mgen

    a, b = mgen.generate(3), mgen.generate(3)
    assert a[1] == b[1] and a[2] == b[2] and a[0] == b[0]  # drawn from the index alone
    drawn = [mgen.generate(i) for i in range(12)]
    for scenario, doc, _what in drawn:
        assert len(doc["search"]["methods"]) >= 2 and len(doc["benchmark"]["prompts"]) == mgen.N_PROMPTS
        assert scenario.name in mgen.BASES
    assert len({tuple(sorted(d["search"]["methods"])) for _, d, _ in drawn}) > 3  # the methods vary
    rows = [
        {
            "index": 0,
            "seed": 0,
            "what": "x",
            "grid_best_method": "ngram",
            "method_best": {"baseline": 100.0, "ngram": 300.0, "eagle3": 296.0},
            "recommended_method": "ngram",
            "right_method": True,
            "tied": [],
            "right_method_or_tie": True,
            "within_2pct": True,
            "recommended_ratio": 0.99,
            "gpu_s": 10.0,
            "grid_s": 100.0,
            "gated_within_2pct": 0,
        },
        {
            "index": 1,
            "seed": 0,
            "what": "y",
            "grid_best_method": "mtp",
            "method_best": {"baseline": 100.0, "mtp": 300.0, "eagle3": 250.0},
            "recommended_method": "eagle3",
            "right_method": False,
            "tied": ["eagle3", "mtp"],
            "right_method_or_tie": True,
            "within_2pct": False,
            "recommended_ratio": 0.9,
            "gpu_s": 30.0,
            "grid_s": 100.0,
            "gated_within_2pct": 1,
        },
    ]
    s = mgen.summary(rows)
    assert (s["right_method_rate"], s["within_2pct_rate"], s["gpu_vs_grid_median"]) == (0.5, 0.5, 0.2)
    assert s["gated_within_2pct_runs"] == 1 and [m["index"] for m in s["misses"]] == [1]
    assert s["close_calls"] == 1 and s["right_method_rate_clear"] == 0.0  # ngram 300 vs eagle3 296: a close call
    assert s["right_method_or_declared_tie_rate"] == 1.0 and s["declared_ties"] == 1  # strict and tie-aware apart
    assert "| 50.0% | 100.0% (1 ties declared) | 0.0% (1 runs) | 50.0% |" in mgen.markdown(s, 2, 1, "cmd", "here")
    assert "tie declared: eagle3, mtp" in mgen.markdown(s, 2, 1, "cmd", "here")
    # how far apart a declared tie truly is: eagle3's 250 against mtp's 300
    assert s["tie_truth_gaps"] == [pytest.approx(1 / 6, abs=1e-4)]
    assert "median 16.7%, largest 16.7%, 1 of 1 ties more than 2% apart" in mgen.markdown(s, 2, 1, "cmd", "here")


def test_an_adaptive_configs_truth_is_the_expectation_of_its_measurements(tmp_path):
    """``adaptive_truth``: starts over the baseline's at the same runner seeds, times the baseline's noise-free
    figure. For a static config that is its noise-free figure (the seed's noise is common to both); for an adaptive
    one it differs from the simulator's mean-field figure (landscape 41: candidate steps 1,3,5,7 measures ~6%
    above it), which no study could see."""
    import bench_method_landscapes as mgen

    from autotune.backends import get_backend
    from autotune.seam import VirtualClock
    from autotune.sim import simulated_space
    from autotune.sim.runner import ModelRunner

    scenario, doc, _ = mgen.generate(41)

    def loader(_name):
        return scenario

    space = simulated_space(mgen._space(doc, tmp_path), scenarios=loader)
    backend = get_backend("sglang")
    runner = ModelRunner(space, backend, VirtualClock(), seed=0, scenarios=loader)
    grid = backend.grid(space)
    static = next(c for c in grid if c.knob("method") == "ngram")
    adaptive = next(c for c in grid if c.knob("method") == "adaptive" and c.knob("candidate_steps") == "1,3,5,7")
    for c in (static, adaptive):
        mean_field = runner.true_tok_per_s(c)
        measured = mgen.adaptive_truth(space, backend, loader, c, mean_field)
        if c is static:
            assert measured == pytest.approx(mean_field, rel=0.005)
        else:
            assert measured > 1.03 * mean_field


def test_bench_method_landscapes_tiny(tmp_path):
    """One generated method landscape, one seed, through the script's main: the study and the grid's truth run,
    only its own key and section are written, and the figures are in range."""
    import bench_method_landscapes as mgen

    (tmp_path / "benchmarks.json").write_text(json.dumps({"other": 1}))
    args = ["--landscapes", "1", "--start", "1", "--seeds", "1", "--jobs", "1"]
    assert mgen.main([*args, "--work", str(tmp_path / "work"), "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "benchmarks.json").read_text())
    assert data["other"] == 1
    m = data["methods_generated"]
    assert (m["landscapes"], m["seeds"], m["runs"]) == (1, 1, 1)
    assert 0 <= m["right_method_rate"] <= 1 and 0 <= m["within_2pct_rate"] <= 1
    assert m["gpu_median_s"] > 0 and m["grid_median_s"] > 0 and m["gpu_vs_grid_median"] > 0
    assert len(m["misses"]) == (0 if m["right_method_rate"] == 1 and m["within_2pct_rate"] == 1 else 1)
    md = (tmp_path / "benchmarks.md").read_text()
    assert "<!-- begin methods-generated -->" in md and "landscapes x 1 seed(s)" in md


def test_snapshot_diff_names_the_differing_paths_and_ignores_run_to_run_paths(tmp_path):
    import snapshot_behaviour as snap

    run = {
        "s": {
            "trials": [{"params": {"k": 1}, "argv": [sys.executable, "/tmp/autotune-snap-ab12/x/sim-start-0005-q1/a"]}]
        }
    }
    again = {
        "s": {
            "trials": [
                {"params": {"k": 1}, "argv": ["/elsewhere/python", "/tmp/autotune-snap-zz9/x/sim-start-0005-r7/a"]}
            ]
        }
    }
    moved = {"s": {"trials": [{"params": {"k": 2}, "argv": run["s"]["trials"][0]["argv"]}]}}
    again["s"]["trials"][0]["argv"][0] = sys.executable
    files = {}
    for name, data in {"run": run, "again": again, "moved": moved}.items():
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(data))
    assert snap.main(["--diff", str(files["run"]), str(files["again"])]) == 0
    assert snap.main(["--diff", str(files["run"]), str(files["moved"])]) == 1
    assert snap.diff(snap._normalised(run), snap._normalised(moved)) == ["/s/trials/0/params/k: '1' -> '2'"]
