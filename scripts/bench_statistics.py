"""Statistical properties of autotune's rules, by Monte Carlo: false wins at the bar, the extra confirmation rounds
and their stricter looks, the best of several candidates, the start-noise prior, the race's tie end, the baseline
check's false alarms, the coverage of confirmation's intervals, and the surrogate's pick against the winner's curse.

The confirmation properties are measured on confirmation's own pure race (``race.Race.next_round`` chooses what
each round measures, ``race.Race.look`` gives the verdict): a candidate's true speedup, lognormal start-to-start
noise on each start of it and of the fresh baseline, seeded draws; the baseline check's on ``baseline_check.check``. The
coverage runs the real orchestration (search, pruning, confirmation) on the simulator's model in-process on a
virtual clock, one study per seed, and compares the confirmed pick's interval with its noise-free speedup. The
surrogate's pick: configs of a smooth landscape measured once each with start noise, the best posterior mean
against the best single measurement. Each property is printed with the bound it was shown against. The suite keeps
a small deterministic test of each rule (tests/verdict/test_sequential.py, test_coverage.py,
test_baseline_check.py, tests/study/test_surrogate.py) and runs this script once with tiny draws
(tests/bench/test_bench_scripts.py).

    python scripts/bench_statistics.py              # the full draws; writes docs/benchmarks.{json,md} (key statistics)
    python scripts/bench_statistics.py --scale 0.01 --seeds 1 --trials 6 --out /tmp/v      # a smoke run
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import optuna

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from bench_common import replace_section  # noqa: E402

from autotune.backends.sglang import SGLangBackend  # noqa: E402
from autotune.config import TrialConfig  # noqa: E402
from autotune.records import Round  # noqa: E402
from autotune.seam import VirtualClock  # noqa: E402
from autotune.sim import simulated_space  # noqa: E402
from autotune.sim.runner import ModelRunner  # noqa: E402
from autotune.space import BudgetSpec, SimulateSpec, VerdictSpec, load_space  # noqa: E402
from autotune.stats import Spread  # noqa: E402
from autotune.study import Orchestrator, baseline_check, confirm, open_study, race  # noqa: E402

KEY = "statistics"
#: the spec of most properties: the first look after 4 rounds, at most 8
SPEC4 = VerdictSpec(repeats=4, max_repeats=8, confidence=0.95, min_gain=0.02)
#: the shipped default: the first look after 3 rounds, at most 8
DEFAULT = VerdictSpec(repeats=3, max_repeats=8, confidence=0.95, min_gain=0.02)


@dataclasses.dataclass
class Draws:
    """How many repetitions a property gets: ``n`` at full scale, times ``scale`` (at least 2)."""

    scale: float

    def __call__(self, n: int) -> int:
        return max(2, round(n * self.scale))


# ------------------------------------------------------------------------------------------------ simulated rounds


def confirmations(
    trues: list[float],
    n: int,
    spec: VerdictSpec,
    *,
    sd: float,
    seed: int,
    prior: Spread | None = race.DEFAULT_PRIOR,
    tie: float | None = None,
) -> dict[str, float]:
    """``n`` confirmations of candidates with these true speedups, each start's log tok/s with noise ``sd``, one
    fresh baseline a round: the share of each verdict, the mean rounds, the mean starts (candidates' and
    baselines') and the mean loss of the pick against the best true speedup."""
    the_race = race.Race(
        [race.Candidate(i, {"num_steps": i}, True) for i in range(len(trues))], spec, True, prior=prior, tie=tie
    )
    rng = random.Random(seed)
    verdicts: dict[str, int] = {}
    rounds_total = starts = 0
    loss = 0.0
    for _ in range(n):
        rounds: list[Round] = []
        while measure := the_race.next_round(rounds):
            base = 100.0 * math.exp(rng.gauss(0, sd))
            rounds.append(
                Round(
                    baseline={True: base},
                    candidates={k: 100.0 * trues[k] * math.exp(rng.gauss(0, sd)) for k in measure},
                )
            )
            starts += 1 + len(measure)
        seen = the_race.look(rounds).decision
        verdicts[seen.verdict] = verdicts.get(seen.verdict, 0) + 1
        rounds_total += len(rounds)
        loss += 1 - trues[seen.best] / max(trues) if seen.best is not None else 0.0

    def share(*names: str) -> float:
        return sum(verdicts.get(v, 0) for v in names) / n

    return {
        "wins": share("speculation-wins"),
        "no_gain": share("no-worthwhile-gain"),
        "deploys_baseline": share("no-worthwhile-gain", "baseline-wins"),
        "rounds": rounds_total / n,
        "starts": starts / n,
        "loss": loss / n,
        "n": n,
    }


def _pct(x: float) -> str:
    return f"{x:.1%}"


# ------------------------------------------------------------------------------------------------ the properties


def looks_at_the_bar(d: Draws) -> dict[str, Any]:
    """A config exactly ``min_gain`` faster (sd 0.035 a start): the extra looks' stricter confidence keeps its
    false-win rate near one look's."""
    looks = confirmations([1.02], d(3000), SPEC4, sd=0.035, seed=1234)
    once = confirmations([1.02], d(3000), dataclasses.replace(SPEC4, max_repeats=4), sd=0.035, seed=1234)
    return {
        "figures": {"false_win": looks["wins"], "false_win_one_look": once["wins"], "one_look_rounds": once["rounds"]},
        "text": f"1.02x at a 2% bar: a winner {_pct(looks['wins'])} of the time with the extra looks, "
        f"{_pct(once['wins'])} with one look after 4 rounds",
        "bound": "extra looks <= 4%, one look <= 3.5% in exactly 4 rounds",
        "holds": looks["wins"] <= 0.04 and once["wins"] <= 0.035 and once["rounds"] == 4,
    }


def extra_rounds_for_marginal_winners(d: Draws) -> dict[str, Any]:
    """A config 8% faster (sd 0.035 a start): the extra rounds prove it more often than one look."""
    more = confirmations([1.08], d(1000), SPEC4, sd=0.035, seed=1234)
    once = confirmations([1.08], d(1000), dataclasses.replace(SPEC4, max_repeats=4), sd=0.035, seed=1234)
    return {
        "figures": {"proven": more["wins"], "rounds": more["rounds"], "proven_one_look": once["wins"]},
        "text": f"1.08x proven {_pct(more['wins'])} of the time in {more['rounds']:.1f} rounds; one look after 4 "
        f"rounds {_pct(once['wins'])}",
        "bound": "at least 15 points more than one look, in 4-8 rounds",
        "holds": more["wins"] >= once["wins"] + 0.15 and 4 < more["rounds"] <= 8 and once["rounds"] == 4,
    }


def first_look_after_three_rounds(d: Draws) -> dict[str, Any]:
    """The shipped first look after 3 rounds against one after 4 (at most 8 either way; sd 0.035 a start)."""
    four = dataclasses.replace(DEFAULT, repeats=4)
    run = {
        (name, true): confirmations([true], d(n), spec, sd=0.035, seed=1234)
        for name, spec in (("three", DEFAULT), ("four", four))
        for true, n in ((1.02, 3000), (1.31, 300), (1.08, 1000))
    }
    f = {
        "false_win": run["three", 1.02]["wins"],
        "false_win_four": run["four", 1.02]["wins"],
        "clear_rounds": run["three", 1.31]["rounds"],
        "clear_rounds_four": run["four", 1.31]["rounds"],
        "clear_proven": run["three", 1.31]["wins"],
        "marginal_proven": run["three", 1.08]["wins"],
        "marginal_proven_four": run["four", 1.08]["wins"],
    }
    return {
        "figures": f,
        "text": f"at the bar a winner {_pct(f['false_win'])} (first look after 4: {_pct(f['false_win_four'])}); "
        f"1.31x proven {_pct(f['clear_proven'])} in {f['clear_rounds']:.2f} rounds (4: {f['clear_rounds_four']:.2f}); "
        f"1.08x proven {_pct(f['marginal_proven'])} (4: {_pct(f['marginal_proven_four'])})",
        "bound": "at the bar <= 4% and <= the 4-round look + 1 point; 1.31x always proven, in < 3.2 rounds; "
        "1.08x proven >= the 4-round look - 6 points",
        "holds": f["false_win"] <= 0.04
        and f["false_win"] <= f["false_win_four"] + 0.01
        and f["clear_proven"] == run["four", 1.31]["wins"] == 1.0
        and f["clear_rounds"] < 3.2
        and f["clear_rounds_four"] == 4
        and f["marginal_proven"] >= f["marginal_proven_four"] - 0.06,
    }


def tie_under_a_wide_bar(d: Draws) -> dict[str, Any]:
    """A 5% bar at the simulator's noise (sd 0.025 a start): a tie (1.004x) is called no-worthwhile-gain more often
    with the extra rounds; a config exactly at the bar is rarely told to deploy the baseline."""
    spec = dataclasses.replace(SPEC4, min_gain=0.05)
    tie = confirmations([1.004], d(1000), spec, sd=0.025, seed=99)
    once = confirmations([1.004], d(1000), dataclasses.replace(spec, max_repeats=4), sd=0.025, seed=99)
    at_bar = confirmations([1.05], d(2000), spec, sd=0.025, seed=99)
    return {
        "figures": {
            "no_gain": tie["no_gain"],
            "no_gain_one_look": once["no_gain"],
            "rounds": tie["rounds"],
            "at_bar_deploys_baseline": at_bar["deploys_baseline"],
        },
        "text": f"1.004x under a 5% bar: no-worthwhile-gain {_pct(tie['no_gain'])} in {tie['rounds']:.1f} rounds "
        f"(one look: {_pct(once['no_gain'])}); 1.05x told to deploy the baseline {_pct(at_bar['deploys_baseline'])}",
        "bound": "tie >= 50% and >= one look + 5 points, in 4-6 rounds; at the bar <= 4%",
        "holds": tie["no_gain"] >= 0.5
        and tie["no_gain"] >= once["no_gain"] + 0.05
        and once["rounds"] == 4
        and 4 < tie["rounds"] < 6
        and at_bar["deploys_baseline"] <= 0.04,
    }


def best_of_several(d: Draws) -> dict[str, Any]:
    """The verdict rests on the pick, the best of the candidates still racing (sd 0.035 a start, the shipped
    prior): they share the error."""
    one = confirmations([1.02], d(2000), DEFAULT, sd=0.035, seed=1)
    three = confirmations([1.02] * 3, d(2000), DEFAULT, sd=0.035, seed=1)
    ties = confirmations([1.004] * 3, d(2000), DEFAULT, sd=0.035, seed=1)
    real = confirmations([1.08, 1.0, 1.0], d(1000), DEFAULT, sd=0.035, seed=1)
    return {
        "figures": {
            "one_at_bar": one["wins"],
            "three_at_bar": three["wins"],
            "three_ties": ties["wins"],
            "real_beside_two": real["wins"],
        },
        "text": f"false winner: one at the bar {_pct(one['wins'])}, three at the bar {_pct(three['wins'])}, three "
        f"1.004x ties {_pct(ties['wins'])}; 1.08x beside two 1.0x proven {_pct(real['wins'])}",
        "bound": "three at the bar <= 5.5% and < one + 2 points; three ties <= 2.2%; the real winner >= 60%",
        "holds": three["wins"] <= 0.055
        and three["wins"] < one["wins"] + 0.02
        and ties["wins"] <= 0.022
        and real["wins"] >= 0.6,
    }


def start_noise_prior(d: Draws) -> dict[str, Any]:
    """At the simulator's noise (sd 0.025 a start, the prior's own level), with and without the start-noise prior."""
    f: dict[str, float] = {}
    for name, prior in (("", race.DEFAULT_PRIOR), ("_no_prior", None)):
        f["ties" + name] = confirmations([1.004] * 3, d(2000), DEFAULT, sd=0.025, seed=1, prior=prior)["wins"]
        real = confirmations([1.08, 1.0, 1.0], d(1000), DEFAULT, sd=0.025, seed=1, prior=prior)
        f["real" + name], f["real_rounds" + name] = real["wins"], real["rounds"]
    f["at_bar"] = confirmations([1.02], d(2000), DEFAULT, sd=0.025, seed=1)["wins"]
    return {
        "figures": f,
        "text": f"three 1.004x ties a false winner {_pct(f['ties'])} (no prior: {_pct(f['ties_no_prior'])}); "
        f"one at the bar {_pct(f['at_bar'])}; 1.08x beside two ties proven {_pct(f['real'])} in "
        f"{f['real_rounds']:.1f} rounds "
        f"(no prior: {_pct(f['real_no_prior'])} in {f['real_rounds_no_prior']:.1f})",
        "bound": "ties <= 0.5% and fewer than without; at the bar <= 2.5%; the real winner >= no prior + 5 points, "
        "in fewer rounds",
        "holds": f["ties"] <= 0.005
        and f["ties"] < f["ties_no_prior"]
        and f["at_bar"] <= 0.025
        and f["real"] >= f["real_no_prior"] + 0.05
        and f["real_rounds"] < f["real_rounds_no_prior"],
    }


def server_noise_against_the_prior(d: Draws) -> dict[str, Any]:
    """A server noisier than the prior raises it (sd 0.035 a start); a much quieter one (0.007) keeps it."""
    noisy = confirmations([1.02] * 3, d(2000), DEFAULT, sd=0.035, seed=1)
    quiet = confirmations([1.05], d(1000), DEFAULT, sd=0.007, seed=1)
    return {
        "figures": {
            "noisy_three_at_bar": noisy["wins"],
            "quiet_proven": quiet["wins"],
            "quiet_rounds": quiet["rounds"],
        },
        "text": f"noisy: three at the bar a false winner {_pct(noisy['wins'])}; quiet: 1.05x proven "
        f"{_pct(quiet['wins'])} in {quiet['rounds']:.1f} rounds",
        "bound": "noisy <= 4.5%; quiet >= 90% in <= 7.5 rounds",
        "holds": noisy["wins"] <= 0.045 and quiet["wins"] >= 0.9 and quiet["rounds"] <= 7.5,
    }


def race_tie_end(d: Draws) -> dict[str, Any]:
    """The race's tie end (``confirm.RACE_TIE``) against racing to ``max_repeats`` (sd 0.025 a start)."""
    tie = confirm.RACE_TIE
    close = confirmations([1.22, 1.218, 1.0], d(1000), DEFAULT, sd=0.025, seed=7, tie=tie)
    close_full = confirmations([1.22, 1.218, 1.0], d(1000), DEFAULT, sd=0.025, seed=7)
    apart = confirmations([1.25, 1.20], d(1000), DEFAULT, sd=0.025, seed=7, tie=tie)
    at_bar = confirmations([1.02] * 3, d(4000), DEFAULT, sd=0.025, seed=11, tie=tie)
    at_bar_full = confirmations([1.02] * 3, d(4000), DEFAULT, sd=0.025, seed=11)
    f = {
        "tie": tie,
        "close_starts": close["starts"],
        "close_starts_full": close_full["starts"],
        "close_loss": close["loss"],
        "close_loss_full": close_full["loss"],
        "apart_loss": apart["loss"],
        "at_bar": at_bar["wins"],
        "at_bar_full": at_bar_full["wins"],
    }
    return {
        "figures": f,
        "text": f"1.22x and 1.218x beside 1.0x: {f['close_starts']:.1f} starts ({f['close_starts_full']:.1f} without "
        f"the tie end), loss of the pick {f['close_loss']:.2%} ({f['close_loss_full']:.2%}); 1.25x vs 1.20x loss "
        f"{f['apart_loss']:.2%}; three at the bar a false winner {_pct(f['at_bar'])} ({_pct(f['at_bar_full'])})",
        "bound": "< 85% of the starts, the same loss (+0.1 point, <= 0.2%), both proven; at the bar <= the full race "
        "+ 0.2 points and <= 3%",
        "holds": close["wins"] == close_full["wins"] == 1.0
        and f["close_starts"] < 0.85 * f["close_starts_full"]
        and f["close_loss"] <= f["close_loss_full"] + 0.001
        and f["close_loss"] <= 0.002
        and f["apart_loss"] <= 0.002
        and f["at_bar"] <= f["at_bar_full"] + 0.002
        and f["at_bar"] <= 0.03,
    }


def baseline_check_false_alarms(d: Draws) -> dict[str, Any]:
    """The baseline check (``baseline_check.check``) when the search's baseline start is one more draw of the fresh
    starts' distribution (sd 0.035 a start, the space's start noise): how often it is flagged anyway."""
    f: dict[str, float] = {}
    for n in (2, 4):
        rng = random.Random(n)
        trials, flagged = d(4000), 0
        for _ in range(trials):
            draw = [1000.0 * math.exp(rng.gauss(0, 0.035)) for _ in range(n + 1)]
            rounds = [Round(baseline={True: v}) for v in draw[1:]]
            [c] = baseline_check.check(rounds, {True: draw[0]}, confidence=0.95, start_noise=0.035)
            flagged += c.flagged
        f[f"fresh_{n}"] = flagged / trials
    return {
        "figures": f,
        "text": f"flagged {_pct(f['fresh_2'])} of the time against 2 fresh starts, {_pct(f['fresh_4'])} against 4",
        "bound": "< 7% each",
        "holds": f["fresh_2"] < 0.07 and f["fresh_4"] < 0.07,
    }


def posterior_mean_pick(d: Draws) -> dict[str, Any]:
    """30 configs of a smooth landscape (its top near steps 6, topk 4, N 32), each measured once with 2.5% start
    noise: the regret of the config with the highest posterior mean against that of the highest single measurement
    (the winner's curse), one sample of configs and noise per seed."""
    import numpy as np

    from autotune.surrogate import Encoding, Surrogate

    grid = [
        TrialConfig.make("d", True, num_steps=s, topk=k, num_draft_tokens=n)
        for s in range(1, 9)
        for k in (1, 2, 4, 8)
        for n in range(2, 65, 2)
        if n >= s + 1
    ]

    def true_log_speed(c: TrialConfig) -> float:
        s, k, n = c.knob("num_steps"), c.knob("topk"), c.knob("num_draft_tokens")
        return 0.8 - 0.02 * (s - 6) ** 2 - 0.05 * (math.log2(k) - 2) ** 2 - 0.04 * (math.log2(n) - 5) ** 2

    enc = Encoding.from_configs(grid)
    truth = np.array([true_log_speed(c) for c in grid])
    raw_regret, model_regret = [], []
    seeds = d(30)
    for seed in range(seeds):
        rng = random.Random(seed)
        idx = rng.sample(range(len(grid)), 30)
        obs = [(grid[i], truth[i] + rng.gauss(0, 0.025)) for i in idx]
        mean, _ = Surrogate(enc, obs, noise_floor=0.025).predict([grid[i] for i in idx])
        raw_regret.append(float(truth.max() - truth[idx[int(np.argmax([y for _, y in obs]))]]))
        model_regret.append(float(truth.max() - truth[idx[int(np.argmax(mean))]]))
    f = {
        "seeds": seeds,
        "raw_regret": statistics.fmean(raw_regret),
        "model_regret": statistics.fmean(model_regret),
        "model_as_good": sum(m <= r for m, r in zip(model_regret, raw_regret, strict=True)) / seeds,
    }
    return {
        "figures": f,
        "text": f"mean regret (log tok/s) of the best posterior mean {f['model_regret']:.4f}, of the best single "
        f"start {f['raw_regret']:.4f}; at least as good in {_pct(f['model_as_good'])} of {seeds} seeds",
        "bound": "a lower mean regret, at least as good in 2 of 3 seeds",
        "holds": f["model_regret"] < f["raw_regret"] and f["model_as_good"] >= 2 / 3,
    }


def coverage_study(seed: int, n_trials: int) -> tuple[dict[str, float], float]:
    """One in-process study of the simulated llama-8b-eagle3 space: the confirmed pick's interval and its true
    (noise-free) speedup over the baseline of its CUDA-graph setting."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    base = load_space(str(ROOT / "spaces" / "llama-8b-eagle3.yaml"))
    space = simulated_space(
        dataclasses.replace(
            base,
            budget=BudgetSpec(n_trials=n_trials),
            simulate=dataclasses.replace(base.simulate or SimulateSpec(), seed=seed),
        )
    )
    backend = SGLangBackend()
    runner = ModelRunner(space, backend, VirtualClock(), seed=seed)
    study = open_study(space, optuna.storages.InMemoryStorage(), "cov", seed=seed)
    orch = Orchestrator(space, backend, runner, study)
    orch.search(n_trials)
    state = orch.confirm()
    best = next(r for r in state["results"] if r["trial"] == state["best"])
    config = TrialConfig.from_dict(best["config"])
    true = runner.true_tok_per_s(config) / runner.true_tok_per_s(TrialConfig.baseline(config.cuda_graph))
    return best["speedup_ci"], true


def interval_coverage(seeds: int, n_trials: int) -> dict[str, Any]:
    """The confirmed pick's 95% interval against its true speedup, one in-process study of ``n_trials`` per seed."""
    covered, misses = 0, []
    for seed in range(seeds):
        ci, true = coverage_study(seed, n_trials)
        if ci["low"] <= true <= ci["high"]:
            covered += 1
        else:
            misses.append({"seed": seed, "low": ci["low"], "high": ci["high"], "true": true})
    need = math.ceil(0.9 * seeds)
    return {
        "figures": {"studies": seeds, "covered": covered, "misses": misses},
        "text": f"{covered} of {seeds} studies' intervals contain the true speedup",
        "bound": f"at least {need} of {seeds} (90%)",
        "holds": covered >= need,
    }


#: key -> (what it shows, the measurement); the coverage is added in ``measure``
PROPERTIES: dict[str, tuple[str, Callable[[Draws], dict[str, Any]]]] = {
    "looks_at_the_bar": ("Extra looks at a config at the bar", looks_at_the_bar),
    "extra_rounds_for_marginal_winners": ("Extra rounds for a marginal winner", extra_rounds_for_marginal_winners),
    "first_look_after_three_rounds": ("The first look after 3 rounds (shipped) vs 4", first_look_after_three_rounds),
    "tie_under_a_wide_bar": ("A tie under a 5% bar", tie_under_a_wide_bar),
    "best_of_several": ("The best of several candidates", best_of_several),
    "start_noise_prior": ("The start-noise prior", start_noise_prior),
    "server_noise_against_the_prior": ("A server noisier or quieter than the prior", server_noise_against_the_prior),
    "race_tie_end": ("The race's tie end", race_tie_end),
    "baseline_check_false_alarms": ("False alarms of the baseline check", baseline_check_false_alarms),
    "posterior_mean_pick": ("The surrogate's pick against the best single start", posterior_mean_pick),
}


def _one(key: str, scale: float, seeds: int, n_trials: int) -> tuple[str, dict[str, Any]]:
    if key == "interval_coverage":
        return key, {"what": "Coverage of confirmation's 95% intervals", **interval_coverage(seeds, n_trials)}
    what, fn = PROPERTIES[key]
    return key, {"what": what, **fn(Draws(scale))}


def measure(scale: float, seeds: int, n_trials: int, jobs: int) -> dict[str, dict[str, Any]]:
    from joblib import Parallel, delayed

    keys = [*PROPERTIES, "interval_coverage"]
    done = Parallel(n_jobs=jobs)(delayed(_one)(k, scale, seeds, n_trials) for k in keys)
    return dict(done)


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "## Statistical properties of the rules (`scripts/bench_statistics.py`)",
        "",
        f"Produced by `{result['command']}` on {result['date']} ({result['machine']}), {result['wall_s']:.0f} s. "
        "Monte Carlo on the rules' own functions (confirmation's `race.Race.next_round` and `race.Race.look`, "
        "`baseline_check.check`, `surrogate.Surrogate`): lognormal start-to-start noise "
        "on every start, one fresh baseline a round, the shipped start-noise prior unless said; the coverage runs "
        f"{result['seeds']} seeded in-process studies of `spaces/llama-8b-eagle3.yaml` "
        f"({result['trials']} trials, then confirmation). Each row with the bound it is shown against; the suite "
        "tests each rule on small fixed cases (tests/verdict/test_sequential.py, test_coverage.py, "
        "test_baseline_check.py; tests/study/test_surrogate.py). "
        "Regenerate: "
        "`python scripts/bench_statistics.py`.",
        "",
        "| property | measured | bound | holds |",
        "|---|---|---|---|",
    ]
    for p in result["properties"].values():
        lines.append(f"| {p['what']} | {p['text']} | {p['bound']} | {'yes' if p['holds'] else '**no**'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", type=float, default=1.0, help="repetitions of each Monte Carlo property, times this")
    p.add_argument("--seeds", type=int, default=20, help="studies for the interval coverage")
    p.add_argument("--trials", type=int, default=14, help="search trials of each coverage study")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--out", default=str(ROOT / "docs"), help="folder of benchmarks.json and benchmarks.md")
    args = p.parse_args(argv)
    if args.scale <= 0 or args.seeds < 1 or args.trials < 1:
        p.error(
            "--scale must be above 0, --seeds and --trials at least 1 "
            f"but got {args.scale}, {args.seeds} and {args.trials}"
        )
    t0 = time.perf_counter()
    properties = measure(args.scale, args.seeds, args.trials, args.jobs)
    result = {
        "command": "python scripts/bench_statistics.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "scale": args.scale,
        "seeds": args.seeds,
        "trials": args.trials,
        "wall_s": time.perf_counter() - t0,
        "properties": properties,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jpath = out / "benchmarks.json"
    data = json.loads(jpath.read_text()) if jpath.exists() else {}
    data[KEY] = result
    jpath.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    md = markdown(result)
    replace_section(out / "benchmarks.md", KEY, md)
    print(md)
    for key, prop in properties.items():
        if not prop["holds"]:
            print(f"{key}: outside its bound ({prop['bound']})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
