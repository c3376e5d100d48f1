"""The live view of a running study (rich): current trial, prompt progress, best so far vs baseline, pruned count.
On a terminal a live panel on stderr; elsewhere (CI, pipes) one plain line per finished trial."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from autotune.config import LevelSummary
from autotune.space import Space
from autotune.study import Event
from autotune.study.ladder import SEEDED_LADDER, SEEDED_LEVEL


class LiveView:
    def __init__(self, space: Space, study_name: str, *, simulated: bool, quiet: bool) -> None:
        self.space = space
        self.study_name = study_name
        self.simulated = simulated
        self.quiet = quiet
        self.console = Console(file=sys.stderr)
        self.live: Live | None = None
        self.current: dict[str, Any] = {}
        self.baselines: dict[str, float] = {}
        self.best: tuple[float, str] | None = None
        self.counts = {"COMPLETE": 0, "PRUNED": 0, "FAIL": 0}
        self.recent: list[str] = []
        self.progress = Progress()

    def __enter__(self) -> LiveView:
        if not self.quiet and self.console.is_terminal:
            self.live = Live(self._render(), console=self.console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.live is not None:
            self.live.__exit__(exc_type, exc, tb)
            self.live = None

    def on_event(self, ev: Event) -> None:
        d = ev.data
        self.progress.on_event(ev)
        if ev.kind == "trial-start":
            self.current = {"trial": ev.trial, "config": d["config"], "prompt": 0, "last": None}
        elif ev.kind == "launched":
            self.current["startup_s"] = d.get("startup_s")
        elif ev.kind == "prompt":
            self.current.update(prompt=d["index"] + 1, of=d["of"], last=d["tok_per_s"], acc=d.get("accept_length"))
        elif ev.kind == "level":
            self.current["level"] = d
            self._show(level_line(ev.trial, LevelSummary.from_dict(d)))
        elif ev.kind == "trial-end":
            state = d["state"]
            self.counts[state] = self.counts.get(state, 0) + 1
            cfg = self.current.get("config", "?")
            tps = d.get("tok_per_s")
            if state == "COMPLETE" and tps is not None:
                if cfg.startswith("baseline"):
                    self.baselines[cfg] = tps
                elif self.best is None or tps > self.best[0]:
                    self.best = (tps, cfg)
            speed = d.get("speedup")
            line = f"#{ev.trial:<3} {state:<8} {cfg}"
            if tps is not None:
                line += f"  {tps:.1f} tok/s"
            if speed is not None:
                line += f"  x{speed:.2f}"
            if d.get("reason"):
                line += f"  ({d['reason']})"
            line += f"  [{self.progress.text()}]"
            self.current = {}
            self._show(line)
        elif ev.kind in ("confirm-start", "confirm-measure", "verdict", "note"):
            # a note (a failed start given a fresh one, a candidate out of confirmation, a drafter not engaged, a
            # baseline check) reaches stderr with --json too: stdout carries only the JSON, the log keeps the why
            self._show(_describe(ev), loud=ev.kind == "note")
        if self.live is not None:
            self.live.update(self._render())

    def _show(self, line: str, *, loud: bool = False) -> None:
        """Keep ``line`` among the recent ones; without the live panel print it (``loud``: with --json too)."""
        self.recent = (self.recent + [line])[-8:]
        if self.live is None and (not self.quiet or loud):
            self.console.print(line, highlight=False, markup=False, soft_wrap=True)

    def _render(self) -> Group:
        unit = "tok/s (simulated)" if self.simulated else "tok/s"
        head = Text(f"autotune study {self.study_name}  ", style="bold")
        head.append(f"complete {self.counts['COMPLETE']}  pruned {self.counts['PRUNED']}  failed {self.counts['FAIL']}")
        head.append(f"\n{self.progress.text()}")
        t = Table.grid(padding=(0, 2))
        for cfg, tps in self.baselines.items():
            t.add_row(Text(cfg), Text(f"{tps:.1f} {unit}"))
        if self.best:
            t.add_row(Text("best so far: " + self.best[1]), Text(f"{self.best[0]:.1f} {unit}"))
        cur = Text("")
        if self.current:
            cur = Text(
                f"trial {self.current.get('trial')}: {self.current.get('config')}  "
                f"prompt {self.current.get('prompt', 0)}/{self.current.get('of', len(self.space.benchmark.prompts))}"
            )
            if self.current.get("last") is not None:
                cur.append(f"  last {self.current['last']:.1f} {unit}")
        return Group(head, t, cur, Text("\n".join(self.recent)))


class Progress:
    """Where a study stands: phase, trials of the budget, server starts against the plan (``plan`` event: the
    ``autotune.plan`` figures, a range), elapsed wall time and an ETA from the starts so far. Trials count what
    used a place in the search's budget; the launch gate's "not launched" (a place used, no start), duplicates (no
    place, no start) and the load levels' picks after the search (their own phase) are said apart."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self.now = now
        self.t0 = now()
        self.phase = "search"
        self.n_trials: int | None = None
        self.trials = 0  # search trials ended in this run that used a place in the budget
        self.not_launched = 0  # of those, kept from a start by the launch gate
        self.duplicates = 0  # trials that copied a measured config (no place in the budget, no start)
        self.level_trials = 0  # the level phase's trials after the search (``study.ladder``)
        self.used0 = 0  # the budget a resumed study had used already
        self.starts = 0  # server starts in this run
        self.planned: tuple[int, int] | None = None  # starts this run plans (as planned, at most)

    def on_event(self, ev: Event) -> None:
        d = ev.data
        if ev.kind == "plan":
            self.n_trials, self.used0 = d.get("n_trials"), int(d.get("used") or 0)
            self.planned = tuple(d["starts"]) if d.get("starts") else None
        elif ev.kind == "trial-end":
            if d.get("seeded") in (SEEDED_LEVEL, SEEDED_LADDER):
                self.phase = "level picks"
                self.level_trials += 1
            elif d.get("duplicate"):
                self.duplicates += 1
            elif d.get("budget", True):
                self.trials += 1
                self.not_launched += bool(d.get("not_launched"))
        elif ev.kind in ("launched", "confirm-measure"):
            self.starts += 1
        elif ev.kind == "confirm-start":
            self.phase = "confirmation"
        elif ev.kind == "verdict":
            self.phase = "verdict"

    def eta_s(self) -> tuple[float, float] | None:
        """(planned, at most) seconds left at this run's pace so far; None before the first start or without a
        plan."""
        if not self.planned or self.starts == 0:
            return None
        per = (self.now() - self.t0) / self.starts
        return max(0, self.planned[0] - self.starts) * per, max(0, self.planned[1] - self.starts) * per

    def text(self) -> str:
        parts = [self.phase]
        if self.n_trials:
            gate = f" ({self.not_launched} not launched)" if self.not_launched else ""
            parts.append(f"trials {self.used0 + self.trials}/{self.n_trials}{gate}")
        if self.duplicates:
            parts.append(f"{self.duplicates} duplicate{'s' if self.duplicates > 1 else ''}")
        if self.level_trials:
            parts.append(f"{self.level_trials} level trial{'s' if self.level_trials > 1 else ''}")
        planned = ""
        if self.planned:
            lo, hi = self.planned
            planned = f"/{lo}" if lo == hi else f"/{lo}-{hi}"
        parts.append(f"starts {self.starts}{planned}")
        parts.append(f"{_clock(self.now() - self.t0)} elapsed")
        eta = self.eta_s()
        if eta is not None and self.phase != "verdict":
            eta_lo, eta_hi = eta
            parts.append(f"ETA {_clock(eta_lo)}" + (f" (at most {_clock(eta_hi)})" if eta_hi > eta_lo + 1 else ""))
        return " · ".join(parts)


def _clock(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def level_line(trial: int | None, x: LevelSummary) -> str:
    """One load level of a trial: aggregate tok/s, speedup over the baseline's level, p99 latencies, failures."""
    line = f"#{trial} {x.level} streams: {x.tok_per_s or 0:.1f} tok/s"
    if x.speedup is not None:
        line += f" x{x.speedup:.2f}"
    if x.itl_p99_ms is not None:
        line += f"  ITL p99 {x.itl_p99_ms:.1f} ms"
    if x.ttft_p99_ms is not None:
        line += f"  TTFT p99 {x.ttft_p99_ms:.0f} ms"
    if x.failed:
        line += f"  {x.failed} failed"
    return line


def _describe(ev: Event) -> str:
    d = ev.data
    if ev.kind == "confirm-start":
        return f"confirming trials {d['candidates']} with {d['repeats']} interleaved repeats against fresh baselines"
    if ev.kind == "confirm-measure":
        return f"  confirm: {d['config']}: {d['tok_per_s']:.1f} tok/s"
    if ev.kind == "verdict":  # the verdict itself opens the summary (or the report) printed next
        text = f"confirmation done after {d['rounds']} round(s)"
        for e in d.get("excluded") or []:
            text += f"\n  excluded trial {e['trial']}: {e['kind']}: {e['reason']}"
        return text
    return str(d.get("message", ""))
