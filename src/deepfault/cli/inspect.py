"""``deepfault inspect``: a model's layers, output shapes and neuron counts."""

from __future__ import annotations

from dataclasses import replace

from ..errors import DeepFaultError
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
    insp.set_defaults(func=_cmd_inspect)



def _cmd_inspect(args) -> int:
    from ..models.summary import describe_model

    mf = open_model_file(args)
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
    neurons = sum(r.units or 0 for r in rows if r.default_neuron_layer)
    print(f"{neurons} neurons in the default layers; name others with --layers")
    return 0
