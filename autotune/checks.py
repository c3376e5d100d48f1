"""Static checks of drafter checkpoints against the target, from their ``config.json`` files (no server).

``Backend.check_drafters`` returns ``Problem``s: errors (a launch would be misconfigured or useless) and warnings
(something could not be verified): ``check_checkpoints`` for checkpoint directories (SGLang, vLLM),
``check_model_files`` for GGUF files (llama.cpp: only their existence). Per drafter that the search uses:

- the checkpoint directory and its ``config.json`` exist and parse;
- EAGLE vs EAGLE-3 (``derive_algorithm``; the field report's trap: an EAGLE-3 drafter launched with
  ``--speculative-algorithm EAGLE`` silently skips its fusion layer and accepts nothing); a forced ``algorithm``
  contradicting the checkpoint is an error, an undeterminable one without ``algorithm`` is an error too;
- hidden size and EAGLE-3 aux hidden-state layer ids against the target;
- ``draft_vocab_size`` against the vocabulary, and the ``d2t`` table in the weights when their headers can be
  read without loading tensors (a safetensors index or headers); otherwise a warning;
- ``max_position_embeddings`` of drafter and target against the longest prompt plus ``max_tokens``.

The target's ``config.json`` missing is a warning (``model_path`` may be a hub id): the target checks are skipped.
``missing_launcher`` says whether this machine can start a server at all.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shutil
import struct
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from autotune.errors import ValidationFailed

if TYPE_CHECKING:
    from autotune.space import DrafterSpec, Space

#: safetensors headers larger than this are not read (the header is JSON; real ones are kilobytes)
_MAX_HEADER_BYTES = 64 << 20
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


@dataclass(frozen=True)
class Problem:
    """One finding. ``severity`` is ``"error"`` (refuse to launch) or ``"warning"`` (could not verify)."""

    severity: str
    message: str
    drafter: str | None = None  # the drafter's name, None for the target / benchmark
    field: str | None = None  # the space field it concerns, e.g. ``drafters[0].algorithm``
    file: str | None = None  # the file it was found in (a config.json), when any

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def __str__(self) -> str:
        return self.message


# -- the algorithm -------------------------------------------------------------------------------------------


def _eagle3_evidence(cfg: Mapping[str, object]) -> list[str]:
    """Why a drafter config looks like EAGLE-3 (empty: it does not)."""
    why: list[str] = []
    archs = _architectures(cfg)
    if any("eagle3" in a.lower() for a in archs):
        why.append("architectures: " + ", ".join(archs))
    eagle = cfg.get("eagle_config")
    if isinstance(eagle, Mapping):
        if eagle.get("use_aux_hidden_state") is True:
            why.append("eagle_config.use_aux_hidden_state: true")
        if "eagle_aux_hidden_state_layer_ids" in eagle:
            why.append(f"eagle_config.eagle_aux_hidden_state_layer_ids: {eagle['eagle_aux_hidden_state_layer_ids']}")
    if "eagle_aux_hidden_state_layer_ids" in cfg:
        why.append(f"eagle_aux_hidden_state_layer_ids: {cfg['eagle_aux_hidden_state_layer_ids']}")
    if _is_int(cfg.get("num_aux_hidden_states")):
        why.append(f"num_aux_hidden_states: {cfg['num_aux_hidden_states']}")
    dv, v = cfg.get("draft_vocab_size"), cfg.get("vocab_size")
    if _is_int(dv) and _is_int(v) and dv < v:
        why.append(f"draft_vocab_size {dv} < vocab_size {v}")
    return why


def derive_algorithm(drafter_config: Mapping[str, object]) -> str | None:
    """``"EAGLE3"``, ``"EAGLE"`` or None (cannot tell) from a drafter's ``config.json`` contents.

    EAGLE-3: ``architectures`` contain "Eagle3", or ``eagle_config.use_aux_hidden_state`` /
    ``eagle_aux_hidden_state_layer_ids`` (in ``eagle_config`` or top-level) / ``num_aux_hidden_states`` are
    present, or ``draft_vocab_size < vocab_size``. EAGLE (1/2): architectures like ``LlamaForCausalLMEagle``,
    ``Qwen2ForCausalLMEagle`` without any EAGLE-3 signal.
    """
    if not isinstance(drafter_config, Mapping):
        return None
    if _eagle3_evidence(drafter_config):
        return "EAGLE3"
    if any("eagle" in a.lower() for a in _architectures(drafter_config)):
        return "EAGLE"
    return None


def _family(algorithm: str) -> str:
    """The checkpoint family an SGLang algorithm expects (NEXTN is SGLang's alias of EAGLE)."""
    return {"NEXTN": "EAGLE"}.get(algorithm, algorithm)


def resolved_algorithm(space: Space, drafter_name: str) -> str:
    """The algorithm to launch drafter ``drafter_name`` with: its forced ``algorithm``, else derived from its
    ``config.json``. Raises ValidationFailed when neither tells (the user must set ``algorithm``)."""
    try:
        drafter = space.drafter(drafter_name)
    except KeyError:
        raise ValidationFailed([f"no drafter named '{drafter_name}' in the space"]) from None
    if drafter.algorithm:
        return drafter.algorithm
    cfg_path = Path(drafter.path) / "config.json"
    cfg, why = _read_json(cfg_path)
    if cfg is None:
        fix = "set algorithm: EAGLE3 (or EAGLE, STANDALONE) for it in the space"
        raise ValidationFailed([f"drafter {drafter.name}: cannot derive its algorithm: {why}; {fix}"])
    algo = derive_algorithm(cfg)
    if algo is None:
        raise ValidationFailed([_undeterminable(drafter, cfg)])
    return algo


def _undeterminable(drafter: DrafterSpec, cfg: Mapping[str, object]) -> str:
    archs = ", ".join(_architectures(cfg)) or "none"
    return (
        f"drafter {drafter.name}: cannot tell from its config.json (architectures: {archs}) whether it is an "
        f"EAGLE-3 or EAGLE checkpoint; set algorithm: EAGLE3, EAGLE or STANDALONE for it in the space"
    )


# -- the checks ------------------------------------------------------------------------------------------------


def estimate_tokens(text: str) -> int:
    """A tokenizer-free upper-ish estimate of a text's token count: max(words * 1.3, chars / 4)."""
    return math.ceil(max(len(text.split()) * 1.3, len(text) / 4))


def missing_launcher(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """What of launcher ``argv`` this machine lacks, with where it was looked for, or None when it can run: its
    executable (a path, or a name on the ``PATH`` the server gets: ``env``'s, else ours, as ``Popen`` searches it)
    and, for ``python -m MODULE`` run by this very interpreter, the module. Nothing is run."""
    if not argv:
        return None
    exe = str(argv[0])
    if os.sep in exe:
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            return f"{exe} {'is not an executable file' if os.path.exists(exe) else 'does not exist'}"
        found = exe
    else:
        path = env.get("PATH") or os.environ.get("PATH") or os.defpath
        which = shutil.which(exe, path=path)
        if which is None:
            return f"`{exe}` is not on PATH ({path})"
        found = which
    if len(argv) > 2 and argv[1] == "-m" and os.path.abspath(found) == os.path.abspath(sys.executable):
        top = str(argv[2]).split(".")[0]
        if importlib.util.find_spec(top) is None:
            return f"this Python ({found}) has no module {top!r} for `{' '.join(map(str, argv[:3]))}`"
    return None


def check_stand_ins(space: Space) -> list[Problem]:
    """With ``--simulate`` the checks read the simulator's stand-in checkpoints: a warning for each real path (the
    target, every searched drafter) not on this machine, which a study without ``--simulate`` would need."""
    scenario = space.simulate.scenario if space.simulate else "default"
    stand_in = f"does not exist on this machine; --simulate checked the simulator's stand-in (scenario {scenario})"
    stand_in += " in its place"
    target = space.server.model_path
    out = []
    if not Path(target).exists() and not _HUB_ID.fullmatch(target):
        out.append(Problem("warning", f"the target {target} {stand_in}", None, "server.model_path"))
    for i, d in _searched_drafters(space):
        if not Path(d.path).exists():
            out.append(Problem("warning", f"drafter {d.name}: {d.path} {stand_in}", d.name, f"drafters[{i}].path"))
    return out


def check_checkpoints(space: Space, *, algorithm_flag: Callable[[str], str]) -> list[Problem]:
    """The checks of checkpoint directories with a ``config.json`` (SGLang, vLLM); ``algorithm_flag`` spells the
    launch option of an algorithm in messages (``Backend.algorithm_flag``)."""
    problems: list[Problem] = []
    target, target_file = _target_config(space, problems)
    if target is not None:
        _check_context(problems, space, "the target", None, "server.model_path", target_file, target)
    for i, d in _searched_drafters(space):
        _check_drafter(space, i, d, target, problems, algorithm_flag)
    return problems


def check_model_files(space: Space) -> list[Problem]:
    """The check of drafters that are single model files (llama.cpp's GGUF): each file exists."""
    return [
        Problem("error", f"drafter {d.name}: model file {d.path} does not exist", d.name, f"drafters[{i}].path")
        for i, d in _searched_drafters(space)
        if not Path(d.path).exists()
    ]


def _searched_drafters(space: Space) -> list[tuple[int, DrafterSpec]]:
    """(index in ``drafters``, drafter) of every drafter the search uses."""
    names = set(space.searched_drafters())
    return [(i, d) for i, d in enumerate(space.drafters) if d.name in names]


def _target_config(space: Space, problems: list[Problem]) -> tuple[dict[str, object] | None, str | None]:
    path = Path(space.server.model_path) / "config.json"
    cfg, why = _read_json(path)
    if cfg is None:
        msg = (
            f"target config.json not readable ({why}); if server.model_path is a hub id that is "
            f"expected, but the drafter/target hidden size, layer and vocabulary checks are skipped"
        )
        problems.append(Problem("warning", msg, None, "server.model_path", str(path)))
        return None, None
    return _text_config(cfg), str(path)


def _check_drafter(
    space: Space,
    i: int,
    d: DrafterSpec,
    target: dict[str, object] | None,
    problems: list[Problem],
    algorithm_flag: Callable[[str], str],
) -> None:
    def add(severity: str, message: str, field: str = "path", file: str | None = None) -> None:
        problems.append(Problem(severity, f"drafter {d.name}: {message}", d.name, f"drafters[{i}].{field}", file))

    root = Path(d.path)
    if not _is_checkpoint_dir(add, d, root):
        return
    cfg_path = root / "config.json"
    raw, why = _read_json(cfg_path)
    if raw is None:
        add("error", f"cannot read its config.json: {why}", file=str(cfg_path))
        return
    cfg, file = _text_config(raw), str(cfg_path)
    derived, forced = derive_algorithm(cfg), d.algorithm
    if forced is None and derived is None:
        problems.append(Problem("error", _undeterminable(d, cfg), d.name, f"drafters[{i}].algorithm", file))
    elif forced is not None and derived is not None and _family(forced) != derived:
        add("error", _contradiction(algorithm_flag(derived), derived, forced, cfg), "algorithm", file)
        return  # the shape checks below assume the right algorithm
    _check_shapes(add, root, cfg, target, file, forced or derived)
    _check_context(problems, space, f"drafter {d.name}", d.name, f"drafters[{i}].path", file, cfg)


def _is_checkpoint_dir(add: Any, d: DrafterSpec, root: Path) -> bool:
    """Whether the drafter's path is a local directory (else the problem is added)."""
    if not root.exists():
        hub = f"{d.path} is not a local directory (a hub id?); "
        if _HUB_ID.fullmatch(d.path) and d.algorithm:
            add("warning", hub + f"it cannot be checked, the forced algorithm {d.algorithm} is trusted")
        elif _HUB_ID.fullmatch(d.path):
            add(
                "error",
                hub + "download the checkpoint and set path to its directory, or set algorithm to launch it unchecked",
            )
        else:
            add("error", f"checkpoint directory {d.path} does not exist")
        return False
    if not root.is_dir():
        add("error", f"{d.path} is not a directory; expected a checkpoint directory with config.json")
        return False
    return True


def _check_shapes(
    add: Any,
    root: Path,
    cfg: Mapping[str, object],
    target: Mapping[str, object] | None,
    file: str,
    algorithm: str | None,
) -> None:
    """An EAGLE drafter's hidden size and aux layers against the target (when its config was read), and its
    vocabulary."""
    if algorithm is None or _family(algorithm) not in ("EAGLE", "EAGLE3"):
        return
    if target is not None:
        _check_hidden(add, cfg, target, file)
        if algorithm == "EAGLE3":
            _check_aux_layers(add, cfg, target, file)
    _check_vocab(add, root, cfg, target, file, algorithm)


def _contradiction(flag: str, derived: str, forced: str, cfg: Mapping[str, object]) -> str:
    """Why a forced algorithm contradicts the checkpoint (``flag``: how to launch the derived one)."""
    if derived == "EAGLE3":
        evidence = "; ".join(_eagle3_evidence(cfg))
        effect = {
            "EAGLE": "SGLang would skip its fc fusion layer and accept nothing",
            "NEXTN": "SGLang would skip its fc fusion layer and accept nothing (NEXTN is EAGLE)",
        }.get(forced, "the target's auxiliary hidden states would never reach its fc fusion layer")
        return (
            f"is an EAGLE-3 checkpoint ({evidence}) but algorithm {forced} was forced: {effect}; "
            f"use {flag} (set algorithm: EAGLE3 or leave it out)"
        )
    archs = ", ".join(_architectures(cfg)) or "none"
    effect = {
        "EAGLE3": "the target would feed it concatenated hidden states its fc layer was not trained for",
    }.get(forced, "it would run without the target's hidden states it was trained on")
    return (
        f"is an EAGLE (1/2) checkpoint (architectures: {archs}; no auxiliary hidden-state layers) but algorithm "
        f"{forced} was forced: {effect}; use {flag} (set algorithm: EAGLE or leave it out)"
    )


def _check_hidden(add: Any, cfg: Mapping[str, object], target: Mapping[str, object], file: str) -> None:
    t_hidden = target.get("hidden_size")
    key = "target_hidden_size" if _is_int(cfg.get("target_hidden_size")) else "hidden_size"
    d_hidden = cfg.get(key)
    if _is_int(t_hidden) and _is_int(d_hidden) and d_hidden != t_hidden:
        msg = (
            f"{key} {d_hidden} does not match the target's hidden_size {t_hidden}: it was trained for a different model"
        )
        add("error", msg, file=file)


def _check_aux_layers(add: Any, cfg: Mapping[str, object], target: Mapping[str, object], file: str) -> None:
    eagle = cfg.get("eagle_config")
    ids = eagle.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle, Mapping) else None
    key = "eagle_config.eagle_aux_hidden_state_layer_ids"
    if ids is None:
        ids, key = cfg.get("eagle_aux_hidden_state_layer_ids"), "eagle_aux_hidden_state_layer_ids"
    if ids is None:
        return  # SGLang then uses [2, N//2, N-3] of the target's layers
    if not isinstance(ids, list) or not ids or not all(_is_int(x) for x in ids):
        add("error", f"{key} should be a list of layer numbers, got {ids!r}", file=file)
        return
    n_layers = target.get("num_hidden_layers")
    if not _is_int(n_layers):
        return
    bad = ", ".join(str(x) for x in ids if not 0 <= x < n_layers)
    if bad:
        msg = f"{key} {ids} names layer(s) {bad} but the target has {n_layers} layers (0..{n_layers - 1})"
        add("error", msg + ": it was trained for a different model", file=file)


def _check_vocab(
    add: Any,
    root: Path,
    cfg: Mapping[str, object],
    target: Mapping[str, object] | None,
    file: str,
    algorithm: str | None,
) -> None:
    d_vocab = dv if _is_int(dv := cfg.get("vocab_size")) else None
    t_vocab = tv if target is not None and _is_int(tv := target.get("vocab_size")) else None
    if d_vocab is not None and t_vocab is not None and d_vocab != t_vocab:
        msg = f"vocab_size {d_vocab} differs from the target's vocab_size {t_vocab}: the drafter may have been trained"
        add("warning", msg + " with another tokenizer (padding differences are harmless)", file=file)
    full = d_vocab if d_vocab is not None else t_vocab
    draft = cfg.get("draft_vocab_size")
    if draft is None or full is None:
        return
    if not _is_int(draft) or draft < 1:
        add("error", f"draft_vocab_size should be a positive integer, got {draft!r}", file=file)
        return
    if draft > full:
        add("error", f"draft_vocab_size {draft} is larger than the vocabulary ({full})", file=file)
    elif draft < full:
        _check_d2t(add, root, draft, full)


def _check_d2t(add: Any, root: Path, draft: int, full: int) -> None:
    """A reduced draft vocabulary needs the ``d2t`` table (draft -> target token ids) in the weights."""
    what = f"draft_vocab_size {draft} < vocab_size {full} needs a d2t tensor in the weights"
    unmapped = "SGLang could not map draft tokens to target tokens"
    index = root / "model.safetensors.index.json"
    if index.is_file():
        data, why = _read_json(index)
        weight_map = data.get("weight_map") if data is not None else None
        if not isinstance(weight_map, Mapping):
            add(
                "warning",
                f"{what}, but {index} is not readable ({why or 'no weight_map'}); not verified",
                file=str(index),
            )
        elif not any(_is_d2t(k) for k in weight_map):
            add("error", f"{what}, but {index} lists none: {unmapped}", file=str(index))
        return
    shards = sorted(root.glob("*.safetensors"))
    if shards:
        names: set[str] = set()
        for shard in shards:
            keys = _safetensors_keys(shard)
            if keys is None:
                add("warning", f"{what}, but the header of {shard} is not readable; not verified", file=str(shard))
                return
            names |= keys
        if not any(_is_d2t(k) for k in names):
            add("error", f"{what}, but the safetensors files in {root} have none: {unmapped}", file=str(shards[0]))
        return
    others = sorted(p.name for p in root.iterdir() if p.suffix in (".bin", ".pt", ".pth"))
    if others:
        add("warning", f"{what}; it cannot be verified without loading {others[0]} (PyTorch pickles are not read)")
    else:
        add("warning", f"{what}; no weight files in {root}, so it cannot be verified")


def _is_d2t(name: str) -> bool:
    return name == "d2t" or name.endswith(".d2t")


def _safetensors_keys(path: Path) -> set[str] | None:
    """Tensor names from a safetensors header (8-byte little-endian length, then JSON), None if unreadable."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                return None
            (n,) = struct.unpack("<Q", head)
            if n > _MAX_HEADER_BYTES:
                return None
            header = json.loads(f.read(n).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return {k for k in header if k != "__metadata__"} if isinstance(header, dict) else None


def _check_context(
    problems: list[Problem],
    space: Space,
    who: str,
    drafter: str | None,
    field: str,
    file: str | None,
    cfg: Mapping[str, object],
) -> None:
    """``max_position_embeddings`` against the longest prompt (estimated tokens) plus ``benchmark.max_tokens``."""
    longest = max((estimate_tokens(p.text) for p in space.benchmark.prompts), default=0)
    max_tokens = space.benchmark.max_tokens
    need = longest + max_tokens
    mpe = cfg.get("max_position_embeddings")
    if _is_int(mpe) and mpe < need:
        msg = (
            f"{who}: max_position_embeddings {mpe} is less than the longest prompt (~{longest} tokens, "
            f"estimated) + benchmark.max_tokens {max_tokens} = {need}: positions past {mpe} degrade or fail"
        )
        problems.append(Problem("error", msg, drafter, field, file))


# -- reading configs ---------------------------------------------------------------------------------------------


def _read_json(path: Path) -> tuple[dict[str, object] | None, str]:
    """(the JSON object, "") or (None, why not)."""
    try:
        with open(path, "rb") as f:
            data = f.read(8 << 20)
    except FileNotFoundError:
        return None, f"{path} does not exist"
    except OSError as e:
        return None, f"{path}: {e.strerror or e}"
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return None, f"{path} is not valid JSON ({e})"
    if not isinstance(obj, dict):
        return None, f"{path} is not a JSON object"
    return obj, ""


def _text_config(cfg: dict[str, object]) -> dict[str, object]:
    """Multimodal configs (e.g. Kimi-K2.5's) nest the language model's settings under ``text_config``."""
    for key in ("text_config", "language_config", "llm_config"):
        inner = cfg.get(key)
        if isinstance(inner, dict):
            return {**cfg, **inner}
    return cfg


def _architectures(cfg: Mapping[str, object]) -> list[str]:
    archs = cfg.get("architectures")
    if isinstance(archs, str):
        return [archs]
    return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []


def _is_int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)
