"""The request-log checks a study recorded, as one JSON object on stdout (the GPU harness's ``traffic.json``): study
attrs ``traffic_holdout`` (the baseline's tok/s on the subset against the holdout), ``traffic_acceptance`` (the
winner's acceptance on the subset against the holdout) and ``greedy_lossless`` (its temperature-0 check), each
with its per-request figures, or null where not recorded.

    python3 scripts/gpu/traffic_attrs.py SPACE.yaml STUDIES_DIR
"""

from __future__ import annotations

import json
import sys

import optuna

from autotune import records
from autotune.space.validate import load_space
from autotune.study.storage import default_storage, study_name_for


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    space = load_space(argv[0])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=study_name_for(space, False), storage=default_storage(space, False, argv[1]))
    out = {
        "traffic_holdout": records.traffic_holdout(study),
        "traffic_acceptance": records.traffic_acceptance(study),
        "greedy_lossless": records.greedy_lossless(study),
    }
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
