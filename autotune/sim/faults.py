"""How a simulated launch fails: the faults a test injects (``--fault KIND[:N][@DRAFTER]``) and the refusals
SGLang prints before exiting non-zero (``SimLaunchError`` and the helpers that build its log).
"""

from __future__ import annotations

from dataclasses import dataclass

FAULT_KINDS = ("crash-startup", "never-healthy", "crash-after", "oom-above", "http500", "truncate")
_FAULTS_WITH_N = ("crash-after", "oom-above", "http500", "truncate")


class SimLaunchError(Exception):
    """The simulated server refuses to start. ``log`` is the text it printed; ``returncode`` its exit status."""

    def __init__(self, message: str, *, log: str = "", returncode: int = 1, oom: bool = False) -> None:
        self.log = log or message
        self.returncode = returncode
        self.oom = oom
        super().__init__(message)


@dataclass(frozen=True)
class Fault:
    kind: str
    n: int | None = None
    drafter: str | None = None  # ``KIND[:N]@NAME``: only servers speculating with drafter NAME ("none": the baseline)

    @staticmethod
    def parse(text: str) -> Fault:
        """``crash-startup``, ``never-healthy``, ``crash-after:N``, ``oom-above:N``, ``http500:N``, ``truncate:N``,
        each optionally scoped to one drafter with ``@NAME`` (``@none`` for the non-speculative server)."""
        text, _, scope = text.strip().partition("@")
        if _ and not scope:
            raise ValueError(f"fault {text + '@'!r}: name a drafter after '@'")
        f = Fault._parse(text)
        return Fault(f.kind, f.n, scope or None)

    def applies_to(self, drafter: str | None) -> bool:
        return self.drafter is None or self.drafter == (drafter or "none")

    @staticmethod
    def _parse(text: str) -> Fault:
        kind, _, num = text.strip().partition(":")
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {text!r}; expected one of {', '.join(FAULT_KINDS)} (with :N where needed)")
        if kind in _FAULTS_WITH_N:
            try:
                n = int(num)
            except ValueError:
                raise ValueError(f"fault {kind} needs a number, like {kind}:3, but got {text!r}") from None
            if n < (0 if kind == "crash-after" else 1):
                raise ValueError(f"fault {text!r}: the number must be positive")
            return Fault(kind, n)
        if num:
            raise ValueError(f"fault {kind} takes no number but got {text!r}")
        return Fault(kind)

    def __str__(self) -> str:
        base = self.kind if self.n is None else f"{self.kind}:{self.n}"
        return base if self.drafter is None else f"{base}@{self.drafter}"


def _fail(message: str, log: list[str], *, returncode: int = 1) -> SimLaunchError:
    return SimLaunchError(message, log="\n".join([*log, message]), returncode=returncode)


def _traceback(exc_line: str, log: list[str], where: str = "speculative_hook.py") -> SimLaunchError:
    lines = [
        *log,
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/dist-packages/sglang/launch_server.py", line 29, in <module>',
        "    server_args = prepare_server_args(sys.argv[1:])",
        f'  File "/usr/lib/python3/dist-packages/sglang/srt/arg_groups/{where}", line 112, in _handle_eagle_family',
        exc_line,
    ]
    return SimLaunchError(exc_line, log="\n".join(lines), returncode=1)


def _not_loadable(path: str, log: list[str]) -> SimLaunchError:
    return _fail(
        f"OSError: Can't load the configuration of '{path}'. If you were trying to load it from "
        "'https://huggingface.co/models', make sure you don't have a local directory with the same name. Otherwise, "
        f"make sure '{path}' is the correct path to a directory containing a config.json file",
        log,
    )
