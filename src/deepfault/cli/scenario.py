"""``deepfault scenario``: write the M1/M2 model pair of a DRFuzz regression scenario."""

from __future__ import annotations

from pathlib import Path

from ..checks import check_int
from ..data import list_datasets, load_dataset
from ..fuzz.pairs.scenarios import SCENARIOS, list_scenarios, make_scenario
from ..models import list_architectures
from ._common import (
    HelpFormatter,
    Output,
    add_data_dir,
    add_device,
    add_no_progress,
    add_seed,
    add_threads,
    apply_threads,
    device_from,
    fmt,
    positive_int,
    table,
)


def add_parser(sub) -> None:
    """Add ``deepfault scenario`` to ``sub``."""
    lines = "; ".join(f"{n}: {SCENARIOS.get(n).description}" for n in list_scenarios())
    p = sub.add_parser(
        "scenario", help="write the M1/M2 model pair of a regression scenario (DRFuzz)",
        description="Train M1 from the zoo and derive M2 as in DRFuzz's regression scenarios "
        f"(spec/drfuzz.md section 9): {lines}. 'all' runs every scenario. The base models are cached "
        "in --out and shared between scenarios with the same architecture, data, seed and epochs. "
        "Prints both test accuracies and the regressions (test inputs M1 gets right and M2 wrong).",
        formatter_class=HelpFormatter,
    )
    p.add_argument("name", choices=[*list_scenarios(), "all"], metavar="SCENARIO",
                   help=f"scenario ({', '.join(list_scenarios())}, or all)")
    p.add_argument("--arch", required=True, choices=list_architectures(), metavar="NAME",
                   help=f"architecture ({', '.join(list_architectures())})")
    p.add_argument("--dataset", required=True, metavar="NAME",
                   help=f"data set ({', '.join(list_datasets())}, or a .npz file)")
    add_data_dir(p)
    p.add_argument("--out", metavar="DIR", default="scenarios", help="folder to write the models to")
    add_seed(p, "seed of weights, splits and shuffling")
    p.add_argument("--epochs", type=positive_int, default=3,
                   help="epochs of M1's training (SUPPLY and ADV:BIM fine-tune as long)")
    p.add_argument("--scale01", action="store_true", help="scale 0-255 data sets (cifar10, svhn) to [0, 1]")
    add_device(p)
    add_threads(p)
    add_no_progress(p)
    p.set_defaults(func=_cmd_scenario)


def outputs(args) -> list[Output]:
    """The folder ``deepfault scenario`` writes its models into."""
    return [Output("--out", Path(args.out), folder=True)]


def _cmd_scenario(args) -> int:
    check_int("--epochs", args.epochs)
    device = device_from(args.device)
    apply_threads(args.threads)
    kwargs = {"scale01": True} if args.scale01 else {}
    data = load_dataset(args.dataset, data_dir=args.data_dir, **kwargs)
    names = list_scenarios() if args.name == "all" else [args.name]
    print(f"scenario {args.name}: {args.arch} on {data.name} ({len(data.y_train)} training, "
          f"{len(data.y_test)} test inputs), seed {args.seed}, {args.epochs} epochs, {device}")
    rows, paths = [], []
    for name in names:
        r = make_scenario(name, args.arch, data, seed=args.seed, epochs=args.epochs, out_dir=args.out,
                          device=device, progress=not args.no_progress)
        rows.append((name, r.label, fmt(r.m1_accuracy, 4), fmt(r.m2_accuracy, 4), r.regressions, r.fixes,
                     fmt(r.seconds, 1)))
        paths += [str(r.m1_path), str(r.m2_path)]
        if len(names) > 1:
            print(f"  {name}: M1 {r.m1_accuracy:.4f}, M2 {r.m2_accuracy:.4f}, {r.regressions} regressions")
    print(table(("scenario", "label", "M1 acc", "M2 acc", "regressions", "fixes", "seconds"), rows))
    print("regressions: test inputs M1 classifies correctly and M2 does not; fixes: the other way round")
    print("wrote " + ", ".join(paths))
    return 0
