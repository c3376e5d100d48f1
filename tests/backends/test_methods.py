"""The shared Optuna encoding (``autotune.backends.methods``) and the resolved-config type the backends return."""

from __future__ import annotations

import pytest

from autotune.backends.methods import cut_name, int_values, spec_values, suggest_int
from autotune.backends.sglang import SGLangBackend
from autotune.config import EffectiveConfig, TrialConfig
from autotune.errors import InfeasibleConfig
from autotune.space import Choices, FloatRange, IntRange

from .test_sglang_backend import make_space


class Recorder:
    """A trial that records each suggest call and answers with the first value."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def suggest_int(self, name, low, high, step=1, log=False):
        self.calls.append(("int", name, low, high, step, log))
        return low

    def suggest_categorical(self, name, choices):
        self.calls.append(("cat", name, tuple(choices)))
        return choices[0]


@pytest.mark.parametrize(
    "spec, allowed, call",
    [
        (IntRange(1, 8), list(range(1, 9)), ("int", "k", 1, 8, 1, False)),
        (IntRange(1, 8, log=True), list(range(1, 9)), ("int", "k", 1, 8, 1, True)),
        (IntRange(1, 8), [1, 2, 3], ("int", "k", 1, 3, 1, False)),  # a prefix: still a range
        (IntRange(1, 8, log=True), [1, 2, 3], ("cat", "k", (1, 2, 3))),  # a log range's prefix: categorical
        (IntRange(1, 8), [2, 5], ("cat", "k", (2, 5))),
        (Choices((1, 4, 9)), [1, 4, 9], ("cat", "k", (1, 4, 9))),
    ],
)
def test_suggest_int(spec, allowed, call):
    trial = Recorder()
    assert suggest_int(trial, "k", spec, allowed) == allowed[0]
    assert trial.calls == [call]


def test_suggest_int_without_a_spec_takes_the_one_value_and_log_can_be_forced_off():
    trial = Recorder()
    assert suggest_int(trial, "k", None, [3]) == 3 and trial.calls == []
    suggest_int(trial, "k", IntRange(1, 4, log=True), [1, 2, 3, 4], log=False)
    assert trial.calls == [("int", "k", 1, 4, 1, False)]


def test_values_and_names():
    assert spec_values(IntRange(2, 8, step=3)) == [2, 5, 8]
    assert spec_values(Choices(("a", "b"))) == ["a", "b"]
    assert spec_values(FloatRange(0.0, 1.0)) is None and spec_values(None) is None
    assert int_values(Choices((1.0, 2)), "X") == [1, 2]
    with pytest.raises(InfeasibleConfig, match="X knobs are integers"):
        int_values(FloatRange(0.0, 1.0), "X")
    assert cut_name("topk", [1, 2], [1, 2], "s3") == "topk"
    assert cut_name("topk", [1], [1, 2], "s3") == "topk_s3"


def test_effective_config_is_a_trial_config_that_is_not_resolved_again():
    eff = EffectiveConfig.make("d", True, num_steps=3, topk=1, num_draft_tokens=4)
    same = TrialConfig.make("d", True, num_steps=3, topk=1, num_draft_tokens=4)
    assert eff == same and same == eff and hash(eff) == hash(same) and eff.key() == same.key()
    assert type(eff.with_knobs(num_steps=4)) is TrialConfig  # a changed config is not resolved
    assert EffectiveConfig.of(same) == same and isinstance(EffectiveConfig.of(same), EffectiveConfig)

    calls = []

    class Counting(SGLangBackend):
        def resolve(self, config, space):
            calls.append(config)
            return super().resolve(config, space)

    space = make_space()
    b = Counting()
    resolved = b.resolve(TrialConfig.make(space.drafters[0].name, True, num_steps=3, topk=1), space)
    assert isinstance(resolved, EffectiveConfig) and resolved.knob("num_draft_tokens") == 4
    calls.clear()
    b.argv(resolved, space, port=1)
    assert calls == []
    b.argv(TrialConfig.make(space.drafters[0].name, True, num_steps=3, topk=1), space, port=1)
    assert len(calls) == 1


def test_settings_reads_raw_server_info_once():
    b = SGLangBackend()
    raw = {"speculative_num_steps": 3, "speculative_eagle_topk": 1, "disable_cuda_graph": False}
    read = b.settings(raw)
    assert read["num_steps"] == 3 and read["cuda_graph"] is True
    assert b.settings(read) == read  # already read: as is
