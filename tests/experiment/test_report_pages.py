"""``--report DIR`` of run, coverage measure, xplore and regress: one page shell for every page.

Each command writes its page on tiny seeded digits MLPs (the embedded 8x8 digits, no download);
the checks are the shell's promises: one title, the configuration collapsed at the end, tables
in their own scrolling box, images inlined, nothing fetched from outside. When Chromium is
installed, each page is also rendered at 1280 px and must not be wider than the window.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from deepfault._io import REPORT_MANIFEST
from deepfault.cli import main
from deepfault.models import save_model

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(n)), None)


def _model(path: Path, seed: int) -> str:
    """A digits MLP trained for two epochs from ``seed``: right often enough to have inputs to change."""
    from deepfault.data import load_dataset
    from deepfault.models.train import TrainConfig, train_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        mf, _ = train_model("digits_mlp", load_dataset("digits"), TrainConfig(epochs=2, seed=seed, lr=1e-2))
    finally:
        torch.set_num_threads(threads)
    save_model(path, mf)
    return str(path)


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """``{command: report folder}`` for each single-run command."""
    d = tmp_path_factory.mktemp("pages")
    m1, m2 = _model(d / "first.pt", 0), _model(d / "second.pt", 1)
    commands = {
        "run": ["run", "--model", m1, "--class", "0,1", "--inputs", "6", "-k", "3", "--out", d / "r.json"],
        "coverage": ["coverage", "measure", "--model", m1, "--criteria", "nc,tknc", "--threshold", "0,0.5",
                     "--out", d / "c.json"],
        "xplore": ["xplore", "--model", f"{m1},{m2}", "--num-seeds", "20", "--iterations", "3",
                   "--no-progress",
                   "--out", d / "x.json"],
        "regress": ["regress", "--m1", m1, "--m2", m2, "--budget", "20it", "--fidelity", "ssim:0.5",
                    "--store", d / "s.sqlite", "--no-progress", "--device", "cpu"],
    }
    out = {}
    for name, argv in commands.items():
        out[name] = d / f"{name}-report"
        assert main([str(a) for a in [*argv, "--report", out[name]]]) == 0, name
    return out


@pytest.mark.parametrize("name", ["run", "coverage", "xplore", "regress"])
def test_each_page_is_one_self_contained_shell(pages, name):
    html = (pages[name] / "report.html").read_text(encoding="utf-8")
    assert html.count("<h1>") == 1
    # the configuration is collapsed, after the method's section, never first
    assert html.index("</main>") < html.index('<details id="configuration">')
    assert "<pre>" not in html
    tables = html.count("<table")
    assert tables >= 2  # at least one result table and the configuration
    assert html.count("class='scroll'") + html.count('class="scroll"') == tables
    srcs = re.findall(r"src=['\"]([^'\"]*)['\"]", html)
    assert srcs, "every page has at least one figure"
    assert all(s.startswith("data:image/png;base64,") for s in srcs)
    text = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]*", "", html)
    assert not re.search(r"<(link|script|iframe)\b|url\(|@import|https?://", text, flags=re.IGNORECASE)
    assert not [p.name for p in pages[name].iterdir()
                if (p.name.startswith(".") and p.name != REPORT_MANIFEST) or "--" in p.name]


def test_pages_say_what_the_issue_asked(pages):
    run = (pages["run"] / "report.html").read_text(encoding="utf-8")
    assert "Against the random baseline" in run
    assert "random accuracy" in run
    coverage = (pages["coverage"] / "report.html").read_text(encoding="utf-8")
    assert "Coverage per criterion" in coverage
    assert "Coverage against the number of inputs" in coverage
    regress = (pages["regress"] / "report.html").read_text(encoding="utf-8")
    assert "regression faults of second.pt against first.pt" in regress
    assert regress.index("Verdict: ") < regress.index("id='faults'")  # the answer first
    assert "DeepHunter" not in regress.split('<details id="configuration">')[0]  # it never ran
    assert "README" not in regress


def test_report_folder_is_checked_before_any_work(tmp_path, capsys, monkeypatch):
    (tmp_path / "file").write_text("x")
    code = main(["run", "--class", "0", "--out", "-", "--report", str(tmp_path / "file")])
    assert code == 2
    assert "--report must be a folder" in capsys.readouterr().err
    # a folder with other files would be replaced whole: refused, and left as it was
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "keep.json").write_text("{}")
    code = main(["run", "--class", "0", "--out", "-", "--report", str(tmp_path / "results")])
    assert code == 2
    assert "--report must be a new folder or a previous report's" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "results").iterdir()] == ["keep.json"]
    # nor the folder it runs in, or one above it, or '/', even when it holds a report.html
    monkeypatch.chdir(tmp_path / "results")
    (tmp_path / "results" / "report.html").write_text("old")
    for folder in (".", "..", "/"):
        assert main(["run", "--class", "0", "--out", "-", "--report", folder]) == 2
        assert "--report must be a folder of its own" in capsys.readouterr().err


def _rendered_width(page: Path, tmp_path: Path) -> int:
    """The page's scroll width in Chromium with a 1280 px window (a copy with a measuring script)."""
    probe = page.with_name("probe.html")
    script = ("<script>function w(){document.title='W'+Math.max(document.documentElement.scrollWidth,"
              "document.body.scrollWidth)}w();addEventListener('load',w)</script>")
    text = page.read_text(encoding="utf-8").replace("</body>", script + "</body>")
    probe.write_text(text, encoding="utf-8")
    try:
        done = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,900",
             "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)
    finally:
        probe.unlink()
    match = re.search(r"<title>W(\d+)</title>", done.stdout)
    assert match, done.stderr[-2000:]
    return int(match.group(1))


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed")
@pytest.mark.parametrize("name", ["run", "coverage", "xplore", "regress"])
def test_page_fits_1280_px_in_chromium(pages, name, tmp_path):
    assert _rendered_width(pages[name] / "report.html", tmp_path) <= 1280


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed")
def test_the_width_probe_sees_an_overflowing_page(tmp_path):
    from deepfault.experiment.report import render_page

    page = tmp_path / "wide.html"
    page.write_text(render_page("wide", "<img alt='' style='width:3000px;max-width:none'>"), encoding="utf-8")
    assert _rendered_width(page, tmp_path) > 1280


def test_changed_first_puts_changed_rows_first_in_order_or_by_key():
    from deepfault.experiment.figures import changed_first

    changed = [False, True, False, True, True]
    assert changed_first(changed, limit=10).tolist() == [1, 3, 4, 0, 2]
    assert changed_first(changed, limit=2).tolist() == [1, 3]
    assert changed_first(changed, limit=10, key=[0, 1, 5, 3, 2]).tolist() == [3, 4, 1, 2, 0]
    assert changed_first([], limit=3).tolist() == []
