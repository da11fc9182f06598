"""One home per public name: no module-level name that does not start with ``_`` is defined
in two modules of ``src/deepfault``, but for the few a protocol asks every module of a kind
to define (the allow-list below, each with where it may stand and why).

A definition is a module-level ``def``, ``class`` or assignment (annotated or not); an
import, even ``import x as name``, is not one, so a re-export is fine. Read with :mod:`ast`.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from fnmatch import fnmatch
from pathlib import Path

import deepfault

ROOT = Path(deepfault.__file__).parent
#: The method packages (``deepfault/methods.py`` lists them).
METHODS = ("localization", "coverage", "xplore", "fuzz", "repair", "gate")
_IN_A_METHOD = tuple(f"{m}/*" for m in METHODS)

#: Name -> (the files it may be defined in, why it is defined in each of them).
ALLOWED: dict[str, tuple[tuple[str, ...], str]] = {
    "add_parser": (("cli/*.py",), "each sub-command module adds its parser (cli/__init__.py calls it)"),
    "outputs": (("cli/*.py",), "each command declares its output paths once (cli/_preflight.py checks them)"),
    "preflight": (("cli/*.py",), "what only that command checks before any work (cli/_preflight.py runs it)"),
    "METHOD": (tuple(f"{m}/__init__.py" for m in METHODS),
               "each method package's record (deepfault/methods.py imports it)"),
    "log": (("*",), "each module's own logger, logging.getLogger(__name__)"),
    # One verb per method, each on its own result type (STYLE: the same verb in every method):
    "render_report": (_IN_A_METHOD, "a method's section of 'deepfault report' (its Method.report)"),
    "run_page": (_IN_A_METHOD, "a method's page of one run (--report DIR)"),
    "summary_text": (_IN_A_METHOD, "what a method's command prints for one run"),
    "add_surprise": (_IN_A_METHOD, "a method's result with the surprise adequacy of its inputs"),
}


def _definitions() -> dict[str, list[str]]:
    """Public name -> the modules (paths relative to the package) that define it."""
    out: dict[str, list[str]] = defaultdict(list)
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        rel = path.relative_to(ROOT).as_posix()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            else:
                continue
            for name in names:
                if not name.startswith("_") and rel not in out[name]:
                    out[name].append(rel)
    return out


def test_no_public_name_is_defined_twice():
    twice = {}
    for name, files in _definitions().items():
        if len(files) < 2:
            continue
        patterns = ALLOWED.get(name, ((), ""))[0]
        if not all(any(fnmatch(f, p) for p in patterns) for f in files):
            twice[name] = files
    assert not twice, ("public names defined in more than one module (rename one, or import it from "
                       f"one home): {twice}")


def test_the_allow_list_is_still_needed():
    defined = _definitions()
    unused = [name for name in ALLOWED if len(defined.get(name, [])) < 2]
    assert not unused, f"allowed twice but defined once or never; drop them from ALLOWED: {unused}"


def test_the_scan_sees_a_duplicate(tmp_path, monkeypatch):
    """The scan itself: two modules defining one public name are found, imports are not."""
    (tmp_path / "a.py").write_text("THING = 1\ndef _private(): pass\n")
    (tmp_path / "b.py").write_text("from .a import THING as THING\nclass THING: pass\n")
    (tmp_path / "c.py").write_text("from .a import THING\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert dict(_definitions()) == {"THING": ["a.py", "b.py"]}
