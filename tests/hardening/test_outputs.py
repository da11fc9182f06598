"""Issue 20: every output path a command cannot use is refused before any work, naming the option."""

from __future__ import annotations

import os

import pytest

from helpers.hardening import assert_refused, cli, files

LONG = "n" * 300


def _commands(d):
    """``(name, argv with OUT where the output goes)`` for every command that writes files."""
    m1, m2, data = d / "m1.pt", d / "m2.pt", d / "data.npz"
    return {
        "coverage profile": ["coverage", "profile", "--model", d / "digits.pt", "--out", "OUT"],
        "coverage measure --plot": [
            "coverage",
            "measure",
            "--model",
            d / "digits.pt",
            "--out",
            "-",
            "--plot",
            "OUT",
        ],
        "xplore --out": ["xplore", "--model", f"{m1},{m2}", "--dataset", data, "--out", "OUT"],
        "regress --out": [
            "regress",
            "--m1",
            m1,
            "--m2",
            m2,
            "--dataset",
            data,
            "--budget",
            "5it",
            "--out",
            "OUT",
        ],
        "regress --store": [
            "regress",
            "--m1",
            m1,
            "--m2",
            m2,
            "--dataset",
            data,
            "--budget",
            "5it",
            "--store",
            "OUT",
        ],
        "scenario --out": [
            "scenario",
            "prune",
            "--arch",
            "digits_mlp",
            "--dataset",
            "digits",
            "--out",
            "OUT",
        ],
        "gan train --out": ["gan", "train", "--dataset", data, "--out", "OUT"],
        "run --out": ["run", "--model", d / "digits.pt", "--out", "OUT"],
        "train --out": ["train", "--arch", "digits_mlp", "--dataset", "digits", "--out", "OUT"],
        "experiment --store": ["experiment", "--preset", "digits", "--store", "OUT"],
    }


def _sub(argv, value):
    return [value if a == "OUT" else a for a in argv]


CASES = {
    "too long": (lambda t: LONG, "at most 255 bytes"),
    "under a file": (lambda t: str(t / "afile" / "x.out"), "is a file"),
    "a directory": (lambda t: str(t / "adir"), "adir"),
    "dot": (lambda t: ".", "'.'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("command", sorted(_commands(__import__("pathlib").Path("."))))
def test_bad_output_path_is_refused_before_work(pair, tmp_path, command, case):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    make, needle = CASES[case]
    argv = _sub(_commands(pair)[command], make(tmp_path))
    is_dir_option = command in ("scenario --out",) or command.endswith("--plot")
    if is_dir_option and case in ("a directory", "dot"):  # a folder is what these take
        return
    option = command.split()[-1] if command.split()[-1].startswith("--") else "--out"
    assert_refused(argv, tmp_path, option, needle)


@pytest.mark.parametrize("command", ["scenario --out", "coverage measure --plot"])
def test_folder_option_set_to_an_existing_file(pair, tmp_path, command):
    (tmp_path / "afile").write_text("x")
    assert_refused(
        _sub(_commands(pair)[command], "afile"), tmp_path, command.split()[-1], "is an existing file"
    )


@pytest.mark.parametrize("command", ["scenario --out", "coverage measure --plot"])
def test_folder_option_set_to_the_file_system_root_is_refused(pair, tmp_path, command):
    """Even as root, where '/' is writable: results never go into the root (a probe once left
    models and pages there)."""
    before = set(os.listdir("/"))
    assert_refused(_sub(_commands(pair)[command], "/"), tmp_path, command.split()[-1], "root")
    assert set(os.listdir("/")) == before


def test_models_dir_at_the_file_system_root_is_refused(tmp_path):
    from deepfault.errors import DeepFaultError
    from deepfault.experiment.presets import get_preset

    with pytest.raises(DeepFaultError, match="root"):
        get_preset("digits").run(tmp_path / "s.sqlite", models_dir="/")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_folder(pair, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        assert_refused(_sub(_commands(pair)["run --out"], str(ro / "r.json")), tmp_path, "--out", "writable")
    finally:
        ro.chmod(0o700)


def test_read_only_file_system_is_refused(pair, tmp_path, monkeypatch):
    """A read-only mount (simulated: every probe file fails with EROFS) names the folder."""
    import tempfile

    def erofs(*a, **k):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", erofs)
    assert_refused(_sub(_commands(pair)["run --out"], "r.json"), tmp_path, "--out", "Read-only file system")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["xplore", "--model", "M1,M2", "--dataset", "DATA", "--out", "r.npz"], "--out (its inputs, .npz)"),
        (
            ["xplore", "--model", "M1,M2", "--dataset", "DATA", "--out", "r.png"],
            "--out (its image grid, .png)",
        ),
        (["run", "--model", "DIGITS", "--out", "x.npz", "--save-inputs", "x.npz"], "--save-inputs"),
        (["run", "--model", "DIGITS", "--out", "x.json", "--log", "x.json"], "--log"),
        (
            ["run", "--model", "DIGITS", "--out", "x.json", "--save-inputs", "a.npz", "--log", "a.png"],
            "--log",
        ),
        (
            ["gan", "train", "--dataset", "DATA", "--out", "d.pt", "--generator-out", "d.pt"],
            "--generator-out",
        ),
        (
            ["regress", "--m1", "M1", "--m2", "M2", "--dataset", "DATA", "--store", "f.npz",
             "--out", "f.npz"],
            "--out",
        ),
    ],
)
def test_sibling_outputs_that_would_clobber_each_other(pair, tmp_path, argv, needle):
    table = {
        "M1": pair / "m1.pt",
        "M2": pair / "m2.pt",
        "DATA": pair / "data.npz",
        "DIGITS": pair / "digits.pt",
    }
    argv = [table.get(a, a) for a in argv]
    argv = [
        a.replace("M1,M2", f"{pair / 'm1.pt'},{pair / 'm2.pt'}") if isinstance(a, str) else a for a in argv
    ]
    assert_refused(argv, tmp_path, needle, "overwrite each other")


def test_campaign_with_dot_dot_is_refused_by_name(pair, tmp_path):
    argv = [*_commands(pair)["regress --store"][:-1], "s.sqlite", "--campaign", "../x"]
    assert_refused(argv, tmp_path, "--campaign", "'../x'")


def test_coverage_profile_out_dash_writes_nothing(pair, tmp_path):
    before = files(tmp_path)
    status, out, err = cli(["coverage", "profile", "--model", pair / "digits.pt", "--out", "-"], tmp_path)
    assert status == 0, err
    assert files(tmp_path) == before
    assert "wrote" not in out


def test_experiment_with_an_unusable_store_creates_nothing(tmp_path):
    (tmp_path / "afile").write_text("x")
    for preset in ("digits", "drfuzz-mnist"):
        assert_refused(["experiment", "--preset", preset, "--store", "afile/s.sqlite"], tmp_path, "--store")
        assert_refused(
            ["experiment", "--preset", preset, "--store", "s.sqlite", "--models-dir", "afile"],
            tmp_path,
            "--models-dir",
        )


def test_the_runner_checks_the_store_before_planning(tmp_path, monkeypatch):
    """The API, too: the preset's plan (which trains models) never starts."""
    from deepfault import DeepFaultError
    from deepfault.experiment.presets import get_preset

    (tmp_path / "afile").write_text("x")
    preset = get_preset("drfuzz-mnist")  # the registry's one instance: patched for this test only
    monkeypatch.setattr(preset, "plan", lambda context: (_ for _ in ()).throw(AssertionError("planned")))
    with pytest.raises(DeepFaultError, match="store"):
        preset.run(tmp_path / "afile" / "s.sqlite")
    assert files(tmp_path) == {"afile"}
