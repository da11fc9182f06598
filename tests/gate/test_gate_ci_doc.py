"""docs/ci.md runs as written: its policy file, and the `deepfault` steps of its GitHub Actions
workflow and GitLab CI job, on small models (a champion against itself passes, a damaged
challenger fails), with the corpus carried from one run to the next as the cache would."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess

import pytest
import yaml

from deepfault.corpus import Corpus
from helpers.docs import page
from helpers.gate_models import save_pair
from helpers.hardening import cli


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", page("ci.md"), flags=re.S)


def _github_steps() -> list[str]:
    workflow = yaml.safe_load(_blocks("yaml")[0])
    return [step["run"] for step in workflow["jobs"]["gate"]["steps"] if "run" in step]


def _gitlab_steps() -> list[str]:
    job = yaml.safe_load(_blocks("yaml")[1])["model-gate"]
    assert "gate-corpus/" in job["cache"]["paths"]
    assert job["artifacts"]["reports"]["junit"] == "gate.xml"
    return job["script"]


@pytest.fixture
def repo(tmp_path):
    """A repository as the workflow sees it: models/, data/ and the page's policy file."""
    save_pair(tmp_path)
    (tmp_path / "models").mkdir()
    (tmp_path / "data").mkdir()
    shutil.copy(tmp_path / "data.npz", tmp_path / "data" / "heldout.npz")
    (tmp_path / "gate-policy.toml").write_text(_blocks("toml")[0])
    return tmp_path


def _run(steps: list[str], folder) -> int:
    """Each ``deepfault`` step in-process; the shell steps (the job summary) in bash; installs skipped."""
    status = 0
    for step in steps:
        if step.startswith("pip install"):
            continue
        if step.startswith("deepfault "):
            status, out, err = cli(shlex.split(step)[1:], folder)
            assert status in (0, 1), (step, out, err)
        else:
            subprocess.run(
                ["bash", "-c", step],
                cwd=folder,
                check=True,
                env={"GITHUB_STEP_SUMMARY": str(folder / "summary.md"), "PATH": "/usr/bin:/bin"},
            )
    return status


@pytest.mark.parametrize("steps", [_github_steps, _gitlab_steps], ids=["github", "gitlab"])
def test_the_ci_page_runs_as_written(repo, steps):
    shutil.copy(repo / "m1.ts", repo / "models" / "champion.ts")
    shutil.copy(repo / "m1.ts", repo / "models" / "challenger.ts")
    assert _run(steps(), repo) == 0
    assert json.loads((repo / "gate.json").read_text())["verdict"] == "pass"
    shutil.copy(repo / "m2.ts", repo / "models" / "challenger.ts")  # a damaged challenger
    assert _run(steps(), repo) == 1
    document = json.loads((repo / "gate.json").read_text())
    assert document["verdict"] == "fail"
    assert "class_flip_rate[2]" in {c["name"] for c in document["checks"] if c["status"] == "fail"}
    grown = len(Corpus.open(repo / "gate-corpus"))
    assert grown >= document["heldout"]["negative_flips"] > 0
    assert _run(steps(), repo) == 1  # the same challenger again: the same verdict
    replay = json.loads((repo / "gate.json").read_text())["replay"]
    assert replay["entries"] == grown == replay["own"]  # the cached corpus replayed: its own findings
    assert replay["regressions"] == 0
    if steps is _github_steps:
        assert "deepfault gate" in (repo / "summary.md").read_text()
        assert (repo / "gate-report" / "report.html").is_file()
