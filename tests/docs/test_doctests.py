"""Every ``>>>`` example in the package's docstrings runs and prints what it says."""

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import deepfault

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(deepfault.__path__, "deepfault.")
    if not m.name.endswith("__main__")
    and ">>> " in Path(importlib.util.find_spec(m.name).origin).read_text(encoding="utf-8")
)


def test_the_package_has_runnable_examples():
    assert len(MODULES) >= 20


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), report=True,
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed"
