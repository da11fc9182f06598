"""The pair of models a regression campaign compares: how it is opened and what it must be.

:class:`Versions` says how the two models are opened (files, modules, prepared models or
black boxes, and the options of their files); :func:`load_pair` prepares them and their data
set once; :func:`check_pair` and :func:`check_black_box` refuse, before any work, a pair that
is not two versions of one classifier or a campaign that needs what a black box lacks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch

from ..checks import check_finite_outputs
from ..core.batches import activations, iterate_batches
from ..core.capture import (
    is_compiled,
    layer_selection,
    model_device,
    neurons_line,
    resolve_layers,
    selection_source,
)
from ..data import Dataset
from ..errors import DeepFaultError
from ..experiment.results import dataset_record, model_record
from ..models import ModelFile, open_model
from ..models.blackbox import outputs_only, unwrap_black_box
from ..models.prepare import PreparedModel, model_label, native_shape, prepare_model
from .campaign import CampaignConfig
from .campaign.memory import check_step_memory, queue_slots
from .campaign.seeds import test_inputs
from .fidelity.checks import check_fidelity_inputs
from .mutation.rules import rule_kind

__all__ = ["Pair", "Versions", "check_black_box", "check_pair", "load_pair", "open_pair"]


@dataclass(frozen=True)
class Versions:
    """Two versions of one classifier, and how their files are opened.

    ``regress((m1, m2), ...)`` takes the pair as it is; a ``Versions`` adds the options a model
    file needs (``regress(Versions("m1.pt", "m2.onnx", runtime="onnxruntime"), "mnist")``).

    Attributes:
        m1: The original model: a model file (any format ``deepfault run --model`` opens,
            ``.onnx`` and ``.tflite`` included), a :class:`~deepfault.models.ModelFile` (a
            :func:`~deepfault.models.blackbox.black_box` included), module,
            :class:`~deepfault.models.prepare.PreparedModel`, or a plain callable from a NumPy
            batch to logits (a black box).
        m2: The new model, fuzzed for regressions; in any form ``m1`` takes.
        arch: Architecture of plain ``state_dict`` files (:func:`deepfault.models.open_model`).
        arch_kwargs: Its keyword arguments.
        trust_pickle: Allow unpickling a whole pickled ``nn.Module``; only for trusted files.
        runtime: How ``.onnx`` files run (:data:`~deepfault.models.blackbox.RUNTIMES`): ``auto``
            (onnx2torch, or ONNX Runtime for a graph it cannot convert), ``torch``, ``onnxruntime``.
        data_dir: The data root of the data set the files name (or that the data names).
    """

    m1: Any
    m2: Any
    arch: str | None = None
    arch_kwargs: dict | None = None
    trust_pickle: bool = False
    runtime: str = "auto"
    data_dir: str | os.PathLike | None = None

    @classmethod
    def of(cls, models) -> Versions:
        """``models`` as a ``Versions``: one already, or the pair ``(m1, m2)``."""
        if isinstance(models, Versions):
            return models
        if isinstance(models, (tuple, list)) and len(models) == 2:
            return cls(models[0], models[1])
        raise DeepFaultError("regress: models must be the pair (m1, m2) or a Versions; got "
                             f"{type(models).__name__}")


class Pair(NamedTuple):
    """Two prepared versions and their data set (:func:`open_pair`)."""

    p1: PreparedModel
    p2: PreparedModel
    data: Dataset
    versions: Versions

    @property
    def names(self) -> tuple[str, str]:
        """How results name M1 and M2 (their file names, else ``M1``, ``M2``)."""
        return (self.p1.name or "M1", self.p2.name or "M2")

    def notes(self) -> list[str]:
        """How each black box of the pair runs, one line each."""
        out = []
        for role, p in (("M1", self.p1), ("M2", self.p2)):
            box = unwrap_black_box(p.module)
            if box is not None:
                out.append(f"{role}: {box.source} runs in {box.runtime} as a black box (input "
                           f"{box.input_io.dtype}; its outputs only)")
        return out

    def m2_neurons(self, config: CampaignConfig) -> tuple[str, Any] | None:
        """``(the neuron line, the selection)`` of M2 where the strategy reads its neurons
        (DeepHunter's coverage), from one test input; ``None`` where it reads none.
        """
        m2 = self.p2.module
        if not config.strategy_spec.reads_m2 or unwrap_black_box(m2) is not None or is_compiled(m2):
            return None
        layers = list(config.layers) if isinstance(config.layers, tuple) else config.layers
        layout, _ = activations(m2, self.data.x_test[:1], layers=layers, threads=None)
        line = neurons_line(layout.num_neurons, len(layout.layers), selection_source(m2, layers), of="M2")
        return line, layer_selection(m2, layers)

    def records(self, names: tuple[str, str], selection=None) -> dict:
        """The models and the data set as a result document names them."""
        def file(m):
            return m if isinstance(m, (str, os.PathLike)) else None

        v = self.versions
        m2_extra = {} if selection is None else {"layer_selection": selection}
        return {"models": {"m1": model_record(self.p1, file(v.m1), name=names[0]),
                           "m2": model_record(self.p2, file(v.m2), name=names[1], **m2_extra)},
                "dataset": dataset_record(self.data, v.data_dir)}


def open_pair(models, data=None) -> Pair:
    """Prepare ``models`` (a :class:`Versions` or the pair ``(m1, m2)``) and ``data`` once
    (:func:`load_pair`).
    """
    v = Versions.of(models)
    for flag, m in (("--m1", v.m1), ("--m2", v.m2)):
        if isinstance(m, (str, os.PathLike)) and not Path(m).exists() and not Path(f"{m}.json").is_file():
            # (a Keras stem names its .json)
            raise DeepFaultError(f"model file {str(m)!r} ({flag}) does not exist; check the path")
    p1, p2, ds = load_pair(v.m1, v.m2, dataset=data, data_dir=v.data_dir, arch=v.arch,
                           trust_pickle=v.trust_pickle, runtime=v.runtime, arch_kwargs=v.arch_kwargs)
    return Pair(p1, p2, ds, v)


def _open(m, *, arch, trust_pickle, runtime="auto", arch_kwargs=None):
    """A path opened as a model file (with its file name as label), a plain callable as a black
    box (:func:`~deepfault.models.blackbox.black_box`); anything else as it is.
    """
    if isinstance(m, (str, os.PathLike)):
        mf = open_model(m, arch=arch, arch_kwargs=arch_kwargs, trust_pickle=trust_pickle, runtime=runtime)
        return mf, model_label(m, mf)
    if callable(m) and not isinstance(m, (torch.nn.Module, PreparedModel)):
        from ..models.blackbox import black_box

        mf = black_box(m)
        return mf, mf.meta["source"]
    if isinstance(m, ModelFile) and m.meta.get("runtime") == "callable":  # black_box(f, name=...)
        return m, m.meta["source"]
    return m, None


def _native_shape(m) -> tuple | None:
    if isinstance(m, PreparedModel):
        return m.input_shape
    if isinstance(m, ModelFile) and m.meta.get("input_shape"):
        return native_shape(m.meta["input_shape"], channels_last=m.meta.get("data_format") == "channels_last")
    return None


def load_pair(m1, m2, *, dataset: str | Dataset | None = None, data_dir: str | os.PathLike | None = None,
              arch: str | None = None, trust_pickle: bool = False, runtime: str = "auto",
              arch_kwargs: dict | None = None):
    """Prepare two models and their data set (:func:`~deepfault.models.prepare.prepare_model`).

    Args:
        m1: The original model: a model file (``.onnx`` and ``.tflite`` included), a
            :class:`~deepfault.models.ModelFile` (a :func:`~deepfault.models.blackbox.black_box`
            included), module, :class:`~deepfault.models.prepare.PreparedModel`, or a plain
            callable from a NumPy batch to logits (a black box; wrap it with
            :func:`~deepfault.models.blackbox.black_box` for probabilities).
        m2: The new model, in any form ``m1`` takes.
        dataset: Data set name, ``.npz`` file or :class:`~deepfault.data.Dataset` (default:
            the one the model files name).
        data_dir: Data root.
        arch: Architecture of plain ``state_dict`` files (any form of
            :func:`~deepfault.models.build_model`).
        trust_pickle: Allow unpickling a whole pickled ``nn.Module``; only for trusted files.
        runtime: How ``.onnx`` files run (:data:`~deepfault.models.blackbox.RUNTIMES`).
        arch_kwargs: The arguments of ``arch``.

    Returns:
        ``(p1, p2, data)``: two :class:`~deepfault.models.prepare.PreparedModel` taking the
        data set's native layout, and the :class:`~deepfault.data.Dataset` in their range.

    Raises:
        DeepFaultError: Unreadable files, no data set named, models that take inputs of
            different shapes, or a data range that a model was not trained on.
    """
    (o1, label1), (o2, label2) = (_open(m, arch=arch, trust_pickle=trust_pickle, runtime=runtime,
                                        arch_kwargs=arch_kwargs) for m in (m1, m2))
    s1, s2 = _native_shape(o1), _native_shape(o2)
    if s1 and s2 and tuple(s1) != tuple(s2):
        raise DeepFaultError(
            f"M1 takes inputs of shape {tuple(s1)} and M2 {tuple(s2)}; regression fuzzing compares two "
            "versions of one classifier, with the same inputs"
        )

    def named(o):
        if isinstance(o, PreparedModel):
            return o.data
        return getattr(o, "dataset", None)

    data = dataset if dataset is not None else named(o1) if named(o1) is not None else named(o2)
    if data is None:
        raise DeepFaultError(f"model file {str(m1)!r} does not name its data set; add --dataset NAME")
    p1 = prepare_model(o1, data, data_dir=data_dir, name=label1)
    p2 = prepare_model(o2, p1.data, data_dir=data_dir, name=label2)
    if p1.bounds is not None and p2.bounds is not None and tuple(p1.bounds) != tuple(p2.bounds):
        raise DeepFaultError(
            f"M1 takes inputs in {tuple(p1.bounds)} and M2 in {tuple(p2.bounds)}; regression fuzzing feeds "
            "the same inputs to both: give two versions of one classifier, with the same input range"
        )
    return p1, p2, p1.data


def check_pair(m1, m2, data, config: CampaignConfig) -> None:
    """Refuse, on a few test inputs, inputs that are not images, sequences or vectors (the
    mutation rules need them), an image-only check for other inputs, models that compute NaN
    or infinite outputs, that have different numbers of classes, or
    whose layers the criterion cannot read.
    """
    sample = data.x_test[:8]
    x, _ = test_inputs(sample, data.y_test[:8])  # images, sequences or vectors: before the store, too
    kind = rule_kind(x.shape[1:])
    check_step_memory(tuple(x.shape[1:]), config.inputs_per_step, config.mutants_per_input,
                      model_device(getattr(m2, "module", m2)))
    queue_slots(tuple(x.shape[1:]), config.queue_dtype, memory=config.queue_memory,  # one input, at least
                count=config.queue_capacity)
    check_fidelity_inputs(config.strategy_spec.check_spec(config), kind, option="--fidelity")  # images only
    check_fidelity_inputs(config.shared_fidelity, kind, option="--shared-fidelity")
    c1, c2 = check_finite_outputs([m1, m2], sample, names=["M1 (--m1)", "M2 (--m2)"])
    if c1 != c2:  # the campaign says the same, but only after the store is opened
        raise DeepFaultError(f"M1 has {c1} classes and M2 {c2}; regression fuzzing compares two versions of "
                             "one classifier")
    layers = list(config.layers) if isinstance(config.layers, tuple) else config.layers
    if not config.strategy_spec.reads_m2:
        # DRFuzz reads M2's outputs only: no pass of M2's to check its layers (issue 26), but
        # layers a user names are still checked by name, so a typo is refused before the store
        if layers is not None and not outputs_only(m2):
            resolve_layers(m2, layers)
        return
    for _ in iterate_batches(m2, sample[:2], layers=layers, batch_size=2):
        break


def check_black_box(m1, m2, config: CampaignConfig, *, strategy_option: str = "--strategy",
                    fidelity_option: str = "--fidelity") -> None:
    """Refuse, before any work, a campaign that needs the insides of a black-box model (an ONNX
    Runtime or LiteRT file, a callable): DeepHunter's coverage keep rule reads M2's neurons, and
    a surprise check (``dsa``, ``lsa``, ``mdsa``) M1's activations. Names what works instead.

    Args:
        m1: M1 (a module, prepared model or model file).
        m2: M2, likewise.
        config: The campaign's configuration.
        strategy_option: How messages name the strategy setting (``--strategy``).
        fidelity_option: How messages name the fidelity setting (``--fidelity``).

    Raises:
        DeepFaultError: One line: which model, what it lacks, and the options that work.
    """
    from ..coverage.surprise import SURPRISE_KINDS
    from ..models.blackbox import outputs_only as black

    reads = config.strategy_spec.reads_m2
    if reads and black(m2):
        raise DeepFaultError(
            f"M2 is a black box (ONNX Runtime, LiteRT, a callable, or compiled TorchScript): "
            f"{config.strategy} needs M2's {reads}, "
            f"which a black box does not have; use {strategy_option} drfuzz, which reads M2's outputs only, "
            "or give M2 as a torch model (a .pt file, or an .onnx file with --runtime torch)")
    surprise = [s for s in (config.strategy_spec.check_spec(config), config.shared_fidelity)
                if s and s.partition(":")[0].strip().lower() in SURPRISE_KINDS]
    if surprise and black(m1):
        raise DeepFaultError(
            f"M1 is a black box (ONNX Runtime, LiteRT, a callable, or compiled TorchScript): it has no "
            f"activations for the surprise "
            f"check {surprise[0]!r}; use {fidelity_option} linf:T, ssim, discriminator (images) or none, or "
            "give M1 as a torch model")
