"""The documentation site builds with warnings as errors, and its home page is the README."""

import runpy
import shutil
import subprocess
import sys

import pytest

from helpers.docs import DOCS, README, ROOT


def test_site_home_is_the_readme():
    home = runpy.run_path(str(ROOT / "scripts" / "site_home.py"))["home"]
    assert (DOCS / "index.md").read_text() == home(README.read_text()), \
        "docs/index.md is stale: run python scripts/site_home.py"


def test_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
         "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin",
                                                       "HOME": str(tmp_path)}, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "site" / "api" / "index.html").is_file()
    shutil.rmtree(tmp_path / "site")
