"""SGLang 0.5.23's speculative resolution rules (``srt/arg_groups/speculative_hook.py`` and the adaptive
config loader of ``srt/speculative/adaptive_spec_params.py``), mirrored for the simulator: what a launch of
NGRAM or the EAGLE family resolves to, and the adaptive config it reads.

``parse_launch_args`` (``autotune.sim.args``) calls them after reading the flags.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from autotune.sim.faults import _fail, _not_loadable, _traceback

if TYPE_CHECKING:
    from autotune.sim.args import ResolvedArgs

#: target architectures whose draft model path defaults to the target (their MTP/NextN layers), from
#: ``_handle_eagle_family`` in SGLang 0.5.23's ``arg_groups/speculative_hook.py``
MTP_ARCHITECTURES = (
    "DeepseekV32ForCausalLM",
    "DeepseekV3ForCausalLM",
    "DeepseekV4ForCausalLM",
    "Glm4MoeForCausalLM",
    "Glm4MoeLiteForCausalLM",
    "GlmMoeDsaForCausalLM",
    "BailingMoeForCausalLM",
    "BailingMoeV2ForCausalLM",
    "BailingMoeV2_5ForCausalLM",
    "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration",
    "HYV3ForCausalLM",
    "HYV4ForCausalLM",
    "Qwen4ExpForConditionalGeneration",
)


def load_adaptive_config_steps(config: dict[str, Any]) -> list[int]:
    """The union of a loaded adaptive config's candidate steps."""
    out: set[int] = set()
    for key, entry in config.items():
        if key.isdigit():
            out.update(entry["candidate_steps"])
    return sorted(out)


def _adaptive_unsupported_reason(algo: str, topk: int | None) -> str | None:
    """SGLang's ``adaptive_unsupported_reason`` for what the simulator models (no attention DP, multi-layer EAGLE,
    two-batch overlap or PD multiplexing in a simulated launch)."""
    if algo not in ("EAGLE", "EAGLE3"):
        return f"speculative_algorithm={algo} (only EAGLE/EAGLE3 are supported)"
    if topk is not None and topk != 1:
        return f"speculative_eagle_topk={topk} (only topk=1 is supported)"
    return None


def load_adaptive_config(path: str | None) -> tuple[dict[str, Any], list[int]]:
    """SGLang's ``_load_adaptive_config`` + ``resolve_candidate_steps_from_config``: (the config, the union of its
    batch-size slots' candidate steps). Raises what SGLang raises (OSError, ValueError, AttributeError) with its
    messages."""
    from autotune.sim.adaptive import DEFAULT_ADAPTIVE_CONFIG

    if path is not None:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    else:
        cfg = DEFAULT_ADAPTIVE_CONFIG
    if not isinstance(cfg, dict):
        raise AttributeError(f"'{type(cfg).__name__}' object has no attribute 'items'")
    bs_entries: dict[int, dict] = {}
    for key, entry in cfg.items():
        if not key.isdigit():
            continue
        steps = entry.get("candidate_steps") if isinstance(entry, dict) else None
        if not isinstance(entry, dict):
            raise AttributeError(f"'{type(entry).__name__}' object has no attribute 'get'")
        if not isinstance(steps, list) or not steps or not all(isinstance(s, int) and s >= 0 for s in steps):
            raise ValueError(f"BS {key}: candidate_steps must be a list of non-negative ints, got {steps!r}")
        bs_entries[int(key)] = entry
    if not bs_entries:
        raise ValueError(
            "speculative_adaptive_config must contain at least one integer-string "
            f'BS key, e.g. {{"1": {{"candidate_steps": [1,3,7]}}}}. Got keys: {list(cfg.keys())}'
        )
    candidates: set[int] = set()
    for entry in bs_entries.values():
        candidates.update(entry["candidate_steps"])
    return cfg, sorted(candidates)


def _load_adaptive_config(path: str | None, log: list[str]) -> tuple[dict[str, Any], list[int]]:
    try:
        return load_adaptive_config(path)
    except json.JSONDecodeError as e:
        raise _traceback(f"json.decoder.JSONDecodeError: {e}", log, "../speculative/adaptive_spec_params.py") from None
    except OSError as e:
        raise _traceback(f"{type(e).__name__}: {e}", log, "../speculative/adaptive_spec_params.py") from None
    except (ValueError, AttributeError) as e:
        raise _traceback(f"{type(e).__name__}: {e}", log, "../speculative/adaptive_spec_params.py") from None


def _resolve_ngram(
    args: ResolvedArgs, vals: dict[str, Any], steps: int | None, ndt: int | None, log: list[str]
) -> ResolvedArgs:
    """SGLang's ``_handle_ngram``: topk := max BFS breadth, 12 draft tokens by default, steps := ndt // topk."""
    if args.max_running_requests is None:
        log.append(
            "WARNING speculative_hook.py: Max running requests is reset to 48 for speculative decoding. You can "
            "override this by explicitly setting --max-running-requests."
        )
    topk = args.speculative_ngram_max_bfs_breadth
    if ndt is None:
        ndt = 12
        log.append(
            "WARNING speculative_hook.py: speculative_num_draft_tokens is set to 12 by default for ngram speculative "
            "decoding. You can override this by explicitly setting --speculative-num-draft-tokens."
        )
    if steps is None:
        if topk == 0:
            raise _traceback("ZeroDivisionError: integer division or modulo by zero", log, "speculative_hook.py")
        steps = ndt // topk
    log.append(
        "WARNING speculative_hook.py: The mixed chunked prefill are disabled because of using ngram speculative "
        "decoding."
    )
    if ndt < 2 or topk < 1 or args.speculative_ngram_max_trie_depth < 1:
        raise _traceback(
            f"AssertionError: ngram needs speculative_num_draft_tokens >= 2, a BFS breadth >= 1 and a trie depth "
            f">= 1 (got {ndt}, {topk}, {args.speculative_ngram_max_trie_depth})",
            log,
            "../speculative/ngram_worker.py",
        )
    args.method = "NGRAM"
    args.speculative_draft_model_path = vals.get("speculative_draft_model_path")
    args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens = steps, topk, ndt
    args.faults = tuple(f for f in args.faults if f.applies_to("ngram"))
    return args


def _resolve_eagle_family(
    args: ResolvedArgs,
    vals: dict[str, Any],
    requested: str,
    steps: int | None,
    topk: int | None,
    ndt: int | None,
    log: list[str],
) -> ResolvedArgs:
    """SGLang's ``_handle_eagle_family`` (EAGLE, EAGLE3 (NEXTN is EAGLE by now), STANDALONE)."""
    scenario = args.scenario
    algo = args.speculative_algorithm
    assert algo is not None
    draft = vals.get("speculative_draft_model_path")
    if scenario.target_architecture in MTP_ARCHITECTURES:
        if not draft:
            draft = args.model_path  # the target's own MTP layers
        else:
            log.append(
                "WARNING speculative_hook.py: DeepSeek MTP does not require setting speculative_draft_model_path."
            )
    if not draft:
        raise _traceback(
            "AssertionError: --speculative-draft-model-path is required for EAGLE/EAGLE3 "
            "(this target has no NextN/MTP layers)",
            log,
        )
    if draft in (args.model_path, scenario.target_name, scenario.target_dir):
        drafter = scenario.mtp
        if drafter is None:
            args.mtp_missing = True  # loads the target as its own NextN draft: fails at weight loading
    else:
        drafter = scenario.drafter_by_path(draft)
        if drafter is None:
            if os.path.isdir(draft) and os.path.isfile(os.path.join(draft, "config.json")):
                raise _fail(
                    f"autotune.sim: {draft} is a checkpoint the scenario {scenario.name} does not know "
                    f"(its drafters: {', '.join(scenario.drafters)})",
                    log,
                )
            raise _not_loadable(draft, log)
    args.speculative_draft_model_path = draft
    args.drafter = drafter
    if algo == "STANDALONE":
        args.method = "STANDALONE"
    elif drafter is not None and drafter.kind == "mtp" or args.mtp_missing:
        args.method = "MTP" if algo == "EAGLE" else algo
    else:
        args.method = algo
    name = drafter.name if drafter is not None else "mtp"
    args.faults = tuple(f for f in args.faults if f.applies_to(name))
    if args.max_running_requests is None:
        log.append(
            "WARNING speculative_hook.py: Max running requests is reset to 48 for speculative decoding. You can "
            "override this by explicitly setting --max-running-requests."
        )

    if steps is None:
        if topk is not None or ndt is not None:
            raise _traceback(
                "AssertionError: speculative_eagle_topk and speculative_num_draft_tokens must be unset "
                "when speculative_num_steps is unset",
                log,
            )
        if algo == "STANDALONE":
            steps, topk, ndt = 3, 1, 4
        else:
            steps, topk, ndt = (5, 4, 8) if scenario.family == "llama" else (3, 1, 4)
        log.append(
            f"INFO speculative_hook.py: auto-chose speculative_num_steps={steps}, "
            f"speculative_eagle_topk={topk}, speculative_num_draft_tokens={ndt} for this model"
        )
    elif topk is None or ndt is None:
        raise _traceback(
            "AssertionError: speculative_eagle_topk and speculative_num_draft_tokens must be set "
            "when speculative_num_steps is set",
            log,
        )
    for flag, v in (
        ("speculative_num_steps", steps),
        ("speculative_eagle_topk", topk),
        ("speculative_num_draft_tokens", ndt),
    ):
        if v < 1:
            raise _traceback(f"AssertionError: {flag} must be positive, got {v}", log)
    if topk == 1 and ndt != steps + 1:
        log.append(
            f"WARNING speculative_hook.py: speculative_num_draft_tokens is adjusted to speculative_num_steps+1 "
            f"when speculative_eagle_topk == 1 (was {ndt}, now {steps + 1})"
        )
        ndt = steps + 1
    if ndt < 2:
        raise _traceback(f"AssertionError: speculative_num_draft_tokens must be at least 2, got {ndt}", log)
    max_nodes = topk + (steps - 1) * topk * topk
    if ndt - 1 > max_nodes:
        raise _traceback(
            f"ValueError: speculative_num_draft_tokens={ndt} is too large for speculative_num_steps={steps} and "
            f"speculative_eagle_topk={topk}: the draft tree has only {max_nodes} candidate nodes "
            f"(num_draft_tokens - 1 <= topk + (steps - 1) * topk^2)",
            log,
            "../speculative/eagle_utils.py",
        )
    args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens = steps, topk, ndt
    return args
