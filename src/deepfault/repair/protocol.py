"""``repair``: fine-tune a model on the failing inputs testing found, against baselines.

The way through: input files -> labels (:mod:`.labels`) -> held-out split by seed
(:mod:`.holdout`) -> found inputs mixed with training inputs -> fine-tuned copy
(:mod:`.finetune`), and the same for each baseline (:mod:`.baselines`) -> accuracies before
and after (:class:`~.results.RepairEvaluation`) -> :class:`~.results.RepairResult`.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from ..core.entry import entry, split_arguments
from ..core.runtime import Runtime
from ..data import Dataset
from ..data.dataset import as_dataset
from ..errors import DeepFaultError
from ..models import ModelFile
from ..models.prepare import PreparedModel, prepare_model
from .baselines import baseline_inputs
from .config import RepairConfig
from .finetune import finetune
from .holdout import seed_keys, split_by_seed
from .inputs import InputFile, read_inputs
from .labels import Labelled, label_inputs
from .results import ApproachResult, FileSummary, RepairEvaluation, RepairResult
from .save import save_repaired

__all__ = ["repair", "evaluate_model", "save_repaired"]

log = logging.getLogger(__name__)


#: Inputs per forward pass of :func:`evaluate_model` when no batch size is given.
PREDICT_BATCH = 1024


def _predict(model: nn.Module, x, batch_size: int = PREDICT_BATCH) -> np.ndarray:
    """The ``(N,)`` int64 arg-max predictions, filled batch by batch into one array: no
    ``(N, classes)`` outputs and no list of per-batch tensors, whose small blocks pinned the
    heap and made the resident set grow with N (issue 26). ``repair`` passes its own batch
    size: a fixed 1,024 ran every test split below it as one batch, so the peak grew with the
    number of test inputs (ResNet-50 at 224x224: about 24 MiB per input).
    """
    from ..core.batches import iterate_batches

    out = np.zeros(len(x), np.int64)
    if len(x):
        for b in iterate_batches(model, x, neurons=False, batch_size=batch_size):
            out[b.start : b.stop] = b.outputs.argmax(1).cpu().numpy()
    return out


def _acc(pred: np.ndarray, y: np.ndarray) -> float | None:
    return float((pred == y).mean()) if len(y) else None


def evaluate_model(model: nn.Module, data, *, clean: np.ndarray, held: dict,
                   batch_size: int = PREDICT_BATCH) -> RepairEvaluation:
    """Accuracies of ``model`` on ``data``'s test split, its ``clean`` part (bool ``(N,)``) and
    each held-out set: ``held[name] = (x, y, m1_right)`` with ``m1_right`` ``(H,)`` bool for
    regression faults (else ``None``); ``batch_size`` inputs per forward pass.
    """
    return _evaluate(model, data, clean=clean, held=held, batch_size=batch_size)[0]


def _evaluate(model: nn.Module, data, *, clean: np.ndarray, held: dict, batch_size: int = PREDICT_BATCH
              ) -> tuple[RepairEvaluation, np.ndarray]:
    """:func:`evaluate_model` and whether the model gets each held-out input right (bool, every
    file's held-out inputs in ``held``'s order, concatenated).
    """
    pred = _predict(model, data.x_test, batch_size)
    held_out, rf, right = {}, {}, [np.zeros(0, bool)]
    for name, (x, y, m1_right) in held.items():
        p = _predict(model, x, batch_size)
        held_out[name] = _acc(p, y)
        right.append(p == y)
        if m1_right is not None:
            rf[name] = int((m1_right & (p != y)).sum())
    test = float((pred == data.y_test).mean())  # the test split is never empty
    return RepairEvaluation(test, _acc(pred[clean], data.y_test[clean]), held_out, rf), np.concatenate(right)


def _unique_names(files: Sequence[InputFile]) -> list[str]:
    names: list[str] = []
    for f in files:
        name = f.name
        while name in names:
            name = f"{f.name}#{len(names)}"
        names.append(name)
    return names


def _trained(train_on, files, names) -> list[bool]:
    if train_on is None:
        return [True] * len(files)
    chosen = set()
    for t in train_on:
        if isinstance(t, int) and 0 <= t < len(files):
            chosen.add(t)
        elif isinstance(t, str) and (t in names or t in [str(f.path) for f in files]):
            chosen.add(
                next(i for i, (n, f) in enumerate(zip(names, files, strict=True)) if t in (n, str(f.path)))
            )
        else:
            raise DeepFaultError(
                f"train_on names {t!r}, which is not one of the input files ({', '.join(names)})"
            )
    return [i in chosen for i in range(len(files))]


def _label_file(f: InputFile, data, config: RepairConfig) -> Labelled:
    """Label one inputs file (:func:`.labels.label_inputs`), checked against the data set."""
    if f.inputs.shape[1:] != data.input_shape:
        raise DeepFaultError(
            f"{f.name} holds inputs of shape {f.inputs.shape[1:]} but the model takes "
            f"{data.input_shape}; give the model and data set the inputs were made for"
        )
    f.check_classes(data.num_classes, data.name)
    lab = label_inputs(f, vote_model=config.vote_model, ties=config.ties, num_classes=data.num_classes)
    if lab.ties:
        log.info(
            "%s: %d of %d votes tied (%s)",
            f.name,
            lab.ties,
            len(f),
            "dropped" if config.ties == "drop" else "labelled with the seed's class",
        )
    bad = (lab.labels < 0) | (lab.labels >= data.num_classes)
    if bad.any():
        raise DeepFaultError(
            f"{f.name} has labels outside the {data.num_classes} classes of {data.name!r}"
        )
    return lab


def _reference_accuracy(evaluation: RepairEvaluation) -> float:
    """The test accuracy a fine-tuning's change is measured on: on the clean test inputs when known."""
    if evaluation.clean_test_accuracy is not None:
        return evaluation.clean_test_accuracy
    return evaluation.test_accuracy


@dataclass(frozen=True, eq=False)
class _Files:
    """The input files labelled and split: what is fine-tuned on and what is held out."""

    summaries: tuple[FileSummary, ...]
    splits: dict[str, tuple[np.ndarray, np.ndarray]]
    held: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]]
    found_x: np.ndarray
    found_y: np.ndarray
    found_seeds: np.ndarray
    held_seeds: np.ndarray


def _read_files(inputs) -> list[InputFile]:
    one = isinstance(inputs, (str, os.PathLike, InputFile))
    files = [f if isinstance(f, InputFile) else read_inputs(f) for f in ([inputs] if one else list(inputs))]
    if not files:
        raise DeepFaultError(
            "no inputs file given; give one or more .npz files of 'deepfault run', 'xplore' or 'regress'"
        )
    return files


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    """The arrays end to end; one array as it is (``np.concatenate`` would copy it, one more
    copy of the found inputs at repair's peak).
    """
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _split_files(files: list[InputFile], data, config: RepairConfig, train_on, m1_net) -> _Files:
    """Label every file, split it by seed, and pool the training parts of the files trained on."""
    keys = seed_keys(len(data.x_test), config.seed)
    names = _unique_names(files)
    summaries, splits, held, parts, held_seeds = [], {}, {}, [], []
    for name, f, use in zip(names, files, _trained(train_on, files, names), strict=True):
        lab = _label_file(f, data, config)
        tr, ho = split_by_seed(lab.seed_index, holdout=config.holdout, keys=keys)
        splits[name] = (lab.rows[tr], lab.rows[ho])
        seeds = lab.seed_index
        summaries.append(FileSummary(name, str(f.path), f.kind, len(f), len(lab.rows), lab.source, lab.ties,
                                     lab.tie_policy, len(tr), len(ho), len(np.unique(seeds[tr])),
                                     len(np.unique(seeds[ho])), use))
        x_ho, y_ho = lab.inputs[ho], lab.labels[ho]
        m1_right = None
        if f.kind == "regress":
            m1_pred = _m1_predictions(f, lab, ho, x_ho, m1_net, config.batch_size)
            m1_right = m1_pred == y_ho
        held[name] = (x_ho, y_ho, m1_right)
        held_seeds.append(seeds[ho])
        if use:
            parts.append((lab.inputs[tr], lab.labels[tr], seeds[tr]))
    if not parts:
        empty = np.zeros(0, np.int64)
        parts.append((np.zeros((0, *data.input_shape), np.float32), empty, empty))
    del lab  # the last file's labelled inputs: only their parts are kept
    found = _Files(tuple(summaries), splits, held, _joined([p[0] for p in parts]),
                   _joined([p[1] for p in parts]), _joined([p[2] for p in parts]),
                   np.unique(np.concatenate(held_seeds)) if held_seeds else np.zeros(0, np.int64))
    if len(found.found_x) == 0:
        detail = "; ".join(f"{s.name}: {s.used} labelled of {s.inputs}, {s.held_out} held out"
                           for s in summaries)
        hint = (" (tied votes are dropped: use ties='seed' / --ties seed or a vote model)"
                if any(s.ties for s in summaries) else "")
        raise DeepFaultError(f"no labelled input left to fine-tune on ({detail}){hint}")
    return found


def _m1_predictions(f: InputFile, lab: Labelled, held_rows: np.ndarray, x_ho: np.ndarray,
                    m1_net: nn.Module | None, batch_size: int = PREDICT_BATCH) -> np.ndarray:
    """M1's predictions of a regress file's held-out inputs: recomputed with ``m1_net``, else saved."""
    if m1_net is not None:
        return _predict(m1_net, x_ho, batch_size)
    if f.m1_pred is None:
        raise DeepFaultError(f"{f.name} is a regress file without M1's predictions; give M1 (--m1)")
    return f.m1_pred[lab.rows[held_rows]]


def _mixed_in(config: RepairConfig, found: int, n_train: int) -> np.ndarray:
    """The training inputs mixed into every fine-tuning (sorted indices)."""
    rng = np.random.default_rng(np.random.SeedSequence(config.seed, spawn_key=(23,)))
    n_mix = n_train if config.mix is None else min(int(round(config.mix * found)), n_train)
    return np.sort(rng.choice(n_train, size=n_mix, replace=False)) if n_mix else np.zeros(0, np.int64)


def _fine_tuning_set(x: np.ndarray, y: np.ndarray, data, mix_idx: np.ndarray
                     ) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """The inputs ``x`` and the mixed-in training inputs, as two arrays that the fine-tuning
    reads end to end (:func:`~deepfault.models.train.fit`): joined, they were one more copy of
    the found inputs at repair's peak (issue 26).
    """
    ys = np.concatenate([y.astype(np.int64), data.y_train[mix_idx].astype(np.int64)])
    return (x.astype(np.float32, copy=False), np.asarray(data.x_train[mix_idx], np.float32)), ys


def _fine_tune_each(net: nn.Module, data, augmentations, mix_idx: np.ndarray, config: RepairConfig, *,
                    clean: np.ndarray, held: dict, before: RepairEvaluation, right_before: np.ndarray,
                    progress: bool) -> tuple[list[ApproachResult], nn.Module]:
    """Fine-tune a copy of ``net`` on each augmentation mixed with the same training inputs;
    ``right_before`` says which held-out inputs ``net`` gets right (to count those fixed and broken).
    """
    approaches, repaired = [], None
    bar = None
    if progress:
        from ..core.progress import progress_bar

        bar = progress_bar(len(augmentations), desc="repair", unit="fine-tuning")
    try:
        for name, x, y in augmentations:
            t0 = time.perf_counter()
            xs, ys = _fine_tuning_set(x, y, data, mix_idx)
            tuned, tr = finetune(net, xs, ys, epochs=config.epochs, lr=config.lr,
                                 batch_size=config.batch_size, seed=config.seed)
            after, right = _evaluate(tuned, data, clean=clean, held=held, batch_size=config.batch_size)
            change = 100.0 * (_reference_accuracy(after) - _reference_accuracy(before))
            approaches.append(ApproachResult(name, len(x), after, change, change < -config.max_drop,
                                             tr.train_loss, time.perf_counter() - t0,
                                             fixed=int((right & ~right_before).sum()),
                                             broken=int((~right & right_before).sum())))
            if name == "found":
                repaired = tuned.cpu().eval()
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    if repaired is None:  # "found" is always the first augmentation
        raise DeepFaultError("no fine-tuning on the found inputs ran")
    return approaches, repaired


class _Models(NamedTuple):
    """The model to fine-tune, M1 (regress files) and, from the old keyword form, where to save
    the repaired model.
    """

    model: Any
    m1: Any = None
    save_model: str | os.PathLike | None = None


#: The old keyword form's arguments that are neither config nor runtime fields.
_OLD_KEYWORDS = ("dataset", "data_dir", "labels", "bounds", "m1", "save_model", "save_to")


def _legacy(name: str, fields: set, args: tuple, kwargs: dict) -> tuple[Any, Any, dict, dict]:
    """``repair(model, inputs, dataset=, data_dir=, labels=, bounds=, m1=, save_model=, ...)``: the data
    set goes with the model (prepared with it), M1 beside it, ``save_model`` writes the repaired
    model as before, and ``inputs=`` names the files of failing inputs, now ``found`` (each with a
    :class:`FutureWarning`; ``found=`` is the keyword without one).
    """
    if "found" in kwargs and len(args) < 2:
        kwargs["data"] = kwargs.pop("found")
    if "inputs" in kwargs and len(args) < 2:
        warnings.warn(f"{name}(..., inputs=...) is deprecated: the files of failing inputs are "
                      f"'found' ({name}(model, found, config))", FutureWarning, stacklevel=3)
        kwargs["data"] = kwargs.pop("inputs")
    old = {k: kwargs.pop(k) for k in _OLD_KEYWORDS if k in kwargs}
    models, found, config_kw, runtime_kw = split_arguments(name, fields, args, kwargs)
    if not old:
        return models, found, config_kw, runtime_kw
    warnings.warn(f"{name}(..., {', '.join(f'{k}=' for k in old)}...) is deprecated: give the data set with "
                  f"the model (prepare_model(model, dataset)), M1 beside it ({name}((model, m1), found, "
                  "config)) and write the repaired model from the result (result.outputs(), "
                  "save_repaired)", FutureWarning, stacklevel=3)
    model, m1 = _pair(models)
    dataset, data_dir = old.get("dataset"), old.get("data_dir")
    if dataset is not None and not isinstance(dataset, (str, os.PathLike)):
        dataset = as_dataset(dataset, old.get("labels"), bounds=old.get("bounds"), what="dataset")
    prepared = _prepare(model, dataset, data_dir)[0]
    if old.get("m1", m1) is not None:
        m1 = _prepare(old.get("m1", m1), prepared.data, data_dir)[0]
    return _Models(prepared, m1, old.get("save_model", old.get("save_to"))), found, config_kw, runtime_kw


def _pair(models) -> tuple[Any, Any]:
    """``(model, m1)`` of the entry's first argument: a model, or a ``(model, M1)`` pair."""
    if isinstance(models, _Models):
        return models.model, models.m1
    if isinstance(models, (tuple, list)):
        if len(models) != 2:
            raise DeepFaultError(f"repair takes a model or a (model, M1) pair; got {len(models)} models")
        return models[0], models[1]
    return models, None


@entry(RepairConfig, data=_read_files, legacy=_legacy)
def repair(
    models: str | os.PathLike | nn.Module | ModelFile | PreparedModel | tuple,
    found: str | os.PathLike | InputFile | Sequence[str | os.PathLike | InputFile],  # read by the entry
    config: RepairConfig,
    *,
    runtime: Runtime,
) -> RepairResult:
    """Fine-tune a model on the failing inputs ``found`` and measure what it gained.

    Each input file is labelled where its labels are defined (:mod:`.labels`), split by
    seed into a part fine-tuned on and a held-out part (:mod:`.holdout`); the parts used
    are pooled, mixed with ``config.mix`` training inputs each, and a copy of the model is
    fine-tuned on them. Each baseline (:mod:`.baselines`) fine-tunes another copy on as
    many other inputs, mixed with the same training inputs. Every model is measured on the
    test split and on every file's held-out inputs (DeepXplore section 7.3; DRFuzz RQ3).

    Args:
        models: The model to repair, anything :func:`deepfault.models.prepare.prepare_model`
            takes with its data set: a model file that names it, or a
            :class:`~deepfault.models.prepare.PreparedModel` (``prepare_model(model, dataset)``;
            the found inputs must come from its test split). Or a ``(model, M1)`` pair, for
            ``regress`` files: M1 recomputes which held-out faults M1 gets right (by default
            the M1 predictions saved in the file are used). Never modified.
        found: The failing inputs testing found: one or more files written by ``deepfault run
            --save-inputs``, ``deepfault xplore`` or ``deepfault regress`` (or
            :class:`~.inputs.InputFile` objects).
        config: A :class:`~.config.RepairConfig` (default ``RepairConfig()``).
        runtime: Device (where to fine-tune), threads and progress bars of the call
            (:class:`~deepfault.Runtime`; the fine-tuning's batch is ``config.batch_size``,
            which changes the result).

    Returns:
        A :class:`~.results.RepairResult`; ``result.verdict()`` says which fine-tuning fixed the
        most held-out faults within the accuracy budget (``max_drop``), if any; ``outputs()``
        writes the repaired model (``save_repaired``).

    Raises:
        DeepFaultError: Unreadable files, inputs that do not fit the model, or no labelled
            input left to fine-tune on.

    Examples:
        >>> import deepfault
        >>> r = deepfault.repair("lenet5-mnist.pt", ["xplore-result.npz"],
        ...                      deepfault.RepairConfig(epochs=5))  # doctest: +SKIP
        >>> r.found.after.held_out, r.found.test_change  # doctest: +SKIP
    """
    start = time.perf_counter()
    model, m1 = _pair(models)
    device = runtime.torch_device()
    prepared, data = _prepare(model, None, None)
    _check_tunable(prepared)
    net = prepared.module.to(device).eval()
    m1_net = None if m1 is None else _prepare(m1, data, None)[0].module.to(device).eval()
    split = _split_files(list(found), data, config, config.train_on, m1_net)  # type: ignore[arg-type]
    result = _fine_tune_all(net, prepared, data, split, config, device, bool(runtime.progress))
    result = replace(result, seconds=time.perf_counter() - start, prepared=prepared)
    save_to = models.save_model if isinstance(models, _Models) else None
    if save_to is not None:
        result = replace(result, saved_to=str(save_repaired(save_to, prepared, result)))
    return result


def _fine_tune_all(net: nn.Module, prepared: PreparedModel, data: Dataset, found: _Files,
                   config: RepairConfig, device: torch.device, progress: bool) -> RepairResult:
    """The baselines' inputs, the evaluation before, and every fine-tuning with its evaluation after."""
    n = len(found.found_x)
    mix_idx = _mixed_in(config, n, len(data.x_train))
    test_pool = np.setdiff1d(np.arange(len(data.x_test)), found.held_seeds)
    baselines = baseline_inputs(net, data, n, config, test_pool=test_pool, output_kind=prepared.output_kind)
    used = [found.found_seeds] + [b.test_index for b in baselines if b.test_index is not None]
    clean = ~np.isin(np.arange(len(data.x_test)), np.concatenate(used))
    before, right_before = _evaluate(net, data, clean=clean, held=found.held, batch_size=config.batch_size)
    augmentations = [("found", found.found_x, found.found_y)] + [(b.name, b.x, b.y) for b in baselines]
    approaches, repaired = _fine_tune_each(net, data, augmentations, mix_idx, config, clean=clean,
                                           held=found.held, before=before, right_before=right_before,
                                           progress=progress)
    return RepairResult(config, prepared.name, data.name, found.summaries, before, tuple(approaches),
                        len(mix_idx), int(clean.sum()), found.splits, repaired, str(device),
                        held_out_faults=int((~right_before).sum()))


def _check_tunable(prepared: PreparedModel) -> None:
    """Refuse, before anything is labelled or fine-tuned, a model repair cannot tune: a black box (ONNX
    Runtime, LiteRT, a callable) or any other module without floating-point weights (an int8
    module).
    """
    from ..models.blackbox import describe_black_box, is_black_box

    if is_black_box(prepared):
        runtime = describe_black_box(prepared.module).get("runtime", "a runtime")
        raise DeepFaultError(
            f"repair fine-tunes a model's weights, and {prepared.name!r} is a black box run by {runtime}, "
            "which has none to tune; repair the float torch model it was exported from (the .pt file), "
            "then export that again")
    if not any(p.is_floating_point() for p in prepared.module.parameters()):
        raise DeepFaultError(
            f"repair fine-tunes a model's weights, and {prepared.name!r} has no floating-point weights "
            "(quantised, or none at all); repair the float torch model it was made from")


def _prepare(model, dataset, data_dir) -> tuple[PreparedModel, Dataset]:
    """The model through the one preparation route, with its data set (an error without one)."""
    if isinstance(model, nn.Module) and not isinstance(dataset, Dataset):
        raise DeepFaultError(
            "a model given as an nn.Module needs the data set as a Dataset (dataset=load_dataset(...))"
        )
    prepared = prepare_model(model, dataset, data_dir=data_dir)
    if prepared.data is None:
        raise DeepFaultError(f"model {prepared.name!r} does not name its data set; pass dataset=")
    return prepared, prepared.data
