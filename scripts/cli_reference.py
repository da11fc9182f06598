"""Rewrite the generated command reference in docs/cli.md from the parser.

The hand-written head of the page must not repeat a heading of the generated part (its
"One vocabulary" and "Every option of every command"): a repeated heading is two entries
with one name in the site's table of contents, and the second's anchor gets a ``_1``
suffix. The script refuses to write such a page.
"""

import re
import sys
from collections import Counter
from pathlib import Path

from deepfault.cli._reference import BEGIN, END, markdown


def repeated_headings(text: str) -> list[str]:
    """The Markdown headings that occur more than once in ``text`` (fenced code excluded)."""
    fenced = False
    headings = []
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            headings.append(line.strip())
    return [h for h, n in Counter(headings).items() if n > 1]


def main() -> int:
    page = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
    text = page.read_text(encoding="utf-8")
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    new = head + markdown() + tail
    if twice := repeated_headings(new):
        print(f"{page}: headings written twice: {'; '.join(twice)}; remove them from the hand-written "
              f"part (the generated part has them)", file=sys.stderr)
        return 1
    page.write_text(new, encoding="utf-8")
    print(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
