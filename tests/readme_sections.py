"""The README's sections, read like files by the tests that run their examples."""

from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def section(heading: str) -> str:
    """The README from ``heading`` to the next second-level heading."""
    text = README.read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


class Section:
    """A README section with ``read_text()`` (what the doc tests call on a file)."""

    def __init__(self, heading: str):
        self.heading = heading

    def read_text(self) -> str:
        return section(self.heading)

    def __str__(self) -> str:
        return f"{README} ({self.heading})"
