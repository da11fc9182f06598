"""A griffe extension for the docs site (mkdocs.yml, mkdocstrings' ``extensions``): the
docstrings' Sphinx roles (``:func:`~deepfault.coverage.surprise.fit_surprise```,
``:class:`RankReport```) become code that links to the object where the site documents it.

mkdocstrings reads docstrings as Markdown, where a role showed as the literal text
``:func:`` before the name. Each role becomes an *optional* autorefs cross-reference: a link
when the target is on the site, plain code otherwise (no warning, so the strict build holds).
A leading ``~`` shows the last part of the name only, as in Sphinx; a name without a package
is looked up beside the object first, then from its module.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|meth|class|data|attr|mod|exc|obj|const):`(~?)([^`<>]+)`")


def _identifier(obj: griffe.Object, target: str) -> str:
    """The dotted path of ``target`` as written in ``obj``'s docstring."""
    target = target.strip().removesuffix("()")
    if target.startswith("."):  # relative to the object's package, as Sphinx reads it
        package = obj.module.path if obj.module.is_init_module else obj.module.path.rpartition(".")[0]
        dots = len(target) - len(target.lstrip("."))
        parts = package.split(".")
        return ".".join(parts[: len(parts) - dots + 1] + [target.lstrip(".")])
    if target.startswith(obj.package.path + ".") or target == obj.package.path:
        return target
    scope = obj if obj.is_class or obj.is_module else obj.parent
    for owner in (scope, obj.module):
        if owner is not None and target.split(".")[0] in owner.members:
            return f"{owner.path}.{target}"
    return target


def replace_roles(obj: griffe.Object, text: str) -> str:
    """``text`` with each Sphinx role as an optional autorefs reference."""

    def one(match: re.Match) -> str:
        short, target = match.group(1), match.group(2)
        identifier = _identifier(obj, target)
        shown = target.strip().rpartition(".")[2] if short else target.strip().lstrip(".")
        return f'<autoref identifier="{identifier}" optional><code>{shown}</code></autoref>'

    return ROLE.sub(one, text)


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring as it is loaded."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring and ":`" in obj.docstring.value:
            obj.docstring.value = replace_roles(obj, obj.docstring.value)
