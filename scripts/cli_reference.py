"""Rewrite the generated command reference in docs/cli.md from the parser.

The generated part is written from the parser itself, so every option of every sub-command is
documented with its current default; a test fails when the page and the parser disagree.

The hand-written head of the page must not repeat a heading of the generated part (its
"One vocabulary" and "Every option of every command"): a repeated heading is two entries
with one name in the site's table of contents, and the second's anchor gets a ``_1``
suffix. The script refuses to write such a page.
"""

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

from deepfault.cli import build_parser
from deepfault.cli._common import RENAMES

BEGIN = "<!-- BEGIN GENERATED: python scripts/cli_reference.py -->"
END = "<!-- END GENERATED -->"


#: One name for each concept in every command (issue 19): ``(concept, options, note)``. The
#: commands column of docs/cli.md is read from the parser, so it cannot drift.
VOCABULARY = (
    ("the model", ("--model",), "xplore compares several: repeat it (`--model a.h5 --model b.h5`), each "
     "value also a comma list (`--model lenet1,lenet4,lenet5`)"),
    ("a model pair with roles", ("--m1", "--m2"), "M1 is the original, M2 its new version: the roles differ "
     "(faults are what M1 gets right and M2 wrong), so the pair is not a repeated `--model`"),
    ("the data set", ("--dataset",), "a name or an .npz file"),
    ("where data sets are kept", ("--data-dir",), ""),
    ("the random seed", ("--seed",), "an integer >= 0, read by one parser everywhere"),
    ("how many seed inputs", ("--num-seeds",), ""),
    ("the step size", ("--step-size",), ""),
    ("inputs per forward pass", ("--batch-size",), "a speed knob in analysis (results do not depend on "
     "it; 'auto', the default, sizes it from the memory); the minibatch in training"),
    ("inputs taken per step of a search", ("--inputs-per-step",), "xplore: seeds advanced together; "
     "regress: DRFuzz's B"),
    ("coverage criteria", ("--criteria",), "regress takes one name"),
    ("how neuron values are scaled", ("--transform",), "raw or layer-minmax"),
    ("xplore's domain constraint", ("--constraint",), "light, occl, blackout, none"),
    ("CPU threads", ("--threads",), "default `auto` everywhere: 1 when the command's models are small "
     "(<= 2M parameters) and on the CPU, measured faster; PyTorch's otherwise, and in the commands that "
     "build or fine-tune their models as they go (train, gan train, scenario, repair, experiment)"),
    ("the device", ("--device",), "default `auto` everywhere: CUDA when available"),
    ("no progress bar", ("--no-progress",), "with the global `-q`/`-v` before the command"),
    ("the result", ("--out",), "one path; siblings go beside it with their own suffix (.npz, .png, .html, "
     ".pt); a folder for scenario and report"),
    ("the suspiciousness measure", ("--measure",), ""),
    ("how many suspicious neurons", ("-k",), ""),
)


def _commands_with(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """``option -> the sub-commands that take it``, in help order."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found: dict[str, list[str]] = {}
    for name, command in sub.choices.items():
        nested = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        parsers = [(f"{name} {n}", p) for a in nested for n, p in a.choices.items()] or [(name, command)]
        for title, p in parsers:
            for action in p._actions:
                for option in action.option_strings:
                    found.setdefault(option, []).append(title)
    return found


def _vocabulary(parser: argparse.ArgumentParser) -> list[str]:
    where = _commands_with(parser)
    out = ["## One vocabulary", "",
           "Each concept has one option name, the same in every command that has the concept.", "",
           "| concept | option | commands | note |", "| --- | --- | --- | --- |"]
    for concept, options, note in VOCABULARY:
        commands = list(dict.fromkeys(c for o in options for c in where.get(o, [])))
        out.append(f"| {concept} | {', '.join(f'`{o}`' for o in options)} | {', '.join(commands)} | "
                   f"{_cell(note)} |")
    out += ["", "Old spellings are errors that name the new one (exit 2), e.g. `deepfault: error: --step was "
            "renamed --step-size (one name for each concept in every command; see docs/cli.md)`:", "",
            "| command | old | new |", "| --- | --- | --- |"]
    out += [f"| {command} | `{old}` | `{new}` |" for command, table in RENAMES.items()
            for old, new in table.items()]
    out += ["", "xplore's `--batch-size` kept its spelling and changed its meaning: it was the seeds "
            "searched together (now `--inputs-per-step`) and is now the inputs per forward pass (was "
            "`--chunk-size`). regress's `--out` is now the faults file itself (`FILE.npz`, the grid beside "
            "it as `FILE.png`), no longer a prefix.", ""]
    return out


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
        listed = [] if not action.choices or isinstance(action.choices, dict) else list(action.choices)
        choices = f" (one of: {', '.join(map(str, listed))})" if listed and len(listed) <= 30 else ""
        rows.append(f"| {_cell(name)} | {_cell(_default(action))} | {_cell((action.help or '') + choices)} |")
    return rows


def markdown() -> str:
    """Every sub-command (and sub-sub-command) with a table of its arguments."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = [BEGIN, "", *_vocabulary(parser),
           "## Every option of every command", "",
           "This part is written from the parser by `python scripts/cli_reference.py`; a test fails",
           "when it and the program disagree.", ""]
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
