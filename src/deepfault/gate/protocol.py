""":func:`gate`: may the challenger M2 replace the champion M1? The four stages and the verdict.

1. the held-out comparison (:mod:`.heldout`), 2. the corpus replay (:mod:`.replay`), 3. a
short fuzz (:mod:`.fuzzing`), 4. the verdict (:mod:`.verdict`). Everything a user can get
wrong is refused before the first stage (:func:`check_gate`); a Ctrl-C during a stage ends
the gate there with a ``hold`` and says which stages finished, and the corpus only ever
receives whole shards (:class:`deepfault.corpus.Corpus`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..checks import check_device, check_finite_outputs, error
from ..core.entry import entry
from ..core.inputs import inputs_and_labels
from ..core.memory import AUTO, resolve_batch_size
from ..core.runtime import Runtime
from ..data import Dataset, as_dataset
from ..errors import DeepFaultError
from ..fuzz.pair import Pair, Versions, open_pair
from .config import GateConfig
from .heldout import HeldOutResult, compare_heldout
from .outcome import FuzzResult, GateOutcome
from .replay import ReplayResult, replay_corpus
from .stats import Tally
from .verdict import judge

__all__ = ["gate", "HeldOut", "check_gate", "read_split"]


@dataclass(frozen=True)
class HeldOut:
    """A held-out split given explicitly (production samples, a split of one's own).

    Attributes:
        inputs: ``(N, ...)`` inputs in the data set's native layout (an array, tensor or memory
            map).
        labels: ``(N,)`` class labels, or ``None`` (unlabelled: the disagreement only).
        dataset: The data set the models are prepared on (a name, ``.npz`` file or
            :class:`~deepfault.data.Dataset`; ``None``: the one the model files name).
    """

    inputs: Any
    labels: Any = None
    dataset: str | os.PathLike | Dataset | None = None

    @classmethod
    def of(cls, data) -> HeldOut:
        """``data`` as a ``HeldOut``: one already; a data set (its test split); an array or
        tensor (unlabelled); an ``(inputs, labels)`` pair; a torch ``Dataset`` or ``DataLoader``
        (read once, with its labels when its items carry them).
        """
        if isinstance(data, HeldOut):
            return data
        if data is None or isinstance(data, (str, os.PathLike, Dataset)):
            return cls(None, None, data)
        if isinstance(data, (tuple, list)) and len(data) == 2:
            return cls(data[0], data[1])
        if isinstance(data, (np.ndarray, torch.Tensor)):
            return cls(data)
        if isinstance(data, (torch.utils.data.Dataset, torch.utils.data.DataLoader)):
            inputs, labels = inputs_and_labels(data)  # read once, in its order
            return cls(inputs, labels)
        raise DeepFaultError(
            f"gate: data must be a data set (name, .npz file or Dataset), inputs, an (inputs, "
            f"labels) pair, a torch Dataset or DataLoader, or a HeldOut; got {type(data).__name__}"
        )


def read_split(path: str | os.PathLike, dataset: str | os.PathLike | Dataset | None = None) -> HeldOut:
    """A held-out split from a file (``deepfault gate --split``): a ``.npy`` of inputs
    (unlabelled), an ``.npz`` with ``x`` (and ``y`` for labels), or a data set's ``.npz`` (its
    ``x_test`` and ``y_test``); ``dataset`` is what the models are prepared on.

    Raises:
        DeepFaultError: The file cannot be read as ``.npy``/``.npz`` (no pickles), or it holds
            no ``x`` nor ``x_test``.
    """
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise DeepFaultError(f"--split {str(path)!r} cannot be read as .npy/.npz ({err})") from None
    if isinstance(loaded, np.ndarray):
        return HeldOut(loaded, None, dataset)
    key = "x" if "x" in loaded.files else "x_test" if "x_test" in loaded.files else None
    if key is None:
        raise error("--split", "an .npz with an array x (and y for labels), or a data set's (x_test, y_test)",
                    path)
    labels = {"x": "y", "x_test": "y_test"}[key]
    return HeldOut(loaded[key], loaded[labels] if labels in loaded.files else None, dataset)


def _split(held: HeldOut, ds: Dataset) -> tuple[Any, Any]:
    if held.inputs is None:
        return ds.x_test, ds.y_test
    x = held.inputs.detach().cpu().numpy() if isinstance(held.inputs, torch.Tensor) else held.inputs
    y = held.labels
    if y is not None:
        y = np.asarray(y.detach().cpu() if isinstance(y, torch.Tensor) else y).astype(np.int64)
        if y.ndim != 1 or len(y) != len(x):
            raise DeepFaultError(
                f"the held-out labels must be one per input ({len(x):,}); got shape {y.shape}"
            )
    if tuple(x.shape[1:]) != tuple(ds.input_shape):
        raise DeepFaultError(
            f"the held-out inputs have shape {tuple(x.shape[1:])} and the models take "
            f"{tuple(ds.input_shape)} (data set {ds.name!r}); give inputs of that shape"
        )
    return x, y


def _open(models, held: HeldOut) -> Pair:
    """The pair prepared on the split's data set; inputs given without one and models that name
    none are prepared on the inputs themselves.
    """
    if held.dataset is not None or held.inputs is None:
        return open_pair(models, held.dataset)
    try:
        return open_pair(models, None)
    except DeepFaultError as err:
        if "does not name its data set" not in str(err):
            raise
    x = held.inputs
    y = held.labels if held.labels is not None else np.zeros(len(x), dtype=np.int64)
    m1 = Versions.of(models).m1
    classes = None
    if isinstance(m1, torch.nn.Module):  # unlabelled inputs: the classes are the model's
        with torch.inference_mode():
            classes = int(m1(torch.as_tensor(np.asarray(x[:1], dtype=np.float32))).shape[1])
    return open_pair(models, as_dataset(x, y, name="heldout", num_classes=classes))


def check_gate(pair: Pair, inputs, labels, config: GateConfig) -> int:
    """Refuse, before any work, what the gate cannot judge; returns the number of classes.

    Raises:
        DeepFaultError: Models with different class counts, labels the policy needs but the
            split lacks, labels or critical classes outside the classes, or an empty split.
    """
    sample = inputs[:8] if len(inputs) else pair.data.x_test[:8]
    c1, c2 = check_finite_outputs(
        [pair.p1.module, pair.p2.module],
        np.asarray(sample, dtype=np.float32),
        names=["M1 (--m1)", "M2 (--m2)"],
    )
    if c1 != c2:
        raise DeepFaultError(
            f"M1 has {c1} classes and M2 {c2}; the gate compares two versions of one classifier"
        )
    if config.heldout:
        if labels is None and config.needs_labels:
            raise DeepFaultError(
                "the held-out split has no labels, and the policy needs them "
                f"({', '.join(config.needs_labels)}); give a labelled split, or switch those checks off "
                "('off')"
            )
        if len(inputs) == 0:
            raise DeepFaultError("the held-out split has no input; give a split with inputs, or --no-heldout")
        if labels is not None and len(labels) and (labels.min() < 0 or labels.max() >= c1):
            raise DeepFaultError(
                f"the held-out labels must be classes 0 to {c1 - 1}; got {int(labels.max())}"
            )
    bad = [c for c in (config.critical_classes or ()) if c >= c1]
    if bad:
        raise DeepFaultError(f"critical_classes must be classes 0 to {c1 - 1}; got {bad[0]}")
    if config.budget != "0":
        from .fuzzing import check_fuzz_stage  # noqa: PLC0415

        check_fuzz_stage(pair, config)
    return c1


def _open_corpus(config: GateConfig, data: Dataset, num_classes: int):
    """The corpus folder opened (made where it does not exist yet); one made for another data
    set, input shape or class count is refused in one line.
    """
    if config.corpus is None:
        return None
    from ..corpus import Corpus  # noqa: PLC0415  (only a gate with a corpus needs it)

    return Corpus.open(
        Path(config.corpus),
        create=True,
        dataset=data.name,
        input_shape=tuple(data.input_shape),
        num_classes=num_classes,
    )


@dataclass
class _Run:
    """A gate under way: what each stage left (the outcome is made from it, interrupted or not)."""

    pair: Pair
    config: GateConfig
    runtime: Runtime
    stages: dict
    heldout: HeldOutResult | None = None
    replay: ReplayResult | None = None
    fuzz: FuzzResult | None = None
    added: int = 0
    batch_size: int = 256
    tally: Tally | None = None


def _stage_heldout(run: _Run, inputs, labels, num_classes: int) -> None:
    run.stages["heldout"] = "interrupted"
    run.heldout, run.tally = compare_heldout(
        run.pair,
        inputs,
        labels,
        run.config,
        num_classes=num_classes,
        batch_size=run.batch_size,
        progress=bool(run.runtime.progress),
        runtime=run.runtime,
    )
    run.stages["heldout"] = "done"


def _add_flips(run: _Run, corpus) -> None:
    """The held-out negative flips into the corpus (after the replay, so that it replays only
    the earlier findings).
    """
    found = None if run.tally is None else run.tally.corpus_inputs()
    if corpus is not None and run.config.add_to_corpus and found is not None:
        run.added += _add(
            corpus,
            found[0],
            found[1],
            run,
            method="gate-heldout",
            note="negative flips on the held-out split",
        )


def _add(corpus, inputs, labels, run: _Run, *, method: str, note: str) -> int:
    from ..corpus import Provenance  # noqa: PLC0415

    return int(
        corpus.add(
            inputs,
            labels,
            Provenance(method, f"gate-seed{run.config.seed}", tuple(run.pair.names), note=note,
                       fingerprints=(run.pair.p1.fingerprint, run.pair.p2.fingerprint)),
        )
    )


def _batch_size(runtime: Runtime, pair: Pair, inputs) -> int:
    if runtime.batch_size != AUTO:
        return int(runtime.batch_size)
    sample = inputs[:1] if len(inputs) else pair.data.x_test[:1]
    return min(
        resolve_batch_size(p.module, sample, AUTO, count=max(1, len(inputs))) for p in (pair.p1, pair.p2)
    )


@entry(GateConfig)
def gate(models: Versions | tuple, data: Any, config: GateConfig, *, runtime: Runtime) -> GateOutcome:
    """May the challenger M2 replace the champion M1? Compare them, replay the corpus, fuzz
    briefly, and judge by the policy.

    Args:
        models: The pair ``(m1, m2)`` (each a model file of any format the tool opens, a module,
            a prepared model or a black box), or a :class:`~deepfault.fuzz.pair.Versions`.
        data: The held-out split: a data set name, ``.npz`` file or
            :class:`~deepfault.data.Dataset` (its test split, labelled); ``(inputs, labels)``;
            unlabelled inputs (an array or tensor: the disagreement only); a :class:`HeldOut`;
            ``None``: the test split of the data set the model files name.
        config: The :class:`~.config.GateConfig`: stages and policy (``None``: the default).
        runtime: Device, threads, batch size and progress (:class:`~deepfault.core.runtime.Runtime`).

    Returns:
        A :class:`~.outcome.GateOutcome`: ``passed``, ``verdict`` (``pass``, ``fail``, ``hold``),
        ``reasons``, and each stage's numbers.

    Raises:
        DeepFaultError: Before any work: unreadable models, different class counts or input
            shapes, a split without labels that the policy needs, a critical class the models do
            not have, a corpus made for another data set or input shape.

    Examples:
        >>> outcome = gate(("m1.pt", "m2.onnx"), "mnist", GateConfig(budget="0"))  # doctest: +SKIP
        >>> outcome.verdict, outcome.reasons  # doctest: +SKIP
    """
    device = None if runtime.device is None else check_device(runtime.device)  # before anything is loaded
    held = HeldOut.of(data)
    pair = _open(models, held)
    if device is not None:
        pair.p1.to(device)
        pair.p2.to(device)
    inputs, labels = _split(held, pair.data)
    num_classes = check_gate(pair, inputs, labels, config)
    corpus = _open_corpus(config, pair.data, num_classes)
    stages = {"heldout": config.heldout, "replay": corpus is not None, "fuzz": config.budget != "0"}
    run = _Run(
        pair,
        config,
        runtime,
        stages={s: ("not run" if on else "off") for s, on in stages.items()},
        batch_size=_batch_size(runtime, pair, inputs),
    )
    _run_stages(run, inputs, labels, num_classes, corpus)
    outcome = _outcome(run, frozenset(s for s, on in stages.items() if not on))
    return outcome.spread_over(None if run.tally is None else run.tally.spread)


def _run_stages(run: _Run, inputs, labels, num_classes: int, corpus) -> None:
    """Stages 1 to 3 in turn, each marked ``interrupted`` while it runs and ``done`` after; a
    Ctrl-C ends the gate at the stage it stopped (what finished stays in ``run``).
    """
    try:
        if run.config.heldout:
            _stage_heldout(run, inputs, labels, num_classes)
        if corpus is not None:
            _stage_replay(run, corpus)
            _add_flips(run, corpus)
        if run.config.budget != "0":
            from .fuzzing import fuzz_stage  # noqa: PLC0415

            run.stages["fuzz"] = "interrupted"
            run.fuzz = fuzz_stage(run.pair, inputs, labels, corpus, run.config, run.runtime)
            run.added += run.fuzz.added
            run.stages["fuzz"] = "done" if run.fuzz.complete else "interrupted"
    except KeyboardInterrupt:
        if not any(state == "interrupted" for state in run.stages.values()):
            raise


def _stage_replay(run: _Run, corpus) -> None:
    run.stages["replay"] = "interrupted"
    run.replay = replay_corpus(corpus, run.pair.p1, run.pair.p2, batch_size=run.batch_size)
    run.stages["replay"] = "done"


def _outcome(run: _Run, off: frozenset[str]) -> GateOutcome:
    verdict = judge(run.config, run.heldout, run.replay, run.fuzz, off=off)
    pair = run.pair
    device = str(next(iter(p.device for p in pair.p1.module.parameters()), "cpu"))
    return GateOutcome(
        judgement=verdict,
        config=run.config,
        heldout=run.heldout,
        replay=run.replay,
        fuzz=run.fuzz,
        stages=dict(run.stages),
        corpus_added=run.added,
        names=pair.names,
        class_names=tuple(pair.data.class_names),
        bounds=(float(pair.data.bounds[0]), float(pair.data.bounds[1])),
        records=pair.records(pair.names),
        device=device,
        threads=torch.get_num_threads(),
    )
