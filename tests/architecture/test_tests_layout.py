"""The tests mirror the package: a folder per package, shared helpers in tests/helpers/, and
no test module importing another."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_test_imports_another_test_module():
    offenders = []
    for path in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.relative_to(TESTS)}: {n}" for n in names
                          if n.split(".")[-1].startswith("test_") or n.startswith("conftest")]
    assert not offenders, offenders


def test_test_modules_live_in_package_folders():
    loose = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert not loose, f"put these in the folder of the package they test: {loose}"


def test_test_module_names_are_unique():
    """pytest's default import mode needs one basename per test module."""
    names = [p.name for p in TESTS.rglob("test_*.py")]
    clashes = sorted({n for n in names if names.count(n) > 1})
    assert not clashes, f"rename one of each: {clashes}"
