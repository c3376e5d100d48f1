"""A trial's evidence where optuna-dashboard shows it: its server log and per-prompt results as Optuna artifacts (a
filesystem store beside the study), and a note with the argv, the effective server config, the outcome and its reason.
``Evidence.attach`` writes them while the trial is still running (Optuna refuses artifact metadata on a finished
trial); notes and artifacts live in system attrs, never in user attrs."""

from __future__ import annotations

import html
import json
import shlex
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna

from autotune import records
from autotune.config import PromptResult
from autotune.redact import redact_env

#: artifact file names (the dashboard shows the name; ``.jsonl`` and ``.svg`` are previewed)
LOG_NAME = "trial-{n}-server.log"
PROMPTS_NAME = "trial-{n}-prompts.jsonl"
FIGURE_NAME = "trial-{n}-prompts.svg"


def param_knobs(params: Mapping[str, object], config: Mapping[str, object] | None) -> dict[str, str]:
    """Each Optuna parameter name -> the knob it sets (a knob whose range depends on earlier knobs is suggested under
    its own name: ``num_draft_tokens_s4_k4``, ``autotune.backends.methods.cut_name``)."""
    knobs = sorted(config or {}, key=len, reverse=True)
    out = {}
    for name in params:
        knob = next((k for k in knobs if name == k or name.startswith(k + "_")), None)
        out[name] = knob or name
    return out


def _server_account(server: Mapping[str, object], measured_accept: float | None) -> dict[str, object]:
    """The server's account of its config, read at start-up before any request: a running acceptance figure
    there is no measurement (SGLang reports 0.0), so the measured one is shown in its place."""
    out = dict(server)
    for key, value in server.items():
        if "accept" in key.lower() and isinstance(value, int | float | None):
            out[key] = (
                f"{measured_accept:.2f} measured over the prompts (the start-up read said {value}, before any decode)"
                if measured_accept is not None
                else f"{value} (read at start-up, before any decode: not a measurement)"
            )
    return out


def trial_note(
    number: int,
    attrs: Mapping[str, Any],
    outcome: Mapping[str, Any],
    prompt_ids: Sequence[str],
    params: Mapping[str, object] | None = None,
) -> str:
    """The trial's note (Markdown)."""
    state = outcome.get("state", "?")
    lines = [f"## Trial {number}: {state}"]
    reason = outcome.get("reason") or attrs.get(records.PRUNE_REASON) or attrs.get(records.FAIL_REASON)
    if attrs.get(records.INFEASIBLE):
        reason = attrs[records.INFEASIBLE]
    if reason:
        lines.append(f"**Reason:** {reason}")
    figures = []
    if outcome.get("tok_per_s") is not None:
        figures.append(f"{outcome['tok_per_s']:.2f} tok/s")
    if attrs.get(records.SPEEDUP) is not None:
        figures.append(
            f"speedup {attrs[records.SPEEDUP]:.3f} against baseline trial {attrs.get(records.BASELINE_TRIAL)}"
        )
    if attrs.get(records.ACCEPT_LENGTH) is not None:
        figures.append(f"accept length {attrs[records.ACCEPT_LENGTH]:.2f}")
    if attrs.get(records.STARTUP_S) is not None:
        figures.append(f"startup {attrs[records.STARTUP_S]:.1f} s")
    if figures:
        lines.append("**Measured:** " + ", ".join(figures))
    if attrs.get(records.DUPLICATE_OF) is not None:
        lines.append(f"Same server config as trial {attrs[records.DUPLICATE_OF]}: its measurement is copied.")
    config: Any = attrs.get(records.CONFIG)
    lines += ["", "### Config", "```json", json.dumps(config, indent=1, sort_keys=True), "```"]
    mapped = {n: k for n, k in param_knobs(params or {}, config).items() if n != k}
    if mapped:
        lines.append(
            "Parameter names in the dashboard: "
            + ", ".join(f"`{n}` is knob `{k}` = {config[k]}" for n, k in mapped.items())
            + " (a knob whose allowed values depend on the knobs before it gets its own parameter per range)"
        )
    if attrs.get(records.EFFECTIVE) and attrs.get(records.EFFECTIVE) != config:
        lines += ["Effective (after the backend's rules):", "```json"]
        lines += [json.dumps(attrs[records.EFFECTIVE], indent=1, sort_keys=True), "```"]
    if attrs.get(records.SERVER_EFFECTIVE):
        lines += ["### Effective server config (the server's own account)", "```json"]
        accepts = [p["accept_length"] for p in attrs.get(records.PROMPTS) or [] if p.get("accept_length") is not None]
        measured = attrs.get(records.ACCEPT_LENGTH)
        if measured is None and accepts:
            measured = sum(accepts) / len(accepts)
        account = _server_account(attrs[records.SERVER_EFFECTIVE], measured)
        lines += [json.dumps(account, indent=1, sort_keys=True, default=str), "```"]
    if attrs.get(records.ARGV):
        lines += ["### Launch", "```", shlex.join(attrs[records.ARGV]), "```"]
    if attrs.get(records.ENV):
        env = redact_env(attrs[records.ENV])
        lines += ["Environment: " + ", ".join(f"`{k}={v}`" for k, v in sorted(env.items()))]
    if attrs.get(records.LOG_PATH):
        lines.append(f"Server log: `{attrs[records.LOG_PATH]}` (artifact {LOG_NAME.format(n=number)})")
    prompts = attrs.get(records.PROMPTS) or []
    if prompts:
        lines += ["", "### Prompts", "| prompt | tokens | seconds | tok/s | accept |", "|---|---:|---:|---:|---:|"]
        for p in prompts:
            pid = prompt_ids[p["index"]] if p["index"] < len(prompt_ids) else p["index"]
            acc = "-" if p.get("accept_length") is None else f"{p['accept_length']:.2f}"
            lines.append(f"| {pid} | {p['completion_tokens']} | {p['seconds']:.2f} | {p['tok_per_s']:.1f} | {acc} |")
    if attrs.get(records.LOG_TAIL):
        lines += ["", "### Log tail", "```", attrs[records.LOG_TAIL][-1500:], "```"]
    return "\n".join(lines) + "\n"


def prompts_jsonl(results: Sequence[PromptResult], prompt_ids: Sequence[str], baseline: Sequence[float]) -> str:
    """One JSON line per measured prompt: the figures, the baseline's tok/s on it, and the answer's text."""
    out = []
    for r in results:
        d = r.to_dict(with_text=True)
        d["prompt"] = prompt_ids[r.index] if r.index < len(prompt_ids) else str(r.index)
        base = baseline[r.index] if r.index < len(baseline) else None
        d["baseline_tok_per_s"] = base
        d["ratio"] = r.tok_per_s / base if base else None
        out.append(json.dumps(d, sort_keys=True))
    return "\n".join(out) + "\n"


def prompts_svg(title: str, tok_per_s: Sequence[float], baseline: Sequence[float], prompt_ids: Sequence[str]) -> str:
    """A bar chart (plain SVG, no script): tok/s per prompt, this trial against its baseline."""
    n = max(len(tok_per_s), 1)
    top = max([*tok_per_s, *baseline, 1.0]) * 1.15
    w, h, left, bottom, group = 120 + 110 * n, 300, 60, 60, 110
    bar = 40

    def y(v: float) -> float:
        return h - bottom - (h - bottom - 30) * v / top

    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='11'>",
        f"<rect width='{w}' height='{h}' fill='white'/>",
        f"<text x='{left}' y='18' font-size='13'>{html.escape(title)}</text>",
        f"<line x1='{left}' y1='{h - bottom}' x2='{w - 20}' y2='{h - bottom}' stroke='black'/>",
        f"<text x='{left - 8}' y='{y(top / 1.15):.0f}' text-anchor='end'>{top / 1.15:.0f}</text>",
        f"<text x='{left - 8}' y='{h - bottom}' text-anchor='end'>0</text>",
    ]
    for i, v in enumerate(tok_per_s):
        x0 = left + 10 + i * group
        if i < len(baseline):
            b = baseline[i]
            parts.append(
                f"<rect x='{x0}' y='{y(b):.1f}' width='{bar}' height='{h - bottom - y(b):.1f}' fill='#999'>"
                f"<title>baseline {b:.1f} tok/s</title></rect>"
            )
        parts.append(
            f"<rect x='{x0 + bar + 4}' y='{y(v):.1f}' width='{bar}' height='{h - bottom - y(v):.1f}' fill='#36c'>"
            f"<title>{v:.1f} tok/s</title></rect>"
            f"<text x='{x0 + bar + 4 + bar / 2}' y='{y(v) - 4:.1f}' text-anchor='middle'>{v:.0f}</text>"
        )
        label = prompt_ids[i] if i < len(prompt_ids) else str(i)
        parts.append(
            f"<text x='{x0 + bar}' y='{h - bottom + 16}' text-anchor='middle'>{html.escape(label[:16])}</text>"
        )
    parts.append(
        f"<rect x='{left}' y='{h - 22}' width='10' height='10' fill='#999'/><text x='{left + 14}' y='{h - 13}'>"
        f"baseline</text><rect x='{left + 80}' y='{h - 22}' width='10' height='10' fill='#36c'/>"
        f"<text x='{left + 94}' y='{h - 13}'>this trial (tok/s)</text></svg>"
    )
    return "".join(parts)


class Evidence:
    """Writes a running trial's evidence into ``directory`` (an Optuna ``FileSystemArtifactStore``) and its note."""

    def __init__(self, directory: str | Path) -> None:
        from optuna.artifacts import FileSystemArtifactStore

        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.store = FileSystemArtifactStore(str(self.directory))

    def attach(
        self,
        trial: optuna.Trial,
        attrs: Mapping[str, Any],
        outcome: Mapping[str, Any],
        results: Sequence[PromptResult],
        prompt_ids: Sequence[str],
        baseline: Sequence[float],
    ) -> None:
        """Upload the server log, the per-prompt results and their figure; save the note when optuna-dashboard is
        installed. ``attrs``: the trial's user attrs."""
        try:
            from optuna_dashboard import save_note
        except ImportError:
            save_note = None

        n = trial.number
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            log = attrs.get(records.LOG_PATH)
            if log and Path(log).is_file():
                self._upload(trial, Path(log).read_bytes(), LOG_NAME.format(n=n), "text/plain")
            if results:
                self._upload(
                    trial,
                    prompts_jsonl(results, prompt_ids, baseline).encode(),
                    PROMPTS_NAME.format(n=n),
                    "application/jsonl",
                )
                figure = prompts_svg(
                    f"trial {n}: tok/s per prompt", [r.tok_per_s for r in results], baseline, prompt_ids
                )
                self._upload(trial, figure.encode(), FIGURE_NAME.format(n=n), "image/svg+xml")
            if save_note is not None:
                save_note(trial, trial_note(n, attrs, outcome, prompt_ids, trial.params))

    def _upload(self, trial: optuna.Trial, data: bytes, name: str, mimetype: str) -> None:
        from optuna.artifacts import upload_artifact

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            path.write_bytes(data)
            upload_artifact(artifact_store=self.store, file_path=str(path), study_or_trial=trial, mimetype=mimetype)
