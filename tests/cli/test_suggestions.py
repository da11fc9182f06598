"""The CLI's vocabulary errors (issue 27): a typo gets "did you mean", in the user's word, on one
line with exit status 2; an unknown argument points to the command's own help; and every
terminal table whose columns are abbreviations has a legend line under it.
"""

from __future__ import annotations

import argparse
import re

import pytest

from deepfault.cli import build_parser, main


def _error(capsys, *argv) -> str:
    """The one error line of ``deepfault ARGV`` (exit 2, nothing on stdout)."""
    assert main(list(argv)) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("deepfault: error: ")
    assert err.count("\n") == 1, err
    return err


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command that runs something, nested ones too: ``("run",)``, ``("coverage", "measure")``."""
    sub = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not sub:
        return [prefix]
    return [c for name, p in sub[0].choices.items() for c in _commands(p, (*prefix, name))]


COMMANDS = _commands(build_parser())


def test_the_walk_finds_nested_commands():
    assert ("run",) in COMMANDS
    assert ("coverage", "measure") in COMMANDS
    assert ("data", "download") in COMMANDS


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_an_unknown_argument_points_to_the_commands_own_help(capsys, command):
    err = _error(capsys, *command, "--no-such-option")
    # the command's own parser answers: 'unrecognized arguments' or, first, a missing required one
    assert err.rstrip().endswith(f"(see 'deepfault {' '.join(command)} --help')")


@pytest.mark.parametrize(("argv", "fragment", "help_of"), [
    (["run", "--mesure", "ochiai"],
     "unrecognized arguments: --mesure ochiai; did you mean --measure?", "run"),
    (["run", "--mesure=ochiai"], "did you mean --measure?", "run"),
    (["run", "--mesure", "ochiai", "--sed", "3"],
     "did you mean --measure for --mesure, --seed for --sed?", "run"),
    (["coverage", "measure", "--criterai", "nc"], "did you mean --criteria?", "coverage measure"),
    (["run", "--model", "m.pt", "extra"], "unrecognized arguments: extra (see", "run"),
    (["--verbos", "run"], "did you mean --verbose?", ""),  # before the command: the program's
])
def test_unknown_options_get_the_closest_option_of_their_command(capsys, argv, fragment, help_of):
    err = _error(capsys, *argv)
    assert fragment in err
    assert err.rstrip().endswith(f"(see '{' '.join(['deepfault', help_of]).strip()} --help')")


@pytest.mark.parametrize(("argv", "fragment"), [
    # choices=: argparse's "invalid choice" with the closest choices
    (["rn"], "argument COMMAND: invalid choice: 'rn'; did you mean 'run'? (choose from 'run'"),
    (["coverage", "mesure"], "invalid choice: 'mesure'; did you mean 'measure'?"),
    (["xplore", "--constraint", "blakout"], "got 'blakout' (did you mean 'blackout'?)"),
    (["experiment", "--executor", "seriall"], "invalid choice: 'seriall'; did you mean 'serial'?"),
    (["train", "--arch", "lenet55", "--dataset", "mnist"],
     "--arch: unknown architecture 'lenet55'; did you mean 'lenet5'"),
    # names the registries check: the user's word
    (["run", "--measure", "ochia"],
     "--measure must be one of ample, "),
    (["run", "--measure", "ochia"], "; got 'ochia' (did you mean 'ochiai' or 'ochiai2'?)"),
    (["run", "--measure", "Tarantula"], "; got 'Tarantula' (did you mean 'tarantula'?)"),
    (["repair", "--baselines", "random-tran"],
     "--baselines must be 'none' or names of random-train, random-test, fgsm, bim; got 'random-tran' "
     "(did you mean 'random-train' or 'random-test'?)"),
    (["coverage", "measure", "--criteria", "nc,kmcn"],
     "unknown coverage criterion 'kmcn'; did you mean 'kmnc'?"),
    (["coverage", "rank", "--by", "ginni"], "unknown prioritiser 'ginni'; did you mean 'gini'?"),
    (["regress", "--m1", "a.pt", "--m2", "b.pt", "--criteria", "kmcn"],
     "--criteria must be one of kmnc, nac, nbc, nc, snac, tknc, tknp; got 'kmcn' (did you mean 'kmnc'?)"),
    (["regress", "--m1", "a.pt", "--m2", "b.pt", "--fidelity", "ssimm"], "got 'ssimm'; did you mean 'ssim'"),
])
def test_a_typo_gets_the_right_suggestion(capsys, argv, fragment):
    assert fragment in _error(capsys, *argv)


def test_a_data_set_typo_in_data_download(capsys, tmp_path):
    err = _error(capsys, "data", "download", "mnst", "--data-dir", str(tmp_path))
    assert "no download source for data set 'mnst' (did you mean 'mnist'?); downloadable: " in err
    assert not any(tmp_path.iterdir())


# --------------------------------------------------------------------------- legends


def test_every_abbreviation_of_the_run_tables_is_in_its_legend():
    from deepfault.localization.outputs import EVALUATION_LEGEND, NEURON_LEGEND

    assert NEURON_LEGEND.startswith("as/af: ")
    assert "; ns/nf: " in NEURON_LEGEND
    for column in ("changed", "L1/L2/Linf", "increased (@k')", "ms/input"):
        assert f"{column}: " in EVALUATION_LEGEND


def test_every_label_of_the_regress_progress_line_is_in_its_legend():
    from deepfault.fuzz.campaign.config import CampaignProgress
    from deepfault.fuzz.regress import PROGRESS_LEGEND, progress_line

    line = progress_line(CampaignProgress(elapsed=1.0, iterations=2, rf=3, urf=4, seeds=5, gf=6, corpus=7,
                                          rule_shares={"blur": 1.0}, budget="10it"))
    labels = re.findall(r"\b([A-Za-z]+) \d", line.split("[")[0])
    assert labels == ["it", "RF", "URF", "Seed", "GF", "queue"]
    for label in labels:
        assert re.search(rf"(^|; ){label}: ", PROGRESS_LEGEND), label


def _under(lines: list[str], header: str) -> list[str]:
    """The lines after the table whose header line contains ``header`` (up to a blank line)."""
    start = next(i for i, line in enumerate(lines) if header in line)
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


@pytest.fixture(scope="module")
def digits_model(tmp_path_factory):
    """An untrained digits MLP file (no training: the tables' shape is what is checked)."""
    import torch

    from deepfault.models import ModelFile, build_model, save_model

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("legend") / "m.pt"
    save_model(path, ModelFile(build_model("digits_mlp"), "digits_mlp", {}, dataset="digits"))
    return str(path)


def test_run_prints_a_legend_under_its_tables(capsys, digits_model):
    from deepfault.localization.outputs import EVALUATION_LEGEND, NEURON_LEGEND

    assert main(["run", "--model", digits_model, "--class", "0", "-k", "2", "--no-surprise", "--out", "-",
                 "--no-progress", "--threads", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert _under(lines, "rank  layer  unit  score  as  af  ns  nf")[-1] == f"  ({NEURON_LEGEND})"
    assert _under(lines, "class  inputs  loss")[-1] == f"  ({EVALUATION_LEGEND})"


def test_coverage_prints_legends_under_its_tables(capsys, digits_model):
    common = ["--model", digits_model, "--out", "-", "--no-progress", "--threads", "1"]
    assert main(["coverage", "measure", "--criteria", "nc,tknc", *common]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert _under(lines, "tknc (covered/items)")[-1] == "  (nc: neuron coverage; tknc: top-k neuron coverage)"
    assert main(["coverage", "rank", "--by", "gini,margin", *common]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert _under(lines, "prioritiser  ")[-1].startswith("  (APFD: average percentage of faults detected")


def test_regress_explains_its_progress_line_once(capsys, tmp_path):
    from deepfault.fuzz.regress import PROGRESS_LEGEND
    from helpers.hardening import write_regress_pair

    write_regress_pair(tmp_path, 20)
    argv = ["regress", "--m1", str(tmp_path / "m1.pt"), "--m2", str(tmp_path / "m2.pt"), "--dataset",
            str(tmp_path / "data.npz"), "--budget", "6it", "--inputs-per-step", "5", "--store",
            str(tmp_path / "s.sqlite"), "--device", "cpu", "--fidelity", "ssim:0.5", "--threads", "1"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines.count(f"progress: {PROGRESS_LEGEND}") == 1
    at = lines.index(f"progress: {PROGRESS_LEGEND}")
    assert " URF " in lines[at + 1]  # the first progress line follows it
