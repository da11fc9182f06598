"""The bad-input probe: every option of every sub-command with hostile values, every file the
tool reads with hostile contents, every output pointed at the command's own inputs, at a FIFO
and at report folders that hold its store, each checked against one contract.

The contract: a run ends with exit status 0 or 2, never a traceback, within its time limit;
status 2 prints exactly one line ``deepfault: error: ...`` on stderr and leaves the working
folder as it was; no input (the fixtures, and every file the command reads) changes by a byte;
a success changes nothing in the working folder but the outputs its module declares
(``outputs(args)``, ``--report DIR``), removes nothing it did not write, and, where a reference
exists, agrees with it (the same command on the honest input, or the numbers recomputed by
hand). Each outcome falls in one class of :data:`CLASSES`.

:func:`option_cases`, :func:`file_cases`, :func:`output_cases`, :func:`report_cases`,
:func:`data_cases`, :func:`reference_cases`, :func:`size_cases`, :func:`model_cases`,
:func:`nan_cases` and :func:`disk_cases` list the cases (:func:`all_cases` all of them),
:func:`run_case` runs one in process with the network switched off and ``DEEPFAULT_DATA`` in the
working folder; ``tests/cli/test_probe.py`` runs a fixed sample, ``benchmarks/probe_all.py``
runs them all and writes the counts per class.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import io
import json
import math
import os
import pickle
import resource
import shutil
import signal
import socket
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CLASSES", "FAILURES", "Case", "Outcome", "make_fixtures", "declared_values",
           "option_cases", "file_cases",
           "output_cases", "report_cases", "data_cases", "reference_cases", "size_cases", "model_cases",
           "nan_cases", "disk_cases", "all_cases", "run_case"]

#: Every outcome's class, the good ones first.
CLASSES = ("clean-error", "success", "traceback", "overwritten", "wrong-result", "partial-file",
           "multi-line-error", "hang", "undeclared-output", "unpickled", "unbounded-size")
#: The classes that break the contract.
FAILURES = CLASSES[2:]
#: Seconds a case may run before it counts as a hang.
TIMEOUT = 60.0

#: Values no count or number option should take silently.
HOSTILE_NUMBERS = ["abc", "", "nan", "inf", "-inf", "1e400", "1e300", "-1", "0", "1.5", "0x10", "9" * 30,
                   "1,2", " ", "-5s", "1000000000000"]
#: Values of text options: names, paths, selections.
HOSTILE_TEXT = ["", " ", ".", "..", "/", "nosuch", "n" * 300, "afile/x", "adir", "../x", "-", "é中", "%s{}",
                "a,,b", "nan"]


@dataclass(frozen=True)
class Case:
    """One probe input: the arguments and what kind of input it is.

    Attributes:
        setup: A key of :data:`SETUPS`, run in the working folder before the case (a data
            tree, a report folder holding a store, ...).
        reference: Arguments of the honest run (in a folder of its own) whose result this
            case must agree with, by :data:`COMPARE` ``[compare]``.
        compare: A key of :data:`COMPARE`; ``"refuse"``: any success is a wrong result.
        timeout: Seconds before the case counts as a hang (0: :data:`TIMEOUT`).
        memory: Bytes of address space the case may take beyond what the probe holds (0: no
            limit); running out of it (the allocator's one line) is ``unbounded-size``: a size
            that was not refused before the memory was taken.
        file_limit: Largest file the case may write, in bytes (0: no limit): a write past it
            fails as on a full disk (``RLIMIT_FSIZE``, ``SIGXFSZ`` ignored), inside torch's
            own writer too.
    """

    kind: str
    argv: tuple[str, ...]
    setup: str = ""
    reference: tuple[str, ...] = ()
    compare: str = ""
    timeout: float = 0.0
    memory: int = 0
    file_limit: int = 0


@dataclass
class Outcome:
    """A probe case's exit status, its class (:data:`CLASSES`) and, when it misbehaved, the
    problem and stderr's tail.
    """

    case: Case
    status: int
    ok: bool
    problem: str = ""
    stderr: str = field(default="", repr=False)
    outcome: str = "success"
    seconds: float = 0.0


def make_fixtures(folder: Path) -> dict[str, str]:
    """Tiny files the base commands use: two LeNet-1 versions, a 28x28 data set labelled by the
    first, a digits MLP, a TOML grid, a hostile-file zoo; returns name -> path.
    """
    import numpy as np
    import torch

    from deepfault.models import ModelFile, build_model, save_model

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
    names.update(_repair_and_store_files(folder, m1, m2, x, y))
    names.update(_model_output_files(folder / "outputs", m1, x, y))
    names["CORPUS"] = str(_corpus(folder / "corpus", x, y))
    names.update(_role_files(folder / "roles", m1))
    names.update(_grown_files(folder / "grown", m1, digits, x, y))
    names["ROOT"] = str(folder)
    pristine = folder.with_name(folder.name + ".pristine")  # run_case restores an overwritten fixture
    shutil.rmtree(pristine, ignore_errors=True)
    shutil.copytree(folder, pristine, symlinks=True)
    return names


def _repair_and_store_files(folder: Path, m1, m2, x, y) -> dict[str, str]:
    """A tiny ``regress`` faults file for ``repair`` (8 inputs near the data set's first 8, labelled
    by M1, M2's predictions recorded), a ``regress`` store for ``report``, M1's profile; and the
    count of inputs M2 misclassifies, recomputed here by hand (the reference of ``coverage rank``).
    """
    import numpy as np
    import torch

    from deepfault.cli import main

    noise = torch.rand(8, 1, 28, 28, generator=torch.Generator().manual_seed(2)) * 0.05
    faults = (x[:8] + noise).clamp(0, 1)
    with torch.no_grad():
        m2_pred = m2(faults).argmax(1).numpy()
        m2_all = m2(x).argmax(1).numpy()
    np.savez(folder / "faults.npz", inputs=faults.numpy(), seed_index=np.arange(8), label=y[:8],
             m1_pred=y[:8], m2_pred=m2_pred)
    hostile = folder / "hostile"  # inputs files of each kind that repair must refuse in one line
    np.savez(hostile / "xplore-empty.npz", inputs=np.zeros((0, 1, 28, 28), np.float32),
             predictions=np.zeros((0, 2), np.int64), model_names=np.array(["a", "b"]),
             common_class=np.zeros(0, np.int64), seed_index=np.zeros(0, np.int64))
    np.savez(hostile / "regress-text-labels.npz", inputs=faults.numpy(), seed_index=np.arange(8),
             label=np.array(["x"] * 8), m1_pred=y[:8], m2_pred=m2_pred)
    np.savez(hostile / "regress-index-99.npz", inputs=faults.numpy(), seed_index=np.full(8, 99),
             label=y[:8], m1_pred=y[:8], m2_pred=m2_pred)
    np.savez(hostile / "run-wrong-shape.npz", synthesized=np.zeros((8, 3), np.float32),
             originals=np.zeros((8, 3), np.float32), labels=y[:8], test_index=np.arange(8))
    out = {f"file:{name}": str(hostile / name) for name in ("xplore-empty.npz", "regress-text-labels.npz",
                                                              "regress-index-99.npz", "run-wrong-shape.npz")}
    out |= {"FAULTS": str(folder / "faults.npz"), "STORE": str(folder / "s.sqlite"),
           "PROFILE": str(folder / "p1.npz"), "M2_FAILING": str(int((m2_all != y).sum())),
           "CLASS": str(int(y[0]))}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(["regress", "--m1", str(folder / "m1.pt"), "--m2", str(folder / "m2.pt"), "--dataset",
              str(folder / "data.npz"), "--budget", "3it", "--store", out["STORE"], "--no-progress",
              "--fidelity", "ssim:0.5", "--criteria", "nc", "--sections", "10", "--threads", "1"])
        main(["coverage", "profile", "--model", str(folder / "m1.pt"), "--dataset", str(folder / "data.npz"),
              "--out", out["PROFILE"], "--no-progress", "--threads", "1"])
    for key in ("STORE", "PROFILE"):
        if not Path(out[key]).is_file():
            raise RuntimeError(f"the probe's fixture {out[key]} was not made")
    return out


def _role_files(folder: Path, m1) -> dict[str, str]:
    """Files a run reads through options other than the model and data set ones (issue 43): a
    user's class file and its state_dict, a surprise state for ``--fidelity dsa::FILE``, feature
    bounds, a model file that names its data set's ``.npz``, and a data root with a file in it.
    """
    import numpy as np
    import torch

    from deepfault.cli import main
    from deepfault.models import ModelFile, save_model

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "net.py").write_text("import torch\n\n\nclass Net(torch.nn.Sequential):\n"
                                   "    def __init__(self):\n"
                                   "        super().__init__(torch.nn.Flatten(), torch.nn.Linear(784, 10))\n")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))
    torch.save(net.state_dict(), folder / "sd.pt")
    np.savez(folder / "bounds.npz", lo=np.zeros((1, 28, 28), np.float32), hi=np.ones((1, 28, 28), np.float32))
    data = folder.parent / "data.npz"
    shutil.copy(data, folder / "own.npz")  # the data set the model file names (no --dataset given)
    own = str(folder / "own.npz")
    save_model(folder / "named.pt", ModelFile(m1, "lenet1", {"num_classes": 10}, own, (0.0, 1.0),
                                              meta={"input_shape": [1, 28, 28]}))
    (folder / "root" / "sub").mkdir(parents=True, exist_ok=True)
    (folder / "root" / "sub" / "kept.json").write_text("{}")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(["coverage", "surprise", "--model", str(folder.parent / "m1.pt"), "--dataset", str(data),
              "--out", str(folder / "sa.npz"), "--no-progress", "--threads", "1"])
    return {"NET": str(folder / "net.py"), "SD": str(folder / "sd.pt"), "SA": str(folder / "sa.npz"),
            "BOUNDS": str(folder / "bounds.npz"), "NAMED": str(folder / "named.pt"),
            "ROOT_DIR": str(folder / "root"), "ROOT_FILE": str(folder / "root" / "sub" / "kept.json")}


def _roles(f: dict[str, str]) -> list[tuple[tuple[str, ...], list[str]]]:
    """Valid runs that read files through the options with declared roles beyond the model and data
    set (a class file, a fidelity's state, feature bounds, a model's own data set): the outputs of
    :func:`output_cases` are pointed at each of those files too.
    """
    m1, m2, data = f["M1"], f["M2"], f["DATA"]
    return [
        (("coverage", "profile"), ["coverage", "profile", "--model", f["SD"], "--arch", f"{f['NET']}:Net",
                                   "--dataset", data, "--out", "p.npz", "--no-progress"]),
        (("run",), ["run", "--model", f["SD"], "--arch", f"{f['NET']}:Net", "--dataset", data, "--out",
                    "o.json", "-q", "-k", "2", "--class", f["CLASS"], "--iterations", "1", "--no-surprise"]),
        (("run",), ["run", "--model", f["NAMED"], "--out", "o.json", "-q", "-k", "2", "--class", f["CLASS"],
                    "--iterations", "1", "--no-surprise"]),
        (("regress",), ["regress", "--m1", m1, "--m2", m2, "--dataset", data, "--budget", "3it", "--store",
                        "s.sqlite", "--fidelity", f"dsa::{f['SA']}", "--no-progress", "--threads", "1"]),
        (("xplore",), ["xplore", "--model", f"{m1},{m2}", "--dataset", data, "--num-seeds", "4",
                       "--iterations", "1", "--feature-bounds", f["BOUNDS"], "--out", "o.json",
                       "--no-progress", "--no-surprise"]),
    ]


def _model_output_files(folder: Path, m1, x, y) -> dict[str, str]:
    """Models whose outputs are wrong in ways no weight check sees: NaN logits only (after every
    analysed layer), a trailing softmax, a softmax over the batch axis, 11 and 9 classes for a
    10-class data set. Each has an honest twin (M1) that gives the reference; ``M1_NEAR`` (M1
    with small changes) is the second model of the ``xplore`` references.
    """
    import torch

    from deepfault.models import ModelFile, build_model, save_model

    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, str] = {}
    meta = {"input_shape": [1, 28, 28]}
    nan = build_model("lenet1").eval()
    nan.load_state_dict(m1.state_dict())
    nan.state_dict()["before_softmax.bias"][3] = float("nan")  # the state_dict shares the weights' storage
    try:
        save_model(folder / "nan-logits.pt", ModelFile(nan, "lenet1", {"num_classes": 10}, None, (0.0, 1.0),
                                                       meta=meta))
        out["NAN_LOGITS"] = str(folder / "nan-logits.pt")
    except Exception:  # noqa: BLE001 - a writer that refuses NaN weights: then only TorchScript's copy
        pass
    torch.jit.save(torch.jit.script(nan), str(folder / "nan-logits.ts.pt"))
    out["NAN_LOGITS_TS"] = str(folder / "nan-logits.ts.pt")

    class BatchSoftmax(torch.nn.Module):
        def forward(self, v):
            return torch.softmax(v, dim=0)

    for key, name, tail in (("SOFTMAX_TS", "softmax.ts.pt", torch.nn.Softmax(dim=1)),
                            ("BATCH_TS", "batch-softmax.ts.pt", BatchSoftmax())):
        torch.jit.save(torch.jit.script(torch.nn.Sequential(*m1.children(), tail)), str(folder / name))
        out[key] = str(folder / name)
    near = build_model("lenet1").eval()  # M1 a little changed: the pair disagrees on few seeds
    near.load_state_dict(m1.state_dict())
    with torch.no_grad():
        for p in near.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(3)) * 0.05)
    save_model(folder / "m1-near.pt", ModelFile(near, "lenet1", {"num_classes": 10}, None, (0.0, 1.0),
                                                meta=meta))
    out["M1_NEAR"] = str(folder / "m1-near.pt")
    for key, classes in (("M11", 11), ("M9", 9)):
        torch.manual_seed(0)
        model = build_model("lenet1", num_classes=classes).eval()
        save_model(folder / f"m{classes}.pt", ModelFile(model, "lenet1", {"num_classes": classes}, None,
                                                         (0.0, 1.0), meta=meta))
        out[key] = str(folder / f"m{classes}.pt")
    return out


#: The user's own class file of the trained-model cases: ``Net(num_classes, width, tail)``, whose
#: ``tail`` turns its logits into what no classifier should return (``softmax``: probabilities,
#: ``argmax``: integers) or makes its forward raise (``raise``).
NET_PY = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes: int = 10, width: int = 16, tail: str = "none"):
        super().__init__()
        self.fc1 = nn.Linear(64, width)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(width, num_classes)
        self.tail = tail

    def forward(self, x):
        out = self.fc2(self.relu(self.fc1(torch.flatten(x, 1))))
        if self.tail == "softmax":
            return torch.softmax(out, 1)
        if self.tail == "argmax":
            return nn.functional.one_hot(out.argmax(1), out.shape[1])
        if self.tail == "raise":
            raise ValueError("the user's forward failed on purpose")
        return out
"""


def _grown_files(folder: Path, m1, digits, x, y) -> dict[str, str]:
    """The files of the angles issue 43 added: the user's class file (:data:`NET_PY`), the digits
    MLP as a plain ``state_dict`` (for ``--arch-args``), M1 as ONNX and a LiteRT ``.tflite`` (for
    ``repair``, where the libraries are installed), and data sets whose training split is too small
    for a surprise fit (one input per class, ten inputs, classes with no input), with test labels
    that M1 gets wrong on every other input.
    """
    import numpy as np
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, str] = {}
    (folder / "probe_net.py").write_text(NET_PY, encoding="utf-8")
    out["NET"] = str(folder / "probe_net.py")
    torch.save(digits.state_dict(), folder / "digits-state.pt")
    out["DIGITS_STATE"] = str(folder / "digits-state.pt")
    try:
        torch.onnx.export(m1, x[:1], str(folder / "m1.onnx"), dynamo=False, input_names=["x"],
                          output_names=["logits"], dynamic_axes={"x": {0: "n"}, "logits": {0: "n"}})
        out["M1_ONNX"] = str(folder / "m1.onnx")
    except Exception:  # noqa: BLE001 - onnx not installed: the case is left out
        pass
    try:
        from helpers.tflite_files import write_dense_tflite

        rng = np.random.default_rng(0)
        write_dense_tflite(folder / "dense.tflite", rng.normal(size=(10, 784)).astype(np.float32) * 0.01,
                           np.zeros(10, np.float32), input_shape=(1, 28, 28))
        out["TFLITE"] = str(folder / "dense.tflite")
    except Exception:  # noqa: BLE001 - ai-edge-litert not installed: the case is left out
        pass
    xs, names = x.numpy(), np.array([str(i) for i in range(10)])
    wrong = y.copy()
    wrong[::2] = (wrong[::2] + 1) % 10  # M1 fails every other input: an APFD to compute
    first = [int(np.flatnonzero(y == c)[0]) for c in np.unique(y)]
    common = int(np.bincount(y).argmax())
    for key, train in (("ONE_PER_CLASS", first), ("TEN_TRAIN", list(range(10))),
                       ("UNTRACED", list(np.flatnonzero(y == common)))):
        path = folder / f"{key.lower()}.npz"
        np.savez(path, x=xs, y=wrong, x_train=xs[train], y_train=y[train], class_names=names)
        out[key] = str(path)
    return out


def _hostile_files(folder: Path, digits) -> dict[str, str]:
    """Files with hostile contents, one per way a reader can be fooled."""
    import numpy as np
    import torch

    from deepfault.cli import main
    from deepfault.models import ModelFile, save_model

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


def _corpus(folder: Path, x, y) -> Path:
    """A regression corpus of the first four inputs of ``data.npz`` (for ``deepfault corpus``)."""
    from deepfault.corpus import Corpus, Provenance

    corpus = Corpus.create(folder, dataset="data", input_shape=(1, 28, 28), num_classes=10)
    corpus.add(x[:4], y[:4], Provenance("regress", "probe", ("m1.pt", "m2.pt")))
    return folder


def _base(f: dict[str, str]) -> dict[tuple[str, ...], list[str]]:
    """A cheap valid run of every command (hostile values replace one option at a time)."""
    return {
        ("run",): ["run", "--model", f["DIGITS"], "--out", "o.json", "--no-save-inputs", "-q", "-k", "2",
                   "--class", "0"],
        ("coverage", "profile"): ["coverage", "profile", "--model", f["DIGITS"], "--out", "p.npz"],
        ("coverage", "surprise"): ["coverage", "surprise", "--model", f["DIGITS"], "--out", "sa.npz",
                                   "--no-progress"],
        ("coverage", "measure"): ["coverage", "measure", "--model", f["DIGITS"], "--out", "o.json"],
        ("coverage", "rank"): ["coverage", "rank", "--model", f["DIGITS"], "--out", "o.json"],
        ("xplore",): ["xplore", "--model", f"{f['M1']},{f['M2']}", "--dataset", f["DATA"], "--num-seeds", "4",
                      "--iterations", "1", "--out", "o.json", "--no-progress"],
        ("regress",): ["regress", "--m1", f["M1"], "--m2", f["M2"], "--dataset", f["DATA"], "--budget", "3it",
                       "--store", "s.sqlite", "--no-progress", "--fidelity", "ssim:0.5", "--criteria", "nc",
                       "--sections", "10"],
        ("repair",): ["repair", f["FAULTS"], "--model", f["M2"], "--dataset", f["DATA"], "--epochs", "1",
                      "--baselines", "none", "--holdout", "0.5", "--mix", "1", "--out", "o.json",
                      "--no-progress", "--threads", "1"],
        ("gate",): ["gate", "--m1", f["M1"], "--m2", f["M2"], "--dataset", f["DATA"], "--budget", "0",
                    "--max-negative-flip-rate", "off", "--max-class-flip-rate", "off",
                    "--allow-significantly-worse", "--max-disagreement-rate", "1", "--out", "o.json",
                    "--no-progress"],
        ("scenario",): ["scenario", "prune", "--arch", "digits_mlp", "--dataset", "digits", "--epochs", "1",
                        "--out", "sc", "--no-progress"],
        ("train",): ["train", "--arch", "digits_mlp", "--dataset", "digits", "--epochs", "1", "--out", "t.pt",
                     "--no-progress"],
        ("gan", "train"): ["gan", "train", "--dataset", f["DATA"], "--epochs", "1", "--images-per-epoch", "4",
                           "--out", "d.pt", "--no-progress"],
        ("experiment",): ["experiment", "--config", f["TOML"], "--store", "e.sqlite", "--no-progress"],
        ("report",): ["report", f["STORE"], "--out", "rep"],
        ("inspect",): ["inspect", f["DIGITS"], "--input-shape", "1,8,8"],
        ("measures",): ["measures"],
        ("data", "list"): ["data", "list"],
        ("data", "download"): ["data", "download", "mnist", "--no-progress"],
        ("corpus", "list"): ["corpus", "list", f["CORPUS"]],
        ("corpus", "check"): ["corpus", "check", f["CORPUS"]],
        ("corpus", "prune"): ["corpus", "prune", f["CORPUS"], "--method", "nothing"],
    }


def _rich(f: dict[str, str]) -> dict[tuple[str, ...], list[str]]:
    """Valid runs that read as many input files as the command takes (model, data set, profile,
    store, input .npz): the outputs of :func:`output_cases` are pointed at each of them.
    """
    m1, m2, data = f["M1"], f["M2"], f["DATA"]
    return {
        ("run",): ["run", "--model", m1, "--dataset", data, "--out", "o.json", "-q", "-k", "2", "--class",
                   f["CLASS"], "--iterations", "1", "--no-surprise"],
        ("coverage", "profile"): ["coverage", "profile", "--model", m1, "--dataset", data, "--out", "p.npz",
                                  "--no-progress"],
        ("coverage", "surprise"): ["coverage", "surprise", "--model", m1, "--dataset", data, "--out",
                                   "sa.npz", "--no-progress"],
        ("coverage", "measure"): ["coverage", "measure", "--model", m1, "--dataset", data, "--split", data,
                                  "--criteria", "kmnc", "--profile", f["PROFILE"], "--out", "o.json",
                                  "--no-progress"],
        ("coverage", "rank"): ["coverage", "rank", "--model", m1, "--dataset", data, "--split", data,
                               "--profile", f["PROFILE"], "--out", "o.json", "--no-progress"],
        ("xplore",): ["xplore", "--model", f"{m1},{m2}", "--dataset", data, "--num-seeds", "4",
                      "--iterations", "1", "--out", "o.json", "--no-progress", "--no-surprise"],
        ("regress",): _base(f)[("regress",)],
        ("gate",): [*_base(f)[("gate",)], "--split", data],
        ("repair",): ["repair", f["FAULTS"], "--model", m2, "--m1", m1, "--dataset", data, "--epochs", "1",
                      "--baselines", "none", "--holdout", "0.5", "--mix", "1", "--out", "o.json",
                      "--no-progress", "--threads", "1"],
        ("train",): ["train", "--arch", "lenet1", "--dataset", data, "--epochs", "1", "--out", "t.pt",
                     "--no-progress"],
        ("gan", "train"): _base(f)[("gan", "train")],
        ("experiment",): _base(f)[("experiment",)],
        ("report",): _base(f)[("report",)],
        ("scenario",): _base(f)[("scenario",)],
    }


#: Options that name what a command writes, by ``dest``.
OUTPUT_DESTS = ("out", "save_inputs", "log", "report_dir", "plot", "store", "save_model", "generator_out",
                "models_dir")


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


def declared_values(action: argparse.Action) -> list[str]:
    """The hostile values an option's declaration gives (:meth:`Constraint.invalid`, as typed on a
    command line), for an option made from a config field (``cli._common.add_field``); none for
    the others.
    """
    from deepfault.cli._common import FieldType

    if not isinstance(action.type, FieldType):
        return []
    typed = []
    for value in action.type.constraint.invalid():
        if value is None or isinstance(value, (tuple, list)):
            continue  # no text on a command line
        typed.append(str(value))
    return typed


def option_cases(fixtures: dict[str, str]) -> list[Case]:
    """Every option and positional of every sub-command, with the hostile values its declaration
    gives and every hostile value of its kind.

    Raises:
        RuntimeError: A sub-command has no base run here (the probe must cover every command).
    """
    from deepfault.cli import build_parser

    base = _base(fixtures)
    cases: list[Case] = []
    missing = [" ".join(key) for key, _ in _commands(build_parser()) if key not in base]
    if missing:
        raise RuntimeError(f"the probe has no base run of: {', '.join(missing)} (add one to _base)")
    for key, command in _commands(build_parser()):
        argv = base[key]
        for action in command._actions:
            if isinstance(action, argparse._HelpAction) or action.nargs == 0:
                continue
            if key[0] == "data" and action.dest == "data_dir":
                values = [v for v in HOSTILE_TEXT if not v.startswith("/")]  # never the system's root
            elif action.choices:
                values = ["bogus", "", "ALL"]
            elif action.type in (None, str):
                values = HOSTILE_TEXT
            else:
                values = HOSTILE_NUMBERS
            values = list(dict.fromkeys([*declared_values(action), *values]))
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
            Case("file repair INPUTS", ("repair", path, "--model", fixtures["M2"], "--dataset",
                                        fixtures["DATA"], "--epochs", "1", "--baselines", "none", "--out",
                                        "o.json", "--no-progress")),
        ]
    return cases


def _option_of(command: argparse.ArgumentParser, dest: str) -> str | None:
    for action in command._actions:
        if action.dest == dest and action.option_strings:
            return max(action.option_strings, key=len)
    return None


def _input_paths(argv: list[str]) -> list[tuple[str, str]]:
    """``(option, path)`` of every existing file ``argv`` reads (the preflight's own table)."""
    from deepfault.cli import _preflight

    parsed = _parse(tuple(argv))
    if parsed is None:
        return []
    parser, args = parsed
    found = _preflight.declared_inputs(parser, args)
    return [(o, p) for o, p in found if os.path.isfile(p)]


def output_cases(fixtures: dict[str, str]) -> list[Case]:
    """Every output option of every writing command pointed at each input file of the same run
    (model, data set, profile, store, input ``.npz``), at a FIFO in the working folder, and at
    ``afile`` (a file the run does not know).
    """
    from deepfault.cli import build_parser

    commands = dict(_commands(build_parser()))
    cases: list[Case] = []
    runs = [*((key, argv, "") for key, argv in _rich(fixtures).items()),
            *((key, argv, f" (roles {i})") for i, (key, argv) in enumerate(_roles(fixtures)))]
    for key, argv, tag in runs:
        command = commands[key]
        inputs = sorted({p for _, p in _input_paths(argv)})
        if tag:  # the roles' runs: their own inputs only (the model's and data set's are tried above)
            inputs = [p for p in inputs if p not in (fixtures["M1"], fixtures["M2"], fixtures["DATA"])]
        for dest in OUTPUT_DESTS:
            option = _option_of(command, dest)
            if option is None or (dest == "models_dir" and key != ("experiment",)):  # xplore reads it
                continue
            rest = _without(argv, option, True)
            if dest == "save_inputs":
                rest = _without(rest, "--no-save-inputs", False)
            name = " ".join(key) + tag
            for path in inputs:
                label = Path(path).name
                cases.append(Case(f"output {name} {option} -> input {label}", (*rest, f"{option}={path}")))
            if tag:
                continue
            cases.append(Case(f"output {name} {option} -> fifo", (*rest, f"{option}=fifo")))
            cases.append(Case(f"output {name} {option} -> afile", (*rest, f"{option}=afile")))
            if dest == "store":  # a file of the user's that is no store, long enough for SQLite to refuse it
                cases.append(Case(f"output {name} {option} -> notes.txt", (*rest, f"{option}=notes.txt")))
    under = ["run", "--data-dir", fixtures["ROOT_DIR"], "-q", "-k", "2", "--iterations", "1", "--no-surprise"]
    kept = fixtures["ROOT_FILE"]
    cases += [Case(f"output run {option} -> a file under --data-dir", (*under, f"{option}={kept}"))
              for option in ("--out", "--log", "--save-inputs")]
    return cases


def report_cases(fixtures: dict[str, str]) -> list[Case]:
    """``--report DIR`` of every command that has it, and ``report --out DIR``: a new folder, a
    former report folder with a file of the user's in it, a folder that holds the command's own
    store or outputs (or inputs), a FIFO, a symbolic link loop.
    """
    from deepfault.cli import build_parser

    commands = dict(_commands(build_parser()))
    rich = _rich(fixtures)
    cases: list[Case] = []
    for key, argv in rich.items():
        option = _option_of(commands[key], "report_dir")
        if option is None:
            continue
        name = " ".join(key)
        base = _without(argv, option, True)
        cases += [Case(f"report {name} --report new", (*base, "--report", "rep")),
                  Case(f"report {name} --report old with notes", (*base, "--report", "rep"),
                       setup="rep-notes"),
                  Case(f"report {name} --report fifo", (*base, "--report", "fifo")),
                  Case(f"report {name} --report loop", (*base, "--report", "loop"), setup="loop"),
                  Case(f"report {name} --report afile", (*base, "--report", "afile"))]
        for dest in OUTPUT_DESTS:  # each of its own outputs inside the report folder
            out = _option_of(commands[key], dest)
            if out is None or dest in ("report_dir", "plot"):
                continue
            rest = _without(_without(base, out, True), "--no-save-inputs", False)
            target = {"store": "rep/s.sqlite", "save_inputs": "rep/i.npz",
                      "log": "rep/log.txt"}.get(dest, "rep/o.json")
            if key == ("regress",) and dest == "out":
                target = "rep/f.npz"
            cases.append(Case(f"report {name} {out} inside --report",
                              (*rest, f"{out}={target}", "--report", "rep")))
        if key == ("coverage", "measure"):
            cases.append(Case(f"report {name} --plot is --report",
                              (*base, "--plot", "rep", "--report", "rep")))
        # the run's inputs inside the report folder
        moved = [a.replace(fixtures["M1"], "rep/m1.pt").replace(fixtures["DATA"], "rep/data.npz")
                 for a in base]
        cases.append(Case(f"report {name} inputs inside --report", (*moved, "--report", "rep"),
                          setup="rep-inputs"))
    report = ["report", fixtures["STORE"]]
    cases += [Case("report report --out new", (*report, "--out", "rep")),
              Case("report report --out old with notes", (*report, "--out", "rep"), setup="rep-notes"),
              Case("report report --out holds its store", ("report", "rep/s.sqlite", "--out", "rep"),
                   setup="rep-store"),
              Case("report report default --out beside its store", ("report", "rep/s.sqlite"),
                   setup="rep-store"),
              Case("report report --out fifo", (*report, "--out", "fifo")),
              Case("report report --out loop", (*report, "--out", "loop"), setup="loop"),
              Case("report report --out .", (*report, "--out", ".")),
              Case("report report --out fixtures", (*report, "--out", fixtures["ROOT"]))]
    return cases


def data_cases(fixtures: dict[str, str]) -> list[Case]:
    """``data list`` and ``data download`` (the network is off: a download fails, or a mirror
    serves junk) over data trees in ``DEEPFAULT_DATA``: none, empty, damaged files, a FIFO among
    them, a symbolic link loop, a file where the root should be; and the readers of such trees.
    """
    trees = ["", "data-empty", "data-damaged", "data-alt-damaged", "data-fifo", "data-loop", "data-file",
             "data-served-junk", "data-svhn-junk"]
    cases: list[Case] = []
    for tree in trees:
        label = tree or "data-none"
        timeout = 15.0
        cases += [Case(f"data list {label}", ("data", "list"), setup=tree, timeout=timeout),
                  Case(f"data list --data-dir {label}", ("data", "list", "--data-dir", "data"), setup=tree,
                       timeout=timeout)]
        for name in ("mnist", "svhn", "cifar10"):
            cases.append(Case(f"data download {name} {label}", ("data", "download", name, "--no-progress"),
                              setup=tree, timeout=timeout))
        cases.append(Case(f"data download mnist --force {label}",
                          ("data", "download", "mnist", "--force", "--no-progress"), setup=tree,
                          timeout=timeout))
        cases.append(Case(f"data reader run {label}", ("run", "--model", fixtures["M1"], "--dataset", "mnist",
                                                       "--out", "-", "-q"), setup=tree, timeout=timeout))
        cases.append(Case(f"data reader coverage {label}",
                          ("coverage", "profile", "--model", fixtures["M1"], "--dataset", "mnist", "--out",
                           "p.npz"), setup=tree, timeout=timeout))
    cases.append(Case("data download nosuch", ("data", "download", "nosuch")))
    cases.append(Case("data download bundled", ("data", "download", "digits")))
    return cases


def reference_cases(fixtures: dict[str, str]) -> list[Case]:
    """Results compared with a reference: models whose outputs are wrong (NaN logits, a trailing
    softmax, a softmax over the batch, more or fewer classes than the data set) against their
    honest twin M1; results that must not depend on the batch size; counts recomputed by hand.
    """
    f = fixtures
    data = f["DATA"]

    def rank(model, *extra):
        return ("coverage", "rank", "--model", model, "--dataset", data, "--split", data, "--out", "o.json",
                "--no-progress", *extra)

    def xplore(model, *extra):
        return ("xplore", "--model", f"{model},{f['M1_NEAR']}", "--dataset", data, "--num-seeds", "12",
                "--iterations", "5", "--out", "o.json", "--no-progress", "--no-surprise", *extra)

    run = ("run", "--model", f["M1"], "--dataset", data, "--out", "o.json", "-q", "-k", "2", "--class",
           f["CLASS"], "--no-surprise", "--no-save-inputs")

    def repair(model):
        return ("repair", f["FAULTS"], "--model", model, "--dataset", data, "--epochs", "1", "--baselines",
                "none", "--holdout", "0.5", "--mix", "1", "--out", "o.json", "--no-progress")

    cases = [
        Case("reference rank M2 by hand", rank(f["M2"]), compare="failing:M2_FAILING"),
        Case("reference rank M1 by hand", rank(f["M1"]), compare="failing:0"),
        Case("reference rank batch size", rank(f["M2"], "--batch-size", "5"),
             reference=rank(f["M2"], "--batch-size", "1"), compare="counts"),
        Case("reference run batch size", (*run, "--batch-size", "5"), reference=(*run, "--batch-size", "1"),
             compare="counts"),
        Case("reference rank batch-softmax model", rank(f["BATCH_TS"], "--batch-size", "5"),
             reference=rank(f["BATCH_TS"], "--batch-size", "1"), compare="counts"),
        Case("reference xplore softmax model", xplore(f["SOFTMAX_TS"]), reference=xplore(f["M1"]),
             compare="counts"),
        Case("reference rank softmax model", rank(f["SOFTMAX_TS"]), reference=rank(f["M1"]),
             compare="counts"),
        Case("reference rank NaN-logits TorchScript", rank(f["NAN_LOGITS_TS"]), compare="refuse"),
        Case("reference xplore NaN-logits TorchScript", xplore(f["NAN_LOGITS_TS"]), compare="refuse"),
        Case("reference rank 11 classes", rank(f["M11"]), compare="refuse"),
        Case("reference rank 9 classes", rank(f["M9"]), compare="refuse"),
        Case("reference repair 9 classes", repair(f["M9"]), compare="refuse"),
        Case("reference repair 11 classes", repair(f["M11"]), compare="refuse"),
    ]
    if "NAN_LOGITS" in f:
        measure = ("coverage", "measure", "--model", f["NAN_LOGITS"], "--dataset", data, "--out", "o.json",
                   "--no-progress")
        regress = ("regress", "--m1", f["M1"], "--m2", f["NAN_LOGITS"], "--dataset", data, "--budget", "3it",
                   "--store", "s.sqlite", "--no-progress", "--fidelity", "ssim:0.5")
        cases += [Case("reference rank NaN-logits", rank(f["NAN_LOGITS"]), compare="refuse"),
                  Case("reference measure NaN-logits", measure, compare="refuse"),
                  Case("reference regress NaN-logits", regress, compare="refuse")]
    return cases


#: Address space a size case may take beyond the probe's own (2 GiB): any size the tool accepts
#: must fit in it or be refused, in one line, before the memory is taken.
SIZE_MEMORY = 2 << 30
#: Seconds a size case may run: the largest accepted count must be refused or cheap.
SIZE_TIMEOUT = 30.0
#: Options whose bound is a count of steps or passes (time, not memory): left to the hang limit.
_TIME_WORDS = ("epoch", "iteration", "steps", "repeat", "budget")


def _size_options(command: argparse.ArgumentParser) -> list[tuple[str, int]]:
    """``(option, largest value)`` of every count option whose declaration bounds a size (an
    integer :class:`~deepfault.core.constraints.Interval` up to at least 65,536 that counts no
    steps): the values that must be refused or fit before any memory is taken.
    """
    from deepfault.cli._common import FieldType
    from deepfault.core.constraints import Interval

    found = []
    for action in command._actions:
        c = getattr(action.type, "constraint", None) if isinstance(action.type, FieldType) else None
        if (isinstance(c, Interval) and c.kind is int and c.high is not None and c.high >= 1 << 16
                and action.option_strings and not any(w in action.dest for w in _TIME_WORDS)):
            found.append((max(action.option_strings, key=len), int(c.high)))
    return found


def size_cases(fixtures: dict[str, str]) -> list[Case]:
    """Sizes bounded before memory is taken (issue 43): every size option of every command at the
    largest value its declaration accepts, and the sizes no declaration bounds (an architecture's
    ``--arch-args`` widths, ``inspect --input-shape``), each under :data:`SIZE_MEMORY`.
    """
    from deepfault.cli import build_parser

    f, base = fixtures, _base(fixtures)
    cases: list[Case] = []
    for key, command in _commands(build_parser()):
        for option, high in _size_options(command):
            rest = _without(base[key], option, True)
            cases.append(Case(f"size {' '.join(key)} {option}", (*rest, f"{option}={high}"),
                              memory=SIZE_MEMORY, timeout=SIZE_TIMEOUT))
    hidden = '{"hidden": [30000, 30000]}'  # 3.6 GB of weights that do not fit the file's
    cases += [
        Case("size run --arch-args", ("run", "--model", f["DIGITS_STATE"], "--arch", "digits_mlp",
                                      "--arch-args", hidden, "--dataset", "digits", "--out", "-", "-q")),
        Case("size inspect --arch-args", ("inspect", f["DIGITS_STATE"], "--arch", "digits_mlp", "--arch-args",
                                          hidden, "--input-shape", "1,8,8")),
        Case("size train --arch-args", ("train", "--arch", f"{f['NET']}:Net", "--arch-args",
                                        '{"width": 100000000}', "--dataset", "digits", "--epochs", "1",
                                        "--out", "t.pt", "--no-progress")),
        Case("size inspect --input-shape", ("inspect", f["DIGITS"], "--input-shape", "64,4096,4096")),
        Case("size inspect --input-shape largest", ("inspect", f["DIGITS"], "--input-shape",
                                                    "65536,65536,65536,65536")),
    ]
    return [c if c.memory else Case(c.kind, c.argv, memory=SIZE_MEMORY, timeout=SIZE_TIMEOUT) for c in cases]


def model_cases(fixtures: dict[str, str]) -> list[Case]:
    """Every model the tool trains or tunes is checked before the first step (issue 43): the
    user's class with the wrong output count, probabilities, integers or a forward that raises;
    a scenario from a class with a softmax; ``repair`` of an ONNX and a LiteRT file.
    """
    f = fixtures
    net = f"{f['NET']}:Net"

    def train(args: str):
        return ("train", "--arch", net, "--arch-args", args, "--dataset", "digits", "--epochs", "1", "--out",
                "t.pt", "--no-progress")

    def repair(model: str):
        return ("repair", f["FAULTS"], "--model", model, "--dataset", f["DATA"], "--epochs", "1",
                "--baselines", "none", "--holdout", "0.5", "--mix", "1", "--out", "o.json", "--no-progress")

    cases = [
        Case("trained train 5 outputs for 10 classes", train('{"num_classes": 5}'), compare="refuse"),
        Case("trained train softmax outputs", train('{"tail": "softmax"}'), compare="refuse"),
        Case("trained train integer outputs", train('{"tail": "argmax"}'), compare="refuse"),
        Case("trained train forward raises", train('{"tail": "raise"}'), compare="refuse"),
        Case("trained scenario softmax class", ("scenario", "prune", "--arch", net, "--arch-args",
                                                '{"tail": "softmax"}', "--dataset", "digits", "--epochs", "1",
                                                "--out", "sc", "--no-progress"), compare="refuse"),
    ]
    if "M1_ONNX" in f:  # read as torch modules where onnx2torch converts it: tuned like any model
        cases.append(Case("trained repair onnx", repair(f["M1_ONNX"])))
    if "TFLITE" in f:  # a black box: nothing to fine-tune
        cases.append(Case("trained repair tflite", repair(f["TFLITE"]), compare="refuse"))
    return cases


def nan_cases(fixtures: dict[str, str]) -> list[Case]:
    """No NaN behind a number (issue 43): surprise adequacy fitted on training splits too small to
    score every class (one input per class, ten inputs, classes with no input); a ranking, an APFD
    or any number of the result computed from NaN scores is a wrong result.
    """
    f = fixtures
    cases = []
    for key in ("ONE_PER_CLASS", "TEN_TRAIN", "UNTRACED"):
        label = key.lower().replace("_", "-")
        cases += [
            Case(f"nan rank {label}", ("coverage", "rank", "--model", f["M1"], "--dataset", f[key], "--by",
                                       "lsa,dsa,mdsa", "--out", "o.json", "--no-progress"), compare="finite"),
            Case(f"nan surprise {label}", ("coverage", "surprise", "--model", f["M1"], "--dataset", f[key],
                                           "--out", "sa.npz", "--no-progress")),
        ]
    return cases


#: The largest file a disk-full case may write: a model's ``.pt`` is larger, a short JSON fits.
DISK_FULL_BYTES = 4096


def disk_cases(fixtures: dict[str, str]) -> list[Case]:
    """A full disk while torch writes a ``.pt`` (issue 43): ``train``, ``gan train``, ``repair``
    (its model beside ``--out``, and ``--save-model``) and ``scenario``, each with files capped at
    :data:`DISK_FULL_BYTES`; one error line and nothing partial left is the contract.
    """
    base, rich = _base(fixtures), _rich(fixtures)
    repair = _without(rich[("repair",)], "--out", True)
    argvs = {"disk train": base[("train",)], "disk gan train": base[("gan", "train")],
             "disk repair": rich[("repair",)],
             "disk repair --save-model": (*repair, "--out", "-", "--save-model", "m.pt"),
             "disk scenario": base[("scenario",)]}
    return [Case(kind, tuple(argv), file_limit=DISK_FULL_BYTES) for kind, argv in argvs.items()]


def all_cases(fixtures: dict[str, str]) -> list[Case]:
    """Every case of every kind, in a fixed order."""
    return (option_cases(fixtures) + file_cases(fixtures) + output_cases(fixtures) + report_cases(fixtures)
            + data_cases(fixtures) + reference_cases(fixtures) + size_cases(fixtures) + model_cases(fixtures)
            + nan_cases(fixtures) + disk_cases(fixtures))


# --- running one case ---------------------------------------------------------------------------


def _mnist_files() -> list[str]:
    from deepfault.data.download import SOURCES

    return [item.name for item in SOURCES["mnist"].local]


def _setup_data(tree: str, work: Path, fixtures: dict[str, str]) -> None:
    data = work / "data"
    if tree == "data-file":
        data.write_text("not a folder")
        return
    data.mkdir()
    raw = data / "MNIST" / "raw"
    if tree == "data-empty":
        return
    if tree == "data-loop":
        (data / "MNIST").mkdir()
        raw.symlink_to("raw")
        return
    if tree == "data-svhn-junk":
        for name in ("train_32x32.mat", "test_32x32.mat"):
            (data / name).write_bytes(b"MATLAB 5.0 junk" + os.urandom(64))
        return
    raw.mkdir(parents=True)
    for name in _mnist_files():
        if tree == "data-alt-damaged":  # the uncompressed form, cut short
            (raw / name[:-3]).write_bytes(b"\0\0\x08\x03" + b"\0" * 12)
        elif tree == "data-fifo" and "train-images" in name:
            os.mkfifo(raw / name)
        else:
            (raw / name).write_bytes(b"\x1f\x8b junk, not gzip")


def _setup_rep(kind: str, work: Path, fixtures: dict[str, str]) -> None:
    rep = work / "rep"
    rep.mkdir()
    if kind == "rep-notes":
        (rep / "report.html").write_text("<p>an earlier report</p>")
        (rep / "notes.txt").write_text("the user's own notes")
    elif kind == "rep-store":
        shutil.copy(fixtures["STORE"], rep / "s.sqlite")
        (rep / "report.html").write_text("<p>an earlier report</p>")
    elif kind == "rep-inputs":
        shutil.copy(fixtures["M1"], rep / "m1.pt")
        shutil.copy(fixtures["DATA"], rep / "data.npz")


#: Preparations of the working folder, by :attr:`Case.setup`.
SETUPS: dict[str, Callable[[Path, dict[str, str]], None]] = {
    **{t: functools.partial(_setup_data, t) for t in ("data-empty", "data-damaged", "data-alt-damaged",
                                                     "data-fifo", "data-loop", "data-file",
                                                     "data-served-junk", "data-svhn-junk")},
    **{k: functools.partial(_setup_rep, k) for k in ("rep-notes", "rep-store", "rep-inputs")},
    "loop": lambda work, fixtures: (work / "loop").symlink_to("loop"),
}


def _result(folder: Path) -> dict:
    path = folder / "o.json"
    return json.loads(path.read_text()) if path.is_file() else {}


#: Numbers two results of the same command must share.
COUNT_KEYS = ("num_inputs", "num_failing", "found", "already_differ", "seeds", "num_classes", "failing")


def _compare_counts(work: Path, ref: Path, fixtures: dict[str, str], arg: str) -> str:
    got, want = _result(work), _result(ref)
    if not want:
        return "the reference run wrote no result"
    diffs = [f"{k}: {got.get(k)!r} vs {want[k]!r}" for k in COUNT_KEYS if k in want and got.get(k) != want[k]]
    for k in ("classes", "evaluation"):  # run: per class counts
        if k in want and json.dumps(got.get(k), sort_keys=True) != json.dumps(want[k], sort_keys=True):
            a, b = json.dumps(got.get(k), sort_keys=True), json.dumps(want[k], sort_keys=True)
            if _numbers_differ(a, b):
                diffs.append(f"{k} differ")
    return "; ".join(diffs)


def _numbers_differ(a: str, b: str) -> bool:
    """Whether two JSON texts differ beyond timings and float noise."""
    def walk(x, y) -> bool:
        if isinstance(x, dict) and isinstance(y, dict):
            return x.keys() != y.keys() or any(walk(x[k], y[k]) for k in x if "second" not in k and k != "ms")
        if isinstance(x, list) and isinstance(y, list):
            return len(x) != len(y) or any(walk(u, v) for u, v in zip(x, y, strict=True))
        if isinstance(x, float) and isinstance(y, float):
            return abs(x - y) > 1e-4 * max(1.0, abs(y))
        return x != y

    return walk(json.loads(a), json.loads(b))


def _compare_finite(work: Path, ref: Path, fixtures: dict[str, str], arg: str) -> str:
    """Every number of the result is finite, and no ranking has an APFD while a score is NaN."""
    result, bad = _result(work), []

    def walk(value, where: str) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            bad.append(f"{where or 'the result'} is {value}")
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{where}.{k}" if where else str(k))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{where}[{i}]")

    walk(result, "")
    for r in result.get("rankings") or []:
        scores = r.get("scores") or [] if isinstance(r, dict) else []
        if isinstance(r, dict) and r.get("apfd") is not None and any(s is None for s in scores):
            missing = sum(s is None for s in scores)
            bad.append(f"{r.get('name')}: APFD {r['apfd']} from {missing} of {len(scores)} NaN scores")
    return "; ".join(bad[:3])


def _compare_failing(work: Path, ref: Path, fixtures: dict[str, str], arg: str) -> str:
    want = int(fixtures.get(arg, arg))
    got = _result(work).get("num_failing")
    return "" if got == want else f"num_failing {got!r}, by hand {want}"


#: How a success is compared with its reference, by :attr:`Case.compare` (``name[:argument]``).
COMPARE: dict[str, Callable[[Path, Path, dict[str, str], str], str]] = {
    "counts": _compare_counts,
    "failing": _compare_failing,
    "refuse": lambda work, ref, fixtures, arg: "accepted a model whose outputs are wrong",
    "finite": _compare_finite,
}


def _tree(folder: Path) -> dict[str, str]:
    """``relative path -> what it is``: a file's sha1, ``dir``, ``fifo``, ``link:TARGET``, ``special``;
    never opens anything but regular files (a FIFO would block), never follows links.
    """
    out: dict[str, str] = {}
    if not folder.is_dir():
        return out
    stack = [folder]
    while stack:
        here = stack.pop()
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue
        for entry in entries:
            rel = os.path.relpath(entry.path, folder)
            try:
                mode = os.lstat(entry.path).st_mode
            except OSError:
                continue
            if stat.S_ISLNK(mode):
                out[rel] = "link:" + os.readlink(entry.path)
            elif stat.S_ISDIR(mode):
                out[rel] = "dir"
                stack.append(Path(entry.path))
            elif stat.S_ISFIFO(mode):
                out[rel] = "fifo"
            elif stat.S_ISREG(mode):
                with open(entry.path, "rb") as fh:
                    body = fh.read()
                kind = "sqlite:" if body.startswith(b"SQLite format 3\0") else ""  # a store a run may resume
                out[rel] = kind + hashlib.sha1(body, usedforsecurity=False).hexdigest()
            else:
                out[rel] = "special"
    return out


def _snapshot(folder: Path) -> set[str]:
    return set(_tree(folder))


@functools.lru_cache(maxsize=4096)
def _parse(argv: tuple[str, ...]):
    """``(parser, args)`` as the CLI parses ``argv``, or ``None``."""
    from deepfault.cli import _join_negative_values

    parser = _parser()
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            args = parser.parse_args(_join_negative_values(list(argv)))
    except SystemExit:
        return None
    args.argv = ["deepfault", *argv]
    return parser, args


@functools.lru_cache(maxsize=1)
def _parser():
    from deepfault.cli import build_parser

    return build_parser()


@dataclass(frozen=True)
class _Declared:
    """What a run may write and what it reads, as paths relative to the working folder (absolute
    ones elsewhere): its declared files and folders, the files that must exist after a success
    (``--out``, ``--store``), its inputs.
    """

    files: frozenset[str] = frozenset()
    folders: frozenset[str] = frozenset()
    primary: frozenset[str] = frozenset()
    inputs: frozenset[str] = frozenset()


def _declared(argv: tuple[str, ...], work: Path) -> _Declared:
    """What a run of ``argv`` in ``work`` declares (its module's ``outputs(args)``, ``--report DIR``)
    and reads (the preflight's input table).
    """
    import importlib

    from deepfault.cli import _preflight

    parsed = _parse(argv)
    if parsed is None:
        return _Declared()

    def rel(path) -> str:
        text = os.path.normpath(os.path.join(work, os.fspath(path)))
        inside = text.startswith(str(work) + os.sep) or text == str(work)
        return os.path.relpath(text, work) if inside else text

    parser, args = parsed
    files: set[str] = set()
    folders: set[str] = set()
    primary: set[str] = set()
    func = getattr(args, "func", None)
    declare = None if func is None else getattr(importlib.import_module(func.__module__), "outputs", None)
    try:
        declared = [] if declare is None else declare(argparse.Namespace(**vars(args)))
    except Exception:  # noqa: BLE001 - a value the command refuses: nothing is declared
        declared = []
    for o in declared:  # ('-' is a file for some commands, none for others: either way declared)
        if o.path is None:
            continue
        (folders if o.folder else files).add(rel(o.path))
        if o.option in ("--out", "--store") and not o.folder:
            primary.add(rel(o.path))
    if getattr(args, "report_dir", None) is not None:
        folders.add(rel(args.report_dir))
    try:
        inputs = {rel(p) for _, p in _preflight.declared_inputs(parser, args)}
    except Exception:  # noqa: BLE001 - as above
        inputs = set()
    return _Declared(frozenset(files), frozenset(folders), frozenset(primary), frozenset(inputs))


def _under(path: str, folders: frozenset[str]) -> bool:
    return any((d == "." and not os.path.isabs(path)) or path == d or path.startswith(d + os.sep)
               for d in folders)


def _reset(work: Path) -> None:
    """The working folder's base state: ``afile`` (one byte), ``notes.txt``, an empty ``adir``, a
    FIFO ``fifo``.
    """
    work.mkdir(parents=True, exist_ok=True)
    for entry in os.scandir(work):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
    (work / "afile").write_text("x")
    (work / "notes.txt").write_text("a file of the user's, no store\n")
    (work / "adir").mkdir()
    os.mkfifo(work / "fifo")


class _Hang(BaseException):
    """Raised by the alarm when a case runs past its time limit."""


def _address_space() -> int:
    """The bytes of address space this process maps now (``VmSize``; 0 where unknown)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
    except (OSError, StopIteration, ValueError):
        return 0


@contextlib.contextmanager
def _resource_caps(memory: int, file_limit: int) -> Iterator[None]:
    """``memory`` bytes of address space beyond the process's own (``RLIMIT_AS``) and files of at
    most ``file_limit`` bytes (``RLIMIT_FSIZE``, with ``SIGXFSZ`` ignored so that a write past it
    fails as on a full disk); 0 leaves a limit as it is. Soft limits only: both come back after.
    """
    caps = []
    if memory and _address_space():
        caps.append((resource.RLIMIT_AS, _address_space() + memory))
    if file_limit:
        caps.append((resource.RLIMIT_FSIZE, file_limit))
    saved = [(which, resource.getrlimit(which)) for which, _ in caps]
    old_signal = None
    try:
        if file_limit and hasattr(signal, "SIGXFSZ"):
            old_signal = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        for which, cap in caps:
            hard = resource.getrlimit(which)[1]
            resource.setrlimit(which, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
        yield
    finally:
        for which, limits in saved:
            resource.setrlimit(which, limits)
        if old_signal is not None:
            signal.signal(signal.SIGXFSZ, old_signal)


@contextlib.contextmanager
def _limits(seconds: float, served: str) -> Iterator[None]:
    """The network off (every connection refused; ``data download``'s transport raises, or writes
    ``served`` bytes where the case simulates a mirror serving junk) and an alarm after ``seconds``
    (in the main thread only).
    """
    from deepfault.data import download as dl

    def refuse(*args, **kwargs):
        raise OSError(101, "the network is off in the probe")

    def transport(url, dest, *, progress=False):
        if not served:
            refuse()
        Path(dest).write_bytes(served.encode())

    saved = (socket.socket.connect, socket.create_connection, dl._urllib_transport)
    socket.socket.connect = refuse  # type: ignore[method-assign]
    socket.create_connection = refuse
    dl._urllib_transport = transport
    alarm = seconds > 0 and hasattr(signal, "setitimer")
    try:
        alarm = alarm and signal.getsignal(signal.SIGALRM) is not None
        old = signal.signal(signal.SIGALRM, _on_alarm) if alarm else None
    except ValueError:  # not the main thread
        alarm, old = False, None
    if alarm:
        signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        socket.socket.connect, socket.create_connection, dl._urllib_transport = saved  # type: ignore[method-assign]


def _on_alarm(signum, frame):
    raise _Hang()


def _call(argv: list[str], cwd: Path, timeout: float, served: str, caps: tuple[int, int] = (0, 0)
          ) -> tuple[int, str, str, bool]:
    """``main(argv)`` in ``cwd``: ``(status, stdout, stderr, hung)``, under ``caps``
    (:func:`_resource_caps`' memory and file size).
    """
    from deepfault.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    hung = False
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                with _limits(timeout, served), _resource_caps(*caps):
                    status = main(list(argv))
            except _Hang:
                status, hung = -1, True
            except BaseException as exc:  # noqa: BLE001 - anything escaping main breaks the contract
                status = -1
                err.write(f"Traceback: escaped {type(exc).__name__}: {exc}\n")
    finally:
        os.chdir(old)
    return status, out.getvalue(), err.getvalue(), hung


#: Exit statuses that are a command's answer, not a failure: the gate's fail (1) and hold (3)
#: (docs/gate.md's table). The probe counts them as a success, with every check of one.
def _answers() -> dict[str, tuple[int, ...]]:
    from deepfault.gate.verdict import EXIT_STATUS

    return {"gate": tuple(status for status in EXIT_STATUS.values() if status != 0)}


ANSWERS: dict[str, tuple[int, ...]] = _answers()


def run_case(case: Case, workdir: Path, fixtures: dict[str, str] | None = None, *,
             timeout: float | None = None) -> Outcome:
    """Run ``case`` in ``workdir`` (reset to ``afile``, ``adir`` and a FIFO ``fifo``, then the
    case's setup) with ``DEEPFAULT_DATA`` at ``workdir/data`` and the network off, and classify
    the outcome (:data:`CLASSES`). With ``fixtures`` (:func:`make_fixtures`), a fixture that
    changed is an input overwritten, and is restored from its pristine copy.
    """
    fixtures = fixtures or {}
    workdir = Path(workdir).absolute()
    _reset(workdir)
    if case.setup:
        SETUPS[case.setup](workdir, fixtures)
    root = Path(fixtures["ROOT"]) if "ROOT" in fixtures else None
    fixtures_before = _tree(root) if root is not None else {}
    before = _tree(workdir)
    env = {"DEEPFAULT_DATA": str(workdir / "data"), "DEEPFAULT_CACHE": str(workdir.parent / "probe-cache")}
    saved_env = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    served = "junk served by a mirror" if case.setup == "data-served-junk" else ""
    limit = case.timeout or (TIMEOUT if timeout is None else timeout)
    t0 = time.perf_counter()
    try:
        status, _, text, hung = _call(list(case.argv), workdir, limit, served, (case.memory, case.file_limit))
        if status in ANSWERS.get(case.argv[0], ()):  # a verdict, as its exit status: a success
            status = 0
        seconds = time.perf_counter() - t0
        after = _tree(workdir)
        fixtures_after = _tree(root) if root is not None else {}
        trees = (before, after, fixtures_before, fixtures_after)
        outcome, problem = _classify(status, text, hung, limit, trees, _declared(case.argv, workdir),
                                     str(root or ""))
        if case.memory and outcome == "clean-error" and "deepfault: error: out of memory (" in text:
            outcome, problem = "unbounded-size", "refused only when the allocator ran past the probe's cap"
        if outcome == "success" and case.compare:
            problem = _reference(case, workdir, fixtures, limit)
            outcome = "wrong-result" if problem else outcome
    finally:
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if root is not None and fixtures_after != fixtures_before:
        pristine = root.with_name(root.name + ".pristine")
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(pristine, root, symlinks=True)
    _reset(workdir)
    return Outcome(case, status, outcome in ("clean-error", "success"), problem, text[-400:], outcome,
                   round(seconds, 2))


def _reference(case: Case, workdir: Path, fixtures: dict[str, str], limit: float) -> str:
    name, _, arg = case.compare.partition(":")
    ref = workdir.parent / "probe-reference"
    shutil.rmtree(ref, ignore_errors=True)
    ref.mkdir()
    try:
        if case.reference:
            status, _, text, hung = _call(list(case.reference), ref, limit, "")
            if status != 0:
                return f"the reference run failed ({status}): {text.strip()[-200:]}"
        return COMPARE[name](workdir, ref, fixtures, arg)
    finally:
        shutil.rmtree(ref, ignore_errors=True)


def _lost(status: int, before: dict[str, str], after: dict[str, str], declared: _Declared) -> list[str]:
    """What the run replaced or removed that it had no right to: inputs (a store it resumes may
    change), special files, files outside its declared outputs, its own main outputs after a success.
    """
    lost = []
    for name, what in before.items():
        now = after.get(name)
        if now == what:
            continue
        resumed = name in declared.files and what.startswith("sqlite:") and status == 0
        if name in declared.inputs and not resumed:
            lost.append(f"input {name}")
        elif what in ("fifo", "special") or what.startswith("link:"):
            lost.append(f"special file {name} now {now or 'gone'}")
        elif status == 0 and (name in declared.files or (_under(name, declared.folders) and now is not None)):
            continue  # an output it declares, or a file in its own report folder, rewritten
        elif what != "dir" or now is None:
            lost.append(f"{name} {'removed' if now is None else 'changed'}")
    if status == 0:
        lost += [f"its own output {p} missing" for p in sorted(declared.primary)
                 if not os.path.isabs(p) and not p.startswith(".." + os.sep) and p not in after]
    return lost


def _classify(status: int, text: str, hung: bool, limit: float, trees: tuple[dict[str, str], ...],
              declared: _Declared, trees_root: str = "") -> tuple[str, str]:
    """``(class, problem)`` of one run (see :data:`CLASSES`); ``trees``: the working folder and the
    fixtures (in ``trees_root``), before and after.
    """
    before, after, fixtures_before, fixtures_after = trees
    if "PWNED" in after:
        return "unpickled", "unpickled a file"
    changed_fixtures = sorted(k for k in fixtures_before if fixtures_before[k] != fixtures_after.get(k))
    if changed_fixtures:
        return "overwritten", f"input changed or removed: {changed_fixtures[:3]}"
    lost = _lost(status, before, after, declared)
    if lost:
        return "overwritten", "; ".join(lost[:3])
    if hung:
        return "hang", f"still running after {limit:g} s"
    if "Traceback" in text or status not in (0, 2):
        return "traceback", "traceback" if "Traceback" in text else f"status {status}"
    beside_inputs = sorted(name for name in fixtures_after.keys() - fixtures_before.keys()
                           if not _under(os.path.join(trees_root, name), declared.folders | declared.files))
    leftovers = [name for name in beside_inputs if name.endswith((".tmp", "-wal", "-shm", "-journal"))]
    if leftovers or (beside_inputs and status != 0):
        return "partial-file", f"left files beside its inputs: {(leftovers or beside_inputs)[:3]}"
    if beside_inputs:
        return "undeclared-output", f"undeclared files beside its inputs: {beside_inputs[:3]}"
    if status == 2:
        lines = [line for line in text.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("deepfault: error: ")]
        if len(errors) != 1 or any(not line.startswith("deepfault: ") for line in lines):
            return "multi-line-error", "not one error line"
        if after != before:
            return "partial-file", f"left files {sorted(after.keys() ^ before.keys())[:3]}"
        return "clean-error", ""
    outputs = declared.files | declared.folders
    extra = sorted(name for name in after.keys() - before.keys()
                   if name not in declared.files and not _under(name, declared.folders)
                   and not any(f.startswith(name + os.sep) for f in outputs))
    if any(name.endswith((".tmp", "-wal", "-shm", "-journal")) for name in extra):
        return "partial-file", f"left files {extra[:3]}"
    if extra:  # written, but not in its outputs(args): the output guard never saw them
        return "undeclared-output", f"undeclared files {extra[:3]}"
    return "success", ""
