"""Every command's JSON result has the one envelope, every command writes what it declares, and a
printed table and its page's table are one object."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from deepfault.cli import build_parser, main
from deepfault.experiment.results import ENVELOPE, SCHEMA, read_result, result_document, write_result
from deepfault.experiment.tables import Table
from deepfault.models import ModelFile, save_model
from deepfault.repair.report import before_after_table, files_table
from helpers.hardening import lenet as _lenet

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """M1, M2 (noisy), M3 (a little noise) and a small data set labelled by M1."""
    d = tmp_path_factory.mktemp("envelope-models")
    nets = {"m1": _lenet(0), "m2": _lenet(0, noise=0.3), "m3": _lenet(0, noise=0.05)}
    g = torch.Generator().manual_seed(1)
    x, xt = torch.rand(40, 1, 28, 28, generator=g), torch.rand(60, 1, 28, 28, generator=g)
    with torch.no_grad():
        y, yt = nets["m1"](x).argmax(1).numpy(), nets["m1"](xt).argmax(1).numpy()
    np.savez(d / "data.npz", x=x.numpy(), y=y, x_train=xt.numpy(), y_train=yt,
             class_names=np.array([str(i) for i in range(10)]))
    for name, m in nets.items():
        save_model(d / f"{name}.pt", ModelFile(m, "lenet1", {"num_classes": 10}, None, (0.0, 1.0),
                                               meta={"input_shape": [1, 28, 28]}))
    return d


def _argv(command: str, models: Path, out: Path) -> list[str]:
    data = ["--dataset", str(models / "data.npz"), "--device", "cpu", "--no-progress"]
    if command == "run":
        return ["run", "--class", "0,1", "-k", "2", "--out", str(out / "r.json")]
    if command in ("coverage measure", "coverage rank"):
        return [*command.split(), "--criteria", "nc", "--no-progress", "--out", str(out / "c.json")]
    if command == "xplore":
        return ["xplore", "--model", str(models / "m1.pt"), "--model", str(models / "m2.pt"),
                "--num-seeds", "8", "--iterations", "2", "--out", str(out / "x.json"), *data]
    if command == "regress":
        return ["regress", "--m1", str(models / "m1.pt"), "--m2", str(models / "m2.pt"), "--budget", "20it",
                "--inputs-per-step", "5", "--fidelity", "ssim:0.5", "--store", str(out / "s.sqlite"), *data]
    if command == "repair":
        main(_argv("xplore", models, models))  # its inputs, beside the models
        return ["repair", str(models / "x.npz"), "--model", str(models / "m1.pt"), "--epochs", "1",
                "--baselines", "random-test", "--ties", "seed", "--out", str(out / "rep.json"),
                "--report", f"{out}-page", *data]  # the page beside the outputs' folder
    raise AssertionError(command)


COMMANDS = ("run", "coverage measure", "coverage rank", "xplore", "regress", "repair")
_RUNS: dict[str, tuple] = {}


@pytest.fixture
def ran(request, models, tmp_path_factory, capsys):
    """``(argv, folder, printed)`` of the command run once into an empty folder."""
    command = request.param
    if command not in _RUNS:
        out = tmp_path_factory.mktemp(command.replace(" ", "-"))
        argv = _argv(command, models, out)
        capsys.readouterr()
        code = main(argv)
        printed = capsys.readouterr()
        assert code == 0, printed.err
        _RUNS[command] = (argv, out, printed.out)
    return _RUNS[command]


def _results(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json"))


@pytest.mark.parametrize("ran", COMMANDS, indirect=True)
def test_every_command_writes_the_common_envelope(ran):
    argv, folder, _ = ran
    command = "coverage " + argv[1] if argv[0] == "coverage" else argv[0]
    paths = _results(folder)
    assert paths, f"{command} wrote no JSON result"
    for path in paths:
        doc = read_result(path, command)
        assert set(ENVELOPE) <= set(doc)
        assert doc["schema"] == SCHEMA
        assert doc["tool"] == f"deepfault {command}"
        assert doc["device"] == "cpu" == doc["provenance"]["device"]
        assert doc["versions"]["torch"] == torch.__version__
        assert doc["provenance"]["argv"][1:] == argv
        assert isinstance(doc["config"], dict)
        assert doc["config"]
        assert set(doc) - set(ENVELOPE), "no payload"
        for name in doc["outputs"].values():
            assert name is None or (folder / Path(name).name).is_file() or Path(name).is_file()


@pytest.mark.parametrize("ran", COMMANDS, indirect=True)
def test_declared_outputs_are_what_is_written(ran):
    argv, folder, _ = ran
    args = build_parser().parse_args(argv)
    module = importlib.import_module(args.func.__module__)
    declared = {o.path.resolve() for o in module.outputs(args) if o.path is not None and not o.folder}
    written = {p.resolve() for p in folder.iterdir()
               if not p.name.startswith(".") and not p.name.endswith(("-wal", "-shm", "-journal"))}
    assert written == declared


@pytest.mark.parametrize("ran", ["repair"], indirect=True)
def test_the_printed_table_and_the_page_table_are_one_object(ran):
    _, folder, printed = ran
    doc = json.loads((folder / "rep.json").read_text())
    page = (folder.parent / f"{folder.name}-page" / "report.html").read_text()
    for table in (files_table(doc), before_after_table(doc)):
        assert table.text() in printed
        assert table.html() in page


def test_a_table_renders_the_same_cells_every_way():
    t = Table(("model", "acc %"), [("before", "97.50"), ("a<b", "-")], title="t")
    assert t.text().splitlines()[1].split() == ["before", "97.50"]
    assert "<td>a&lt;b</td>" in t.html()
    assert "| a<b | - |" in t.markdown()
    with pytest.raises(ValueError, match="2 columns"):
        Table(("a", "b"), [("only one",)])


def test_the_builder_refuses_what_the_reader_would_refuse(tmp_path):
    from deepfault.errors import DeepFaultError

    with pytest.raises(DeepFaultError, match="envelope's keys"):
        result_document("run", {"config": {}}, config={})
    doc = result_document("run", {"classes": []}, config={"k": 1}, seed=3)
    assert read_result(write_result(tmp_path / "r.json", doc), "run")["seed"] == 3
    with pytest.raises(DeepFaultError, match="not of 'deepfault xplore'"):
        read_result(tmp_path / "r.json", "xplore")
    (tmp_path / "old.json").write_text(json.dumps({"tool": "deepfault run"}))
    with pytest.raises(DeepFaultError, match="not a deepfault result"):
        read_result(tmp_path / "old.json")
