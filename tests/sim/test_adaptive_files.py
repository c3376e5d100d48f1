"""The in-process simulator's launch files: each start reads its own (issue #43)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from ..cli.helpers import REPO, autotune, report, space_file


def test_each_in_process_adaptive_start_keeps_its_own_config_file(tmp_path):
    """The in-process simulator wrote every adaptive start's adaptive.json into one folder, so a recorded argv named
    a file a later start overwrote: each start now has its own, beside the study."""
    studies = tmp_path / "studies"
    base = yaml.safe_load((REPO / "spaces" / "methods.yaml").read_text())
    methods = {"adaptive": base["search"]["methods"]["adaptive"]}
    space = space_file(
        tmp_path,
        "methods.yaml",
        name="adaptive-files",
        search={"methods": methods},
        benchmark={"prompts_file": str(REPO / "tests" / "sim" / "prompts" / "code_edit.yaml")},
        budget={"n_trials": 5},
    )
    r = autotune(
        "study", str(space), "--simulate", "--in-process", "--no-confirm", "--json", "--studies-dir", str(studies)
    )
    assert r.returncode == 0, r.stderr
    seen: dict[str, str] = {}
    for t in report(space, studies)["trials"]:
        argv = t.get("argv") or []
        if "--speculative-adaptive-config" not in argv:
            continue
        path = Path(argv[argv.index("--speculative-adaptive-config") + 1])
        steps = json.loads(path.read_text())["1"]["candidate_steps"]  # a single stream's draft lengths
        assert steps == [int(s) for s in t["config"]["candidate_steps"].split(",")], (t["number"], path)
        assert studies in path.parents, path  # beside the study, not in a shared temporary folder
        seen[str(path)] = t["config"]["candidate_steps"]
    assert len(set(seen.values())) >= 2, seen  # two adaptive configs, each file still its own
