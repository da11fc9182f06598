"""Shared files of the hardening tests: tiny model pairs and data, and the in-process CLI."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import os
import pkgutil

import numpy as np
import pytest
import torch

from deepfault import DeepFaultError
from deepfault.cli import main
from deepfault.models import ModelFile, build_model, save_model


def lenet(seed: int, noise: float = 0.0, classes: int = 10):
    torch.manual_seed(seed)
    m = build_model("lenet1", num_classes=classes).eval()
    if noise:
        g = torch.Generator().manual_seed(seed + 100)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(torch.randn(p.shape, generator=g) * noise)
    return m


@pytest.fixture(scope="session")
def pair(tmp_path_factory):
    """M1, M2 (M1 with noise), a 5-class model, a NaN model, one of another input range, and a
    60-input data set labelled by M1; plus a digits MLP."""
    d = tmp_path_factory.mktemp("pair")
    m1 = lenet(0)
    x = torch.rand(60, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = m1(x).argmax(1).numpy()
    np.savez(
        d / "data.npz",
        x=x.numpy(),
        y=y,
        x_train=x.numpy(),
        y_train=y,
        class_names=np.array([str(i) for i in range(10)]),
    )
    meta = {"input_shape": [1, 28, 28]}

    def save(name, model, classes=10, bounds=(0.0, 1.0)):
        save_model(d / name, ModelFile(model, "lenet1", {"num_classes": classes}, None, bounds, meta=meta))

    save("m1.pt", m1)
    save("m2.pt", lenet(0, noise=0.3))
    save("m5.pt", lenet(0, classes=5), classes=5)
    nan = lenet(0)
    with torch.no_grad():
        next(nan.parameters()).fill_(float("nan"))
    save("nan.pt", nan)
    save("range.pt", lenet(0, noise=0.3), bounds=(-1.0, 1.0))
    torch.manual_seed(0)
    save_model(d / "digits.pt", ModelFile(build_model("digits_mlp"), "digits_mlp", {}, "digits", (0.0, 1.0)))
    return d


def cli(argv, cwd=None):
    """Run the CLI in-process (in ``cwd``); ``(status, stdout, stderr)``."""
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main([str(a) for a in argv])
    finally:
        os.chdir(old)
    return status, out.getvalue(), err.getvalue()


def outcome(fn, *args, **kwargs):
    """``(fn(*args, **kwargs), None)``, or ``(None, message)`` when it raises a DeepFaultError: for
    property tests where a result and a refusal are both fine, checked after the call."""
    try:
        return fn(*args, **kwargs), None
    except DeepFaultError as err:
        return None, str(err)


def files(folder) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def assert_refused(argv, cwd, *needles):
    """One line ``deepfault: error: ...`` with every needle, exit 2, and nothing created in ``cwd``."""
    before = files(cwd)
    status, _, err = cli(argv, cwd)
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2, (argv, status, err)
    assert len(lines) == 1, (argv, err)
    assert lines[0].startswith("deepfault: error: "), (argv, err)
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert files(cwd) == before, (argv, sorted(files(cwd) - before))
    return lines[0]


def tiny_grid_toml(*, classes=(0,), approaches=("ochiai",), inputs_per_class=1, random_repetitions=1,
                   models=("m",)) -> str:
    """A DeepFault experiment grid small enough for a test (digits, one-epoch MLPs, k = 1)."""
    def words(items):
        return ", ".join(f'"{w}"' if isinstance(w, str) else str(w) for w in items)

    head = (f'name = "tiny"\ndataset = "digits"\nks = [1]\nclasses = [{words(classes)}]\n'
            f"approaches = [{words(approaches)}]\ninputs_per_class = {inputs_per_class}\n"
            f"random_repetitions = {random_repetitions}\nstep = 1.0\ndistance = 0.1\nstar = 3.0\nseed = 0\n"
            "threshold = 0.0\niterations = 1\ntrain_epochs = 1\nscale01 = false\n")
    return head + "".join(f'[[models]]\nname = "{m}"\narch = "digits_mlp"\n' for m in models)


def write_regress_pair(folder, n: int):
    """M1, M2 (M1 with weight noise) as ``m1.pt``/``m2.pt`` and an ``n``-input ``data.npz``
    labelled by M1, in ``folder``; returns M1 (a LeNet-1 for 1x28x28 inputs).
    """
    import numpy as np
    import torch

    from deepfault.models import ModelFile, save_model

    m1, m2 = lenet(0), lenet(0, noise=0.3)
    x = torch.rand(n, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = m1(x).argmax(1).numpy()
    np.savez(folder / "data.npz", x=x.numpy(), y=y, class_names=np.array([str(i) for i in range(10)]))
    meta = {"input_shape": [1, 28, 28]}
    for name, m in (("m1", m1), ("m2", m2)):
        save_model(folder / f"{name}.pt",
                   ModelFile(m, "lenet1", {"num_classes": 10}, None, (0.0, 1.0), meta=meta))
    return m1


def package_configs() -> list[type]:
    """Every frozen ``...Config`` dataclass defined in the package (outside the CLI), by name."""
    import deepfault

    found = {}
    for info in pkgutil.walk_packages(deepfault.__path__, "deepfault."):
        if ".cli" in info.name or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (name.endswith("Config") and isinstance(obj, type) and dataclasses.is_dataclass(obj)
                    and obj.__module__ == module.__name__):
                found[f"{obj.__module__}.{name}"] = obj
    return [found[k] for k in sorted(found)]
