"""The exception tree of autotune.

AutotuneError                      base of everything autotune raises on purpose
 +-- UserError                     bad input: the CLI prints one paragraph and exits 2, nothing written
 |    +-- SpaceError               a space file is invalid (file, line, field path, what was expected)
 |    +-- ValidationFailed         static drafter/target checks found problems (``problems`` lists them)
 |    +-- PortInUse                something we did not start answers on the server port
 +-- InfeasibleConfig              a trial config the server would reject or silently rewrite (never launched)
 +-- LaunchError                   the server did not come up; ``log_tail`` carries the end of its log
 |    +-- ServerExited             the process exited during startup (``returncode``)
 |    |    +-- ServerOOM           ... and its log says it ran out of memory
 |    +-- StartupTimeout           not healthy within the startup timeout
 +-- BenchmarkError                a request failed after bounded retries (HTTP error, truncated stream, timeout)
 |    +-- ServerDied               the server process exited while being benchmarked
 |    +-- Unstable                 the config's server crashed on two starts in a row
 +-- DrafterNotEngaged             acceptance length stays near 1.0: the drafter is not doing anything
"""

from __future__ import annotations


class AutotuneError(Exception):
    """Base class of all errors autotune raises on purpose."""


class UserError(AutotuneError):
    """Bad input from the user. Reported as one paragraph, exit code 2, no traceback."""


class SpaceError(UserError):
    """An invalid space file: ``path`` the file, ``line`` the 1-based line when known, ``field`` the dotted field
    path (``search.num_steps.low``)."""

    def __init__(
        self, message: str, *, path: str | None = None, line: int | None = None, field: str | None = None
    ) -> None:
        self.path = path
        self.line = line
        self.field = field
        where = f"{path}{f':{line}' if line else ''}: " if path else ""
        super().__init__(where + (f"{field}: " if field else "") + message)


class ValidationFailed(UserError):
    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class PortInUse(UserError):
    """Something that autotune did not start answers on the server port."""


class InfeasibleConfig(AutotuneError):
    """A config the server would reject or silently rewrite. It is recorded, never launched."""


class LaunchError(AutotuneError):
    kind = "launch-failed"
    #: server seconds (hardware seconds) the failed start held the machine, set by the runner (``server_seconds``)
    server_s: float | None = None

    def __init__(self, message: str, *, log_tail: str = "", log_path: str | None = None) -> None:
        self.log_tail = log_tail
        self.log_path = log_path
        super().__init__(message)


class ServerExited(LaunchError):
    kind = "exited"

    def __init__(
        self, message: str, *, returncode: int | None = None, log_tail: str = "", log_path: str | None = None
    ) -> None:
        self.returncode = returncode
        super().__init__(message, log_tail=log_tail, log_path=log_path)


class ServerOOM(ServerExited):
    kind = "oom"


class StartupTimeout(LaunchError):
    kind = "startup-timeout"


class BenchmarkError(AutotuneError):
    kind = "benchmark-failed"
    #: server seconds the start it failed on had used (set by ``autotune.measure.measure_config``, which drops it)
    server_s: float | None = None


class ServerDied(BenchmarkError):
    kind = "server-died"

    def __init__(self, message: str, *, returncode: int | None = None, log_tail: str = "") -> None:
        self.returncode = returncode
        self.log_tail = log_tail
        super().__init__(message)


class Unstable(BenchmarkError):
    """The server of one config crashed on every start it got (``autotune.measure.FRESH_STARTS``)."""

    kind = "unstable"

    def __init__(self, message: str, *, log_tail: str = "", log_path: str | None = None) -> None:
        self.log_tail = log_tail
        self.log_path = log_path
        super().__init__(message)


class StartsFailed(AutotuneError):
    """Every fresh start one measurement got failed (``autotune.measure.measure_fresh``); ``kind`` is ``unstable``
    when each of them crashed, else the last failure's."""

    def __init__(self, message: str, kind: str, failed_s: tuple[float, ...] = ()) -> None:
        self.kind = kind
        self.failed_s = failed_s  # each failed start's server seconds (``server_seconds``), in order
        super().__init__(message)


def server_seconds(e: BaseException) -> float:
    """The server seconds a failed start held the machine (``server_s``, as its runner or measurement set it; 0 when
    not known): a start that fails costs its GPUs until it fails, and the study's bill counts it."""
    return float(getattr(e, "server_s", None) or 0.0)


def is_crash(e: Exception) -> bool:
    """A crash, not a refusal: killed by a signal (negative return code) at start-up, or died while serving."""
    return isinstance(e, ServerDied) or (isinstance(e, ServerExited) and (e.returncode or 0) < 0)


def crash_line(e: Exception) -> str:
    """The exit and the last line of the log that says something (for the report)."""
    tail = [ln.strip() for ln in (getattr(e, "log_tail", "") or "").splitlines() if ln.strip()]
    code = getattr(e, "returncode", None)
    return f"{'exit ' + str(code) if code is not None else 'died'}: " + (tail[-1][:200] if tail else str(e)[:200])


class ConfirmationFailed(AutotuneError):
    """A fresh baseline of confirmation could not be measured (its server failed on every start it got): nothing
    can be confirmed against it. The study keeps its rounds; running it again resumes them."""

    kind = "confirmation-failed"
    failed_s: tuple[float, ...] = ()  # each failed start's server seconds


class DrafterNotEngaged(AutotuneError):
    kind = "drafter-not-engaged"
