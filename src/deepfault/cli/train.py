"""``deepfault train``: train a zoo architecture on a data set."""

from __future__ import annotations

import sys
from pathlib import Path

from ..data import list_datasets, load_dataset
from ..models import list_architectures, save_model
from ..models.train import TrainConfig, train_model
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
    fraction,
    positive_int,
    positive_number,
)
from .gan import outputs as gan_outputs
from .gan import train_from_train_args


def add_parser(sub) -> None:
    """Add ``deepfault train`` to ``sub``."""
    train = sub.add_parser(
        "train", help="train a zoo architecture on a data set and write a model file",
        description="Train with the DeepFault prototype's recipe by default (Adam, batch 32, "
        "10 epochs, 1/6 of the training set held out for validation), with the learning rate "
        "decayed on a cosine unless --schedule constant. Ctrl-C stops after "
        "keeping the last completed epoch, which is then saved.",
        formatter_class=HelpFormatter,
    )
    train.add_argument("--arch", required=True, choices=list_architectures(), metavar="NAME",
                       type=lambda s: s.replace("-", "_"),
                       help=f"architecture ({', '.join(list_architectures())})")
    train.add_argument("--dataset", required=True, metavar="NAME",
                       help=f"data set ({', '.join(list_datasets())}, or a .npz file)")
    add_data_dir(train)
    train.add_argument("--epochs", type=positive_int, default=10, help="passes over the training set")
    train.add_argument("--batch-size", type=positive_int, default=32, help="inputs per step")
    train.add_argument("--lr", type=positive_number, default=1e-3, help="Adam learning rate")
    train.add_argument("--schedule", choices=("cosine", "constant"), default="cosine",
                       help="learning-rate schedule; 'constant' is exactly the prototype's recipe")
    train.add_argument("--val-fraction", type=fraction, default=1 / 6,
                       help="share of the training set held out for validation (default: 1/6)")
    add_seed(train, "seed of the weights, the split and the shuffling")
    train.add_argument("--scale01", action="store_true",
                       help="scale 0-255 data sets (cifar10, svhn) to [0, 1]")
    add_device(train)
    add_threads(train)
    train.add_argument("--out", metavar="FILE", default=None,
                       help="model file to write (default: ARCH-DATASET.pt)")
    add_no_progress(train)
    train.set_defaults(func=_cmd_train)



def outputs(args) -> list[Output]:
    """The files ``deepfault train`` writes (a discriminator comes with its generator)."""
    if args.arch == "dcgan_discriminator":
        return gan_outputs(args)
    return [Output("--out", Path(args.out or f"{args.arch}-{Path(args.dataset).stem}.pt"))]


def _cmd_train(args) -> int:
    if args.arch == "dcgan_discriminator":  # trained adversarially with its generator
        return train_from_train_args(args)
    out = Path(str(outputs(args)[0].path))
    config = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                         val_fraction=args.val_fraction, seed=args.seed, schedule=args.schedule)
    config.validate()
    device = device_from(args.device)
    apply_threads(args.threads)
    kwargs = {"scale01": True} if args.scale01 else {}
    data = load_dataset(args.dataset, data_dir=args.data_dir, **kwargs)
    print(f"training {args.arch} on {data.name}: {len(data.y_train)} training inputs, "
          f"{len(data.y_test)} test inputs, {device}")
    mf, result = train_model(args.arch, data, config, device=device,
                             arch_kwargs={"num_classes": data.num_classes},
                             progress=not args.no_progress)
    if args.dataset.endswith(".npz"):  # so that 'run --model' finds the same file again
        mf.dataset = str(Path(args.dataset).resolve())
    if result.epochs_completed == 0:
        print("interrupted before the first epoch finished: nothing written", file=sys.stderr)
        return 130
    save_model(out, mf)
    if result.interrupted:
        print(f"interrupted: kept the weights of epoch {result.epochs_completed}")
    val = "-" if result.val_accuracy is None else f"{result.val_accuracy:.4f}"
    print(f"epochs {result.epochs_completed}, {result.seconds:.1f} s; train accuracy "
          f"{result.train_accuracy:.4f}, validation {val}, test {mf.meta['test_accuracy']:.4f}")
    print(f"wrote {out}")
    return 130 if result.interrupted else 0


