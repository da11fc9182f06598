"""``deepfault inspect``: a model's layers, output shapes and neuron counts."""

from __future__ import annotations

from ..errors import DeepFaultError
from ..experiment.inspection import check_input_size, inspect_model
from ..models.blackbox import RUNTIMES
from ..models.source import ModelSource
from . import _common as c


def add_parser(sub) -> None:
    """Add ``deepfault inspect`` to ``sub``."""
    insp = c.command(sub, "inspect", "show a model's layers, output shapes and neuron counts")
    insp.add_argument("model", type=c.MODEL, metavar="MODEL",
                      help="model file (any format 'run --model' takes)")
    insp.add_argument("--input-shape", default=None, metavar="D1,D2,...",
                      help="per-input shape when the file does not record it (e.g. 1,28,28)")
    c.add_options(insp, "dataset", "data_dir", *c.MODEL_FILE,
                  dataset="take the input shape from this data set")
    insp.add_argument("--runtime", choices=RUNTIMES, default="auto",
                      help="how an .onnx file is read: auto (onnx2torch, or ONNX Runtime for a graph it "
                      "cannot convert), torch or onnxruntime (a black box); a .tflite file is read by LiteRT")
    insp.set_defaults(func=_cmd_inspect)


def _shape(text: str | None) -> tuple[int, ...] | None:
    """``--input-shape``: 1 to 4 sizes from 1 to 65536."""
    if text is None:
        return None
    try:
        shape = tuple(int(v) for v in text.split(","))
    except ValueError:
        shape = ()
    if not shape or any(d < 1 or d > 1 << 16 for d in shape) or len(shape) > 4:
        raise DeepFaultError("--input-shape must be 1 to 4 comma-separated sizes from 1 to 65536, e.g. "
                             f"1,28,28; got {text!r}")
    return shape


def preflight(args) -> None:
    """``--input-shape`` read and its one input checked against the memory free, before the model."""
    shape = _shape(args.input_shape or None)
    if shape is not None:
        check_input_size(shape)


def _cmd_inspect(args) -> int:
    mf = c.config_from(args, ModelSource).open(runtime=args.runtime)
    shape = _shape(args.input_shape or None)
    print(inspect_model(mf, str(args.model), input_shape=shape, dataset=args.dataset, data_dir=args.data_dir),
          end="")
    return 0
