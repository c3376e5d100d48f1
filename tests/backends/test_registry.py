"""The backend registry and what every backend declares for the space file and the study (no server)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from autotune.backends import Backend, backend_class, get_backend
from autotune.backends.llamacpp import LlamaCppBackend
from autotune.backends.sglang import SGLangBackend
from autotune.backends.vllm import VLLMBackend
from autotune.servers import KnobDomain, backend_names, knob_domains


def test_names_and_classes():
    assert backend_names() == ("sglang", "llamacpp", "vllm")
    assert [backend_class(n) for n in backend_names()] == [SGLangBackend, LlamaCppBackend, VLLMBackend]
    assert all(isinstance(get_backend(n), Backend) and get_backend(n).name == n for n in backend_names())
    with pytest.raises(KeyError):
        backend_class("tgi")


@pytest.mark.parametrize("name", ["sglang", "llamacpp", "vllm"])
def test_each_backend_declares_its_knobs(name):
    cls = backend_class(name)
    assert tuple(cls.knob_domains) == cls.knob_names
    assert all(isinstance(d, KnobDomain) for d in cls.knob_domains.values())
    assert cls.size_knob in cls.knob_names
    assert "--port" in cls.managed_flags and "--host" in cls.managed_flags
    assert knob_domains(name) == dict(cls.knob_domains)


def test_knob_domains_of_every_backend():
    every = knob_domains()
    assert list(every) == [
        k for n in backend_names() for k in backend_class(n).knob_names
    ]  # names are unique across backends
    assert every["num_draft_tokens"] == KnobDomain("int", 2)
    assert every["draft_p_min"] == KnobDomain("float", 0.0, 1.0)
    assert every["method"] == KnobDomain("str")
    with pytest.raises(ValueError, match="kind must be"):
        KnobDomain("bool")


@pytest.mark.parametrize(
    "backend, arg, managed",
    [
        (SGLangBackend, "--speculative-num-steps", True),
        (SGLangBackend, "--port=1", True),
        (SGLangBackend, "--portal", False),
        (SGLangBackend, "--tp-size", False),
        (LlamaCppBackend, "--draft-max", True),
        (LlamaCppBackend, "-m", True),
        (LlamaCppBackend, "-t", False),
        (VLLMBackend, "--speculative-config={}", True),
        (VLLMBackend, "--speculative-num-steps", False),
    ],
)
def test_managed_flags(backend, arg, managed):
    assert backend.sets_flag(arg) is managed


def test_study_facing_members():
    assert [backend_class(n).size_knob for n in backend_names()] == [
        "num_draft_tokens",
        "draft_n_max",
        "num_speculative_tokens",
    ]
    assert [backend_class(n).probe_before_argv for n in backend_names()] == [False, True, False]
    assert not LlamaCppBackend.not_engaged_is_per_drafter and SGLangBackend.not_engaged_is_per_drafter
    assert VLLMBackend().algorithm_flag("EAGLE3") == '--speculative-config \'{"method": "eagle3", ...}\''
    assert SGLangBackend().algorithm_flag("EAGLE3") == "--speculative-algorithm EAGLE3"


def test_a_backend_must_say_how_it_enqueues_configs():
    class Partial(Backend):
        def suggest(self, trial, space): ...
        def resolve(self, config, space): ...
        def argv(self, config, space, *, port, simulate=False): ...

    with pytest.raises(TypeError, match="params"):
        Partial()


def test_importing_the_space_imports_no_backend_module():
    """Only the generic modules (the package with the registry, the ABC, the readers of what servers send back, the
    generic method type, its walk and the Optuna encoding): no server's module."""
    code = (
        "import sys, autotune.space\n"
        "generic = {'autotune.backends.base', 'autotune.backends.methods', 'autotune.backends.streams'}\n"
        "print(sorted(m for m in sys.modules if m.startswith('autotune.backends.') and m not in generic))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
