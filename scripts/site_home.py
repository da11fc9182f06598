"""Write docs/index.md (the documentation site's home) from README.md, links made relative to docs/."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTE = "<!-- Written from README.md by scripts/site_home.py: edit the README, not this file. -->\n"


def home(readme: str) -> str:
    """The README as the site's home page."""
    text = readme.replace("](docs/", "](")
    text = text.replace("[Specifications](spec/)", "[Specifications](spec/deepfault.md)")
    return NOTE + text.replace("[`docs/results/`](results/)", "`docs/results/`")


if __name__ == "__main__":
    (ROOT / "docs" / "index.md").write_text(home((ROOT / "README.md").read_text(encoding="utf-8")),
                                             encoding="utf-8")
    print("wrote docs/index.md")
