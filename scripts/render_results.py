"""Re-render the committed reproductions in ``docs/results/`` from their stores.

Usage::

    python scripts/render_results.py --stores DIR [--only NAME ...] [--no-screenshot]

For each preset below it runs ``deepfault report DIR/NAME.sqlite --out docs/results/NAME``
and then writes, under the title of ``report.md`` (``tables.md`` for DeepFault) and
``report.html``, the size the store was run at: where it is smaller than the preset's
documented size, what the full size is and about how long it takes. ``paper-mnist`` also
gets its ``screenshot.png`` again (``scripts/screenshot_report.py``, headless Chromium).
The stores are not committed; ``SIZES`` says how each was made, so that it can be rebuilt.

The coverage figures (``docs/results/coverage/``) have no store: they come from
``benchmarks/bench_coverage.py --part figures``.
"""

from __future__ import annotations

import argparse
import html
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results"

#: What each committed store holds, said at the top of its page. Keep in step with the run.
SIZES: dict[str, str] = {
    "paper-mnist": (
        "Full size, the preset's documented grid: 3 models x 10 classes x 5 values of k x (Tarantula, "
        "Ochiai, D* + 5 random repetitions) = 1,200 cells. `deepfault experiment --preset paper-mnist "
        "--threads 1` on a shared 2-core machine under load (load average about 3): 2 min 33 s, the "
        "three models' training included; Table 10's times are upper bounds."
    ),
    "deepxplore-mnist": (
        "Full size, the preset's documented runs: Tables 2 and 5 five times each (seeds 0 to 4), "
        "2,000 seeds per run, 20 iterations, the published code's settings; Figure 9 at four "
        "thresholds: 29 runs. `deepfault experiment --preset deepxplore-mnist --threads 1` on a shared "
        "2-core machine (load average 1 to 3): 5 min 33 s; the LeNets were already trained."
    ),
    "drfuzz-mnist": (
        "Reduced: one seed (0) instead of the preset's three (`--preset-option seeds=0`): the five "
        "published scenarios, DRFuzz and DeepHunter, 50 s of fuzzing per campaign and every test input "
        "a candidate seed, as documented; 10 campaigns. Run on a shared 2-core machine under load "
        "(load average 3 to 9), one thread: 21 min 47 s, of which about 11 min making the five "
        "scenarios and 11 min the campaigns. The full size (`deepfault experiment --preset "
        "drfuzz-mnist`: seeds 0, 1, 2, 30 campaigns) would take about 45 minutes there (33 min of "
        "campaigns), plus about 15 minutes to train the discriminator the first time. The budget is "
        "wall time, so the counts depend on the machine's load; single-seed differences of a few "
        "faults are noise."
    ),
}

START, END = "<!-- size: written by scripts/render_results.py -->", "<!-- /size -->"


def _note(name: str) -> str:
    return SIZES[name]


def add_size_note(folder: Path, text: str) -> None:
    """Write ``text`` under the title of ``folder/report.md`` (or ``tables.md``) and ``report.html``
    (replacing a note written before)."""
    for md in (folder / "report.md", folder / "tables.md"):  # a DeepFault grid's page is tables.md
        if not md.is_file():
            continue
        lines = _drop_old(md.read_text(encoding="utf-8").splitlines())
        at = next((i for i, line in enumerate(lines) if line.startswith("# ")), -1) + 1
        lines[at:at] = ["", START, f"**Size of this run.** {text}", END]
        md.write_text("\n".join(lines) + "\n", encoding="utf-8")
    page = folder / "report.html"
    if page.is_file():
        doc = page.read_text(encoding="utf-8")
        if START in doc:
            doc = doc[: doc.index(START)] + doc[doc.index(END) + len(END):]
        block = f"{START}<p class=\"note\"><strong>Size of this run.</strong> {_inline(text)}</p>{END}"
        if "</header>" not in doc:
            raise SystemExit(f"{page}: no </header> to put the size under")
        doc = doc.replace("</header>", block + "</header>", 1)
        page.write_text(doc, encoding="utf-8")


def _drop_old(lines: list[str]) -> list[str]:
    if START not in lines:
        return lines
    i, j = lines.index(START), lines.index(END)
    if i > 0 and lines[i - 1] == "":
        i -= 1
    return lines[:i] + lines[j + 1:]


def _inline(text: str) -> str:
    """Markdown backticks to <code>, everything else escaped."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if k % 2 else p for k, p in enumerate(parts))


def render(name: str, stores: Path, screenshot: bool) -> None:
    store = stores / f"{name}.sqlite"
    if not store.is_file():
        raise SystemExit(f"{store} does not exist")
    out = RESULTS / name
    subprocess.run([sys.executable, "-m", "deepfault", "report", str(store), "--out", str(out)], check=True)
    add_size_note(out, _note(name))
    if screenshot and name == "paper-mnist":
        shot = REPO / "scripts" / "screenshot_report.py"
        png = out / "screenshot.png"
        subprocess.run([sys.executable, str(shot), str(out / "report.html"), "-o", str(png)], check=True)
    print(f"rendered {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", type=Path, required=True, help="folder with NAME.sqlite for each preset")
    parser.add_argument("--only", nargs="+", choices=sorted(SIZES), default=sorted(SIZES))
    parser.add_argument("--no-screenshot", action="store_true", help="leave paper-mnist's screenshot.png")
    args = parser.parse_args(argv)
    for name in args.only:
        render(name, args.stores, not args.no_screenshot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
