"""``deepfault repair``: fine-tune a model on the failing inputs testing found, against baselines."""

from __future__ import annotations

import argparse

import torch

from ..core.registry import unknown_name
from ..experiment.results import result_document, write_result
from ..models.prepare import prepare_model
from ..provenance import provenance
from ..repair import RepairConfig, repair
from ..repair.config import BASELINES, TIE_POLICIES
from ..repair.report import run_page, summary_text
from ._common import (
    HelpFormatter,
    Output,
    add_arch_options,
    add_data_dir,
    add_device,
    add_no_progress,
    add_report_option,
    add_seed,
    add_threads,
    apply_threads,
    device_from,
    fraction,
    names,
    non_negative_number,
    number,
    output_path,
    positive_int,
    positive_number,
    positive_share,
    prepare_from_args,
    sibling,
    write_run_report,
)


def _mix(text: str) -> float | None:
    if text == "all":
        return None
    value = number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0 or 'all'; got {text!r}")
    return value


def _baselines(text: str) -> tuple[str, ...]:
    if text.strip() == "none":
        return ()
    chosen = names(text)
    unknown = [b for b in chosen if b not in BASELINES]
    if unknown:
        raise argparse.ArgumentTypeError(unknown_name("baseline", unknown[0], [*BASELINES, "none"]))
    return chosen


def add_parser(sub) -> None:
    """Add ``deepfault repair`` to ``sub``."""
    d = RepairConfig()
    p = sub.add_parser(
        "repair",
        help="fine-tune a model on the failing inputs run/xplore/regress found, against baselines",
        description="Label the inputs of each file where their labels are defined (the originals' labels "
        "for 'run' and 'regress' files, the models' majority vote for 'xplore' files), hold out part of "
        "every file by seed, fine-tune a copy of the model on the rest mixed with training inputs, and "
        "do the same with as many random or adversarial inputs. Prints test and held-out accuracy "
        "before and after each, ends with a verdict (which fine-tuning fixed the most held-out faults within "
        "the --max-drop budget, and which model was saved), and writes a JSON result and the repaired model "
        "(.pt); --report DIR adds an HTML page.",
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUTS.npz",
        help="files of 'deepfault run --save-inputs', 'deepfault xplore' (its .npz) or "
        "'deepfault regress' (its faults .npz)",
    )
    p.add_argument(
        "--model",
        required=True,
        metavar="FILE",
        help="the model to repair (any format 'deepfault run' takes; for regress files, M2)",
    )
    p.add_argument(
        "--dataset",
        metavar="NAME",
        default=None,
        help="data set the inputs were made from (default: the one the model file names)",
    )
    add_data_dir(p)
    add_arch_options(p)
    p.add_argument(
        "--trust-pickle",
        action="store_true",
        help="allow loading a pickled whole nn.Module (only for files you trust)",
    )
    p.add_argument(
        "--m1",
        metavar="FILE",
        default=None,
        help="M1 of regress files, to recompute which held-out faults it gets right (default: "
        "the M1 predictions saved in the file)",
    )
    p.add_argument(
        "--holdout",
        type=fraction,
        default=d.holdout,
        help="share of every file's seeds held out for evaluation",
    )
    p.add_argument(
        "--mix",
        type=_mix,
        default=d.mix,
        metavar="R",
        help="training inputs mixed in per found input, or 'all' for the whole training split",
    )
    p.add_argument("--epochs", type=positive_int, default=d.epochs, help="fine-tuning epochs")
    p.add_argument("--lr", type=positive_number, default=d.lr, help="Adam's learning rate (constant)")
    p.add_argument("--batch-size", type=positive_int, default=d.batch_size, help="inputs per step")
    add_seed(p, "seed of the split, the mixed-in and random inputs and the shuffling", default=d.seed)
    p.add_argument(
        "--max-drop",
        type=non_negative_number,
        default=d.max_drop,
        metavar="POINTS",
        help="flag a repair that loses more test accuracy than this (percentage points)",
    )
    p.add_argument(
        "--ties",
        choices=TIE_POLICIES,
        default=d.ties,
        help="tied votes on xplore inputs: drop them, or label them with the seed's class",
    )
    p.add_argument(
        "--vote-model",
        metavar="NAME",
        default=None,
        help="label xplore inputs with this model's prediction (name or index) instead of the vote",
    )
    p.add_argument(
        "--baselines",
        type=_baselines,
        default=d.baselines,
        metavar="B1,B2",
        help=f"baselines ({', '.join(BASELINES)}) or 'none' (default: all)",
    )
    p.add_argument("--eps", type=positive_share, default=d.eps,
                   help="FGSM/BIM radius as a share of the pixel range")
    p.add_argument("--bim-steps", type=positive_int, default=d.bim_steps, help="BIM iterations")
    add_device(p)
    add_threads(p)
    p.add_argument(
        "--out",
        metavar="FILE",
        default="repair-result.json",
        help="JSON result, written atomically; '-' writes none",
    )
    p.add_argument(
        "--save-model",
        metavar="FILE",
        default=None,
        help="the repaired model (default: beside --out as .pt); '-' writes none",
    )
    add_no_progress(p)
    add_report_option(p)
    p.set_defaults(func=_cmd_repair)


def outputs(args) -> list[Output]:
    """The files ``deepfault repair`` writes: the JSON result and the repaired model (``--report DIR``
    is checked as the report folder).
    """
    out = output_path(args.out)
    model = args.save_model if args.save_model is not None else sibling(out, ".pt")
    return [Output("--out", out),
            Output("--save-model" if args.save_model is not None else "--save-model (default: --out as .pt)",
                   output_path(model))]


def _cmd_repair(args) -> int:
    config = RepairConfig(
        holdout=args.holdout, mix=args.mix, epochs=args.epochs, lr=args.lr, batch_size=args.batch_size,
        seed=args.seed, max_drop=args.max_drop, ties=args.ties, vote_model=args.vote_model,
        baselines=args.baselines, eps=args.eps, bim_steps=args.bim_steps,
    )
    paths = outputs(args)
    out, model_path = (p.path for p in paths)
    device = device_from(args.device)
    prepared = prepare_from_args(args)
    m1 = None if args.m1 is None else prepare_model(args.m1, prepared.data, data_dir=args.data_dir,
                                                    arch=args.arch, arch_kwargs=args.arch_args,
                                                    trust_pickle=args.trust_pickle)
    before = torch.get_num_threads()
    threads = apply_threads(args.threads)
    try:
        result = repair(prepared, args.inputs, config=config, data_dir=args.data_dir, m1=m1, device=device,
                        save_model=model_path, progress=not args.no_progress)
    finally:
        torch.set_num_threads(before)
    print(summary_text(result), end="")
    wrote = [str(model_path)] if model_path else []
    if out is not None:
        payload = result.to_dict()
        body = {k: v for k, v in payload.items() if k not in ("config", "device")}  # the envelope has them
        document = result_document(
            "repair", body, config=payload["config"],
            seed=config.seed, device=device, argv=args.argv, threads=threads,
            outputs={"model": str(model_path) if model_path else None})
        write_result(out, document)
        wrote.append(str(out))
    if wrote:
        print(f"wrote {', '.join(wrote)}")
    where = {**provenance(device, argv=args.argv), "threads": threads}
    write_run_report(args, lambda folder: run_page(result, folder, provenance=where))
    return 0
