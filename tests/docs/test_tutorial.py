"""docs/tutorial.md runs as written: its bash blocks through ``main`` on tiny stand-ins for the
reader's ``model.h5``/``model-v2.h5`` and for MNIST, and its Python block as it is.
"""

from __future__ import annotations

import re
import shlex

import numpy as np
import pytest
import torch

import deepfault as df
from deepfault.cli import main
from helpers.docs import page, run_python_examples

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TUTORIAL = page("tutorial.md")


def commands(text: str) -> list[list[str]]:
    """Every ``deepfault ...`` line of the bash blocks (continuations joined), as argv."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                assert line.startswith("deepfault "), line
                out.append(shlex.split(line)[1:])
    return out


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    """``model.h5`` and ``model-v2.h5`` (channels-last Keras LeNets ending in a softmax) and a
    60-input 28x28 stand-in for MNIST, labelled by the first model except for 20 inputs that
    give every class a test input and the models some mistakes."""
    pytest.importorskip("h5py")
    from helpers.keras_files import write_lenet

    write_lenet(tmp_path / "model.h5", seed=0)
    write_lenet(tmp_path / "model-v2.h5", seed=1)
    x = np.random.default_rng(0).uniform(0, 1, (200, 1, 28, 28)).astype(np.float32)
    zeros = np.zeros(len(x), np.int64)
    names = tuple(str(i) for i in range(10))
    prepared = df.prepare_model(tmp_path / "model.h5", df.Dataset("d", x, zeros, x, zeros, (0.0, 1.0), names))
    with torch.no_grad():
        y = prepared.module(torch.as_tensor(x)).argmax(1).numpy()
    y[:20] = np.arange(20) % 10
    data = tmp_path / "mnist-stand-in.npz"
    np.savez(data, x=x[:60], y=y[:60], x_train=x[60:], y_train=y[60:], class_names=np.array(names))
    monkeypatch.chdir(tmp_path)
    return tmp_path, data


def test_the_tutorial_covers_each_step():
    used = {argv[0] for argv in commands(TUTORIAL)}
    assert {"inspect", "run", "coverage", "xplore", "regress"} <= used
    assert "DataLoader" in TUTORIAL


def test_tutorial_commands_run(stand_ins, capsys):
    folder, data = stand_ins
    for argv in commands(TUTORIAL):
        argv = [str(data) if a == "mnist" and i and argv[i - 1] == "--dataset" else a
                for i, a in enumerate(argv)]
        if argv[0] in ("run", "coverage", "xplore", "regress"):
            argv.append("--no-progress")
        code = main(argv)
        out, err = capsys.readouterr()
        assert code == 0, f"deepfault {' '.join(argv)}\n{out}\n{err}"
    for name in ("run.json", "run.npz", "profile.npz", "coverage.json", "rank.json", "xplore.json",
                 "faults.npz", "regress.sqlite"):
        assert (folder / name).is_file(), name


def test_tutorial_python_runs(capsys):
    run_python_examples(TUTORIAL, "docs/tutorial.md")
    lines = capsys.readouterr().out.splitlines()
    assert "inputs of class 3 misclassified" in lines[0]
    # spectrum, 3 neurons, 2 criteria, then the run's summary: its answer, then what `deepfault run` prints
    assert "evaluation of synthesized inputs (labels are the originals'; means per input)" in lines[8:]
    assert lines[5].startswith("tknc(top_k=1) ")
    assert lines[6].startswith("DeepFault run: ochiai k=3 on 1 class,")
