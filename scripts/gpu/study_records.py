"""A study's records as JSON, and back: what a recorded GPU run keeps so that CI can rebuild its report.

    python3 scripts/gpu/study_records.py STUDY.db OUT.json.gz [--study NAME]

Writes the study's user attrs and every trial (number, state, value, params with their distributions, intermediate
values, user attrs, the ``fixed_params`` of a queued one) as gzipped JSON. The artifacts (server logs, the prompts'
figures for optuna-dashboard) stay out: they are files beside the database, not records. ``load`` puts them back
into an in-memory Optuna study, trial numbers as recorded, which ``autotune.report.build_report`` reads as it reads
the database (tests/llamacpp/test_recorded_gpu_methods.py). JSON rather than the SQLite file: a database written by
one Optuna release may need a migration under the next.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import distribution_to_json, json_to_distribution
from optuna.trial import TrialState

FORMAT = 1


def dump(study: optuna.Study) -> dict[str, Any]:
    trials = []
    for t in study.get_trials(deepcopy=False):
        trials.append(
            {
                "number": t.number,
                "state": t.state.name,
                "value": t.value if t.state == TrialState.COMPLETE else None,
                "params": t.params,
                "distributions": {k: distribution_to_json(d) for k, d in t.distributions.items()},
                "intermediate_values": {str(k): v for k, v in t.intermediate_values.items()},
                "user_attrs": t.user_attrs,
                "system_attrs": {k: v for k, v in t.system_attrs.items() if k == "fixed_params"},
            }
        )
    return {
        "format": FORMAT,
        "study_name": study.study_name,
        "direction": study.direction.name,
        "user_attrs": study.user_attrs,
        "trials": trials,
    }


def load(doc: dict[str, Any]) -> optuna.Study:
    """The recorded study in memory (trials added in their recorded order, so their numbers are the recorded
    ones)."""
    study = optuna.create_study(study_name=doc["study_name"], direction=doc["direction"].lower())
    for k, v in doc["user_attrs"].items():
        study.set_user_attr(k, v)
    for i, t in enumerate(doc["trials"]):
        assert t["number"] == i, f"trial {t['number']} recorded at position {i}"
        study.add_trial(
            optuna.trial.create_trial(
                state=TrialState[t["state"]],
                value=t["value"],
                params=t["params"],
                distributions={k: json_to_distribution(d) for k, d in t["distributions"].items()},
                intermediate_values={int(k): v for k, v in t["intermediate_values"].items()},
                user_attrs=t["user_attrs"],
                system_attrs=t["system_attrs"],
            )
        )
    return study


def read(path: Path) -> optuna.Study:
    return load(json.loads(gzip.decompress(path.read_bytes())))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("db", help="the study's SQLite database")
    ap.add_argument("out", help="the .json.gz to write")
    ap.add_argument("--study", help="the study's name (default: the database's only study)")
    a = ap.parse_args(argv)
    storage = f"sqlite:///{Path(a.db).resolve()}"
    name = a.study or optuna.get_all_study_names(storage)[0]
    study = optuna.load_study(study_name=name, storage=storage)
    text = json.dumps(dump(study), separators=(",", ":"), default=str)
    Path(a.out).write_bytes(gzip.compress(text.encode(), mtime=0))
    print(f"{a.out}: {len(study.trials)} trials of {name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
