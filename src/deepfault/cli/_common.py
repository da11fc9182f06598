"""What the sub-commands share: argument types, the help formatter, devices, tables."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from ..errors import DeepFaultError

log = logging.getLogger("deepfault")


def positive_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def int_list(text: str) -> tuple[int, ...]:
    """Comma-separated integers, e.g. ``20,50``."""
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers such as 20,50; got {text!r}") from None


def seed_int(text: str) -> int:
    """A seed: an integer >= 0."""
    value = positive_int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"a seed must be an integer >= 0; got {text!r}")
    return value


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def class_list(text: str) -> tuple[int, ...] | None:
    if text.strip().lower() == "all":
        return None
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a class index, a comma-separated list, or 'all'; got {text!r}"
        ) from None


def names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a default only where there is one worth showing and the help does not say it."""

    def _get_help_string(self, action):
        text = action.help or ""
        flag = isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction))
        if flag or action.default is None or action.default is argparse.SUPPRESS or "default" in text:
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


def add_data_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", metavar="DIR", default=None,
                   help="data root (default: $DEEPFAULT_DATA, else the user cache directory)")


def add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", default=None, metavar="NAME",
                   help="zoo architecture of a plain state_dict file (see 'deepfault train --help')")
    p.add_argument("--weights", default=None, metavar="FILE",
                   help="Keras weights HDF5 when --model is an architecture JSON")
    p.add_argument("--trust-pickle", action="store_true",
                   help="allow loading a pickled whole nn.Module (unpickling can run code: "
                   "only for files you trust)")


def add_report_option(p: argparse.ArgumentParser) -> None:
    """``--report DIR``: the one way every single-run command asks for its HTML page."""
    p.add_argument("--report", dest="report_dir", metavar="DIR", default=None,
                   help="also write a self-contained DIR/report.html of this run (its PNGs beside it), "
                   "written whole or not at all")


def write_run_report(args, render) -> None:
    """Write ``--report DIR`` (when given) through the report shell and print where.

    ``render(folder) -> dict(title, html, ...)`` is the method's page
    (:func:`deepfault.experiment.report.write_page`).
    """
    if getattr(args, "report_dir", None) is None:
        return
    from ..experiment.report import write_page

    print(f"wrote {write_page(args.report_dir, render)}")


def device_from(name: str):
    """``--device`` as a :class:`torch.device` that exists here (:func:`deepfault.checks.check_device`)."""
    from ..checks import check_device

    return check_device(name, "--device")


def table(headers: Sequence[str], rows: Sequence[Sequence], indent: str = "  ") -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for r in cells:
        parts = [c.ljust(w) if i == 0 or not numeric(c) else c.rjust(w)
                 for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        lines.append(indent + "  ".join(parts).rstrip())
    return "\n".join(lines)


def numeric(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return text in ("inf", "-", "n/a")


def fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value == float("inf"):
            return "inf"
        return f"{value:.{digits}f}"
    return str(value)


def open_model_file(args):
    from ..models import open_model

    return open_model(args.model, weights=args.weights, arch=args.arch,
                      trust_pickle=args.trust_pickle)


def load_inputs(args, data=None):
    """The prepared model and its data set (:func:`deepfault.models.prepare.prepare_model`):
    ``--model`` (or the embedded default), ``--dataset`` (or ``data``, or the file's).
    """
    from ..models.prepare import prepare_model

    prepared = prepare_model(args.model, data if data is not None else args.dataset, data_dir=args.data_dir,
                             weights=args.weights, arch=args.arch, trust_pickle=args.trust_pickle)
    if prepared.data is None:
        raise DeepFaultError(f"model file {str(args.model)!r} does not name its data set; add --dataset NAME")
    return prepared
