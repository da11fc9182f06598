"""``deepfault scenario``: write the M1/M2 model pair of a DRFuzz regression scenario."""

from __future__ import annotations

from pathlib import Path

from ..checks import error
from ..core.constraints import EPOCHS
from ..data import list_datasets, load_dataset
from ..errors import DeepFaultError
from ..fuzz.pairs.scenarios import SCENARIOS, ScenarioContext, list_scenarios, make_scenario
from ..fuzz.pairs.summary import deployment_summary, scenarios_summary
from ..models import list_architectures
from ..models.deploy import deployment_files, list_deploy_formats, make_deployment
from ..models.specs import ARCH_ARGS_HELP
from . import _common as c


def add_parser(sub) -> None:
    """Add ``deepfault scenario`` to ``sub``."""
    lines = "; ".join(f"{n}: {SCENARIOS.get(n).description}" for n in list_scenarios())
    help, description = c.text("scenario")
    p = c.command(sub, "scenario", help, description.format(scenarios=lines))
    p.add_argument("name", choices=[*list_scenarios(), "all", "deploy"], metavar="SCENARIO",
                   help=f"scenario ({', '.join(list_scenarios())}, all, or deploy)")
    p.add_argument("--arch", default=None, type=c.ARCH, metavar="SPEC",
                   help=f"architecture: a zoo name ({', '.join(list_architectures())}), or your class "
                   "(file.py:Class; this runs that file), package.module:factory, torchvision:NAME, "
                   "timm:NAME; required but for deploy")
    c.add_options(p, "arch_args", "dataset", arch_args=ARCH_ARGS_HELP,
                dataset=f"data set ({', '.join(list_datasets())}, or a .npz file); required but for deploy "
                "with a --model file that names its data set")
    p.add_argument("--model", type=c.MODEL, default=None, metavar="FILE",
                   help="deploy: the float torch model to export (any format 'run --model' takes)")
    p.add_argument("--formats", default=",".join(list_deploy_formats()), metavar="NAMES",
                   help=f"deploy: the files to write ({', '.join(list_deploy_formats())})")
    c.add_options(p, "data_dir")
    p.add_argument("--out", type=c.WRITES_FOLDER, metavar="DIR", default="scenarios",
                   help="folder to write the models to")
    c.add_options(p, "seed", seed="seed of weights, splits and shuffling")
    p.add_argument("--epochs", type=c.FieldType(EPOCHS), default=3, metavar="N",
                   help="epochs of M1's training (SUPPLY and ADV:BIM fine-tune as long)")
    p.add_argument("--scale01", action="store_true", help="scale 0-255 data sets (cifar10, svhn) to [0, 1]")
    c.add_options(p, *c.RUNNING)
    p.set_defaults(func=_cmd_scenario)


def outputs(args) -> list[c.Output]:
    """The folder ``deepfault scenario`` writes its models into; for deploy, also its files."""
    folder = [c.Output("--out", Path(args.out), folder=True)]
    if args.name != "deploy" or args.model is None:
        return folder
    try:
        files = deployment_files(args.model, args.formats, args.out)
    except DeepFaultError:  # an unknown format: the command refuses it in its own words
        return folder
    return [*folder, *(c.Output(f"--out ({path.name})", path) for path in files.values())]


def _cmd_deploy(args) -> int:
    if args.model is None:
        raise DeepFaultError("scenario deploy exports a model: give it with --model FILE (a zoo .pt file)")
    c.apply_threads(args.threads)
    r = make_deployment(args.model, args.dataset, data_dir=args.data_dir, out_dir=args.out,
                        formats=args.formats, seed=args.seed)
    print(deployment_summary(args.model, r))
    return 0


def preflight(args) -> None:
    """The dcgan parts are no classifiers: they are trained together by ``gan train``."""
    if args.arch in ("dcgan_generator", "dcgan_discriminator"):
        raise error("--arch", "a classifier of the zoo", args.arch,
                    "the dcgan parts are trained together with 'deepfault gan train'")


def _cmd_scenario(args) -> int:
    if args.name == "deploy":
        return _cmd_deploy(args)
    for flag, value in (("--arch", args.arch), ("--dataset", args.dataset)):
        if value is None:
            raise DeepFaultError(f"scenario {args.name} trains M1: give {flag}")
    device = c.device_from(args.device)
    c.apply_threads(args.threads)
    kwargs = {"scale01": True} if args.scale01 else {}
    data = load_dataset(args.dataset, data_dir=args.data_dir, **kwargs)
    names = list_scenarios() if args.name == "all" else [args.name]
    print(f"scenario {args.name}: {args.arch} on {data.name} ({len(data.y_train)} training, "
          f"{len(data.y_test)} test inputs), seed {args.seed}, {args.epochs} epochs, {device}")
    results = []
    for name in names:
        context = ScenarioContext(seed=args.seed, epochs=args.epochs, device=device,
                                  progress=not args.no_progress, threads=args.threads)
        r = make_scenario(name, args.arch, data, context=context, out_dir=args.out,
                          arch_kwargs=args.arch_kwargs)
        results.append(r)
        if len(names) > 1:
            print(f"  {name}: M1 {r.m1_accuracy:.4f}, M2 {r.m2_accuracy:.4f}, {r.regressions} regressions")
    print(scenarios_summary(results))
    return 0
