"""``deepfault gate``: may the challenger M2 replace the champion M1? A verdict and an exit status."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..checks import error
from ..core.runtime import Runtime
from ..gate import THRESHOLDS, GateConfig, gate, policy_config
from ..gate.config import GateFiles
from ..gate.protocol import read_split
from ..gate.report import gate_page
from . import _common as c
from .corpus import check_corpus_option, corpus_output

#: The stages' options, in the order --help lists them (the thresholds follow --policy).
_STAGES = ("heldout", "corpus", "budget", "fidelity", "add_to_corpus", "seed", "worst")


def add_parser(sub) -> None:
    """Add ``deepfault gate`` to ``sub``."""
    p = c.command(sub, "gate", *c.text("gate"))
    c.add_options(p, *c.PAIR, "dataset", "data_dir", m1="the champion: the model in production",
                m2="the challenger; a deployed .onnx (ONNX Runtime) or .tflite (LiteRT) runs as a black box",
                runtime="how .onnx files run",
                dataset="data set or .npz file whose test split is held out (default: the one the model "
                "files name)")
    c.add_field(p, GateFiles, "split")
    _add_stages_and_policy(p)
    c.add_fields(p, GateFiles, "out", "junit", "summary")  # the files a pipeline reads
    c.add_options(p, "report")
    c.add_options(p, "device", "threads", "arch", "arch_args", "trust_pickle", "no_progress")
    c.add_parallel(p)  # the held-out stage spreads over them
    p.set_defaults(func=_cmd_gate)


def _add_stages_and_policy(p) -> None:
    """The stages' options and the policy's (each threshold unset unless given, so that a policy
    file's value is not overridden).
    """
    c.add_fields(p, GateConfig, *_STAGES)
    c.add_field(p, GateFiles, "policy")
    for name in THRESHOLDS:  # unset unless given, so that a policy file's value is not overridden
        c.add_field(p, GateConfig, name, default=argparse.SUPPRESS)


def _config(args) -> GateConfig:
    base = GateConfig(**{n: getattr(args, n) for n in _STAGES})
    given = {n: getattr(args, n) for n in THRESHOLDS if hasattr(args, n)}
    return policy_config(args.policy, base, **given)


def preflight(args) -> None:
    """The policy file read and checked (unknown keys, impossible thresholds) and the split's kind,
    before any work (the guard keeps every output off the policy file and out of the corpus).
    """
    _config(args)
    check_corpus_option(args, args.dataset)
    if args.split is not None and Path(args.split).suffix not in (".npy", ".npz"):
        raise error("--split", "a .npy or .npz file", args.split)


def outputs(args) -> list[c.Output]:
    """The files ``deepfault gate`` writes: the JSON result, the JUnit XML and the Markdown summary;
    then the corpus folder it replays and grows.
    """
    return [c.Output("--out", c.output_path(args.out, "--out")),
            c.Output("--junit", c.output_path(args.junit, "--junit")),
            c.Output("--summary", c.output_path(args.summary, "--summary")), corpus_output(args)]


def _cmd_gate(args) -> int:
    config = _config(args)
    versions = c.versions_from(args)
    runtime = c.spread_runtime(args, device=args.device, threads=args.threads, progress=not args.no_progress)
    outcome = gate(versions, args.dataset if args.split is None else read_split(args.split, args.dataset),
                   config, runtime=runtime)
    c.write_outcome(args, outcome, command="gate", config=config, out=c.output_path(args.out),
                  runtime=Runtime(device=outcome.device, threads=outcome.threads),
                  paths={"junit": c.output_path(args.junit), "summary": c.output_path(args.summary)})
    c.write_run_report(args, lambda folder: gate_page(outcome, folder))
    return outcome.exit_status
