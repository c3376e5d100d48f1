"""autotune's judgements on data recorded on an NVIDIA H200 (llama-server, scripts/gpu/, docs/gpu-runs).

The lossless check on real answers: with an F16 target every speculative config, even the bad draft, departed from
the baseline's text early on some prompts, at tokens where the baseline's two best choices were nearly tied. The
old check (minimum matching prefix over prompts >= 0.9) vetoed every config there and the study said the baseline
wins. The verdict, the re-verification's intervals and confirmation's rounds on recorded tok/s: what autotune
computes from them now is what those runs recorded (or, where a rule changed since, the change). The pruner on
recorded per-prompt tok/s: tests/llamacpp/test_recorded_pruning.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from autotune import lossless, reverify
from autotune.backends.llamacpp import LlamaCppBackend
from autotune.records import CandidateResult, Exclusion, Round
from autotune.space import VerdictSpec, load_space
from autotune.stats import Interval
from autotune.study import race

SAMPLE = Path(__file__).parent / "samples" / "h200-near-ties.json"
#: the recorded real-GPU runs (scripts/gpu/run.sh outputs, NOTES.md in each)
GPU_RUNS = Path(__file__).resolve().parents[2] / "docs" / "gpu-runs"


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads(SAMPLE.read_text())


def _refs(recorded: dict) -> list:
    b = LlamaCppBackend()
    n = len(recorded["prompts"])
    raw = recorded["baseline_reference"]
    return [b.parse_reference(raw[str(i)], i) if str(i) in raw else None for i in range(n)]


def test_the_recorded_reference_is_the_baseline_answer(recorded):
    refs = _refs(recorded)
    for i, ref in enumerate(refs):
        if ref is not None:
            assert ref.text == recorded["texts"]["baseline"][i]
            assert "".join(t.text for t in ref.tokens) == ref.text and len(ref.tokens) == 256


@pytest.mark.parametrize("config", ["good", "bad"])
def test_real_gpu_divergences_are_near_tie_flips_not_lossy(recorded, config):
    refs = _refs(recorded)
    texts = recorded["texts"][config]
    base = recorded["texts"]["baseline"]
    old_rule = min(lossless.prefix_fraction(b, t) for b, t in zip(base, texts, strict=True))
    assert old_rule < 0.9  # what vetoed every config on the H200
    for i in (0, 2):  # the prompts whose references were recorded
        d = lossless.classify(base[i], texts[i], refs[i], lossless.default_tolerance("float16"), prompt=i)
        assert d.kind == "numerics", d.describe()
        assert d.margin is not None and d.margin < 0.03
        # one of the baseline's own top choices at that token, a few hundredths of a nat below its best
        assert d.other_token in [a for a, _ in refs[i].tokens[d.token].top[1:]]
    # with a tolerance of zero the same flips are lossy: the tolerance is what tells numerics from a failure
    d0 = lossless.classify(base[0], texts[0], refs[0], 0.0)
    assert d0.kind == "lossy"


def test_a_confident_divergence_on_the_recorded_answer_is_lossy(recorded):
    ref = _refs(recorded)[0]
    confident = [j for j, t in enumerate(ref.tokens) if t.margin is not None and t.margin > 2.0]
    assert confident
    j = confident[0]
    start = sum(len(t.text) for t in ref.tokens[:j])
    other = ref.text[:start] + ref.tokens[j].top[1][0] + ref.text[start + len(ref.tokens[j].text) :]
    d = lossless.classify(ref.text, other, ref, lossless.default_tolerance("float16"))
    assert d.kind == "lossy" and d.token == j and d.margin > 2.0
    rec = lossless.check_outputs([other], [ref.text], [ref], tolerance=0.1, min_prefix=0.9)
    assert not rec["ok"] and rec["lossy"] == [0]


def _min_gain(report: Path) -> float:
    """The bar of the space a recorded report was run with (its folder's or the run's space.yaml; 2% without)."""
    for d in (report.parent, report.parent.parent):
        if (d / "space.yaml").exists():
            return float((yaml.safe_load((d / "space.yaml").read_text()).get("verdict") or {}).get("min_gain", 0.02))
    return 0.02


#: recorded before ``no-worthwhile-gain`` existed: its pick's interval lies under the 2% bar, which was inconclusive
BEFORE_NO_WORTHWHILE_GAIN = {"2026-12-01-h200-ext-check/resumed"}


def _candidate(c: dict) -> CandidateResult:
    """A report's confirmed candidate as confirmation's result (its intervals and whether it was dropped)."""
    ci, deploy = c.get("speedup_ci"), c.get("deploy_speedup_ci")
    ci, deploy = (None if x is None else Interval.from_dict(x) for x in (ci, deploy))
    return CandidateResult(c["trial"], c["config"], (), (), ci, (), deploy, bool(c.get("dropped")))


def test_every_recorded_confirmed_verdict_follows_from_its_confirmed_candidates():
    """``race.decide`` over each recorded confirmation's candidates (their intervals, dropped or not) and
    exclusions gives the recorded verdict, pick and what it rests on, in every confirmed H200 study; one recorded
    before the verdict ``no-worthwhile-gain`` existed gets it now."""
    decided = 0
    for path in sorted(GPU_RUNS.glob("**/report.json")):
        rep = json.loads(path.read_text())
        if rep["verdict_basis"] != "confirmed":
            continue
        name = str(path.parent.relative_to(GPU_RUNS))
        deploy = rep["fastest_baseline"]["cuda_graph"]
        confirmed = [_candidate(c) for c in rep["confirmed"]]
        excluded = [Exclusion.from_dict(e) for e in rep["exclusions"]]
        got = race.decide(confirmed, excluded, deploy, _min_gain(path))
        assert got.rests_on == rep["verdict_rests_on"], name
        if name in BEFORE_NO_WORTHWHILE_GAIN:
            assert (rep["verdict"], got.verdict) == ("inconclusive", "no-worthwhile-gain")
            continue
        assert got.verdict == rep["verdict"], name
        if rep["verdict"] == "speculation-wins":
            assert got.best == rep["recommended"]["trial"], name
        decided += 1
    assert decided >= 25


LEVELS22 = GPU_RUNS / "2026-12-04-h200-levels22"


DEFAULT26 = GPU_RUNS / "2026-12-06-h200-default"


@pytest.mark.parametrize(
    ("space_path", "run"),
    [
        (LEVELS22 / "first" / "space.yaml", LEVELS22 / "reverify"),
        (LEVELS22 / "first" / "space.yaml", LEVELS22 / "reverify-fixed"),
        (DEFAULT26 / "space.yaml", DEFAULT26 / "reverify"),
    ],
    ids=["levels22", "levels22-fixed", "default26"],
)
def test_the_recorded_reverify_intervals_and_their_answer_are_rebuilt_from_their_rounds(space_path, run):
    """``autotune reverify`` on the H200 (levels22's export, 3 rounds; the fixed run's 2 rounds with each load
    level; the default study of 2026-12-06, 3 rounds, one stream): its interval (the start-noise prior, 5 and 4
    degrees of freedom), each level's, and whether the export holds, recomputed from the recorded rounds by the
    code that computed them."""
    space = load_space(str(space_path))
    rec = json.loads((run / "reverify.json").read_text())
    rounds = [reverify.Round.from_dict(r) for r in rec["rounds"]]
    new = reverify._interval(rounds, space)
    assert new is not None
    assert new.to_dict() == pytest.approx(rec["speedup_ci"]) and new.df == len(rec["rounds"]) + 2
    levels = reverify._level_intervals(rounds, space)
    assert [x.level for x in levels] == [x["level"] for x in rec.get("levels", [])]
    for x, recorded in zip(levels, rec.get("levels", []), strict=True):
        assert x.speedup_ci.to_dict() == pytest.approx(recorded["speedup_ci"])
    assert reverify.holds(new, rec["exported_speedup_ci"], rec["exported_speedup"]) is rec["holds"] is True


def _objective(per_prompt: list[float]) -> float:
    return len(per_prompt) / sum(1.0 / x for x in per_prompt)  # equal tokens per prompt: the start's tok/s


def test_fresh_h200_starts_as_confirmation_rounds_prove_the_draft_at_the_first_look_under_the_shipped_prior():
    """docs/gpu-runs/2026-12-04-h200-noise23: 4 fresh starts each of the baseline and the good draft (n_max 8),
    their first pass of the 4 prompts as confirmation rounds. The starts differ by 1.4% (sd of a start's log
    tok/s), under the shipped prior's 3.5% for a pair: ``race.measured_prior`` keeps the prior; the first look after
    3 rounds proves the draft (about 2x) and asks for no more rounds."""
    runs = json.loads((GPU_RUNS / "2026-12-04-h200-noise23" / "noise" / "noise.json").read_text())["runs"]
    rounds = [
        Round({True: _objective(b["tok_per_s"][0])}, {8: _objective(g["tok_per_s"][0])})
        for b, g in zip(runs["baseline"], runs["good n_max 8"], strict=True)
    ]
    assert len(rounds) == 4
    assert race.measured_prior(rounds, race.DEFAULT_PRIOR) == race.DEFAULT_PRIOR
    spec = VerdictSpec(repeats=3, max_repeats=8, confidence=0.95, min_gain=0.02)
    cands = [race.Candidate(8, {"drafter": "good", "draft_n_max": 8}, True)]
    assert race.Race(cands, spec, True).next_round(rounds[:3]) == []
    seen = race.Race(cands, spec, True).look(rounds[:3])
    ci = seen.results[0].speedup_ci
    assert seen.decision.verdict == "speculation-wins" and seen.confidence == 0.95
    assert ci is not None and ci.df == 5 and 1.8 < ci.low < ci.point < ci.high < 2.2
