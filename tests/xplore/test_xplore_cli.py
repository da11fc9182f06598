"""``deepfault xplore`` end to end on tiny models and data (offline)."""

import json
import re

import numpy as np
import pytest
import torch

from deepfault.cli import main
from deepfault.models import ModelFile, build_model, open_model, save_model
from deepfault.xplore import load_inputs, replay


def _digits_model(path, seed, **arch_kwargs):
    torch.manual_seed(seed)
    model = build_model("digits_mlp", **arch_kwargs)
    save_model(path, ModelFile(model, "digits_mlp", arch_kwargs, dataset="digits", bounds=(0.0, 1.0)))
    return path


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    """Two digits MLPs trained briefly from different seeds: they agree on most test inputs."""
    from deepfault.data import load_dataset
    from deepfault.models.train import TrainConfig, train_model

    folder = tmp_path_factory.mktemp("models")
    data = load_dataset("digits")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        paths = []
        for seed in (1, 2):
            mf, _ = train_model("digits_mlp", data, TrainConfig(epochs=8, seed=seed, lr=1e-2))
            paths.append(str(save_model(folder / f"m{seed}.pt", mf)))
    finally:
        torch.set_num_threads(threads)
    return paths


def _run(capsys, *args):
    code = main(["xplore", "--no-progress", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_xplore_writes_table_json_inputs_and_grid(tmp_path, capsys, two_models):
    out = tmp_path / "res" / "x.json"
    code, text, err = _run(capsys, "--model", ",".join(two_models), "--num-seeds", "80", "--step-size", "0.5",
                           "--iterations", "8", "--out", str(out), "--grid", "3")
    assert code == 0, err
    assert "target" in text
    assert "neuron coverage (layer-minmax, t = 0)" in text
    assert "pooled" in text
    payload = json.loads(out.read_text())
    assert payload["tool"] == "deepfault xplore"
    assert payload["provenance"]["argv"][1] == "xplore"
    assert payload["seeds"] == 80
    assert payload["config"]["step"] == 0.5
    assert [m["name"] for m in payload["models"]] == ["m1.pt", "m2.pt"]
    assert (tmp_path / "res" / "x.png").stat().st_size > 1000
    saved = load_inputs(tmp_path / "res" / "x.npz")
    assert len(saved["inputs"]) == payload["found"] > 0
    models = [open_model(p).model for p in two_models]
    preds = replay(models, saved["inputs"].reshape(len(saved["inputs"]), -1))
    assert np.array_equal(preds, saved["predictions"])
    assert np.all(preds[:, 0] != preds[:, 1])
    assert saved["inputs"].min() >= 0
    assert saved["inputs"].max() <= 1


def test_same_command_same_inputs(tmp_path, capsys, two_models):
    for name in ("a", "b"):
        code, _, err = _run(capsys, "--model", ",".join(two_models), "--num-seeds", "30",
                            "--step-size", "0.5", "--iterations", "4", "--constraint", "none",
                            "--out", str(tmp_path / f"{name}.json"))
        assert code == 0, err
    a, b = load_inputs(tmp_path / "a.npz"), load_inputs(tmp_path / "b.npz")
    assert np.array_equal(a["inputs"], b["inputs"])
    assert np.array_equal(a["seed_index"], b["seed_index"])


def test_identical_models_find_nothing_and_say_so(tmp_path, capsys):
    a = _digits_model(tmp_path / "a.pt", seed=3)
    b = _digits_model(tmp_path / "b.pt", seed=3)
    code, text, err = _run(capsys, "--model", f"{a},{b}", "--num-seeds", "40", "--iterations", "3",
                           "--out", str(tmp_path / "r.json"))
    assert code == 0, err
    assert "no difference-inducing input found in 40 seeds (the models agree on every input tried)" in text
    assert json.loads((tmp_path / "r.json").read_text())["found"] == 0


def test_zoo_names_resolve_in_the_models_dir(tmp_path, capsys):
    _digits_model(tmp_path / "digits_mlp-digits.pt", seed=1)
    other = _digits_model(tmp_path / "other.pt", seed=2)
    code, text, err = _run(capsys, "--model", f"digits_mlp,{other}", "--dataset", "digits",
                           "--models-dir", str(tmp_path), "--num-seeds", "10", "--iterations", "2",
                           "--out", "-")
    assert code == 0, err and "digits_mlp" in text
    # a zoo name without its file is trained on first use; one that cannot take the data set's
    # inputs is refused in one line before any training
    code, _, err = _run(capsys, "--model", f"lenet1,{other}", "--dataset", "digits",
                        "--models-dir", str(tmp_path), "--out", "-")
    assert code == 2
    assert "cannot take inputs of shape (1, 8, 8)" in err


def test_zoo_names_train_on_first_use_then_come_from_the_cache(tmp_path, capsys, monkeypatch, caplog):
    monkeypatch.setenv("DEEPFAULT_CACHE", str(tmp_path / "cache"))
    other = _digits_model(tmp_path / "other.pt", seed=2)
    args = ("--model", f"digits_mlp,{other}", "--dataset", "digits", "--models-dir", str(tmp_path / "none"),
            "--num-seeds", "10", "--iterations", "2", "--out", "-")
    with caplog.at_level("WARNING"):
        code, _, err = _run(capsys, *args)
    assert code == 0, err
    cached = sorted((tmp_path / "cache" / "models").glob("digits_mlp-digits-*.pt"))
    assert len(cached) == 1
    assert "training zoo model digits_mlp on digits (first use: 10 epochs" in caplog.text
    trained = r"trained digits_mlp on digits in \d+ s \(test accuracy 0\.\d+\); cached in"
    assert re.search(trained, caplog.text)
    caplog.clear()
    stamp = cached[0].stat().st_mtime_ns
    with caplog.at_level("WARNING"):
        assert _run(capsys, *args)[0] == 0
    assert "training zoo model" not in caplog.text
    assert cached[0].stat().st_mtime_ns == stamp


def test_keras_weights_files_with_arch(tmp_path, capsys):
    h5py = pytest.importorskip("h5py")
    from helpers.keras_files import keras_arrays as _keras_arrays
    from helpers.keras_files import write_save_weights as _write_save_weights

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "tiny.npz", x=rng.uniform(0, 1, (30, 1, 28, 28)).astype(np.float32),
             y=rng.integers(0, 10, 30), bounds=np.array([0.0, 1.0]))
    files = []
    for i, arch in enumerate(("lenet1", "lenet4")):
        torch.manual_seed(i)
        path = _write_save_weights(tmp_path / f"Model{i + 1}.h5", _keras_arrays(build_model(arch)))
        files.append(str(path))
    assert h5py is not None
    code, text, err = _run(capsys, "--model", ",".join(files), "--arch", "lenet1,lenet4", "--dataset",
                           str(tmp_path / "tiny.npz"), "--num-seeds", "20", "--iterations", "3", "--out", "-")
    assert code == 0, err
    assert "Model1.h5 (" in text
    assert "Model2.h5 (" in text
    code, _, err = _run(capsys, "--model", ",".join(files), "--dataset", str(tmp_path / "tiny.npz"),
                        "--out", "-")
    assert code == 2
    assert "holds Keras weights without an architecture; name it with --arch" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--num-seeds", "0"], "--num-seeds must be an integer from 1 to 16,777,216; got 0"),
        (["--num-seeds", "600"], "--num-seeds 600 is more than the 540 inputs to draw from"),
        (["--lambda1", "nan"], "lambda1 must be a finite number"),
        (["--step-size", "-1"], "--step-size must be a number >= 0; got -1.0"),
        (["--target", "2"], "target must be a model index in 0..1 (or random); got 2"),
        (["--target", "first"], "--target must be 'random' or an integer from 0 to 1,023; got 'first'"),
        (["--occlusion", "1,2"], "--occlusion must be x,y,h,w (four integers >= 0); got '1,2'"),
        (["--constraint", "fog"], "--constraint must be one of blackout, light, none, occl; got 'fog'"),
        (["--neurons", "often"], "--neurons must be one of per-iteration, per-seed; got 'often'"),
        (["--num-seeds", "9", "--constraint", "occl", "--occlusion", "0,0,9,9"],
         "does not fit in 8 x 8 images"),
        (["--arch", "a,b,c"], "--arch gives 3 entries for 2 models"),
        (["--device", "tpu"], "unknown device 'tpu'"),
    ],
)
def test_bad_options_are_one_line_errors(tmp_path, capsys, two_models, args, message):
    out = tmp_path / "r.json"
    code, _, err = _run(capsys, "--model", ",".join(two_models), "--out", str(out), *args)
    assert code == 2
    assert message in err
    assert err.startswith("deepfault: error: ")
    assert err.count("\n") == 1
    assert not out.exists()


def test_fewer_than_two_models(capsys, two_models):
    code, _, err = _run(capsys, "--model", two_models[0], "--out", "-")
    assert code == 2
    assert "two or more models; got 1" in err


def test_different_class_counts_are_refused(tmp_path, capsys, two_models):
    five = _digits_model(tmp_path / "five.pt", seed=4, num_classes=5)
    code, _, err = _run(capsys, "--model", f"{two_models[0]},{five}", "--out", "-")
    assert code == 2, err
    # refused when the model is prepared, against the data set (issue 30), before the models are compared
    assert "model 'five.pt' has 5 outputs per input but data set 'digits' has 10 classes" in err, err


def test_models_of_different_input_layouts_share_the_native_inputs(tmp_path, capsys, two_models):
    # a flat model is adapted to the data set's (1, 8, 8) inputs, so both see the same inputs
    torch.manual_seed(0)
    flat = build_model("digits_mlp")
    save_model(tmp_path / "flat.pt", ModelFile(flat, "digits_mlp", dataset="digits", bounds=(0.0, 1.0),
                                               meta={"input_shape": [64]}))
    code, text, err = _run(capsys, "--model", f"{two_models[0]},{tmp_path / 'flat.pt'}", "--num-seeds", "20",
                           "--iterations", "2", "--out", "-")
    assert code == 0, err
    assert "20 seeds" in text
    wide = tmp_path / "wide.pt"
    save_model(wide, ModelFile(flat, "digits_mlp", dataset="digits", bounds=(0.0, 1.0),
                               meta={"input_shape": [65]}))
    code, _, err = _run(capsys, "--model", f"{two_models[0]},{wide}", "--num-seeds", "20", "--out", "-")
    assert code == 2, err
    assert "has inputs of shape (1, 8, 8) but the model takes (65,)" in err, err


# --- the published code's options ---------------------------------------------------------


def test_seed_indices_from_a_list_and_a_file_are_the_seeds(tmp_path, capsys, caplog, two_models):
    listed = tmp_path / "list.json"
    code, text, err = _run(capsys, "--model", ",".join(two_models), "--seed-indices", "5,3,5,539",
                           "--step-size", "0.5", "--iterations", "4", "--out", str(listed))
    assert code == 0, err
    # issue 43: the repeated 5 is dropped with a note (it was searched, and counted, twice)
    assert "seed indices: 1 repeated value(s) dropped (5)" in caplog.text
    assert "3 seeds of 540 test inputs (given indices)" in text
    payload = json.loads(listed.read_text())
    assert payload["config"]["seed_indices"] == [5, 3, 539]
    assert payload["seeds"] == 3
    (tmp_path / "idx.txt").write_text("# DeepXplore's seeds\n5 3\n5,539\n")
    code, _, err = _run(capsys, "--model", ",".join(two_models), "--seed-indices", str(tmp_path / "idx.txt"),
                        "--step-size", "0.5", "--iterations", "4", "--out", str(tmp_path / "file.json"))
    assert code == 0, err
    a, b = load_inputs(tmp_path / "list.npz"), load_inputs(tmp_path / "file.npz")
    assert np.array_equal(a["seed_index"], b["seed_index"])
    assert np.array_equal(a["inputs"], b["inputs"])
    np.save(tmp_path / "idx.npy", np.array([5, 3, 5, 539]))
    code, _, err = _run(capsys, "--model", ",".join(two_models), "--seed-indices", str(tmp_path / "idx.npy"),
                        "--step-size", "0.5", "--iterations", "4", "--out", str(tmp_path / "npy.json"))
    assert code == 0, err
    assert json.loads((tmp_path / "npy.json").read_text())["config"]["seed_indices"] == [5, 3, 539]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "expected a file of seed indices or a comma list such as 3,17,42; got '1,x'"),
        ("3 -1\n", "seed indices must be integers >= 0; file"),
        ("3 2.5\n", "holds '2.5'"),
        ("# nothing\n", "no seed index in file"),
        ("12 540\n", "seed index 540 is outside the 540 inputs to draw from (valid: 0..539)"),
    ],
)
def test_bad_seed_indices_are_one_line_errors(tmp_path, capsys, two_models, content, message):
    value = "1,x"
    if content is not None:
        value = str(tmp_path / "idx.txt")
        (tmp_path / "idx.txt").write_text(content)
    code, _, err = _run(capsys, "--model", ",".join(two_models), "--seed-indices", value, "--out", "-")
    assert code == 2
    assert message in err
    assert err.startswith("deepfault: error: ")
    assert err.count("\n") == 1


def _parsed(*args):
    from deepfault.cli import build_parser
    from deepfault.cli.xplore import _config

    return _config(build_parser().parse_args(["xplore", "--model", "a,b", *args]))


def test_compat_sets_every_published_choice():
    from deepfault.xplore import XploreConfig
    from deepfault.xplore.config import PUBLISHED

    config = _parsed("--compat", "--num-seeds", "300")
    assert config == XploreConfig.published(seeds=300)
    assert {k: getattr(config, k) for k in PUBLISHED} == PUBLISHED
    assert _parsed("--paper") == XploreConfig.published()
    assert _parsed() == XploreConfig()
    given = _parsed("--compat", "--clip", "--step-size", "0.05", "--target", "random",
                    "--neurons", "per-iteration")
    assert (given.clip, given.step, given.target, given.neurons, given.replace) == \
        (True, 0.05, None, "per-iteration", True)
    assert _parsed("--no-clip").clip is False
    assert _parsed("--no-clip").neurons == "per-iteration"


def test_true_label_and_ssim_in_the_summary_json_npz_and_page(tmp_path, capsys, two_models):
    from deepfault.data import load_dataset

    out, report = tmp_path / "x.json", tmp_path / "rep"
    code, text, err = _run(capsys, "--model", ",".join(two_models), "--num-seeds", "60", "--step-size", "0.5",
                           "--iterations", "8", "--out", str(out), "--grid", "3", "--no-surprise",
                           "--report", str(report))
    assert code == 0, err
    saved = load_inputs(tmp_path / "x.npz")
    truth = load_dataset("digits").y_test[saved["seed_index"]]
    assert np.array_equal(saved["true_label"], truth)
    agree = json.loads(out.read_text())["true_label_agreement"]
    assert [m["agrees"] for m in agree["models"]] == [int((saved["predictions"][:, j] == truth).sum())
                                                      for j in range(2)]
    assert agree["none"] == int((saved["predictions"] != truth[:, None]).all(axis=1).sum())
    assert "Which model is right on the" in text
    assert f"Difference-inducing inputs (first 3 of {len(truth)})" in text
    assert "realism: mean SSIM to the seed" in text
    assert "saturate" not in text  # the old measure is in the JSON only
    realism = json.loads(out.read_text())["realism"]
    assert {"mean_ssim", "low_ssim", "ssim_threshold", "saturated"} <= set(realism)
    page = (report / "report.html").read_text(encoding="utf-8")
    assert "Agreeing with the true label on them: m1.pt " in page[:page.index("<nav>")]


def test_no_clip_reports_what_clipping_would_keep_and_warns_on_saturation(tmp_path, capsys, two_models):
    code, text, err = _run(capsys, "--model", ",".join(two_models), "--num-seeds", "60", "--compat",
                           "--out", str(tmp_path / "r.json"))
    assert code == 0, err
    assert "no clipping" in text
    assert "still differ once clipped" in text
    assert "saturate" in text
    assert "warning: " in text
    assert "a smaller --step-size (an element can move by their product, now " in text
    assert "--constraint none instead of light" in text
    realism = json.loads((tmp_path / "r.json").read_text())["realism"]
    assert realism["outside_bounds"] > 0
    assert 0 <= realism["still_differ_clipped"] <= 1
    assert json.loads((tmp_path / "r.json").read_text())["provenance"]["threads"] == 1


def test_xplore_workers_on_the_shared_executors(tmp_path, capsys, two_models):
    base = ["--model", ",".join(two_models), "--num-seeds", "40", "--step-size", "0.5", "--iterations", "4",
            "--lambda2", "0", "--no-surprise"]
    code, _, err = _run(capsys, *base, "--out", str(tmp_path / "one.json"))
    assert code == 0, err
    spread = ["--workers", "2", "--executor", "process"]
    code, _, err = _run(capsys, *base, *spread, "--out", str(tmp_path / "two.json"))
    assert code == 0, err
    one, two = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("one", "two"))
    assert two["config"]["workers"] == 2
    assert two["found"] == one["found"]  # with lambda2 0 the spread search finds what one process finds
    code, _, err = _run(capsys, *base, "--workers", "2", "--gpus-per-worker", "0.5", "--out", "-")
    assert code == 2
    assert "--gpus-per-worker only applies to the 'ray' executor" in err
