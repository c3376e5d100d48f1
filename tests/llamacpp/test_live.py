"""Live tests: a real ``llama-server`` on this machine's CPU with the tiny GGUF models.

Skipped (with the reason) when no binary is found: ``$AUTOTUNE_LLAMA_SERVER``, ``llama-server`` on PATH, or
the cached build of ``scripts/llamacpp_setup.sh``. Models: ``$AUTOTUNE_LLAMACPP_MODELS`` if set, else
``studies/llamacpp-models`` when it holds the default models, else they are written once into the autotune
cache folder (~20 s). Each config is launched once per module (baseline, good draft, bad draft) through
``ProcessRunner``, the three up at once with their prompts interleaved; every process is stopped and none may be
left behind.

Speed orderings are asserted with wide margins: a 2-core machine is noisy (up to 25% run-to-run).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

import pytest

from autotune.acceptance import acceptance_profile
from autotune.backends.llamacpp import LlamaCppBackend
from autotune.backends.llamacpp_methods import find_llama_server, flag_spelling
from autotune.backends.streams import metric_total
from autotune.config import PromptResult, TrialConfig, summarize
from autotune.errors import ServerExited
from autotune.process import ProcessRunner
from autotune.space import BenchmarkSpec, DrafterSpec, IntRange, Prompt, SearchSpec, ServerSpec, Space
from tests.llamacpp.conftest import _descendants, models_dir

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]

SERVER = find_llama_server()
if SERVER is None:
    pytest.skip(
        "no llama-server binary: set AUTOTUNE_LLAMA_SERVER, put llama-server on PATH, or run scripts/llamacpp_setup.sh",
        allow_module_level=True,
    )

N_MAX = 8
PROMPTS = (
    "The kettle on the stove began to whistle, and the old man looked up from his newspaper",
    "Here is a short list of things to pack for a weekend in the mountains:",
    "Dear members of the committee, thank you for the time you gave to our proposal last week",
)


@dataclass
class Run:
    config: TrialConfig
    argv: list[str]
    effective: dict
    results: list[PromptResult] = field(default_factory=list)
    metrics_before: dict | None = None
    metrics_after: dict | None = None
    returncode: int | None = None

    @property
    def tok_per_s(self) -> float:
        return summarize(self.results)["tok_per_s"]

    @property
    def accept_length(self) -> float | None:
        return summarize(self.results)["accept_length"]


@pytest.fixture(scope="module")
def space(tmp_path_factory) -> Space:
    models = models_dir()
    return Space(
        name="llamacpp-live",
        server=ServerSpec(
            backend="llamacpp",
            model_path=str(models / "target.gguf"),
            launcher=(str(SERVER),),
            port=30180,
            port_busy="next",
            # one thread: with -t 2 on a 2-core machine shared with other processes, llama.cpp's spinning
            # thread barriers collapse speed (seen here: 36 -> 7 tok/s); one thread only loses its CPU share
            extra_args=("-t", "1"),
            startup_timeout_s=120.0,
            request_timeout_s=120.0,
        ),
        drafters=(
            DrafterSpec(name="good", path=str(models / "draft-good.gguf")),
            DrafterSpec(name="bad", path=str(models / "draft-bad.gguf")),
        ),
        search=SearchSpec(knobs={"draft_n_max": IntRange(1, 16)}),
        benchmark=BenchmarkSpec(
            prompts=tuple(Prompt(id=f"p{i}", text=t) for i, t in enumerate(PROMPTS)),
            max_tokens=64,
            warmup_requests=1,
            retries=1,
        ),
    )


@pytest.fixture(scope="module")
def runs(space, tmp_path_factory) -> dict[str, Run]:
    """Baseline, good draft and bad draft at draft_n_max 8: three servers up at once, their prompts interleaved
    (prompt 0 on each, then prompt 1 on each, ...), so that the load of a busy machine (CI runs tests side by side
    on 2 cores) falls on all three alike; measured one after another, a baseline timed beside other tests at 35
    tok/s (75-94 alone) and a good draft timed after it at 37 made a 1.05x bound fail in CI."""
    before = _descendants()
    backend = LlamaCppBackend()
    runner = ProcessRunner(space, backend, log_dir=tmp_path_factory.mktemp("logs"))
    configs = {
        "baseline": TrialConfig.baseline(),
        "good": TrialConfig.make("good", draft_n_max=N_MAX),
        "bad": TrialConfig.make("bad", draft_n_max=N_MAX),
    }
    out: dict[str, Run] = {}
    sessions = {}
    try:
        for name, cfg in configs.items():
            session = sessions[name] = runner.launch(cfg)
            out[name] = Run(cfg, session.info.argv, session.info.effective)
        for name, session in sessions.items():
            session.warmup()
            out[name].metrics_before = session.client.metrics(timeout_s=10.0)
        for i in range(len(space.benchmark.prompts)):
            for name, session in sessions.items():
                out[name].results.append(session.run_prompt(i))
        for name, session in sessions.items():
            out[name].metrics_after = session.client.metrics(timeout_s=10.0)
    finally:
        for name, session in sessions.items():
            session.close()
            out[name].returncode = session.server.returncode
        deadline = time.monotonic() + 10
        while (left := _descendants() - before) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not left, f"processes left behind: {left}"
    for name, run in out.items():
        print(f"{name}: {run.tok_per_s:.1f} tok/s, accept length {run.accept_length}")
    return out


def test_help_of_the_real_binary_has_the_new_spelling():
    proc = subprocess.run([str(SERVER), "--help"], capture_output=True, text=True, timeout=60, check=False)
    spelling = flag_spelling(proc.stdout + proc.stderr)
    assert spelling["draft_n_max"] in ("--spec-draft-n-max", "--draft-max")
    if spelling["draft_n_max"] == "--spec-draft-n-max":
        assert spelling["spec_type"] == "--spec-type"


def test_argv_uses_the_probed_spelling(runs):
    argv = runs["good"].argv
    assert argv[0] == str(SERVER)
    assert argv[argv.index("--port") + 1].isdigit()
    if "--spec-type" in argv:
        assert argv[argv.index("--spec-type") + 1] == "draft-simple"
    assert "--metrics" in argv


def test_props_read(runs):
    eff = runs["baseline"].effective
    assert eff.get("total_slots") == 1
    assert eff.get("n_ctx") and eff["n_ctx"] >= 2048
    assert str(eff.get("model_path", "")).endswith("target.gguf")


def test_streaming_gives_full_valid_completions(runs, space):
    for run in runs.values():
        assert len(run.results) == len(space.benchmark.prompts)
        for r in run.results:
            assert r.completion_tokens == space.benchmark.max_tokens  # no early EOS
            assert r.finish_reason == "length"
            assert r.text and "\ufffd" not in r.text  # never a byte piece: valid UTF-8
            assert r.seconds > 0 and r.ttft_s is not None and r.ttft_s < r.seconds


def test_speculation_is_lossless(runs):
    base = [r.text for r in runs["baseline"].results]
    for name in ("good", "bad"):
        assert [r.text for r in runs[name].results] == base, f"{name} changed the greedy output"


def test_acceptance_from_the_final_chunk(runs):
    assert runs["baseline"].accept_length in (None, 1.0)
    good, bad = runs["good"].accept_length, runs["bad"].accept_length
    # seen here at draft_n_max 8: good ~4.5-5.6, bad ~1.5-1.7 (engaged, but poor)
    assert good is not None and good > 3.0, good
    assert bad is not None and 1.1 < bad < 2.2, bad


def test_acceptance_from_metrics_counters(runs):
    backend = LlamaCppBackend()
    for name in ("good", "bad"):
        run = runs[name]
        assert run.metrics_before is not None and run.metrics_after is not None
        assert "llamacpp:spec_decode_num_draft_tokens_total" in run.metrics_after
        from_metrics = backend.acceptance_from_metrics(run.metrics_before, run.metrics_after)
        assert from_metrics is not None
        assert from_metrics == pytest.approx(run.accept_length, rel=0.1)


def test_per_position_acceptance_from_the_servers_counter(runs):
    """llama-server's per-draft-position counter, read around each prompt: present for both drafters, the prompts'
    windows add up to the whole run's counters, and the good draft keeps its first token more often."""
    backend = LlamaCppBackend()
    first = {}
    for name in ("good", "bad"):
        run = runs[name]
        per_prompt = [r.positions for r in run.results]
        assert all(p is not None and p.drafts > 0 for p in per_prompt), name
        whole = backend.positions_from_metrics(run.metrics_before, run.metrics_after)
        assert whole is not None
        assert sum(p.drafts for p in per_prompt) == whole.drafts
        assert [sum(c) for c in zip(*(p.accepted for p in per_prompt), strict=False)] == list(whole.accepted)
        accepted = metric_total(run.metrics_after, "llamacpp:spec_decode_num_accepted_tokens_total") - metric_total(
            run.metrics_before, "llamacpp:spec_decode_num_accepted_tokens_total"
        )
        assert sum(whole.accepted) == accepted  # every accepted token counted at its position
        profile = acceptance_profile(whole.rates)
        assert profile[-1] == pytest.approx(accepted / whole.drafts)
        first[name] = whole.rates[0]
    assert first["good"] > first["bad"], first


def test_good_draft_wins_and_bad_draft_loses(runs):
    base = runs["baseline"].tok_per_s
    good = runs["good"].tok_per_s
    bad = runs["bad"].tok_per_s
    assert runs["good"].accept_length > 3.0 > 2.0 > runs["bad"].accept_length  # the mechanism, noise-free
    # Speeds, with bounds this 2-core machine keeps under any load seen: alone (or beside CPU-bound or memory-bound
    # load) the good draft ran 1.13-1.40x the baseline, but beside the suite's other tests in CI only 1.03-1.05x
    # (twice, sequential and interleaved), so against the baseline only the ordering is asserted; the good draft's
    # lead over the bad one (2.4-2.7x in every run seen) and the bad draft's loss (0.39-0.50x) keep wide margins.
    # The speedup itself is measured on GPUs (docs/gpu-runs), never timed here.
    assert good > base, (base, good, bad)
    assert good > 2.0 * bad, (base, good, bad)
    assert bad < 0.8 * base, (base, good, bad)


def test_servers_stopped_cleanly(runs):
    for run in runs.values():
        assert run.returncode is not None


def test_removed_flag_makes_the_server_exit(space, tmp_path):
    """Why the spelling probe matters: this release refuses the old --draft-max."""
    proc = subprocess.run([str(SERVER), "--help"], capture_output=True, text=True, timeout=60, check=False)
    if flag_spelling(proc.stdout + proc.stderr)["draft_n_max"] != "--spec-draft-n-max":
        pytest.skip("an older llama-server: --draft-max is still valid there")
    old = dataclasses.replace(space, server=dataclasses.replace(space.server, extra_args=("--draft-max", "4")))
    runner = ProcessRunner(old, LlamaCppBackend(), log_dir=tmp_path)
    with pytest.raises(ServerExited) as err:
        runner.launch(TrialConfig.baseline())
    assert "removed" in err.value.log_tail


STUDY_SPACE = """\
name: llamacpp-live-study
server:
  backend: llamacpp
  model_path: {models}/target.gguf
  launcher: [{server}]
  port: 30280
  port_busy: next
  startup_timeout_s: 120
  request_timeout_s: 120
  extra_args: ["-t", "1"]
drafters:
  - {{name: good, path: {models}/draft-good.gguf}}
  - {{name: bad, path: {models}/draft-bad.gguf}}
search:
  cuda_graph: [true]
  draft_n_max: {{low: 1, high: 12}}
benchmark:
  prompts:
    - The kettle on the stove began to whistle, and the old man looked up from his newspaper
    - "Here is a short list of things to pack for a weekend in the mountains:"
    - Dear members of the committee, thank you for the time you gave to our proposal last week
  max_tokens: 64
  temperature: 0
  warmup_requests: 1
  retries: 1
pruning: {{enabled: true}}
budget: {{n_trials: 4}}
"""


def _study_then_report(tmp_path, template: str, *, seed: int) -> dict:
    """`autotune study --no-confirm` on the real server (no process of ours left after it), then `report --json`."""
    space_file = tmp_path / "space.yaml"
    space_file.write_text(template.format(models=models_dir(), server=SERVER))
    common = ["--storage", f"sqlite:///{tmp_path / 'study.db'}", "--studies-dir", str(tmp_path / "studies")]
    before = _descendants()
    proc = subprocess.run(
        [sys.executable, "-m", "autotune", "study", str(space_file), *common, "--no-confirm", "--seed", str(seed)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not (_descendants() - before)
    report = subprocess.run(
        [sys.executable, "-m", "autotune", "report", str(space_file), *common, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert report.returncode == 0, report.stderr[-3000:]
    return json.loads(report.stdout)


def test_a_real_study_end_to_end(tmp_path):
    """``autotune study`` on the real server: the baseline, both drafters' server-default configs, a search trial."""
    data = _study_then_report(tmp_path, STUDY_SPACE, seed=1)
    trials = {t["number"]: t for t in data["trials"]}
    assert len(trials) >= 4
    assert data["baseline"]["cuda_graph_on"]["tok_per_s"] > 0
    spec = [t for t in trials.values() if t["role"] == "speculative" and t["state"] == "COMPLETE"]
    good = [t for t in spec if t["config"]["drafter"] == "good"]
    # the bad draft may be stopped early (a clear loser is pruned by its second prompt): measured either way
    bad = [
        t
        for t in trials.values()
        if t["role"] == "speculative"
        and t["config"]["drafter"] == "bad"
        and t["state"] in ("COMPLETE", "PRUNED")
        and t["speedup"] is not None
    ]
    assert good and bad, [(t["number"], t["config"], t["state"]) for t in trials.values()]
    assert max(t["speedup"] for t in good) > 1.05  # noise on 2 cores: see test_good_draft_wins_and_bad_draft_loses
    assert max(t["speedup"] for t in bad) < max(t["speedup"] for t in good)
    assert all(t["accept_length"] > 2.0 for t in good if t["config"]["draft_n_max"] >= 3)
    assert all(t["lossless"] is None or t["lossless"]["ok"] for t in spec)
    # the baseline's reference answers came from the real server (n_probs): any divergence is classified, and the
    # tolerance is the one for the target's type, read from the GGUF file
    checked = [t["lossless"] for t in spec if t["lossless"]]
    assert checked and all(c["unclassified"] == [] for c in checked)
    assert {c["tolerance_source"] for c in checked} == {"default for float32"}
    assert all("--spec-type" in t["argv"] for t in spec)
    # every start warmed up with llama.cpp's one untimed pass of the prompts, and the report says so
    w = data["warmup"]
    assert w["passes_median"] == w["passes_max"] == 1 and w["starts"] >= len(trials) - 1
    assert w["text"].startswith(f"{w['starts']} starts warmed up with 1 pass(es) of the prompts")


LOSING_SPACE = """\
name: llamacpp-live-losing
server:
  backend: llamacpp
  model_path: {models}/target.gguf
  launcher: [{server}]
  port: 30380
  port_busy: next
  startup_timeout_s: 120
  request_timeout_s: 120
  extra_args: ["-t", "1"]
drafters:
  - {{name: bad, path: {models}/draft-bad.gguf}}
search:
  cuda_graph: [true]
  draft_n_max: [10, 12]
benchmark:
  prompts:
    - The kettle on the stove began to whistle, and the old man looked up from his newspaper
    - "Here is a short list of things to pack for a weekend in the mountains:"
    - Dear members of the committee, thank you for the time you gave to our proposal last week
    - "def fibonacci(n):"
    - The history of the printing press begins in the fifteenth century
  max_tokens: 64
  temperature: 0
  warmup_requests: 1
  retries: 1
pruning: {{enabled: true, confidence: 0.95, min_prompts: 2}}
budget: {{n_trials: 2}}
"""


def test_a_clearly_losing_config_is_pruned_before_its_last_prompt(tmp_path):
    """The poor drafter drafting 10-12 tokens runs at about half the baseline's speed: pruned early, for real."""
    data = _study_then_report(tmp_path, LOSING_SPACE, seed=0)
    assert data["baseline"]["cuda_graph_on"]["tok_per_s"] > 0
    spec = [t for t in data["trials"] if t["role"] == "speculative" and t["duplicate_of"] is None]
    assert spec
    pruned = [t for t in spec if t["state"] == "PRUNED" and 0 < t["prompts_measured"] < 5]
    assert pruned, [(t["state"], t["prompts_measured"], t["speedup"]) for t in spec]
    assert all(t["speedup"] < 0.9 and t["accept_length"] > 1.1 for t in pruned)
    assert data["verdict"] == "baseline-wins"


def test_a_study_with_two_load_levels_on_parallel_slots(tmp_path):
    """benchmark.concurrency [1, 4] against the real llama-server: one start per config with -np 4 slots (and a
    context that fits them), 4 real streams at once at level 4, token counts from usage; the study ends with a
    per-level table and a deployable command for the slots."""
    import yaml

    models = models_dir()
    space_path = tmp_path / "load.yaml"
    space_path.write_text(
        yaml.safe_dump(
            {
                "name": "llamacpp-load",
                "server": {
                    "backend": "llamacpp",
                    "model_path": str(models / "target.gguf"),
                    "launcher": [str(SERVER)],
                    "port": 30280,
                    "port_busy": "next",
                    "extra_args": ["-t", "1"],
                    "startup_timeout_s": 120,
                    "request_timeout_s": 120,
                },
                "drafters": [{"name": "good", "path": str(models / "draft-good.gguf")}],
                "search": {"draft_n_max": [2, 6]},
                "benchmark": {
                    "prompts": list(PROMPTS[:2]),
                    "max_tokens": 32,
                    "temperature": 0,
                    "warmup_requests": 1,
                    "retries": 1,
                    "concurrency": [1, 4],
                },
                "budget": {"n_trials": 2},
                "verdict": {"confirm_top": 1, "repeats": 2, "max_repeats": 4, "min_gain": 0.05},
            },
            sort_keys=False,
        )
    )
    before = _descendants()
    env = {**os.environ}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "autotune",
            "study",
            str(space_path),
            "--studies-dir",
            str(tmp_path / "studies"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout)
    deadline = time.monotonic() + 10
    while (left := _descendants() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"processes left behind: {left}"
    measured = [t for t in rep["trials"] if t["state"] == "COMPLETE" and t["duplicate_of"] is None]
    assert measured
    for t in measured:
        assert [x["level"] for x in t["levels"]] == [1, 4]
        one, four = t["levels"]
        assert one["requests"] == 2 and four["requests"] == 8 and four["failed"] == 0
        assert four["completion_tokens"] == 8 * 32  # from usage, every request to max_tokens
        assert four["tok_per_s"] > 0 and four["itl_p99_ms"] > 0 and four["ttft_p99_ms"] > 0
        argv = t["argv"]
        assert argv[argv.index("-np") + 1] == "4"
        assert int(argv[argv.index("-c") + 1]) >= 4 * 2048  # llama-server splits the context between slots
    assert rep["load"] is not None and [x["level"] for x in rep["load"]["levels"]] == [1, 4]
    e = subprocess.run(
        [
            sys.executable,
            "-m",
            "autotune",
            "export",
            str(space_path),
            "--studies-dir",
            str(tmp_path / "studies"),
            "--format",
            "command",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert e.returncode == 0, e.stderr
    assert "-np 4" in e.stdout and "streams:" in e.stdout  # the schedule table, then the static command


def test_a_real_server_warms_up_with_an_untimed_pass_of_the_prompts(space, tmp_path):
    """llama.cpp's default warm-up (``autotune.warmup``): one untimed pass of the prompts before the timed ones, on
    the real server; the space's ``benchmark.warmup_passes`` wins over the default."""
    from autotune.measure import measure_config

    before = _descendants()
    runner = ProcessRunner(space, LlamaCppBackend(), log_dir=tmp_path)
    config = TrialConfig.make("good", draft_n_max=N_MAX)
    m = measure_config(runner, config, space)
    n = len(space.benchmark.prompts)
    assert len(m.results) == n and m.tok_per_s == pytest.approx(summarize(m.results)["tok_per_s"])
    assert [len(p) for p in m.pass_tok_per_s()] == [n]
    assert m.warmup.passes == 1 and len(m.warmup.tok_per_s[0]) == n and m.warmup.seconds > 0
    assert all(v > 0 for v in m.warmup.tok_per_s[0])
    cold = dataclasses.replace(space, benchmark=dataclasses.replace(space.benchmark, warmup_passes=0))
    assert measure_config(runner, config, cold).warmup.passes == 0  # the space's value wins over the default
    deadline = time.monotonic() + 10
    while (left := _descendants() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"processes left behind: {left}"


def test_logged_requests_reach_the_real_chat_endpoint_with_their_own_sampling(space, tmp_path):
    """#45: a request log's requests are replayed as logged through llama-server's chat endpoint: the system turn,
    each request's own max_tokens, and its own temperature (greedy answers repeat, hot ones differ)."""
    turns = (("system", "You are terse."), ("user", "Name three colours."))
    logged = (
        Prompt(id="short", text="x", max_tokens=6, temperature=0.0, messages=turns),
        Prompt(id="long", text="x", max_tokens=40, temperature=0.0, messages=turns),
        Prompt(id="hot", text="x", max_tokens=40, temperature=1.5, top_p=1.0, messages=turns),
    )
    chat = dataclasses.replace(
        space, benchmark=dataclasses.replace(space.benchmark, prompts=logged, api="chat", max_tokens=64)
    )
    session = ProcessRunner(chat, LlamaCppBackend(), log_dir=tmp_path).launch(TrialConfig.baseline())
    try:
        short, long1, long2 = (session.run_prompt(i) for i in (0, 1, 1))
        hot = [session.run_prompt(2).text for _ in range(3)]
        greedy = session.reference(2, 5)  # the lossless check's reference of the hot request: its turns, greedy
    finally:
        session.close()
    assert short.completion_tokens <= 6 < long1.completion_tokens <= 40  # each request's own limit
    assert long1.text == long2.text  # temperature 0: the same answer
    assert greedy is not None and greedy.text == long1.text  # same turns and limit at temperature 0
    assert len(set(hot)) > 1  # temperature 1.5 reached the server: the answers differ
