"""Render a report.html to a PNG with headless Chromium, to look at what a reader sees.

Usage::

    python scripts/screenshot_report.py results/report/report.html [-o report.png]
        [--width 1400] [--height 3000]

Needs a Chromium binary (``chromium``, ``chromium-browser`` or ``google-chrome`` on the
PATH, or ``--chromium PATH``); on Debian/Ubuntu: ``apt-get install -y chromium``. The page
is self-contained, so Chromium runs with networking features off.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium(explicit: str | None = None) -> str:
    for name in ([explicit] if explicit else CANDIDATES):
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("no Chromium found; install it with 'apt-get install -y chromium' "
                     "or pass --chromium PATH")


def screenshot(html: Path, png: Path, *, width: int = 1400, height: int = 3000,
               chromium: str | None = None, timeout: float = 120) -> Path:
    """Write a ``width`` x ``height`` screenshot of ``html`` to ``png``."""
    binary = find_chromium(chromium)
    html, png = Path(html).resolve(), Path(png).resolve()
    if not html.is_file():
        raise SystemExit(f"{html} does not exist")
    png.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--hide-scrollbars", f"--user-data-dir={profile}", f"--screenshot={png}",
               f"--window-size={width},{height}", html.as_uri()]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0 or not png.is_file():
        raise SystemExit(f"chromium failed ({result.returncode}):\n{result.stderr[-2000:]}")
    return png


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", type=Path, help="the report.html to render")
    parser.add_argument("-o", "--out", type=Path, default=None,
                        help="PNG to write (default: next to the HTML)")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=3000)
    parser.add_argument("--chromium", default=None, help="Chromium binary")
    args = parser.parse_args(argv)
    out = args.out or args.html.with_suffix(".png")
    print(screenshot(args.html, out, width=args.width, height=args.height, chromium=args.chromium))
    return 0


if __name__ == "__main__":
    sys.exit(main())
