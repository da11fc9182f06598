"""``deepfault repair``: fine-tune a model on the failing inputs testing found, against baselines."""

from __future__ import annotations

from dataclasses import replace

from ..core.runtime import Runtime
from ..models.source import ModelSource
from ..provenance import provenance
from ..repair import RepairConfig, repair
from . import _common as c

#: The options that set RepairConfig's fields, in the order --help lists them.
_FIELDS = ("holdout", "mix", "epochs", "lr", "batch_size", "seed", "max_drop", "ties", "vote_model",
           "baselines", "eps", "bim_steps")

def add_parser(sub) -> None:
    """Add ``deepfault repair`` to ``sub``."""
    p = c.command(sub, "repair", *c.text("repair"))
    p.add_argument("inputs", type=c.READS, nargs="+", metavar="INPUTS.npz",
                   help="files of 'deepfault run --save-inputs', 'deepfault xplore' (its .npz) or "
                   "'deepfault regress' (its faults .npz)")
    c.add_options(p, "model", "dataset", "data_dir", "arch", "arch_args", "trust_pickle",
                model={"required": True, "help": "the model to repair (any format 'deepfault run' takes; for "
                       "regress files, M2)"},
                dataset="data set the inputs were made from (default: the one the model file names)")
    p.add_argument("--m1", type=c.MODEL, metavar="FILE", default=None,
                   help="M1 of regress files, to recompute which held-out faults it gets right (default: "
                   "the M1 predictions saved in the file)")
    c.add_fields(p, RepairConfig, *_FIELDS)
    c.add_options(p, "device", "threads")
    p.add_argument("--out", type=c.WRITES, metavar="FILE", default="repair-result.json",
                   help="JSON result, written atomically; '-' writes none")
    p.add_argument("--save-model", type=c.WRITES, metavar="FILE", default=None,
                   help="the repaired model (default: beside --out as .pt); '-' writes none")
    c.add_options(p, "no_progress", "report")
    p.set_defaults(func=_cmd_repair)


def outputs(args) -> list[c.Output]:
    """The files ``deepfault repair`` writes: the JSON result and the repaired model (``--report DIR``
    is checked as the report folder).
    """
    out = c.output_path(args.out, "--out")
    model = args.save_model if args.save_model is not None else c.sibling(out, ".pt")
    named = "--save-model" if args.save_model is not None else "--save-model (default: --out as .pt)"
    return [c.Output("--out", out), c.Output(named, c.output_path(model, "--save-model"))]


def _cmd_repair(args) -> int:
    config = RepairConfig(**{name: getattr(args, name) for name in _FIELDS})
    out, model_path = (o.path for o in outputs(args))
    device = c.device_from(args.device)
    source = c.config_from(args, ModelSource)
    prepared = source.prepare(need_data=True)
    m1 = None if args.m1 is None else replace(source, model=args.m1).prepare(prepared.data)
    threads = c.apply_threads(args.threads, [prepared.module], device)
    runtime = Runtime(device=str(device), progress=not args.no_progress)
    result = repair((prepared, m1), args.inputs, config, runtime=runtime).saving(model_path)
    c.write_outcome(args, result, command="repair", config=config, out=out,
                  runtime=runtime.with_(threads=threads), paths={"model": model_path})
    where = {**provenance(device, argv=args.argv), "threads": threads}
    c.write_run_report(args, lambda folder: result.page(folder, provenance=where))
    return 0
