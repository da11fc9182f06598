"""The command-line reference as Markdown, written from the parser itself (``docs/cli.md``).

``python scripts/cli_reference.py`` rewrites the generated part of ``docs/cli.md``; a test
fails when the page and the parser disagree, so every option of every sub-command is
documented with its current default.
"""

from __future__ import annotations

import argparse

__all__ = ["markdown", "BEGIN", "END"]

BEGIN = "<!-- BEGIN GENERATED: python scripts/cli_reference.py -->"
END = "<!-- END GENERATED -->"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(action: argparse.Action) -> str:
    if action.default in (None, argparse.SUPPRESS) or action.nargs == 0:
        return ""
    return f"`{action.default}`"


def _rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            continue
        if action.option_strings:
            name = ", ".join(f"`{o}`" for o in action.option_strings)
            if action.nargs != 0:
                name += f" {action.metavar or action.dest.upper()}"
        else:
            name = f"`{action.metavar or action.dest}`"
        choices = f" (one of: {', '.join(map(str, action.choices))})" if action.choices and \
            not isinstance(action.choices, dict) and len(action.choices) <= 30 else ""
        rows.append(f"| {_cell(name)} | {_cell(_default(action))} | {_cell((action.help or '') + choices)} |")
    return rows


def markdown() -> str:
    """Every sub-command (and sub-sub-command) with a table of its arguments."""
    from . import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = [BEGIN, ""]
    for name, command in sub.choices.items():
        out += [f"### `deepfault {name}`", "", _cell(command.description or ""), ""]
        nested = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        parsers = [(f"{name} {n}", p) for a in nested for n, p in a.choices.items()] or [(name, command)]
        for title, p in parsers:
            if title != name:
                out += [f"#### `deepfault {title}`", "", _cell(p.description or ""), ""]
            rows = _rows(p)
            if rows:
                out += ["| argument | default | meaning |", "| --- | --- | --- |", *rows, ""]
    out.append(END)
    return "\n".join(out)
