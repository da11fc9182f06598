"""docs/architecture.md's module tree is held to the code: every module and folder it names
exists, and every package, every top-level module and every module of the engine's kernel
(``core/``) is in it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "src" / "deepfault"


def _tree() -> list[Path]:
    """The paths the tree block names, from each line's indentation."""
    text = DOC.read_text(encoding="utf-8")
    block = text.split("## The tree", 1)[1].split("```", 2)[1]
    stack: list[tuple[int, Path]] = []
    named: list[Path] = []
    for line in block.splitlines():
        m = re.match(r"^( *)([\w./]+/|[\w.]+\.py)(?=\s|$)", line)
        if not m:
            continue
        indent, name = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else ROOT
        path = parent / name.rstrip("/")
        named.append(path)
        if name.endswith("/"):
            stack.append((indent, path))
    return named


def test_every_path_the_tree_names_exists():
    named = _tree()
    assert len(named) > 40
    missing = [str(p.relative_to(ROOT)) for p in named if not p.exists()]
    assert not missing, f"docs/architecture.md names what is not there: {missing}"


def test_every_package_and_engine_module_is_in_the_tree():
    named = set(_tree())
    packages = {p.parent for p in PACKAGE.rglob("__init__.py")
                if p.parent.relative_to(PACKAGE).parts[:1] not in (("templates",),)}
    packages = {p for p in packages if len(p.relative_to(PACKAGE).parts) <= 2}  # sub-packages, one level down
    top = set(PACKAGE.glob("*.py"))
    core = {p for p in (PACKAGE / "core").glob("*.py") if p.name != "__init__.py"}
    wanted = (packages | top | core) - {PACKAGE}
    absent = sorted(str(p.relative_to(ROOT)) for p in wanted if p not in named)
    assert not absent, f"add these to docs/architecture.md's tree: {absent}"
