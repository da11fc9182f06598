"""``deepfault inspect``: a model's layers, output shapes and neuron counts."""

from __future__ import annotations

from dataclasses import replace

from ..core.capture import is_compiled
from ..errors import DeepFaultError
from ..models.blackbox import RUNTIMES, describe_black_box, unwrap_black_box
from ..models.prepare import prepare_model
from ._common import HelpFormatter, add_data_dir, add_model_options, open_model_file, table


def add_parser(sub) -> None:
    """Add ``deepfault inspect`` to ``sub``."""
    insp = sub.add_parser("inspect", help="show a model's layers, output shapes and neuron counts",
                          formatter_class=HelpFormatter)
    insp.add_argument("model", metavar="MODEL", help="model file (any format 'run --model' takes)")
    insp.add_argument("--input-shape", default=None, metavar="D1,D2,...",
                      help="per-input shape when the file does not record it (e.g. 1,28,28)")
    insp.add_argument("--dataset", default=None, metavar="NAME",
                      help="take the input shape from this data set")
    add_data_dir(insp)
    add_model_options(insp)
    insp.add_argument("--runtime", choices=RUNTIMES, default="auto",
                      help="how an .onnx file is read: auto (onnx2torch, or ONNX Runtime for a graph it "
                      "cannot convert), torch or onnxruntime (a black box); a .tflite file is read by LiteRT")
    insp.set_defaults(func=_cmd_inspect)



def _cmd_inspect(args) -> int:
    from ..models.summary import describe_model

    mf = open_model_file(args)
    _show_how_read(mf)
    if unwrap_black_box(mf.model) is not None:
        return _show_black_box(args, mf)
    shape = None
    if args.input_shape:
        try:
            shape = tuple(int(v) for v in args.input_shape.split(","))
        except ValueError:
            shape = ()
        if not shape or any(d < 1 or d > 1 << 16 for d in shape) or len(shape) > 4:
            raise DeepFaultError(
                "--input-shape must be 1 to 4 comma-separated sizes from 1 to 65536, e.g. 1,28,28; "
                f"got {args.input_shape!r}"
            )
    recorded = mf.meta.get("input_shape")
    known = shape is not None or (recorded and None not in recorded)
    # the data set only when it alone gives the shape: inspect needs no data otherwise
    data = None if known else (args.dataset or mf.dataset)
    if not known and data is None:
        raise DeepFaultError(
            "the model file does not record its input shape; give --input-shape 1,28,28 or --dataset NAME"
        )
    pm = prepare_model(replace(mf, dataset=None), data, data_dir=args.data_dir, input_shape=shape,
                       name=str(args.model))
    if is_compiled(pm.module):
        return _show_compiled(args, mf, pm)
    rows, out_shape = describe_model(pm.module, pm.input_shape)
    total = sum(p.numel() for p in pm.module.parameters())
    adapted = f" (the file takes {pm.file_input_shape}, adapted: {pm.adapter})" if pm.adapter else ""
    print(f"model {args.model} ({mf.arch}); input shape per input {pm.input_shape}{adapted}; output "
          f"{out_shape}, {pm.output_kind}; {total:,} parameters; fingerprint {pm.fingerprint}")
    body = [(r.name, r.kind, "x".join(map(str, r.output_shape)) if r.output_shape else "-",
              r.units if r.units is not None else "-", f"{r.parameters:,}",
              "yes" if r.default_neuron_layer else "")
             for r in rows]
    print(table(("layer", "type", "output", "units", "params", "analysed by default"), body))
    print(f"{_default_neurons(pm)}; name others with --layers")
    return 0


def _default_neurons(pm) -> str:
    """The neuron line (:func:`~deepfault.core.capture.neurons_line`) of the default layers."""
    import torch

    from ..core.batches import activations
    from ..core.capture import neurons_line, selection_source

    layout, _ = activations(pm.module, torch.zeros((1, *pm.input_shape)), layers=None, threads=None)
    return neurons_line(layout.num_neurons, len(layout.layers), selection_source(pm.module, None))


def _hooks(mf) -> str:
    if unwrap_black_box(mf.model) is not None:
        return "no: a black box (outputs only)"
    if is_compiled(mf.model):
        return "no: compiled TorchScript (outputs and gradients only)"
    return "yes (every method)"


def _show_how_read(mf) -> None:
    """How the file was read: format, architecture, loader, and whether hooks reach its neurons."""
    rows = [("format", mf.read.get("format", "-")),
            ("architecture", f"{mf.arch} {mf.arch_kwargs}" if mf.arch_kwargs else mf.arch),
            ("loader", mf.read.get("loader", "-")),
            ("neuron hooks", _hooks(mf))]
    print(table(("read", "how"), rows))


def _show_compiled(args, mf, pm) -> int:
    """A compiled TorchScript model: its output and parameters; no layers (no hooks reach them)."""
    import torch

    from ..core.capture import eval_mode, forward, model_device

    with eval_mode(pm.module), torch.inference_mode():
        out = forward(pm.module, torch.zeros((1, *pm.input_shape), device=model_device(pm.module)))
    total = sum(p.numel() for p in pm.module.parameters())
    print(f"model {args.model} ({mf.arch}); input shape per input {pm.input_shape}; output "
          f"{tuple(out.shape[1:])}, {pm.output_kind}; {total:,} parameters; fingerprint {pm.fingerprint}")
    print(f"its forward is compiled ({getattr(mf.model, 'why', 'TorchScript')}), so no layer table and no "
          "neurons: regress (drfuzz) and repair run on it; for run, coverage and xplore save its state_dict "
          "and use --arch path/to/file.py:ClassName, or export it to ONNX")
    return 0


def _show_black_box(args, mf) -> int:
    """How a black-box file is read: the runtime, its input and output tensors and their dtypes."""
    d = describe_black_box(mf.model)

    def io(t):
        if t is None:
            return "-"
        q = t.get("quantization")
        extra = f", quantised: scale {q['scale']:.6g}, zero point {q['zero_point']}" if q else ""
        return f"{t['name']} {'x'.join(map(str, t['shape']))} {t['dtype']}{extra}"

    print(f"model {args.model} ({mf.arch}): run by {d['runtime']} as a black box: no layers, no neurons, "
          f"no gradients; regress (drfuzz) reads its outputs only")
    fallback = mf.meta.get("runtime_fallback")
    rows = [("runtime", d["runtime"]), ("input", io(d["input"])), ("output", io(d["output"])),
            ("output kind", mf.output_kind),
            ("batch", "any" if d["input"]["shape"][0] == "N" else f"{d['input']['shape'][0]} (fixed)")]
    if fallback:
        rows.append(("why not torch", fallback))
    ops = mf.meta.get("graph_ops")
    if ops:
        rows.append(("operators", ", ".join(f"{k} {v}" for k, v in sorted(ops.items()))))
    print(table(("what", "how"), rows))
    return 0
