"""The bad-input probe: every option of every sub-command with hostile values, every file the
tool reads with hostile contents, each checked against one contract.

The contract: a run ends with exit status 0 or 2, never a traceback; status 2 prints exactly
one line ``deepfault: error: ...`` on stderr and leaves the working folder as it was. A value
that happens to be valid runs normally on tiny inputs (its outputs are then cleared).

:func:`option_cases` and :func:`file_cases` list the cases, :func:`run_case` runs one in
process; ``tests/test_probe.py`` runs a sample within a time budget, and
``benchmarks/probe_all.py`` runs them all and writes the counts.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import pickle
import shutil
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Case", "Outcome", "make_fixtures", "option_cases", "file_cases", "run_case"]

#: Values no count or number option should take silently.
HOSTILE_NUMBERS = ["abc", "", "nan", "inf", "-inf", "1e400", "1e300", "-1", "0", "1.5", "0x10", "9" * 30,
                   "1,2", " ", "-5s", "1000000000000"]
#: Values of text options: names, paths, selections.
HOSTILE_TEXT = ["", " ", ".", "..", "/", "nosuch", "n" * 300, "afile/x", "adir", "../x", "-", "é中", "%s{}",
                "a,,b", "nan"]
#: Options skipped: they reach the network (``data download``) or only show help.
SKIP = {("data", "download"), ("data", "list")}


@dataclass(frozen=True)
class Case:
    """One probe input: the arguments and what kind of input it is."""

    kind: str
    argv: tuple[str, ...]


@dataclass
class Outcome:
    """A probe case's exit status and, when it misbehaved, the problem and stderr's tail."""

    case: Case
    status: int
    ok: bool
    problem: str = ""
    stderr: str = field(default="", repr=False)


def make_fixtures(folder: Path) -> dict[str, str]:
    """Tiny files the base commands use: two LeNet-1 versions, a 28x28 data set labelled by the
    first, a digits MLP, a TOML grid, a hostile-file zoo; returns name -> path.
    """
    import numpy as np
    import torch

    from ..models import ModelFile, build_model, save_model

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    m1 = build_model("lenet1").eval()
    torch.manual_seed(0)
    m2 = build_model("lenet1").eval()
    with torch.no_grad():
        for p in m2.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * 0.3)
    x = torch.rand(12, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = m1(x).argmax(1).numpy()
    np.savez(folder / "data.npz", x=x.numpy(), y=y, x_train=x.numpy(), y_train=y,
             class_names=np.array([str(i) for i in range(10)]))
    meta = {"input_shape": [1, 28, 28]}
    save_model(folder / "m1.pt", ModelFile(m1, "lenet1", {"num_classes": 10}, None, (0.0, 1.0), meta=meta))
    save_model(folder / "m2.pt", ModelFile(m2, "lenet1", {"num_classes": 10}, None, (0.0, 1.0), meta=meta))
    torch.manual_seed(0)
    digits = build_model("digits_mlp")
    save_model(folder / "digits.pt", ModelFile(digits, "digits_mlp", {}, "digits", (0.0, 1.0)))
    (folder / "g.toml").write_text(
        'name = "probe"\ndataset = "digits"\nks = [1]\nclasses = [0]\napproaches = ["ochiai"]\n'
        "inputs_per_class = 2\nrandom_repetitions = 1\nstep = 1.0\ndistance = 0.1\nstar = 3.0\nseed = 0\n"
        'threshold = 0.0\niterations = 1\ntrain_epochs = 1\nscale01 = false\n[[models]]\nname = "m"\n'
        'arch = "digits_mlp"\n')
    names = {k: str(folder / f) for k, f in (("M1", "m1.pt"), ("M2", "m2.pt"), ("DATA", "data.npz"),
                                             ("DIGITS", "digits.pt"), ("TOML", "g.toml"))}
    names.update(_hostile_files(folder / "hostile", digits))
    return names


def _hostile_files(folder: Path, digits) -> dict[str, str]:
    """Files with hostile contents, one per way a reader can be fooled."""
    import numpy as np
    import torch

    from ..cli import main
    from ..models import ModelFile, save_model

    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, str] = {}

    def put(name, data: bytes):
        (folder / name).write_bytes(data)
        out[f"file:{name}"] = str(folder / name)

    class Evil:
        def __reduce__(self):
            return (os.system, ("touch PWNED",))

    put("empty.pt", b"")
    put("random.pt", os.urandom(2048))
    put("evil.pt", pickle.dumps(Evil()))
    put("junk.json", b"{ not json")
    put("deep.json", b"[" * 5000 + b"]" * 5000)
    put("junk.npz", os.urandom(256))
    put("junk.toml", b"name = [\n")
    save_model(folder / "ok.pt", ModelFile(digits, "digits_mlp", {}, "digits", (0.0, 1.0)))
    good = torch.load(folder / "ok.pt", weights_only=True)
    raw = (folder / "ok.pt").read_bytes()
    put("truncated.pt", raw[: len(raw) // 2])
    put("flipped.pt", raw[:1500] + b"\0" * 16 + raw[1516:])
    for name, change in {"huge-classes": lambda p: p["arch_kwargs"].update(num_classes=10**12),
                         "negative-classes": lambda p: p["arch_kwargs"].update(num_classes=-3),
                         "unknown-kw": lambda p: p["arch_kwargs"].update(bogus=1),
                         "no-state": lambda p: p.pop("state_dict"),
                         "list-meta": lambda p: p.update(arch_kwargs=[10]),
                         "nan-bounds": lambda p: p.update(bounds=[float("nan"), 1.0])}.items():
        payload = {k: (dict(v) if isinstance(v, dict) else v) for k, v in good.items()}
        change(payload)
        buf = io.BytesIO()
        torch.save(payload, buf)
        put(f"{name}.pt", buf.getvalue())
    for name, arrays in {
        "labels-2p40.npz": dict(x=np.zeros((3, 1, 8, 8), np.float32), y=np.array([0, 1, 2**40])),
        "labels-neg.npz": dict(x=np.zeros((3, 1, 8, 8), np.float32), y=np.array([0, -1, 2])),
        "labels-nan.npz": dict(x=np.zeros((3, 1, 8, 8), np.float32), y=np.array([0, np.nan, 2])),
        "x-nan.npz": dict(x=np.full((3, 1, 8, 8), np.nan, np.float32), y=np.zeros(3, int)),
        "x-shape.npz": dict(x=np.zeros((3, 5), np.float32), y=np.zeros(3, int)),
        "objects.npz": dict(x=np.array([object()] * 3, dtype=object)),
    }.items():
        np.savez(folder / name, allow_pickle=True, **arrays)  # objects.npz holds an object array
        out[f"file:{name}"] = str(folder / name)
    with contextlib.redirect_stdout(io.StringIO()):  # through the CLI: the testing unit imports no method
        main(["coverage", "profile", "--model", str(folder / "ok.pt"), "--out", str(folder / "p.npz")])
    with np.load(folder / "p.npz") as npz:
        base = {k: npz[k] for k in npz.files}
    for name, change in {"nan-low": lambda a: a["low"].__setitem__(0, np.nan),
                         "low-above-high": lambda a: a.update(low=a["high"] + 1),
                         "neg-std": lambda a: a["std"].__setitem__(0, -1.0),
                         "rank2": lambda a: a.update(low=a["low"][None])}.items():
        arrays = {k: v.copy() for k, v in base.items()}
        change(arrays)
        np.savez(folder / f"profile-{name}.npz", allow_pickle=True, **arrays)  # savez's default
        out[f"file:profile-{name}.npz"] = str(folder / f"profile-{name}.npz")
    return out


def _base(f: dict[str, str]) -> dict[tuple[str, ...], list[str]]:
    """A cheap valid run of every command (hostile values replace one option at a time)."""
    return {
        ("run",): ["run", "--model", f["DIGITS"], "--out", "o.json", "--no-save-inputs", "-q", "-k", "2",
                   "--class", "0"],
        ("coverage", "profile"): ["coverage", "profile", "--model", f["DIGITS"], "--out", "p.npz"],
        ("coverage", "measure"): ["coverage", "measure", "--model", f["DIGITS"], "--out", "o.json"],
        ("coverage", "rank"): ["coverage", "rank", "--model", f["DIGITS"], "--out", "o.json"],
        ("xplore",): ["xplore", "--model", f"{f['M1']},{f['M2']}", "--dataset", f["DATA"], "--num-seeds", "4",
                      "--iterations", "1", "--out", "o.json", "--no-progress"],
        ("regress",): ["regress", "--m1", f["M1"], "--m2", f["M2"], "--dataset", f["DATA"], "--budget", "3it",
                       "--store", "s.sqlite", "--no-progress", "--fidelity", "ssim:0.5", "--criteria", "nc",
                       "--sections", "10"],
        ("scenario",): ["scenario", "prune", "--arch", "digits_mlp", "--dataset", "digits", "--epochs", "1",
                        "--out", "sc", "--no-progress"],
        ("train",): ["train", "--arch", "digits_mlp", "--dataset", "digits", "--epochs", "1", "--out", "t.pt",
                     "--no-progress"],
        ("gan", "train"): ["gan", "train", "--dataset", f["DATA"], "--epochs", "1", "--images-per-epoch", "4",
                           "--out", "d.pt", "--no-progress"],
        ("experiment",): ["experiment", "--config", f["TOML"], "--store", "e.sqlite", "--no-progress"],
        ("report",): ["report", f["TOML"], "--out", "rep"],
        ("inspect",): ["inspect", f["DIGITS"], "--input-shape", "1,8,8"],
        ("measures",): ["measures"],
    }


def _commands(parser: argparse.ArgumentParser):
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        nested = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        if nested:
            for n, c in nested[0].choices.items():
                yield (name, n), c
        else:
            yield (name,), command


def _without(argv: list[str], option: str, takes_value: bool) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == option:
            skip = takes_value
            continue
        if a.startswith(option + "="):
            continue
        out.append(a)
    return out


def option_cases(fixtures: dict[str, str]) -> list[Case]:
    """Every option and positional of every sub-command, with every hostile value of its kind."""
    from ..cli import build_parser

    base = _base(fixtures)
    cases: list[Case] = []
    for key, command in _commands(build_parser()):
        if key in SKIP or key not in base:
            continue
        argv = base[key]
        for action in command._actions:
            if isinstance(action, argparse._HelpAction) or action.nargs == 0:
                continue
            if action.choices:
                values = ["bogus", "", "ALL"]
            elif action.type in (None, str):
                values = HOSTILE_TEXT
            else:
                values = HOSTILE_NUMBERS
            if action.option_strings:
                option = max(action.option_strings, key=len)
                rest = _without(argv, option, True)
                # '--opt=value': argparse would take a value such as '-1' for an option otherwise
                cases += [Case(f"option {' '.join(key)} {option}", (*rest, f"{option}={v}")) for v in values]
            else:
                pos = [i for i, a in enumerate(argv) if i >= len(key) and not a.startswith("-")
                       and (i == 0 or not argv[i - 1].startswith("-"))]
                if not pos:
                    continue
                i = pos[0]
                cases += [Case(f"positional {' '.join(key)} {action.dest}", (*argv[:i], v, *argv[i + 1:]))
                          for v in values if not v.startswith("-")]
    return cases


def file_cases(fixtures: dict[str, str]) -> list[Case]:
    """Every reader: each hostile file where the tool reads that kind of file."""
    hostile = {k[5:]: v for k, v in fixtures.items() if k.startswith("file:")}
    cases: list[Case] = []
    for path in sorted(hostile.values()):
        d = fixtures["DIGITS"]
        cases += [
            Case("file run --model", ("run", "--model", path, "--dataset", "digits", "--out", "-", "-q")),
            Case("file inspect", ("inspect", path, "--input-shape", "1,8,8")),
            Case("file run --dataset", ("run", "--model", d, "--dataset", path, "--out", "-")),
            Case("file coverage --split", ("coverage", "rank", "--model", d, "--split", path, "--out", "-")),
            Case("file coverage --profile", ("coverage", "measure", "--model", d, "--criteria", "kmnc",
                                             "--profile", path, "--out", "-")),
            Case("file xplore --model", ("xplore", "--model", f"{path},{fixtures['DIGITS']}", "--out", "-",
                                         "--num-seeds", "2", "--iterations", "1", "--no-progress")),
            Case("file regress --m2", ("regress", "--m1", fixtures["M1"], "--m2", path, "--dataset",
                                       fixtures["DATA"], "--budget", "3it", "--no-progress")),
            Case("file report", ("report", path)),
            Case("file experiment --config", ("experiment", "--config", path, "--store", "e.sqlite")),
        ]
    return cases


def _snapshot(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def run_case(case: Case, workdir: Path) -> Outcome:
    """Run ``case`` in ``workdir`` (which holds ``afile`` and ``adir``) and check the contract;
    the folder is restored afterwards.
    """
    from ..cli import main

    before = _snapshot(workdir)
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(workdir)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(list(case.argv))
            except BaseException as exc:  # noqa: BLE001 - anything escaping main breaks the contract
                status = -1
                err.write(f"Traceback: escaped {type(exc).__name__}: {exc}\n")
    finally:
        os.chdir(old)
    text = err.getvalue()
    after = _snapshot(workdir)
    problem = ""
    if "Traceback" in text:
        problem = "traceback"
    elif status not in (0, 2):
        problem = f"status {status}"
    elif status == 2:
        lines = [line for line in text.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("deepfault: error: ")]
        if len(errors) != 1 or any(not line.startswith("deepfault: ") for line in lines):
            problem = "not one error line"
        elif after != before:
            problem = f"left files {sorted(after - before)[:3]}"
    if (workdir / "PWNED").exists():
        problem = "unpickled a file"
    for name in after - before:  # outputs of valid runs (and any leftovers) are cleared
        path = workdir / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    return Outcome(case, status, not problem, problem, text[-400:])
