"""Workers share one study through PostgreSQL (real server started by .ci/run or scripts/start_postgres.sh)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import optuna
import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.postgres


@pytest.fixture
def pg_url():
    url = os.environ.get("AUTOTUNE_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("AUTOTUNE_TEST_POSTGRES_URL is not set (scripts/start_postgres.sh prints one)")
    return url


def test_two_workers_share_a_postgres_study(pg_url, tmp_path):
    name = f"dist-{uuid.uuid4().hex[:8]}"
    text = (REPO / "spaces" / "eagle3.yaml").read_text().replace("name: kimi-k25-eagle3", f"name: {name}", 1)
    space = tmp_path / "space.yaml"
    space.write_text(text)
    argv = [
        sys.executable,
        "-m",
        "autotune",
        "study",
        str(space),
        "--simulate",
        "--in-process",
        "--storage",
        pg_url,
        "--n-trials",
        "14",
        "--no-confirm",
        "--json",
        "--studies-dir",
        str(tmp_path / "studies"),
    ]
    workers = [
        subprocess.Popen([*argv, "--seed", str(i)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        for i in range(2)
    ]
    outs = [w.communicate(timeout=600) for w in workers]
    for w, (_out, err) in zip(workers, outs, strict=True):
        assert w.returncode == 0, err
    storage = optuna.storages.RDBStorage(pg_url)
    study = optuna.load_study(study_name=f"{name}-sim", storage=storage)
    trials = study.get_trials()
    counted = [t for t in trials if t.state.is_finished() and "duplicate_of" not in t.user_attrs]
    # the budget is shared and exact: each trial claims its place under the study lock
    assert len(counted) == 14
    workers_seen = {t.user_attrs.get("worker") for t in trials}
    assert len(workers_seen) == 2, workers_seen
    assert {t.params["cuda_graph"] for t in trials if t.user_attrs.get("role") == "baseline"} == {False, True}
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    optuna.delete_study(study_name=f"{name}-sim", storage=storage)
    storage.engine.dispose()
