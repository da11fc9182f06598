"""Issues 20 and 22: sizes, devices, models, options and messages, each refused in one line before work."""

from __future__ import annotations

import socket

import numpy as np
import pytest
import torch

from deepfault import DeepFaultError
from helpers.hardening import assert_refused, cli, files


def _regress(d, *extra):
    return [
        "regress",
        "--m1",
        d / "m1.pt",
        "--m2",
        d / "m2.pt",
        "--dataset",
        d / "data.npz",
        "--budget",
        "5it",
        "--store",
        "s.sqlite",
        "--no-progress",
        *extra,
    ]


# --- sizes that cannot fit --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["coverage", "measure", "--sections", "1000000000"],
         "--sections must be an integer from 1 to 100,000; got 1000000000"),
        (["run", "--iterations", "1000000000000"], "--iterations must be an integer from 1 to 100,000"),
        (
            ["train", "--arch", "digits_mlp", "--dataset", "digits", "--epochs", "1000000000000"],
            "--epochs must be an integer from 1 to 100,000; got 1000000000000",
        ),
        (["xplore", "--model", "a,b", "--threads", "-1"],
         "--threads must be 'auto' or an integer from 1 to 1,024"),
        (["xplore", "--model", "a,b", "--threads", "1000000"],
         "--threads must be 'auto' or an integer from 1 to 1,024"),
        (["experiment", "--preset", "digits", "--workers", "1000000"],
         "--workers must be an integer from 1 to 1,024; got 1000000"),
        (
            ["scenario", "prune", "--arch", "digits_mlp", "--dataset", "digits", "--seed", "1" + "0" * 30],
            "--seed must be an integer from 0 to 9,223,372,036,854,775,807",
        ),
        (["xplore", "--model", "a,b", "--grid", "-3"], "--grid must be an integer from 1 to 10,000; got -3"),
        (["gan", "train", "--dataset", "digits", "--epochs", "1000000000000"],
         "--epochs must be an integer from 1 to 100,000"),
    ],
)
def test_sizes_that_cannot_fit(tmp_path, argv, needle):
    assert_refused(argv, tmp_path, needle)


def test_npz_with_a_huge_label_is_refused_without_allocating(pair, tmp_path):
    from deepfault.data.npz import load_npz

    np.savez(tmp_path / "d.npz", x=np.zeros((3, 4), np.float32), y=np.array([0, 1, 2**40]))
    with pytest.raises(DeepFaultError, match="labels must be below 100,000"):
        load_npz(tmp_path / "d.npz")
    assert_refused(
        ["run", "--model", pair / "digits.pt", "--dataset", tmp_path / "d.npz", "--out", "-"],
        tmp_path,
        "100,000",
    )


def test_workers_bound_in_the_api():
    from deepfault.experiment.executors import get_executor

    with pytest.raises(DeepFaultError, match="workers must be an integer from 1 to 1,024"):
        get_executor("process", workers=10**6)


# --- devices ----------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["meta", "mps", "xla", "cuda", "gpu", "cuda:99"])
def test_unavailable_devices_list_the_available_ones(tmp_path, device):
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    for argv in (
        ["coverage", "profile"],
        ["coverage", "measure"],
        ["coverage", "rank"],
        ["xplore", "--model", "a,b"],
        ["regress", "--m1", "a", "--m2", "b"],
        ["run"],
    ):
        assert_refused([*argv, "--device", device], tmp_path, "--device", "cpu", repr(device))


def test_device_in_the_api(pair):
    from deepfault import regress
    from deepfault.checks import check_device

    with pytest.raises(DeepFaultError, match="device must be one of this machine's devices"):
        check_device("meta")
    with pytest.raises(DeepFaultError, match="device"):
        regress(pair / "m1.pt", pair / "m2.pt", dataset=pair / "data.npz", device="xla", budget="5it")


# --- the zoo's GAN parts are no classifiers ------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["scenario", "prune", "--arch", "dcgan_generator", "--dataset", "digits"],
        ["scenario", "prune", "--arch", "dcgan_discriminator", "--dataset", "digits"],
        ["train", "--arch", "dcgan_generator", "--dataset", "digits"],
    ],
)
def test_gan_parts_are_not_classifiers(tmp_path, argv):
    assert_refused(argv, tmp_path, "--arch", "gan train")


# --- models that compute nonsense ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("other", "needle"), [("nan.pt", "NaN or infinite"), ("m5.pt", "classes"), ("range.pt", "input")]
)
def test_xplore_and_regress_refuse_broken_or_mismatched_models(pair, tmp_path, other, needle):
    assert_refused(
        [
            "xplore",
            "--model",
            f"{pair / 'm1.pt'},{pair / other}",
            "--dataset",
            pair / "data.npz",
            "--num-seeds",
            "4",
            "--iterations",
            "1",
        ],
        tmp_path,
        needle,
    )
    argv = _regress(pair)
    argv[argv.index(pair / "m2.pt")] = pair / other
    assert_refused(argv, tmp_path, needle)


# --- regress checks every option before its store ---------------------------------------------


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--fidelity", "bogus"], "--fidelity"),
        (["--fidelity", "ssim:2"], "ssim:T"),
        (["--fidelity", "discriminator:nosuch.pt"], "existing model file"),
        (["--criteria", "bogus"], "--criteria"),
        (["--sections", "0"], "--sections must be an integer from 1 to 100,000"),
        (["--threshold", "nan"], "--threshold must be a finite number; got 'nan'"),
        (["--layers", "nosuch"], "nosuch"),
        (["--budget", "99999h"], "'99999h'"),
        (["--budget", "-5s"], "'-5s'"),
        (["--campaign", "a/b"], "--campaign"),
    ],
)
def test_regress_checks_options_before_the_store(pair, tmp_path, extra, needle):
    assert_refused(_regress(pair, *extra), tmp_path, needle)


def test_negative_values_need_no_equals_sign(tmp_path):
    status, _, err = cli(["coverage", "measure", "--scale", "-1e3", "--device", "nosuch"], tmp_path)
    assert status == 2
    assert "--scale must be a number >= 0; got -1000.0" in err  # '-1e3' was taken as --scale's value


# --- coverage rank labels ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "labels", [[-1, 0, 0, 0], [99, 0, 0, 0], [np.nan, 0, 0, 0], [2.5, 0, 0, 0], None, [0, 0]]
)
def test_rank_inputs_refuses_labels_outside_the_classes(labels):
    from deepfault import rank_inputs
    from helpers.tiny_models import chain_model

    x = np.random.default_rng(0).normal(size=(4, 4)).astype(np.float32)
    with pytest.raises(DeepFaultError, match="labels"):
        rank_inputs(chain_model(), x, None if labels is None else np.array(labels))


def test_coverage_rank_cli_refuses_out_of_range_labels(pair, tmp_path):
    np.savez(
        tmp_path / "x.npz",
        x=np.zeros((4, 1, 8, 8), np.float32),
        y=np.array([0, 1, 2, 11]),
        class_names=np.array([str(i) for i in range(12)]),
    )
    assert_refused(
        ["coverage", "rank", "--model", pair / "digits.pt", "--split", tmp_path / "x.npz", "--out", "r.json"],
        tmp_path,
        "labels",
    )


# --- registries ---------------------------------------------------------------------------------


def test_registering_a_measure_twice_is_a_deepfault_error():
    from deepfault import register_measure
    from deepfault.localization.measures import MEASURES
    from deepfault.localization.selection import APPROACHES

    register_measure("twice_probe", lambda a_s, a_f, n_s, n_f: a_f, formula="af")
    try:
        with pytest.raises(DeepFaultError, match="registered twice"):
            register_measure("twice_probe", lambda a_s, a_f, n_s, n_f: a_f, formula="af")
    finally:
        MEASURES.unregister("twice_probe")
        APPROACHES.unregister("twice_probe")


# --- Ray: a dead address fails fast -------------------------------------------------------------


def test_ray_address_with_nothing_listening_fails_within_the_stated_time(tmp_path):
    pytest.importorskip("ray")
    import time

    from deepfault.experiment.executors import CONNECT_TIMEOUT

    with socket.socket() as s:  # a free loopback port, closed again: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"127.0.0.1:{port}"
    t0 = time.monotonic()
    line = assert_refused(
        [
            "experiment",
            "--preset",
            "digits",
            "--store",
            "s.sqlite",
            "--executor",
            "ray",
            "--ray-address",
            address,
        ],
        tmp_path,
        address,
    )
    assert time.monotonic() - t0 < CONNECT_TIMEOUT + 30
    assert "Ray" in line
    assert files(tmp_path) == set()
