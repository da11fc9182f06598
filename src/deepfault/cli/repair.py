"""``deepfault repair``: fine-tune a model on the failing inputs testing found, against baselines."""

from __future__ import annotations

import argparse
import io

from ._common import (
    HelpFormatter,
    add_data_dir,
    add_device,
    add_no_progress,
    add_seed,
    add_threads,
    apply_threads,
    device_from,
    fmt,
    fraction,
    names,
    non_negative_number,
    number,
    positive_int,
    positive_number,
    positive_share,
    table,
)


def _mix(text: str) -> float | None:
    if text == "all":
        return None
    value = number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0 or 'all'; got {text!r}")
    return value


def _baselines(text: str) -> tuple[str, ...]:
    from ..repair.config import BASELINES

    if text.strip() == "none":
        return ()
    chosen = names(text)
    unknown = [b for b in chosen if b not in BASELINES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown baseline {unknown[0]!r}; known: {', '.join(BASELINES)}, none"
        )
    return chosen


def add_parser(sub) -> None:
    """Add ``deepfault repair`` to ``sub``."""
    from ..repair.config import BASELINES, TIE_POLICIES, RepairConfig

    d = RepairConfig()
    p = sub.add_parser(
        "repair",
        help="fine-tune a model on the failing inputs run/xplore/regress found, against baselines",
        description="Label the inputs of each file where their labels are defined (the originals' labels "
        "for 'run' and 'regress' files, the models' majority vote for 'xplore' files), hold out part of "
        "every file by seed, fine-tune a copy of the model on the rest mixed with training inputs, and "
        "do the same with as many random or adversarial inputs. Prints test and held-out accuracy "
        "before and after each, writes a JSON result, an HTML page and the repaired model (.pt).",
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
    p.add_argument("--arch", default=None, metavar="NAME", help="zoo architecture of a plain state_dict file")
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
        help="JSON result, written atomically (the HTML page goes beside it as .html); '-' writes none",
    )
    p.add_argument(
        "--save-model",
        metavar="FILE",
        default=None,
        help="the repaired model (default: beside --out as .pt); '-' writes none",
    )
    add_no_progress(p)
    p.set_defaults(func=_cmd_repair)


def summary(result) -> str:
    """The printed report: the files, then one row per model (before, found, baselines)."""
    out = io.StringIO()
    w = out.write
    cfg = result.config
    w(f"model {result.model_name} · data {result.dataset} · {result.device}\n")
    w(
        f"hold out {cfg.holdout:g} of each file's seeds, {result.mixed} training inputs mixed in, "
        f"{cfg.epochs} epochs, lr {cfg.lr:g}, batch {cfg.batch_size}, seed {cfg.seed}\n\n"
    )
    rows = [
        (
            f.name,
            f.kind,
            f.inputs,
            f.used,
            f.ties if f.tie_policy else "-",
            f"{f.tie_policy}" if f.tie_policy else "-",
            f.train,
            f.held_out,
            f.source,
        )
        for f in result.files
    ]
    w(
        table(("file", "kind", "inputs", "labelled", "ties", "ties are", "train", "held out", "labels"), rows)
        + "\n\n"
    )
    files = [f.name for f in result.files]
    rf_files = [f.name for f in result.files if f.kind == "regress"]
    headers = [
        "model",
        "inputs",
        "test acc",
        f"clean test acc ({result.clean_test})",
        "change (pts)",
        *[f"held-out {n}" for n in files],
        *[f"#RF {n}" for n in rf_files],
        "flag",
    ]

    def row(name, inputs, ev, change, flag):
        return [
            name,
            inputs,
            fmt(ev.test_accuracy, 4),
            fmt(ev.clean_test_accuracy, 4),
            change,
            *[fmt(ev.held_out.get(n), 4) for n in files],
            *[ev.rf.get(n, "-") for n in rf_files],
            flag,
        ]

    rows = [row("before", "-", result.before, "-", "")]
    for a in result.approaches:
        rows.append(
            row(
                a.name,
                a.inputs,
                a.after,
                f"{a.test_change:+.2f}",
                f"costs > {cfg.max_drop:g} pts" if a.flagged else "",
            )
        )
    w(table(headers, rows) + "\n")
    flagged = [a.name for a in result.approaches if a.flagged]
    if flagged:
        w(f"\nflagged: {', '.join(flagged)} lost more than {cfg.max_drop:g} points of clean test accuracy\n")
    return out.getvalue()


def _cmd_repair(args) -> int:
    import torch

    from .._io import check_writable, write_json
    from ..provenance import provenance
    from ..repair import RepairConfig, repair

    config = RepairConfig(
        holdout=args.holdout,
        mix=args.mix,
        epochs=args.epochs,
        lr=args.lr,
        batch_size=args.batch_size,
        seed=args.seed,
        max_drop=args.max_drop,
        ties=args.ties,
        vote_model=args.vote_model,
        baselines=args.baselines,
        eps=args.eps,
        bim_steps=args.bim_steps,
    ).validate()
    out = None if args.out == "-" else check_writable(args.out)
    html = None if out is None else check_writable(out.with_suffix(".html"))
    model_path = args.save_model or (None if out is None else str(out.with_suffix(".pt")))
    model_path = None if model_path == "-" else check_writable(model_path) if model_path else None
    device = device_from(args.device)
    before = torch.get_num_threads()
    threads = apply_threads(args.threads)
    try:
        result = repair(
            args.model,
            args.inputs,
            dataset=args.dataset,
            data_dir=args.data_dir,
            config=config,
            m1=args.m1,
            device=device,
            save_to=model_path,
            progress=not args.no_progress,
            arch=args.arch,
            trust_pickle=args.trust_pickle,
        )
    finally:
        torch.set_num_threads(before)
    print(summary(result), end="")
    wrote = [str(model_path)] if model_path else []
    if out is not None:
        prov = {**provenance(device, argv=args.argv), "threads": threads}
        payload = {
            "tool": "deepfault repair",
            "provenance": prov,
            "model": {
                "file": args.model,
                "name": result.model_name,
                "saved": str(model_path) if model_path else None,
            },
            **result.to_dict(),
        }
        write_json(out, payload)
        wrote.append(str(out))
        from ..repair.report import write_result_page

        if write_result_page(html, result, prov) is not None:
            wrote.append(str(html))
    if wrote:
        print(f"wrote {', '.join(wrote)}")
    return 0
