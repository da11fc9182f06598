"""``deepfault inspect``: a model's layers, output shapes and neuron counts."""

from __future__ import annotations

from ..experiment.inspection import input_shape, inspect_model
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


def preflight(args) -> None:
    """``--input-shape`` read and its one input checked against the memory free, before the model."""
    input_shape(args.input_shape)


def _cmd_inspect(args) -> int:
    mf = c.config_from(args, ModelSource).open(runtime=args.runtime)
    shape = input_shape(args.input_shape)
    print(inspect_model(mf, str(args.model), input_shape=shape, dataset=args.dataset, data_dir=args.data_dir),
          end="")
    return 0
