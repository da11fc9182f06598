"""``deepfault train``: train a zoo architecture on a data set."""

from __future__ import annotations

import sys
from pathlib import Path

from ..checks import error
from ..data import list_datasets, load_dataset
from ..models import list_architectures, save_model
from ..models.specs import ARCH_ARGS_HELP, arch_arguments, default_stem
from ..models.train import TRAIN_COMMAND, TrainConfig, train_model
from . import _common as c
from .gan import outputs as gan_outputs
from .gan import train_from_train_args


def add_parser(sub) -> None:
    """Add ``deepfault train`` to ``sub``."""
    train = c.command(sub, "train", *TRAIN_COMMAND)
    train.add_argument("--arch", required=True, metavar="SPEC", type=c.ARCH,
                       help=f"architecture: a zoo name ({', '.join(list_architectures())}), or "
                       "file.py:Class, package.module:factory, torchvision:NAME, timm:NAME")
    c.add_options(train, "arch_args", "dataset", "data_dir", arch_args=ARCH_ARGS_HELP,
                dataset={"required": True,
                         "help": f"data set ({', '.join(list_datasets())}, or a .npz file)"})
    for name in ("epochs", "batch_size", "lr", "schedule", "val_fraction", "seed"):
        c.add_field(train, TrainConfig, name)
    train.add_argument("--scale01", action="store_true",
                       help="scale 0-255 data sets (cifar10, svhn) to [0, 1]")
    c.add_options(train, "device", "threads")
    train.add_argument("--out", type=c.WRITES, metavar="FILE", default=None,
                       help="model file to write (default: ARCH-DATASET.pt)")
    c.add_options(train, "no_progress")
    train.set_defaults(func=_cmd_train)


def outputs(args) -> list[c.Output]:
    """The files ``deepfault train`` writes (a discriminator comes with its generator)."""
    if args.arch == "dcgan_discriminator":
        return gan_outputs(args)
    return [c.Output("--out", Path(args.out or f"{default_stem(args.arch)}-{Path(args.dataset).stem}.pt"))]


def preflight(args) -> None:
    """The generator is trained with its discriminator (``gan train``)."""
    if args.arch == "dcgan_generator":
        raise error("--arch", "a classifier of the zoo (or dcgan_discriminator)", args.arch,
                    "the generator is trained with its discriminator: 'deepfault gan train'")


def _cmd_train(args) -> int:
    if args.arch == "dcgan_discriminator":  # trained adversarially with its generator
        return train_from_train_args(args)
    out = Path(str(outputs(args)[0].path))
    config = c.config_from(args, TrainConfig)
    device = c.device_from(args.device)
    c.apply_threads(args.threads)
    kwargs = {"scale01": True} if args.scale01 else {}
    data = load_dataset(args.dataset, data_dir=args.data_dir, **kwargs)
    print(f"training {args.arch} on {data.name}: {len(data.y_train)} training inputs, "
          f"{len(data.y_test)} test inputs, {device}")
    mf, result = train_model(args.arch, data, config, device=device,
                             arch_kwargs=arch_arguments(args.arch, args.arch_kwargs, data.num_classes),
                             progress=not args.no_progress, threads=args.threads)
    if args.dataset.endswith(".npz"):  # so that 'run --model' finds the same file again
        mf.dataset = str(Path(args.dataset).resolve())
    if result.epochs_completed == 0:
        print("interrupted before the first epoch finished: nothing written", file=sys.stderr)
        return 130
    save_model(out, mf)
    print(result.summary(mf.meta["test_accuracy"]))
    print(f"wrote {out}")
    return 130 if result.interrupted else 0


