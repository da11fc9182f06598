"""The README's quick start runs as written (issue 27): its bash block, parsed from README.md,
is run command by command through ``deepfault.cli.main`` in an empty folder, against a tiny
MNIST written here in the official IDX format, with ``HOME`` and the cache redirected, so a
fresh machine's first-use paths (zoo models trained for ``xplore``, the DRFuzz
discriminator) run too.

Substitutions, in :data:`FAST` and in docs/decisions.md: the README's ``export
DEEPFAULT_DATA=...`` points at the tiny MNIST, ``regress --budget 60s`` becomes ``2s`` and
``xplore --num-seeds 200`` becomes ``20`` (the tiny test split holds 120 images); and the
discriminator that the first ``regress`` trains sees 128 images once instead of two epochs.
Everything else runs as printed.
"""

from __future__ import annotations

import dataclasses
import gzip
import logging
import re
import shlex
import struct

import numpy as np
import pytest

from helpers.docs import README

#: (the command's first words, option, value the test runs instead of the README's).
FAST = (
    ("deepfault regress", "--budget", "2s"),
    ("deepfault xplore", "--num-seeds", "20"),
)

_STEMS = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}


def quickstart_commands() -> list[str]:
    """The commands of the first bash block under the "Quick start" heading, as a reader
    copies them (comments and blank lines left out, backslash continuations joined)."""
    section = README.read_text(encoding="utf-8").split("## Quick start", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S)
    assert block is not None, "README.md has no bash block under its Quick start heading"
    out = []
    for line in block.group(1).replace("\\\n", " ").splitlines():
        line = "" if line.lstrip().startswith("#") else line.split(" #", 1)[0].strip()
        if line:
            out.append(line)
    return out


def _idx(array: np.ndarray) -> bytes:
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = b"\x00\x00\x08" + bytes([array.ndim]) + struct.pack(f">{array.ndim}i", *array.shape)
    return header + array.tobytes()


def write_tiny_mnist(root, n_train: int = 1200, n_test: int = 120, seed: int = 0) -> None:
    """MNIST's four ``.gz`` IDX files under ``root/MNIST/raw``: noise plus one brighter 7x7
    block whose place (jittered) is the class, and a fifth of the training labels shuffled, so
    a LeNet learns the task within an epoch or two, but not perfectly (two versions of a
    model then disagree on some inputs, which ``regress`` needs)."""
    rng = np.random.default_rng(seed)
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for split, n in (("train", n_train), ("test", n_test)):
        y = np.arange(n) % 10
        rng.shuffle(y)
        x = rng.integers(0, 30, (n, 28, 28))
        for i, label in enumerate(y):
            r = 3 + 13 * (label // 5) + rng.integers(-2, 3)
            c = 1 + 5 * (label % 5) + rng.integers(-1, 1)
            x[i, r : r + 7, c : c + 7] += rng.integers(170, 226, (7, 7))
        if split == "train":
            noisy = rng.random(n) < 0.1
            y[noisy] = rng.integers(0, 10, int(noisy.sum()))
        for role, array in ((f"x_{split}", x), (f"y_{split}", y)):
            (raw / f"{_STEMS[role]}.gz").write_bytes(gzip.compress(_idx(array), mtime=0))


def _fast(words: list[str]) -> list[str]:
    line = " ".join(words)
    for prefix, option, value in FAST:
        if line.startswith(prefix):
            assert option in words, f"the README's {prefix} line no longer gives {option}: {line}"
            i = words.index(option)
            words = [*words[: i + 1], value, *words[i + 2 :]]
    return words


@pytest.fixture
def fresh_machine(tmp_path, monkeypatch):
    """An empty working folder, home and cache; no data root set; downloads off."""
    for name in ("home", "cache", "work"):
        (tmp_path / name).mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    monkeypatch.setenv("DEEPFAULT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DEEPFAULT_DATA", raising=False)
    monkeypatch.chdir(tmp_path / "work")
    write_tiny_mnist(tmp_path / "data")
    return tmp_path


def test_readme_quick_start_runs_as_written(fresh_machine, monkeypatch, caplog, one_torch_thread):
    from deepfault.cli import main
    from deepfault.fuzz.fidelity import gan

    # regress's discriminator trains on first use as on a fresh machine, on 128 images once
    # (the recipe's 2 epochs of up to 12,000 images take minutes even on the tiny MNIST)
    short = dataclasses.replace(gan.AUTO_RECIPE, epochs=1, images_per_epoch=128)
    monkeypatch.setattr(gan, "AUTO_RECIPE", short)

    commands = quickstart_commands()
    assert commands[0].startswith("export DEEPFAULT_DATA="), "the quick start sets the data folder first"
    ran = []
    with caplog.at_level(logging.INFO):
        for command in commands:
            words = shlex.split(command)
            if words[0] == "export":
                name = words[1].partition("=")[0]
                assert name == "DEEPFAULT_DATA", command
                monkeypatch.setenv(name, str(fresh_machine / "data"))
                continue
            assert words[0] == "deepfault", f"not a deepfault command: {command}"
            words = _fast(words)
            assert main(words[1:]) == 0, f"README quick start step failed: {shlex.join(words)}"
            ran.append(words[1])
    assert ran[:2] == ["train", "run"]
    assert {"coverage", "xplore", "scenario", "regress", "repair"} <= set(ran)
    work = fresh_machine / "work"
    for out in ("lenet5.pt", "lenet5-deepfault.json", "lenet5-profile.npz", "lenet5-coverage.json",
                "lenet5-rank/report.html", "xplore.json", "faults.npz"):
        assert (work / out).is_file(), out
    # xplore's zoo names were trained on first use, into the cache, and announced with the time
    cached = (fresh_machine / "cache" / "models").glob("lenet*-mnist-*.pt")
    assert sorted(p.name.split("-")[0] for p in cached) == ["lenet1", "lenet4"]
    assert re.search(r"trained lenet1 on mnist in \d+ s .*cached in", caplog.text)


def test_a_model_file_remembers_its_data_folder(fresh_machine, monkeypatch, capsys, one_torch_thread):
    """``train --data-dir`` writes the folder into the file; a later command on that file finds
    the data without ``--data-dir``; ``$DEEPFAULT_DATA`` and ``--data-dir`` win over it."""
    from deepfault.cli import main
    from deepfault.models import open_model

    data = str(fresh_machine / "data")
    assert main(["train", "--arch", "lenet1", "--dataset", "mnist", "--epochs", "1", "--data-dir", data,
                 "--out", "m.pt"]) == 0
    assert open_model("m.pt").meta["data_dir"] == str((fresh_machine / "data").resolve())
    assert main(["coverage", "measure", "--model", "m.pt", "--criteria", "nc", "--out", "c.json"]) == 0
    monkeypatch.setenv("DEEPFAULT_DATA", str(fresh_machine / "empty"))  # the variable wins: no data there
    assert main(["coverage", "measure", "--model", "m.pt", "--criteria", "nc", "--out", "c.json"]) == 2
    assert "mnist file not found" in capsys.readouterr().err
    assert main(["coverage", "measure", "--model", "m.pt", "--criteria", "nc", "--data-dir", data,
                 "--out", "c.json"]) == 0


def test_extras_are_named_as_they_install_from_the_checkout():
    """deepfault is installed from its checkout (README, Installation), so an error or a page
    that names an extra says ``pip install -e '.[keras]'``; ``deepfault[keras]`` is no package
    on the index."""
    from helpers.docs import DOCS, ROOT

    generated = {"cli.md", "index.md"}  # written from src/ (its help texts), checked there
    pages = [p for p in sorted(DOCS.glob("*.md")) if p.name not in generated]
    files = [*sorted((ROOT / "src").rglob("*.py")), *pages, README]
    wrong = [f"{path.relative_to(ROOT)}:{n}" for path in files
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"pip install (-U )?'?deepfault\b", line)]
    assert not wrong, wrong


MYNET = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 5, stride=2)
        self.hidden = nn.Linear(8 * 12 * 12, 32)
        self.relu = nn.ReLU()
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x):
        x = torch.flatten(self.relu(self.conv(x)), 1)
        return self.fc(self.relu(self.hidden(x)))
'''


def own_class_commands() -> list[str]:
    """The bash block of the quick start that names a class of the user's own (``mynet.py:Net``)."""
    section = README.read_text(encoding="utf-8").split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = [b for b in re.findall(r"```bash\n(.*?)```", section, flags=re.S) if "mynet.py:" in b]
    assert len(blocks) == 1, "the quick start shows bringing your own class in one bash block"
    lines = (line.strip() for line in blocks[0].splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def test_readme_own_class_runs_as_written(fresh_machine, monkeypatch, capsys, one_torch_thread):
    """Issue 26: a class in the user's ``mynet.py`` and its ``state_dict`` in ``mynet.pt`` go
    through the README's commands as printed (the data folder set as the quick start sets it)."""
    import torch

    from deepfault.cli import main

    work = fresh_machine / "work"
    (work / "mynet.py").write_text(MYNET, encoding="utf-8")
    namespace: dict = {}
    exec(compile(MYNET, "mynet.py", "exec"), namespace)  # what the user's own code does
    torch.manual_seed(0)
    torch.save(namespace["Net"](num_classes=10).state_dict(), work / "mynet.pt")
    monkeypatch.setenv("DEEPFAULT_DATA", str(fresh_machine / "data"))
    commands = own_class_commands()
    assert [shlex.split(c)[1] for c in commands] == ["inspect", "run"]
    for command in commands:
        words = shlex.split(command)
        assert main(words[1:]) == 0, command
    out = capsys.readouterr().out
    assert "mynet.py:Net" in out
