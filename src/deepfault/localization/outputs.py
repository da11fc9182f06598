"""The synthesized inputs of a run, saved for the user: an ``.npz`` and an image grid.

The ``.npz`` (read with ``np.load(path)``, no pickle) holds one row per synthesized input:

=====================  ================================================================
``originals``           ``(N, ...)`` the inputs synthesis started from
``synthesized``         ``(N, ...)`` the new inputs
``labels``              ``(N,)`` the originals' labels (the new inputs inherit them)
``pred_original``       ``(N,)`` the model's prediction on the original
``pred_synthesized``    ``(N,)`` its prediction on the synthesized input
``test_index``          ``(N,)`` the original's index in the test split
``target_class``        ``(N,)`` the class analysed
``repetition``          ``(N,)`` the repetition
``neurons``             ``(R, k)`` strings ``layer[unit]`` of the selected neurons, one row
                        per (class, repetition), ``selection_row`` maps inputs to rows
=====================  ================================================================
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._io import atomic_path
from ..core.constraints import Declared, Flag, file_param, param
from ..core.guard import output_path, sibling
from ..experiment.tables import fmt, text_table

if TYPE_CHECKING:
    from ..core.runtime import Runtime
    from ..data import Dataset
    from .config import RunConfig

__all__ = ["RunShown", "RunFiles", "save_synthesized", "synthesized_grid", "summary_text"]


@dataclass(frozen=True, eq=False)
class RunShown:
    """What a run's summary, page and files show beside its findings (none of it is in
    ``to_dict()``): the data, the model's name, the device, the neuron and batch lines, the
    surprise state and the random baseline, with the times they took.
    """

    data: Dataset
    model_name: str
    model_accuracy: float | None
    device: str
    layers_source: str
    batch: str
    seconds: float
    surprise: Any = None
    no_surprise: str | None = None
    baseline: Any = None
    baseline_seconds: float | None = None

    @classmethod
    def of(cls, prepared, module, data: Dataset, config: RunConfig, runtime: Runtime, batch: str,
           seconds: float) -> RunShown:
        """What the entry knows of a run: ``prepared`` is the model as given (a prepared model
        names itself and records its test accuracy), ``module`` the network that ran.
        """
        from ..core.capture import selection_source

        meta = getattr(getattr(prepared, "model_file", None), "meta", None) or {}
        name = getattr(prepared, "name", None) or type(module).__name__
        param = next(module.parameters(), None)
        device = runtime.device or (str(param.device) if param is not None else "cpu")
        source = selection_source(module, config.layers)
        return cls(data, name, meta.get("test_accuracy"), str(device), source, batch, seconds)


@dataclass(frozen=True)
class RunFiles(Declared):
    """Where a run's files go: its JSON result, its synthesized inputs (``.npz``, their image
    grid beside it as ``.png``) and the log its summary is appended to, each ``None`` or ``'-'``
    for none.

    Attributes:
        out: The JSON result.
        log: The log file the printed summary is appended to.
        save_inputs: The synthesized inputs (default: beside ``out``, as ``.npz``).
        no_save_inputs: Save no synthesized inputs.
    """

    out: str | os.PathLike | None = file_param("deepfault-result.json",
                                               "JSON result file, written atomically; '-' writes none")
    log: str | os.PathLike | None = file_param(None, "also append the printed summary to this file")
    save_inputs: str | os.PathLike | None = file_param(
        None, "where to save the synthesized inputs with their originals, labels and predictions, plus an "
        "image grid beside it (.png) (default: beside --out, e.g. deepfault-result.npz)", metavar="FILE.npz")
    no_save_inputs: bool = param(False, Flag(), help="do not save the synthesized inputs")

    def paths(self) -> tuple[Path | None, Path | None, Path | None, Path | None]:
        """``(result, inputs, their grid, log)``, ``None`` for each not written.

        Raises:
            DeepFaultError: A path that names a folder (``m/``).
        """
        out = output_path(self.out, "--out")
        inputs = None
        if not self.no_save_inputs and (self.save_inputs or out is not None):
            inputs = Path(self.save_inputs) if self.save_inputs else sibling(out, ".npz")
        return out, inputs, sibling(inputs, ".png"), output_path(self.log, "--log")


def _collect(result, data) -> dict[str, np.ndarray]:
    parts: dict[str, list] = {k: [] for k in ("originals", "synthesized", "labels", "pred_original",
                                               "pred_synthesized", "test_index", "target_class",
                                               "repetition", "selection_row")}
    neurons: list[list[str]] = []
    for cr in result.classes:
        for rep in cr.repetitions:
            n = len(rep.input_indices)
            row = len(neurons)
            neurons.append([f"{x.layer}[{x.unit}]" for x in rep.selection.neurons])
            if not n:
                continue
            parts["originals"].append(data.x_test[rep.input_indices])
            parts["synthesized"].append(rep.synthesized)
            parts["labels"].append(data.y_test[rep.input_indices])
            parts["pred_original"].append(rep.evaluation.pred_original)
            parts["pred_synthesized"].append(rep.evaluation.pred_synthesized)
            parts["test_index"].append(np.asarray(rep.input_indices))
            parts["target_class"].append(np.full(n, cr.target_class))
            parts["repetition"].append(np.full(n, rep.index))
            parts["selection_row"].append(np.full(n, row))
    shape = data.x_test.shape[1:]
    out = {}
    for key, values in parts.items():
        if values:
            out[key] = np.concatenate(values)
        else:
            empty_inputs = key in ("originals", "synthesized")
            out[key] = np.zeros((0, *shape), np.float32) if empty_inputs else np.zeros(0, int)
    width = max((len(r) for r in neurons), default=0)
    padded = [r + [""] * (width - len(r)) for r in neurons]
    out["neurons"] = np.array(padded, dtype=str).reshape(len(neurons), width)
    out["originals"] = out["originals"].astype(np.float32)
    out["synthesized"] = out["synthesized"].astype(np.float32)
    return out


def save_synthesized(result, data, path: str | os.PathLike) -> Path:
    """Write every synthesized input of ``result`` (a :class:`~.protocol.RunResult` on ``data``)
    with its original, label and predictions to ``path`` (``.npz``, atomically).
    """
    arrays = _collect(result, data)
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez_compressed(fh, allow_pickle=False, **arrays)  # no object arrays; read without pickle
    return path


def synthesized_grid(npz_path: str | os.PathLike, png_path: str | os.PathLike, *, bounds=(0.0, 1.0),
                     class_names=None, per_class: int = 2) -> Path | None:
    """A PNG grid from a :func:`save_synthesized` file: original, synthesized and their
    difference with colour bars, ``per_class`` inputs of each class (those whose prediction
    changed first, titled in red), with the model's predictions.

    Returns ``None`` (and writes nothing) when the inputs are not images or matplotlib is
    not installed.
    """
    with np.load(npz_path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    return _grid(arrays, png_path, bounds=bounds, class_names=class_names, per_class=per_class)


def grid_of(result, data, png_path: str | os.PathLike) -> Path | None:
    """:func:`synthesized_grid` of ``result``'s inputs on ``data``, straight from the result."""
    return _grid(_collect(result, data), png_path, bounds=data.bounds, class_names=list(data.class_names))


def _grid(arrays: dict, png_path, *, bounds, class_names, per_class: int = 2) -> Path | None:
    try:
        from ..experiment.figures import GridCaptions, as_image, changed_first, difference_grid
        from ..experiment.report import new_figure

        new_figure(1, 1)  # matplotlib is there
    except ModuleNotFoundError:
        return None
    changed = arrays["pred_synthesized"] != arrays["labels"]
    rows = []
    for c in np.unique(arrays["target_class"]):
        mine = np.flatnonzero(arrays["target_class"] == c)
        rows.extend(mine[changed_first(changed[mine], limit=per_class)].tolist())
    if not rows or as_image(arrays["originals"][rows[0]]) is None:
        return None
    name = (lambda i: class_names[i]) if class_names else str
    captions = GridCaptions(
        before=[f"#{int(arrays['test_index'][i])} label {name(int(arrays['labels'][i]))}\n"
                f"predicted {name(int(arrays['pred_original'][i]))}" for i in rows],
        after=[f"synthesized\npredicted {name(int(arrays['pred_synthesized'][i]))}" for i in rows],
        highlight=changed[rows], labels=("original", "synthesized"))
    return difference_grid(arrays["originals"][rows], arrays["synthesized"][rows], png_path, bounds=bounds,
                           columns=2, captions=captions)


#: The legend under ``deepfault run``'s neuron tables (the spectrum's four counts, spec section 2).
NEURON_LEGEND = ("as/af: inputs of the class classified right/wrong (passing/failing) that activate the "
                 "neuron (value > threshold); ns/nf: passing/failing inputs that do not")
#: The legend under its evaluation table (:mod:`deepfault.localization.evaluation`).
EVALUATION_LEGEND = ("changed: share predicted otherwise than the original; L1/L2/Linf: distance to the "
                     "original; increased (@k'): share of the k (top k') neurons whose value rose; "
                     "ms/input: synthesis time")


def summary_text(result, *, quiet: bool = False) -> str:
    """What ``deepfault run`` prints after the run's answer: the model and data, the batch and
    neuron lines, each class's neurons (unless ``quiet``), the evaluation of the synthesized
    inputs, the surprise state and the random baseline (from ``result.shown``).
    """
    parts = [_header(result), "" if quiet else _neuron_tables(result), _evaluation_table(result),
             _totals(result), _after_text(result.shown)]
    return "".join(parts)


def _header(result) -> str:
    """The batch line, the model and data, the settings and the neurons analysed."""
    from ..core.capture import neurons_line

    shown, cfg = result.shown, result.config
    data = shown.data
    acc = result.test_accuracy if shown.model_accuracy is None else shown.model_accuracy
    lines = [shown.batch] if shown.batch else []
    lines.append(f"model {shown.model_name} (test accuracy {acc:.1%}) · data {data.name} "
                 f"({len(data.y_test)} test inputs, bounds {data.bounds[0]:g}..{data.bounds[1]:g}) · "
                 f"{shown.device}")
    lines.append(f"measure {cfg.measure}, k={cfg.k}, step size {cfg.step_size:g}, "
                 f"distance {cfg.distance:g} (L_inf), "
                 f"{'normalised' if cfg.normalize else 'raw'} gradients, {cfg.iterations} iteration(s), "
                 f"seed {cfg.seed}")
    if result.classes:
        layout = result.classes[0].spectrum.layout
        lines.append(neurons_line(layout.num_neurons, len(layout.layers), shown.layers_source))
    return "".join(line + "\n" for line in lines)


def _neuron_tables(result) -> str:
    """Each class's spectrum line and, per repetition, its neurons with their counts."""
    out = io.StringIO()
    w = out.write
    names = result.shown.data.class_names
    for cr in result.classes:
        sp = cr.spectrum
        name = names[cr.target_class]
        label = f"{cr.target_class}" + (f" ({name})" if name != str(cr.target_class) else "")
        w(f"\nclass {label}: {sp.num_inputs} inputs, "
          f"{sp.num_passed} pass, {sp.num_failed} fail · spectrum {sp.seconds * 1e3:.1f} ms\n")
        if cr.no_failures:
            w("  no failing input: every score is 0; neurons follow the tie-breaking order\n")
        for rep in cr.repetitions:
            if result.config.repeat > 1:
                w(f"  repetition {rep.index}\n")
            ranked = [(i + 1, n.layer, n.unit, fmt(n.score), n.a_s, n.a_f, n.n_s, n.n_f)
                      for i, n in enumerate(rep.selection.neurons)]
            w(text_table(("rank", "layer", "unit", "score", "as", "af", "ns", "nf"), ranked) + "\n")
    if result.classes:
        w(f"  ({NEURON_LEGEND})\n")
    return out.getvalue()


def _surprise_kinds(result) -> list[str]:
    evs = [rep.evaluation for cr in result.classes for rep in cr.repetitions]
    return list(next((e.surprise for e in evs if e.surprise), {}))


def _evaluation_table(result) -> str:
    """One row per class (and repetition): the synthesized inputs' means."""
    kinds = _surprise_kinds(result)
    repeat = result.config.repeat > 1
    rows = []
    for cr in result.classes:
        for rep in cr.repetitions:
            s = rep.evaluation.summary()
            n = s["inputs"]
            ms = rep.synthesis_seconds / n * 1e3 if n else None
            inc_at = " ".join(f"{k}:{fmt(v, 2)}" for k, v in s["increased_at"].items())
            label = str(cr.target_class) + (f"/{rep.index}" if repeat else "")
            sa = [_g(s.get("surprise", {}).get(k)) for k in kinds]
            rows.append((label, n, fmt(s["loss"]), fmt(s["accuracy"]), fmt(s["changed"]),
                         fmt(s["l1"], 2), fmt(s["l2"], 3), fmt(s["linf"], 3), *sa,
                         fmt(s["increased"], 2), inc_at or "-", fmt(ms, 3)))
    table = text_table(("class", "inputs", "loss", "accuracy", "changed", "L1", "L2", "Linf",
                        *(k.upper() for k in kinds), "increased", "increased@k'", "ms/input"), rows)
    surprise = f"; {'/'.join(k.upper() for k in kinds)}: mean surprise adequacy" if kinds else ""
    return ("\nevaluation of synthesized inputs (labels are the originals'; means per input)\n"
            f"{table}\n  ({EVALUATION_LEGEND}{surprise})\n")


def _totals(result) -> str:
    """All classes' synthesized inputs together, their surprise, the classes with no failure."""
    evs = [rep.evaluation for cr in result.classes for rep in cr.repetitions]
    kinds = _surprise_kinds(result)
    text = ""
    total = sum(e.num_inputs for e in evs)
    if total:
        acc_all = float(np.concatenate([e.correct for e in evs]).mean())
        loss_all = float(np.concatenate([e.loss for e in evs]).mean())
        text += f"\nall classes: {total} synthesized inputs, accuracy {acc_all:.3f}, loss {loss_all:.3f}\n"
        if kinds:
            parts = []
            for k in kinds:
                new = np.concatenate([e.surprise[k] for e in evs if e.surprise])
                old = np.concatenate([e.surprise_original[k] for e in evs if e.surprise])
                parts.append(f"{k.upper()} {_g(float(np.mean(new)))} (originals {_g(float(np.mean(old)))})")
            text += f"surprise against the training data, mean per input: {', '.join(parts)}\n"
    none = [str(cr.target_class) for cr in result.classes if cr.no_failures]
    if none:
        text += f"classes with no failing test input: {', '.join(none)}\n"
    return text


def _after_text(shown: RunShown) -> str:
    """The surprise state's line and the random baseline's (what the run did after its findings)."""
    text = ""
    if shown.surprise is not None:
        text += shown.surprise.describe() + "\n"
    elif shown.no_surprise is not None:
        text += f"no surprise adequacy: {shown.no_surprise}\n"
    if shown.baseline is not None:
        text += (f"--report: the random baseline (the same run from random neurons) took "
                 f"{shown.baseline_seconds:.1f} s beside the run's {shown.seconds:.1f} s "
                 "(--no-baseline skips it)\n")
    return text


def _g(value: float | None) -> str:
    """A surprise score: four significant digits (LSA reaches millions, DSA is about 1)."""
    return "-" if value is None else "inf" if value == float("inf") else f"{value:.4g}"
