"""A bad-input probe: hostile arguments, TOML grids and files, and API misuse.

Every probe asserts the same contract: a bad input ends in exactly one line
``deepfault: error: ...`` with exit status 2 (or a ``DeepFaultError`` from the API), no
traceback, and nothing written; an input that happens to be valid runs normally. The
number of inputs tried is printed at the end of the run (``-s``) and checked here.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import math
import os
import pickle
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deepfault import DeepFaultError, RunConfig, compute_spectrum, select
from deepfault.cli import main
from deepfault.localization.preset import load_config
from deepfault.localization.protocol import k_primes_for
from helpers.hardening import outcome
from helpers.tiny_models import chain_model

TRIED: dict[str, int] = {}

#: Values that are wrong for a number, an integer, a count or a seed, or at the edge.
HOSTILE_NUMBERS = ["abc", "", "nan", "inf", "-inf", "1e400", "1e300", "-1", "0", "1.5", "0x10", "9" * 30,
                   "1,2", " "]


def _cli(argv, cwd):
    """Run the CLI in-process in ``cwd``; return (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(argv)
    finally:
        os.chdir(old)
    return status, out.getvalue(), err.getvalue()


def _check_clean(argv, status, err, before, after, expect_files=()):
    assert "Traceback" not in err, (argv, err)
    assert status in (0, 2), (argv, status, err)
    if status == 2:
        lines = [line for line in err.splitlines() if line.strip() and not line.startswith("deepfault: ")
                 or line.startswith("deepfault: error")]
        assert len(lines) == 1, (argv, err)
        assert lines[0].startswith("deepfault: error: "), (argv, err)
        assert after == before, (argv, sorted(after - before))
    else:
        assert after - before <= set(expect_files) | before, (argv, sorted(after - before))


def _files(folder):
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


# --- the command line: every numeric option of 'run' with hostile values ----------------------

RUN_NUMERIC = ["-k", "--step-size", "--distance", "--seed", "--star", "--repeat", "--threshold",
               "--iterations", "--inputs", "--k-prime", "--batch-size", "--class"]


def test_run_numeric_options(tmp_path):
    base = ["run", "--class", "0", "-q", "--out", "o.json", "--no-save-inputs", "-k", "2"]
    for option, value in itertools.product(RUN_NUMERIC, HOSTILE_NUMBERS):
        argv = [*base, f"{option}={value}"] if option.startswith("--") else [*base, option, value]
        before = _files(tmp_path)
        status, _, err = _cli(argv, tmp_path)
        _check_clean(argv, status, err, before, _files(tmp_path), expect_files={"o.json"})
        with contextlib.suppress(FileNotFoundError):
            (tmp_path / "o.json").unlink()
        TRIED["cli run options"] = TRIED.get("cli run options", 0) + 1


def test_every_command_rejects_garbage_numbers(tmp_path):
    """Every sub-command: each option whose type is numeric, with values no number can be."""
    import argparse

    from deepfault.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    garbage = ["abc", "", "1e400x", "0x", "1,,2"]
    for name, command in sub.choices.items():
        nested = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        commands = [([name, n], c) for n, c in nested[0].choices.items()] if nested else [([name], command)]
        for prefix, cmd in commands:
            for action in cmd._actions:
                if not action.option_strings or action.type in (None, str) or action.nargs == 0:
                    continue
                if getattr(getattr(action.type, "constraint", None), "role", None) is not None:
                    continue  # a path, not a number (the file-role tests try paths)
                for value in garbage:
                    argv = [*prefix, f"{action.option_strings[-1]}={value}"]
                    before = _files(tmp_path)
                    status, _, err = _cli(argv, tmp_path)
                    assert status == 2, (argv, status)
                    _check_clean(argv, status, err, before, _files(tmp_path))
                    TRIED["cli garbage numbers"] = TRIED.get("cli garbage numbers", 0) + 1


# --- hostile files ----------------------------------------------------------------------------


def _hostile_files(folder):
    files = {}
    files["empty.pt"] = b""
    files["random.pt"] = os.urandom(4096)
    files["truncated.pt"] = None  # filled below from a real file
    files["text.h5"] = b"not an hdf5 file"
    files["junk.json"] = b"{ this is not json"
    files["list.json"] = b"[1, 2, 3]"
    files["deep.json"] = b"[" * 5000 + b"]" * 5000
    files["junk.onnx"] = os.urandom(256)
    files["junk.npz"] = os.urandom(256)

    class Evil:
        def __reduce__(self):
            return (os.system, ("touch PWNED",))

    files["evil.pt"] = pickle.dumps(Evil())
    buf = io.BytesIO()
    torch.save({"format": "something-else", "weights": torch.zeros(2)}, buf)
    files["wrongformat.pt"] = buf.getvalue()
    buf = io.BytesIO()
    torch.save(chain_model().state_dict(), buf)
    files["truncated.pt"] = buf.getvalue()[: len(buf.getvalue()) // 2]
    files["statedict.pt"] = buf.getvalue()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    npz = {
        "nan.npz": dict(x_train=np.full((4, 2), np.nan, np.float32), y_train=np.zeros(4, int),
                        x_test=np.full((4, 2), np.nan, np.float32), y_test=np.zeros(4, int)),
        "shapes.npz": dict(x_train=np.zeros((4, 2), np.float32), y_train=np.zeros(3, int),
                           x_test=np.zeros((4, 2), np.float32), y_test=np.zeros(4, int)),
        "labels.npz": dict(x_train=np.zeros((4, 64), np.float32), y_train=np.full(4, -3),
                           x_test=np.zeros((4, 64), np.float32), y_test=np.full(4, 99)),
        "objects.npz": dict(x_train=np.array([object()] * 4, dtype=object)),
    }
    for name, arrays in npz.items():
        np.savez(folder / name, **arrays)
    return sorted([*files, *npz])


def test_hostile_model_data_and_store_files(tmp_path):
    names = _hostile_files(tmp_path)
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    argvs = []
    for name in names:
        argvs.append(["run", "--model", name, "--dataset", "digits", "--out", "-", "-q"])
        argvs.append(["inspect", name, "--input-shape", "1,8,8"])
        argvs.append(["run", "--dataset", name, "--out", "-"])
        argvs.append(["report", name])
        argvs.append(["experiment", "--config", name])
    argvs += [["report", "other.sqlite"], ["experiment", "--preset", "digits", "--store", "other.sqlite"],
              ["run", "--model", "statedict.pt", "--arch", "nosuch"], ["run", "--model", "evil.pt"],
              ["report", "."], ["run", "--model", "."], ["inspect", "nosuch.pt"]]
    for argv in argvs:
        before = _files(tmp_path)
        status, _, err = _cli(argv, tmp_path)
        assert status == 2, (argv, status, err)
        _check_clean(argv, status, err, before, _files(tmp_path))
        TRIED["hostile files"] = TRIED.get("hostile files", 0) + 1
    assert not (tmp_path / "PWNED").exists()
    with sqlite3.connect(other) as db:  # another program's database is left untouched
        assert [r[0] for r in db.execute("SELECT name FROM sqlite_master")] == ["t"]


# --- hostile TOML grids: validated before anything is created ----------------------------------

BASE_TOML = {
    "name": '"probe"', "dataset": '"digits"', "ks": "[1]", "classes": "[0]", "approaches": '["ochiai"]',
    "inputs_per_class": "2", "random_repetitions": "1", "step": "1.0", "distance": "0.1", "star": "3.0",
    "seed": "0", "threshold": "0.0", "iterations": "1", "train_epochs": "1", "scale01": "false",
}
HOSTILE_TOML = ["-1", "0", "1.5", "nan", "inf", '"x"', "[]", "[1, 1]", "[1000]", '["nosuch"]', "true",
                '"../../x"', "{a = 1}", "1e300", "99999999999999999999"]


def test_hostile_toml_grids(tmp_path):
    for key, value in itertools.product(BASE_TOML, HOSTILE_TOML):
        body = "\n".join(f"{k} = {value if k == key else v}" for k, v in BASE_TOML.items())
        toml = tmp_path / "grid.toml"
        toml.write_text(body + '\n[[models]]\nname = "m"\narch = "digits_mlp"\n')
        config, refusal = outcome(load_config, toml)
        if refusal is not None:
            assert "\n" not in refusal
            TRIED["toml values"] = TRIED.get("toml values", 0) + 1
            continue
        # Accepted: it must be a sane grid (the run itself is tested elsewhere).
        assert config.seed >= 0
        assert all(k >= 1 for k in config.ks)
        assert math.isfinite(config.threshold)
        assert len(set(config.ks)) == len(config.ks)
        assert "/" not in config.name
        TRIED["toml values"] = TRIED.get("toml values", 0) + 1


# --- the Python API ---------------------------------------------------------------------------

_any = st.one_of(st.integers(-10**20, 10**20), st.floats(allow_nan=True, allow_infinity=True),
                 st.text(max_size=5), st.none(), st.booleans(), st.lists(st.integers(-3, 30), max_size=3))


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(["k", "seed", "step_size", "distance", "star", "repeat", "threshold",
                              "iterations",
                              "num_inputs", "k_primes", "batch_size", "classes", "measure"]), value=_any)
def test_run_config_validation(field, value):
    if field in ("k_primes", "classes") and isinstance(value, list):
        value = tuple(value)
    _, refusal = outcome(lambda: RunConfig(**{field: value}).validate((0.0, 1.0)))
    if refusal is not None:
        assert "\n" not in refusal
    TRIED["api RunConfig"] = TRIED.get("api RunConfig", 0) + 1


@settings(max_examples=150, deadline=None, derandomize=True)
@given(k=_any, seed=_any, threshold=_any)
def test_spectrum_and_selection(k, seed, threshold):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(20, 4)).astype(np.float32), rng.integers(0, 3, 20)

    def run():
        spec = compute_spectrum(chain_model(), x, y, threshold=threshold)
        select(spec, "tarantula", k, seed=seed)
        k_primes_for(3, spec.layout.num_neurons, explicit=[k] if isinstance(k, int) else None)

    _, refusal = outcome(run)
    if refusal is not None:
        assert "\n" not in refusal
    TRIED["api spectrum/select"] = TRIED.get("api spectrum/select", 0) + 1


def test_api_misuse():
    from deepfault import evaluate, predict, register_measure, suspiciousness
    from deepfault.localization.measures import MEASURES

    model = chain_model()
    x = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    cases = [
        lambda: predict("not a model", x),
        lambda: predict(model, np.zeros((3, 7), np.float32)),
        lambda: predict(model, np.array([[np.nan] * 4], np.float32)),
        lambda: evaluate(model, x, x, np.full(6, 99), [("fc1", 0)]),
        lambda: compute_spectrum(model, x, np.zeros(6, int), threshold=float("nan")),
        lambda: compute_spectrum(model, x, np.zeros(6, int), layers=["nosuch"]),
    ]

    class NoGrad(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = chain_model()

        def forward(self, v):
            with torch.no_grad():
                return self.inner(v)

    from deepfault import synthesize

    cases.append(lambda: synthesize(NoGrad(), x, [("inner.fc1", 0)], step_size=1.0, distance=0.1,
                                    bounds=(-5, 5)))
    register_measure("probe_nan", lambda a_s, a_f, n_s, n_f: a_f / 0.0 * 0.0, formula="nan")
    try:
        spec = compute_spectrum(model, x, np.zeros(6, int))
        cases.append(lambda: suspiciousness(spec, "probe_nan") if spec.num_failed else
                     (_ for _ in ()).throw(DeepFaultError("no failures")))
        for case in cases:
            with pytest.raises(DeepFaultError):
                case()
            TRIED["api misuse"] = TRIED.get("api misuse", 0) + 1
    finally:
        MEASURES.unregister("probe_nan")
        from deepfault.localization.selection import APPROACHES

        APPROACHES.unregister("probe_nan")


def test_models_returning_tuples_and_dicts_work():
    from deepfault import predict

    class TupleOut(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = chain_model()

        def forward(self, v):
            return self.inner(v), "aux"

    class DictOut(TupleOut):
        def forward(self, v):
            return {"logits": self.inner(v), "hidden": None}

    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    want = predict(chain_model(), x)
    for cls in (TupleOut, DictOut):
        model = cls()
        torch.testing.assert_close(predict(model, x), want)
        compute_spectrum(model, x, np.zeros(5, int))


# --- the whole surface: every option of every sub-command, every reader, every output against
# --- every input, report folders, data trees, results against references (a fixed sample) -------

#: Kinds of probe case (or files in their arguments) that fail on today's code and wait for a
#: fix: ``benchmarks/probe_all.py`` runs and counts them, the sample leaves them out. Add a line
#: (with its reason) only for a failure that is being fixed; remove it with the fix.
AWAITING: tuple[str, ...] = ()
#: Problems that wait for a fix the same way, whatever the case (none at present).
AWAITING_PROBLEMS: tuple[str, ...] = ()
#: New surfaces sampled whole (their cases are cheap refusals or tiny runs).
SAMPLED_WHOLE = ("data", "reference")
#: Issue 43's angles, one case of each kind sampled (each a training, a fit or a size at its bound).
SAMPLED_ONE = ("size", "trained", "nan", "disk")


def _sample(cases):
    """One case of every option and reader kind (seeded), every output pointed at an input or the
    FIFO, the report folders' fast refusals, every data tree, every reference, one case of each of
    issue 43's angles; none awaiting a fix.
    """
    import random

    cases = [c for c in cases if not _awaiting(c)]
    shuffled = list(cases)
    random.Random(0).shuffle(shuffled)
    sample, seen = [], set()
    for case in shuffled:
        word = case.kind.split()[0]
        if word in ("option", "positional", "file"):
            take = case.kind not in seen
            seen.add(case.kind)
        elif word in SAMPLED_ONE:
            take = word not in seen
            seen.add(word)
        else:
            take = (word in SAMPLED_WHOLE
                    or (word == "output" and not case.kind.endswith(("-> afile", "-> notes.txt")))
                    or (word == "report" and case.kind.endswith(("fifo", "afile", "inputs inside --report"))))
        if take:
            sample.append(case)
    return sorted(sample, key=cases.index)


def _awaiting(case) -> bool:
    return any(a in case.kind or any(a in arg for arg in case.argv) for a in AWAITING)


def test_every_option_and_reader_sample(tmp_path):
    """A fixed sample of :mod:`helpers.probe`'s cases (:func:`_sample`); every one must end
    clean (one error line, nothing changed) or succeed with nothing but its outputs written and its
    reference matched. The benchmark runs every case and records the counts per class.
    """
    import logging

    from helpers.probe import all_cases, make_fixtures, run_case

    fixtures = make_fixtures(tmp_path / "fixtures")
    every = all_cases(fixtures)
    cases = _sample(every)
    kinds = {c.kind.split()[0] for c in cases}
    awaited = {c.kind.split()[0] for c in every if _awaiting(c)} - {c.kind.split()[0] for c in every
                                                                    if not _awaiting(c)}
    assert kinds | awaited == {"option", "positional", "file", "output", "report", "data", "reference",
                               "size", "trained", "nan", "disk"}, kinds
    failures = []
    logging.disable(logging.WARNING)
    try:
        for case in cases:
            outcome = run_case(case, tmp_path / "work", fixtures, timeout=60)
            TRIED["surface sample"] = TRIED.get("surface sample", 0) + 1
            if not outcome.ok and not any(a in outcome.problem for a in AWAITING_PROBLEMS):
                failures.append((outcome.outcome, case.kind, case.argv, outcome.problem, outcome.stderr))
    finally:
        logging.disable(logging.NOTSET)
    assert not failures, failures[:3]


def test_probe_classifies_what_it_sees(tmp_path, monkeypatch):
    """The probe's own classes, on outcomes known in advance: a refusal, an output over an input,
    a FIFO output (the guard's), a wrong count against the hand count; and, from stand-ins for the
    CLI, a fixture overwritten (then restored), a traceback, two error lines, a file left, a hang."""
    import logging
    import sys
    import time

    import deepfault.cli
    from helpers.probe import Case, make_fixtures, run_case

    fixtures = make_fixtures(tmp_path / "fixtures")
    m1, data, work = fixtures["M1"], fixtures["DATA"], tmp_path / "work"
    pristine = Path(m1).read_bytes()

    def run(*argv, **kw):
        return run_case(Case("t", argv, **kw), work, fixtures, timeout=kw.pop("timeout", 60))

    logging.disable(logging.WARNING)
    try:
        profile = ("coverage", "profile", "--model", m1, "--dataset", data, "--out")
        assert run("run", "--model", "nosuch.pt").outcome == "clean-error"
        assert run(*profile, m1).outcome == "clean-error"  # the output guard
        assert run(*profile, "fifo").outcome == "clean-error"
        rank = ("coverage", "rank", "--model", m1, "--dataset", data, "--out", "o.json")
        wrong = run(*rank, compare="failing:5")
        assert wrong.outcome == "wrong-result", wrong
        assert "by hand 5" in wrong.problem

        def stand_in(body, **caps):
            monkeypatch.setattr(deepfault.cli, "main", body)
            try:
                return run_case(Case("t", ("measures",), timeout=0.5, **caps), work, fixtures)
            finally:
                monkeypatch.undo()

        def overwrite(argv):
            Path(m1).write_bytes(b"replaced")
            return 0

        def two_lines(argv):
            print("deepfault: error: one\ndeepfault: error: two", file=sys.stderr)
            return 2

        def leave(argv):
            Path("left.tmp").write_text("x")
            print("deepfault: error: refused late", file=sys.stderr)
            return 2

        def crash(argv):
            raise IndexError("index 9 is out of bounds")

        def sleep(argv):
            time.sleep(5)
            return 0

        def out_of_memory(argv):
            print("deepfault: error: out of memory (DefaultCPUAllocator: can't allocate memory); use fewer "
                  "or smaller inputs, then rerun the same command", file=sys.stderr)
            return 2

        def large_file(argv):  # past the case's file cap: refused by the system, as on a full disk
            try:
                Path("big.bin").write_bytes(b"x" * 10_000)
            except OSError as err:
                Path("big.bin").unlink(missing_ok=True)
                print(f"deepfault: error: {err.strerror}", file=sys.stderr)
                return 2
            return 0

        assert stand_in(overwrite).outcome == "overwritten"
        assert Path(m1).read_bytes() == pristine  # restored from the pristine copy
        assert stand_in(two_lines).outcome == "multi-line-error"
        assert stand_in(leave).outcome == "partial-file"
        assert stand_in(crash).outcome == "traceback"
        assert stand_in(sleep).outcome == "hang"
        assert stand_in(out_of_memory, memory=1 << 30).outcome == "unbounded-size"  # a size case's
        assert stand_in(out_of_memory).outcome == "clean-error"
        assert stand_in(large_file, file_limit=4096).outcome == "clean-error"
        assert stand_in(large_file).outcome == "undeclared-output"  # no cap: written
    finally:
        logging.disable(logging.NOTSET)


def test_zz_probe_counts():
    """The probe's size, as the issue asks (printed with -s)."""
    total = sum(TRIED.values())
    print(f"\nbad-input probe: {total} inputs tried: {TRIED}")
    if len(TRIED) >= 8:  # the whole file ran
        assert total >= 500


def test_the_probe_covers_every_command_and_option(tmp_path):
    """The probe derives its cases from the parser: every sub-command has a base run (a command
    without one is an error, never skipped), and every option that takes a value gets cases,
    the hostile values its declaration gives among them."""
    import argparse

    from deepfault.cli import build_parser
    from deepfault.cli._common import FieldType
    from helpers.probe import _base, _commands, declared_values, make_fixtures, option_cases

    fixtures = make_fixtures(tmp_path / "fixtures")
    cases = option_cases(fixtures)
    kinds = {c.kind for c in cases}
    argvs = {c.argv for c in cases}
    for key, command in _commands(build_parser()):
        assert key in _base(fixtures), key
        for action in command._actions:
            if isinstance(action, argparse._HelpAction) or action.nargs == 0 or not action.option_strings:
                continue
            option = max(action.option_strings, key=len)
            assert f"option {' '.join(key)} {option}" in kinds, (key, option)
            if isinstance(action.type, FieldType):
                for value in declared_values(action):
                    assert any(f"{option}={value}" in argv for argv in argvs), (key, option, value)
