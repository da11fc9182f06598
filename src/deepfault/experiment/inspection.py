"""What ``deepfault inspect`` reports about a model file: how it was read, its layers, output shapes
and neuron counts, or why a compiled or black-box model has none (:func:`inspect_model`).
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from ..core.batches import activations
from ..core.capture import eval_mode, forward, is_compiled, model_device, neurons_line, selection_source
from ..errors import DeepFaultError
from ..models.blackbox import describe_black_box, unwrap_black_box
from ..models.io import ModelFile
from ..models.prepare import PreparedModel, prepare_model
from ..models.summary import describe_model
from .tables import text_table

__all__ = ["inspect_model", "check_input_size", "input_shape"]


def inspect_model(mf: ModelFile, name: str, *, input_shape: tuple[int, ...] | None = None,
                  dataset: str | None = None, data_dir: str | None = None) -> str:
    """The text ``deepfault inspect`` prints for the opened model file ``mf`` (named ``name``):
    how it was read, then its layers (a black box: its input and output tensors; compiled
    TorchScript: its output only).

    Args:
        mf: The opened file (:func:`deepfault.models.open_model`).
        name: How the text names it (the path the user gave).
        input_shape: The per-input shape when the file does not record it.
        dataset: A data set to take the input shape from (default: the file's), read only when
            neither ``input_shape`` nor the file gives the shape.
        data_dir: Where data sets are kept.

    Returns:
        The lines, each table and line ending in a newline.

    Raises:
        DeepFaultError: No input shape is known.
    """
    lines = [text_table(("read", "how"), _how_read(mf))]
    if unwrap_black_box(mf.model) is not None:
        return "\n".join([*lines, *_black_box(name, mf)]) + "\n"
    recorded = mf.meta.get("input_shape")
    known = input_shape is not None or (recorded and None not in recorded)
    if input_shape is not None:
        check_input_size(input_shape)
    # the data set only when it alone gives the shape: inspect needs no data otherwise
    data = None if known else (dataset or mf.dataset)
    if not known and data is None:
        raise DeepFaultError(
            "the model file does not record its input shape; give --input-shape 1,28,28 or --dataset NAME")
    pm = prepare_model(replace(mf, dataset=None), data, data_dir=data_dir, input_shape=input_shape, name=name)
    body = _compiled(name, mf, pm) if is_compiled(pm.module) else _layers(name, mf, pm)
    return "\n".join([*lines, *body]) + "\n"


def check_input_size(shape: tuple[int, ...], option: str = "--input-shape") -> None:
    """Refuse, before it is made, one input of ``shape`` whose float32 values exceed the memory
    free here (:func:`deepfault.core.memory.check_fits`; its pass through the model needs more).

    Raises:
        DeepFaultError: Giving the input's size and the memory free.
    """
    from ..core.memory import check_fits

    values = math.prod(int(d) for d in shape)
    check_fits(values * 4, f"one input of {option} {','.join(str(d) for d in shape)} ({values:,} values in "
               "float32)", f"give the shape the model takes ({option})")


def input_shape(text: str | None) -> tuple[int, ...] | None:
    """``deepfault inspect --input-shape``: 1 to 4 comma-separated sizes from 1 to 65536, one
    input of which fits in the memory free (:func:`check_input_size`); ``None`` when not given.

    Raises:
        DeepFaultError: Another text, or an input too large for the memory.
    """
    if not text:
        return None
    try:
        shape = tuple(int(v) for v in text.split(","))
    except ValueError:
        shape = ()
    if not shape or any(d < 1 or d > 1 << 16 for d in shape) or len(shape) > 4:
        raise DeepFaultError("--input-shape must be 1 to 4 comma-separated sizes from 1 to 65536, e.g. "
                             f"1,28,28; got {text!r}")
    check_input_size(shape)
    return shape


def _one_input(pm: PreparedModel) -> torch.Tensor:
    """One input of zeros in the model's (known) input shape."""
    return torch.zeros((1, *(d or 1 for d in pm.input_shape or ())))


def _hooks(mf: ModelFile) -> str:
    if unwrap_black_box(mf.model) is not None:
        return "no: a black box (outputs only)"
    if is_compiled(mf.model):
        return "no: compiled TorchScript (outputs and gradients only)"
    return "yes (every method)"


def _how_read(mf: ModelFile) -> list[tuple[str, str]]:
    """Format, architecture, loader, and whether hooks reach its neurons."""
    return [("format", mf.read.get("format", "-")),
            ("architecture", f"{mf.arch} {mf.arch_kwargs}" if mf.arch_kwargs else mf.arch),
            ("loader", mf.read.get("loader", "-")),
            ("neuron hooks", _hooks(mf))]


def _layers(name: str, mf: ModelFile, pm: PreparedModel) -> list[str]:
    """The headline, the layer table and the default layers' neuron count."""
    rows, out_shape = describe_model(pm.module, pm.input_shape)
    total = sum(p.numel() for p in pm.module.parameters())
    adapted = f" (the file takes {pm.file_input_shape}, adapted: {pm.adapter})" if pm.adapter else ""
    body = [(r.name, r.kind, "x".join(map(str, r.output_shape)) if r.output_shape else "-",
             r.units if r.units is not None else "-", f"{r.parameters:,}",
             "yes" if r.default_neuron_layer else "") for r in rows]
    layout, _ = activations(pm.module, _one_input(pm), layers=None, threads=None)
    neurons = neurons_line(layout.num_neurons, len(layout.layers), selection_source(pm.module, None))
    return [f"model {name} ({mf.arch}); input shape per input {pm.input_shape}{adapted}; output "
            f"{out_shape}, {pm.output_kind}; {total:,} parameters; fingerprint {pm.fingerprint}",
            text_table(("layer", "type", "output", "units", "params", "analysed by default"), body),
            f"{neurons}; name others with --layers"]


def _compiled(name: str, mf: ModelFile, pm: PreparedModel) -> list[str]:
    """A compiled TorchScript model: its output and parameters; no layers (no hooks reach them)."""
    with eval_mode(pm.module), torch.inference_mode():
        out = forward(pm.module, _one_input(pm).to(model_device(pm.module)))
    total = sum(p.numel() for p in pm.module.parameters())
    return [f"model {name} ({mf.arch}); input shape per input {pm.input_shape}; output "
            f"{tuple(out.shape[1:])}, {pm.output_kind}; {total:,} parameters; fingerprint {pm.fingerprint}",
            f"its forward is compiled ({getattr(mf.model, 'why', 'TorchScript')}), so no layer table and no "
            "neurons: regress (drfuzz) and repair run on it; for run, coverage and xplore save its "
            "state_dict and use --arch path/to/file.py:ClassName, or export it to ONNX"]


def _tensor(t) -> str:
    if t is None:
        return "-"
    q = t.get("quantization")
    extra = f", quantised: scale {q['scale']:.6g}, zero point {q['zero_point']}" if q else ""
    return f"{t['name']} {'x'.join(map(str, t['shape']))} {t['dtype']}{extra}"


def _black_box(name: str, mf: ModelFile) -> list[str]:
    """How a black-box file is read: the runtime, its input and output tensors and their dtypes."""
    d = describe_black_box(mf.model)
    rows = [("runtime", d["runtime"]), ("input", _tensor(d["input"])), ("output", _tensor(d["output"])),
            ("output kind", mf.output_kind),
            ("batch", "any" if d["input"]["shape"][0] == "N" else f"{d['input']['shape'][0]} (fixed)")]
    if mf.meta.get("runtime_fallback"):
        rows.append(("why not torch", mf.meta["runtime_fallback"]))
    ops = mf.meta.get("graph_ops")
    if ops:
        rows.append(("operators", ", ".join(f"{k} {v}" for k, v in sorted(ops.items()))))
    return [f"model {name} ({mf.arch}): run by {d['runtime']} as a black box: no layers, no neurons, "
            "no gradients; regress (drfuzz) reads its outputs only", text_table(("what", "how"), rows)]
