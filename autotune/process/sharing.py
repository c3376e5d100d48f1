"""Shared starts: trials whose launches differ only in knobs the server takes per request run on one server.

``ProcessRunner.share_starts(True)`` (the study's search phase, ``autotune.study.sharing``) gives the runner a
``StartSharing`` for the backend's ``PerRequest`` (``Backend.per_request``). Then, for a config it applies to:

- the launch key is the argv (port left out), environment and files of the config with its per-request knobs at
  their shared launch values (``PerRequest.launch_config``); a kept server with the same key and still healthy is
  used again (``startup_s`` 0, ``LaunchInfo.start["shared"]``), any other kept server is stopped first;
- every request of the session carries the config's own values (``PerRequest.body``), and every answer is checked
  against its draft counters (``PerRequest.check``): an answer that proves the server ran other values is a
  ``BenchmarkError`` (never counted) and turns sharing off; the verdicts go in ``LaunchInfo.start``
  (``checked``: answers per verdict; ``answers``: the first ``ANSWERS_KEPT`` with their counters), which the trial
  records again after its prompts;
- before the first trial whose values differ from the launch's, a kept server answers one verification request
  (``PerRequest.probe_body``); when its counters show the values ignored, sharing is off for the rest of the runner's
  life (``off_reason``, recorded on that trial as ``sharing_off``) and the trial gets its own start with its own
  argv, as without sharing; when they show nothing (no drafts), that trial gets its own start and sharing goes on;
- closing a session keeps its server for the next launch unless the session failed (a request error, Ctrl-C) or
  sharing is off; ``share_starts(False)`` stops a kept server.

Configs it does not apply to (baselines, other types, backends declaring none) start and stop as before.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.backends.per_request import Check, Honoured, PerRequest
from autotune.config import EffectiveConfig, LaunchInfo
from autotune.errors import BenchmarkError

if TYPE_CHECKING:
    from autotune.process.server import ServerProcess
    from autotune.process.session import ProcessSession

log = logging.getLogger("autotune.process")

#: max_tokens of the verification request (enough decode steps for the counters to tell n_max 1 from more)
PROBE_MAX_TOKENS = 128
#: answers whose check is kept with its counters in ``LaunchInfo.start["answers"]`` (all are counted in ``checked``)
ANSWERS_KEPT = 64

LaunchKey = tuple[tuple[str, ...], tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]


@dataclass
class KeptStart:
    """A started server kept for the next trial of the same launch key."""

    key: LaunchKey
    server: ServerProcess
    launch: EffectiveConfig
    info: LaunchInfo  # the start's own launch record (argv, env, log, startup)
    start_id: str
    probe: Check | None = None  # the verification request's verdict (None: not verified yet)
    trials: int = 0  # sessions it has served


@dataclass
class StartSharing:
    """One runner's shared starts: the kept server, whether sharing is still on, what it has done."""

    per: PerRequest
    kept: KeptStart | None = None
    off_reason: str | None = None
    starts: int = 0  # shared launches started
    reused: int = 0  # trials that ran on an earlier trial's start
    #: messages for the study to announce (taken with ``take_notes``)
    notes: list[str] = field(default_factory=list)

    @property
    def on(self) -> bool:
        return self.off_reason is None

    def turn_off(self, reason: str) -> None:
        if self.off_reason is None:
            self.off_reason = reason
            msg = f"per-request knobs: {reason}; every trial gets its own server start from here on"
            self.notes.append(msg)
            log.info("%s", msg)  # the study announces it (its notes); a warning too would print it twice

    def take_notes(self) -> list[str]:
        out, self.notes = self.notes, []
        return out

    def release(self) -> None:
        """Stop the kept server, if any."""
        kept, self.kept = self.kept, None
        if kept is not None:
            kept.server.stop()

    def keeps(self, session: ProcessSession) -> bool:
        """Whether closing ``session`` leaves its server running for the next trial (its ``on_close``)."""
        kept = self.kept
        if kept is None or kept.server is not session.server:
            return False
        if not self.on or session.failed or session.server.returncode is not None:
            self.kept = None
            return False
        return True


def launch_key(argv: Sequence[str], env: Mapping[str, str], files: Mapping[str, str]) -> LaunchKey:
    """What makes two launches the same server: argv (built with port 0), environment and file contents."""
    return (tuple(argv), tuple(sorted(env.items())), tuple(sorted(files.items())))


def attach(session: ProcessSession, sharing: StartSharing, config: EffectiveConfig, kept: KeptStart) -> None:
    """Make ``session`` send ``config``'s per-request values and check every answer against them."""
    per = sharing.per
    body = per.body(config)
    session.client.extra_body = dict(body)

    def on_answer(index: int, sent: Mapping[str, Any], chunks: Sequence[Mapping[str, Any]]) -> None:
        check = per.check(sent, kept.launch, per.telemetry(chunks))
        note_answer(session.info.start, index, check)
        if check.honoured is Honoured.NO:
            sharing.turn_off(f"the server ignored the per-request values ({check.reason})")
            raise BenchmarkError(
                f"prompt {index}: the server did not run the per-request values {dict(sent)}: {check.reason}"
            )

    session.client.on_answer = on_answer
    session.on_close = sharing.keeps


def note_answer(start: dict[str, Any], index: int, check: Check) -> None:
    """Count ``check`` in the start record's ``checked`` and keep it (without its reason) in ``answers``."""
    checked = start.setdefault("checked", {})
    checked[check.honoured.value] = checked.get(check.honoured.value, 0) + 1
    answers = start.setdefault("answers", [])
    if len(answers) < ANSWERS_KEPT:
        answers.append({"prompt": index, "honoured": check.honoured.value, **dict(check.figures)})


def probe(session: ProcessSession, sharing: StartSharing, kept: KeptStart, prompt: str) -> Check:
    """One verification request on ``kept``'s server (``PerRequest.probe_body``), not timed or recorded."""
    per = sharing.per
    body = per.probe_body(kept.launch)
    if body is None:
        return Check(Honoured.UNKNOWN, "no verification request can tell this launch's values apart", {})
    seen: list[Check] = []

    def capture(index: int, sent: Mapping[str, Any], chunks: Sequence[Mapping[str, Any]]) -> None:
        seen.append(per.check(sent, kept.launch, per.telemetry(chunks)))

    hook, session.client.on_answer = session.client.on_answer, capture
    try:
        session.client.measure(0, prompt, max_tokens=PROBE_MAX_TOKENS, extra=body)
    finally:
        session.client.on_answer = hook
    return seen[-1] if seen else Check(Honoured.UNKNOWN, "no answer to the verification request", {})


__all__ = [
    "ANSWERS_KEPT",
    "PROBE_MAX_TOKENS",
    "KeptStart",
    "LaunchKey",
    "StartSharing",
    "attach",
    "launch_key",
    "note_answer",
    "probe",
]
