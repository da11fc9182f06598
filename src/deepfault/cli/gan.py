"""``deepfault gan train``: train DRFuzz's DCGAN and write its discriminator as a model file."""

from __future__ import annotations

import sys
from pathlib import Path

from ..data import list_datasets, load_dataset
from ..errors import DeepFaultError
from ..fuzz.fidelity.gan import GanConfig, GanFiles, check_gan_data, save_gan, train_gan
from . import _common as c

#: Flags of ``deepfault train`` that :func:`train_from_train_args` takes over when given.
_TRAIN_FLAGS = {"--epochs": "epochs", "--batch-size": "batch_size", "--lr": "lr"}


def add_parser(sub) -> None:
    """Add ``deepfault gan`` and its action train to ``sub``."""
    gan = sub.add_parser("gan", help="train the DCGAN whose discriminator checks DRFuzz's mutants")
    gan_sub = gan.add_subparsers(dest="gan_command", metavar="ACTION")
    gan_sub.required = True
    train = c.command(gan_sub, "train", *c.text("gan train"))
    train.add_argument("--dataset", required=True, metavar="NAME",
                       help=f"data set of square images ({', '.join(list_datasets())}, or a .npz file)")
    c.add_options(train, "data_dir")
    c.add_fields(train, GanFiles, "out", "generator_out")
    for name in ("epochs", "images_per_epoch", "batch_size", "lr", "seed"):
        c.add_field(train, GanConfig, name)
    c.add_options(train, *c.RUNNING)
    train.set_defaults(func=_cmd_gan_train)


def outputs(args) -> list[c.Output]:
    """The files ``deepfault gan train`` (and ``train --arch dcgan_discriminator``) writes."""
    generator = getattr(args, "generator_out", None)  # train --arch dcgan_discriminator has none
    out, gen_out = GanFiles(args.out, generator).paths(args.dataset)
    named = "--generator-out" if generator else "--out (its generator)"
    return [c.Output("--out", out), c.Output(named, gen_out)]


def _cmd_gan_train(args) -> int:
    return _train(args, c.config_from(args, GanConfig))


def _train(args, config: GanConfig) -> int:
    device = c.device_from(args.device)
    c.apply_threads(args.threads)
    data = load_dataset(args.dataset, data_dir=args.data_dir)
    check_gan_data(data)
    out, gen_out = (Path(str(o.path)) for o in outputs(args))
    if gen_out.resolve() == out.resolve():
        raise DeepFaultError(f"--generator-out and --out name the same file {str(out)!r}")
    print(f"training the DCGAN on {data.name}: {config.per_epoch(len(data.y_train))} of {len(data.y_train)} "
          f"training images per epoch, epochs: {config.epochs}, {device}")
    result = train_gan(data, **config.to_dict(), device=device, progress=not args.no_progress,
                       threads=args.threads)
    if args.dataset.endswith(".npz"):
        result.discriminator.dataset = result.generator.dataset = str(Path(args.dataset).resolve())
    if result.epochs_completed == 0:
        print("interrupted before the first epoch finished: nothing written", file=sys.stderr)
        return 130
    save_gan(result, out, gen_out)
    print(result.summary())
    print(f"wrote {out} (discriminator) and {gen_out} (generator)")
    return 130 if result.interrupted else 0


def train_from_train_args(args) -> int:
    """Run ``deepfault train --arch dcgan_discriminator`` as ``deepfault gan train``.

    ``deepfault train``'s ``--epochs``, ``--batch-size`` and ``--lr`` are used when given on
    the command line; otherwise the GAN's own defaults apply (the classifier defaults of
    ``train`` would make a GAN run for an hour on a CPU).
    """
    given = {_TRAIN_FLAGS[flag.split("=")[0]] for flag in getattr(args, "argv", [])
             if flag.split("=")[0] in _TRAIN_FLAGS}
    return _train(args, GanConfig(**{name: getattr(args, name) for name in given}, seed=args.seed))
