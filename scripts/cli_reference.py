"""Rewrite the generated command reference in docs/cli.md from the parser."""

from pathlib import Path

from deepfault.cli._reference import BEGIN, END, markdown

page = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
text = page.read_text(encoding="utf-8")
head, _, rest = text.partition(BEGIN)
_, _, tail = rest.partition(END)
page.write_text(head + markdown() + tail, encoding="utf-8")
print(f"wrote {page}")
