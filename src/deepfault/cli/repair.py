"""``deepfault repair``: fine-tune a model on the failing inputs testing found, against baselines."""

from __future__ import annotations

from dataclasses import fields, replace

from ..core.runtime import Runtime
from ..models.source import ModelSource
from ..provenance import provenance
from ..repair import RepairConfig, repair
from ..repair.config import RepairFiles
from . import _common as c

#: The options that set RepairConfig's fields, in the order --help lists them (train_on: Python only).
_FIELDS = tuple(f.name for f in fields(RepairConfig) if f.name != "train_on")

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
    c.add_field(p, RepairFiles, "m1")
    c.add_fields(p, RepairConfig, *_FIELDS)
    c.add_options(p, "device", "threads")
    c.add_fields(p, RepairFiles, "out", "save_model")
    c.add_options(p, "no_progress", "report")
    p.set_defaults(func=_cmd_repair)


def outputs(args) -> list[c.Output]:
    """The files ``deepfault repair`` writes: the JSON result and the repaired model (``--report DIR``
    is checked as the report folder).
    """
    out, model = c.config_from(args, RepairFiles).paths()
    named = "--save-model" if args.save_model is not None else "--save-model (default: --out as .pt)"
    return [c.Output("--out", out), c.Output(named, model)]


def _cmd_repair(args) -> int:
    config = c.config_from(args, RepairConfig)
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
