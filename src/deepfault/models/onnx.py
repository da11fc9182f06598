"""ONNX models through onnx2torch (the optional ``onnx`` extra)."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import types
from pathlib import Path

from ..errors import DeepFaultError
from .io import ModelFile

__all__ = ["load_onnx"]


@contextlib.contextmanager
def _torchvision_placeholder():
    """Let onnx2torch import where torchvision cannot be imported.

    onnx2torch imports torchvision at start-up, but needs it only to convert the NMS and
    RoiAlign operators, which classifiers do not use. A CPU build of torch without its
    matching torchvision (as in deepfault's pinned development set-up) would otherwise make
    every ONNX import fail. When torchvision really is unavailable, a placeholder stands in
    during the import only; converting a model that uses those two operators then raises
    a clear error. With a working torchvision nothing is replaced.
    """
    try:
        importlib.import_module("torchvision")
        yield
        return
    except Exception:  # missing, or a build that does not match torch
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]

    def unavailable(*args, **kwargs):
        raise DeepFaultError(
            "this ONNX model uses NMS or RoiAlign, which need a torchvision that matches the "
            "installed torch; install one and retry"
        )

    tv = types.ModuleType("torchvision")
    ops = types.ModuleType("torchvision.ops")
    for name in ("nms", "roi_align", "box_convert"):
        setattr(ops, name, unavailable)
    setattr(tv, "ops", ops)  # noqa: B010 (a module object: no attribute to type-check)
    sys.modules.update({"torchvision": tv, "torchvision.ops": ops})
    try:
        yield
    finally:
        sys.modules.pop("torchvision", None)
        sys.modules.pop("torchvision.ops", None)


def _onnx2torch():
    try:
        with _torchvision_placeholder():
            import onnx2torch
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            f"loading ONNX models needs onnx and onnx2torch ({err.name} is missing); "
            "install the extra: pip install -e '.[onnx]'"
        ) from err
    return onnx2torch


def _check_single_input(proto, path: Path) -> None:
    """Refuse a graph of several inputs or outputs: deepfault runs a classifier of one input
    tensor to one tensor of class scores (initialisers listed as inputs, as older exporters
    write them, are weights, not inputs).
    """
    weights = {t.name for t in proto.graph.initializer}
    inputs = [i.name for i in proto.graph.input if i.name not in weights]
    outputs = [o.name for o in proto.graph.output]
    if len(inputs) != 1 or len(outputs) != 1:
        raise DeepFaultError(
            f"{str(path)!r} has {len(inputs)} inputs ({', '.join(inputs) or 'none'}) and {len(outputs)} "
            f"outputs; deepfault needs a single-input classifier (one input tensor, one tensor of class "
            "scores): export the model with one input and one output"
        )


def load_onnx(path: str | os.PathLike) -> ModelFile:
    """Convert an ``.onnx`` classifier into an ``nn.Module`` with onnx2torch.

    The module names are onnx2torch's (derived from the ONNX node names); ``deepfault
    inspect`` lists them. The output kind is ``"probabilities"`` when the graph's last
    node is a Softmax.

    Raises:
        DeepFaultError: The file is missing or not a valid ONNX model, has more than one
            input or output, or the conversion fails.
        ModuleNotFoundError: onnx or onnx2torch is not installed.
    """
    path = Path(path)
    if not path.is_file():
        raise DeepFaultError(f"ONNX file {str(path)!r} does not exist; check the path")
    onnx2torch = _onnx2torch()
    import onnx

    try:
        proto = onnx.load(str(path))
        onnx.checker.check_model(proto)
    except Exception as err:  # onnx raises DecodeError, ValidationError, ...
        raise DeepFaultError(
            f"{str(path)!r} is not a valid ONNX model ({type(err).__name__}); "
            "re-export it or check that the file is complete"
        ) from err
    _check_single_input(proto, path)
    try:
        model = onnx2torch.convert(proto)
    except DeepFaultError:
        raise
    except Exception as err:
        raise DeepFaultError(f"onnx2torch could not convert {str(path)!r}: {err}") from err
    graph = proto.graph
    weights = {t.name for t in graph.initializer}
    first = next(i for i in graph.input if i.name not in weights)
    dims = first.type.tensor_type.shape.dim
    input_shape = [d.dim_value or None for d in dims][1:]
    last = graph.node[-1].op_type if graph.node else ""
    return ModelFile(
        model=model.eval(),
        arch="onnx",
        output_kind="probabilities" if last == "Softmax" else "logits",
        meta={"input_shape": input_shape, "source": str(path), "opset": proto.opset_import[0].version},
    )
