"""What a server backend is: one module per server (SGLang, llama.cpp, vLLM).

A backend knows
- its knobs and their rules (``knob_names``, ``suggest`` encodes the conditional space for Optuna so that
  configs the server would reject or rewrite are unreachable, ``resolve`` returns the effective config the
  server will run or raises InfeasibleConfig),
- how to launch it (``argv``, ``env``), with flag spelling chosen for the targeted server version,
- how to read it (health path, resolved settings, acceptance from the final streamed chunk and /metrics).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from autotune.config import TrialConfig

if TYPE_CHECKING:
    import optuna

    from autotune.space import Space


class Backend(ABC):
    name: str = ""
    health_path: str = "/health"
    #: knob names a space may search over (besides ``drafter`` and ``cuda_graph``)
    knob_names: tuple[str, ...] = ()

    @abstractmethod
    def suggest(self, trial: optuna.trial.BaseTrial, space: Space) -> TrialConfig:
        """Ask Optuna for one config of ``space``. Baseline is drafter "none"."""

    @abstractmethod
    def resolve(self, config: TrialConfig, space: Space) -> TrialConfig:
        """The effective config the server would run. Raises InfeasibleConfig for configs it would reject."""

    @abstractmethod
    def argv(self, config: TrialConfig, space: Space, *, port: int, simulate: bool = False) -> list[str]:
        """The launch command as an argv list (never a shell string)."""

    def env(self, config: TrialConfig, space: Space) -> dict[str, str]:
        """Environment variables to set on top of the inherited environment."""
        return dict(space.server.env)

    def defaults(self, space: Space) -> list[TrialConfig]:
        """Configs worth trying first (the server's own defaults), already inside the space."""
        return []

    def read_effective(self, server_info: dict[str, Any]) -> dict[str, Any]:
        """Settings as resolved by the server, from its info endpoint's JSON."""
        return {}

    info_path: str | None = None

    def parse_final_chunk(self, chunk: dict[str, Any]) -> float | None:
        """Acceptance length from the last streamed chunk, if the server reports it."""
        return None
