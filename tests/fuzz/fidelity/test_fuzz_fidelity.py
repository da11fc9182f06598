"""Fidelity checks (SSIM, the DCGAN discriminator) and the DCGAN itself (spec/drfuzz.md section 6)."""

import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from deepfault.cli import main
from deepfault.errors import DeepFaultError
from deepfault.fuzz.fidelity import (
    DiscriminatorFidelity,
    SSIMFidelity,
    gan,
    list_fidelities,
    make_fidelity,
    ssim,
)
from deepfault.models import ModelFile, load_model, save_model, zoo

# --- SSIM against a loop written from the formula ----------------------------------------------


def naive_ssim(x: torch.Tensor, y: torch.Tensor, data_range: float) -> float:
    """Wang et al. 2004 for one (C, H, W) pair, window by window, in float64."""
    x, y = x.double(), y.double()
    height, width = x.shape[-2:]
    taps = min(11, height, width)
    taps -= 1 - taps % 2
    g = torch.tensor([math.exp(-((t - (taps - 1) / 2) ** 2) / (2 * 1.5**2)) for t in range(taps)],
                     dtype=torch.float64)
    w = torch.outer(g, g) / g.sum() ** 2
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    values = []
    for c in range(x.shape[0]):
        for i in range(height - taps + 1):
            for j in range(width - taps + 1):
                a, b = x[c, i : i + taps, j : j + taps], y[c, i : i + taps, j : j + taps]
                ma, mb = (w * a).sum(), (w * b).sum()
                va, vb = (w * (a - ma) ** 2).sum(), (w * (b - mb) ** 2).sum()
                cov = (w * (a - ma) * (b - mb)).sum()
                values.append((2 * ma * mb + c1) * (2 * cov + c2) / ((ma**2 + mb**2 + c1) * (va + vb + c2)))
    return float(torch.stack(values).mean())


@pytest.mark.parametrize(("shape", "data_range"), [((3, 1, 28, 28), 1.0), ((2, 3, 9, 12), 255.0),
                                                ((2, 1, 8, 8), 1.0)])
def test_ssim_equals_naive_loop(shape, data_range):
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(shape, generator=gen) * data_range
    y = (x + 0.08 * data_range * torch.randn(shape, generator=gen)).clamp(0, data_range)
    got = ssim(x, y, data_range=data_range)
    want = torch.tensor([naive_ssim(x[i], y[i], data_range) for i in range(shape[0])], dtype=torch.float64)
    assert got.shape == (shape[0],)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, atol=2e-6, rtol=0)


def test_ssim_agrees_with_kornia():
    kornia_metrics = pytest.importorskip("kornia.metrics")
    gen = torch.Generator().manual_seed(2)
    x = torch.rand(16, 1, 28, 28, generator=gen)
    y = (x + 0.1 * torch.randn(x.shape, generator=gen)).clamp(0, 1)
    ref = kornia_metrics.ssim(x, y, 11, max_val=1.0, eps=0.0, padding="valid").mean(dim=(1, 2, 3))
    torch.testing.assert_close(ssim(x, y, data_range=1.0), ref, atol=1e-6, rtol=0)


def _digit_like() -> torch.Tensor:
    """A 28x28 '0': a thick ring on black, in [0, 1]."""
    yy, xx = torch.meshgrid(torch.arange(28.0), torch.arange(28.0), indexing="ij")
    r = ((yy - 13.5) ** 2 / 64 + (xx - 13.5) ** 2 / 36).sqrt()
    return ((r > 0.7) & (r < 1.1)).float()[None, None]


def test_ssim_identical_is_one_and_a_visible_change_is_below_threshold():
    img = _digit_like()
    assert ssim(img, img, data_range=1.0).item() == 1.0
    shifted = torch.roll(img, shifts=2, dims=-1)  # the digit moved 2 pixels right
    patched = img.clone()
    patched[..., 10:16, 10:16] = 1.0  # a white square in the hole
    faint = (img + 0.002).clamp(0, 1)
    scores = ssim(torch.cat([shifted, patched, faint]), img.expand(3, -1, -1, -1), data_range=1.0)
    assert scores[0] < 0.99
    assert scores[1] < 0.99
    assert scores[2] >= 0.99
    fid = make_fidelity("ssim", bounds=(0.0, 1.0))
    ref = fid.reference(img)
    rows = ref[[0, 0, 0, 0]]
    assert fid.passes(torch.cat([img, shifted, patched, faint]), rows).tolist() == [True, False, False, True]


@pytest.mark.parametrize("window", ["gaussian", "uniform"])
def test_ssim_of_large_images_equals_the_banded_filter(window, monkeypatch):
    """Above ``BAND_MAX`` pixels a side the window is applied by shifted sums; on the same
    images the banded matrix products (forced by raising ``BAND_MAX``) give the same SSIM,
    and so does the naive loop on one image (Gaussian)."""
    from deepfault.core import ssim as ssim_module

    gen = torch.Generator().manual_seed(5)
    x = torch.rand(3, 2, 70, 81, generator=gen)
    y = (x + 0.1 * torch.randn(x.shape, generator=gen)).clamp(0, 1)
    shifted = ssim(x, y, data_range=1.0, window=window)
    monkeypatch.setattr(ssim_module, "BAND_MAX", 10**6)
    banded = ssim(x, y, data_range=1.0, window=window)
    torch.testing.assert_close(shifted, banded, atol=1e-6, rtol=0)
    if window == "gaussian":
        torch.testing.assert_close(shifted[:1].double(), torch.tensor([naive_ssim(x[0], y[0], 1.0)],
                                                                      dtype=torch.float64), atol=2e-6, rtol=0)


def test_ssim_does_not_depend_on_batch_or_chunk_size():
    gen = torch.Generator().manual_seed(3)
    x, y = torch.rand(9, 2, 14, 14, generator=gen), torch.rand(9, 2, 14, 14, generator=gen)
    whole = ssim(x, y, data_range=1.0)
    one_by_one = torch.cat([ssim(x[i : i + 1], y[i : i + 1], data_range=1.0) for i in range(9)])
    torch.testing.assert_close(ssim(x, y, data_range=1.0, chunk=2), whole, atol=1e-7, rtol=0)
    torch.testing.assert_close(one_by_one, whole, atol=1e-7, rtol=0)


def test_ssim_scale_invariant_between_pixel_ranges():
    gen = torch.Generator().manual_seed(4)
    x, y = torch.rand(4, 1, 28, 28, generator=gen), torch.rand(4, 1, 28, 28, generator=gen)
    torch.testing.assert_close(ssim(x * 255, y * 255, data_range=255.0), ssim(x, y, data_range=1.0),
                               atol=1e-6, rtol=0)


def test_ssim_threshold_from_spec():
    img = _digit_like()
    shifted = torch.roll(img, shifts=2, dims=-1)
    score = ssim(shifted, img, data_range=1.0).item()
    loose = make_fidelity(f"ssim:{score - 0.01}", bounds=(0.0, 1.0))
    assert isinstance(loose, SSIMFidelity)
    assert loose.threshold == pytest.approx(score - 0.01)
    assert loose.passes(shifted, loose.reference(img)).tolist() == [True]
    check = loose.check(shifted, loose.reference(img))
    assert check.to_dict()["passed"] == [True]
    assert check.scores.item() == pytest.approx(score)


# --- the discriminator check -------------------------------------------------------------------


class MeanPixel(nn.Module):
    """A 'discriminator' whose score is the mean pixel of its input, as it receives it."""

    def __init__(self):
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return x.mean(dim=(1, 2, 3))[:, None] + 0 * self.unused


@pytest.fixture
def mean_pixel_arch():
    zoo.register_architecture("test_mean_pixel")(lambda: MeanPixel())
    yield "test_mean_pixel"
    zoo.ARCHITECTURES.pop("test_mean_pixel", None)


def _mean_pixel_file(path, *, input_range=(-1.0, 1.0), bounds=(0.0, 1.0)):
    meta = {} if input_range is None else {"input_range": list(input_range)}
    save_model(path, ModelFile(MeanPixel(), "test_mean_pixel", dataset="mnist", bounds=bounds,
                               output_kind="probabilities", meta=meta))
    return path


def test_discriminator_sees_the_recorded_input_range(tmp_path, mean_pixel_arch):
    path = _mean_pixel_file(tmp_path / "d.pt")
    fid = make_fidelity(f"discriminator:{path}", bounds=(0.0, 1.0))
    assert isinstance(fid, DiscriminatorFidelity)
    assert fid.input_range == (-1.0, 1.0)
    x = torch.stack([torch.full((1, 4, 4), v) for v in (0.0, 0.25, 0.5, 1.0)])
    # data 0..1 -> [-1, 1]: the mean pixel m becomes 2m - 1, not m (the published code's bug)
    torch.testing.assert_close(fid.reference(x), torch.tensor([-1.0, -0.5, 0.0, 1.0]))
    # the same images on a 0..255 scale give the same scores
    fid255 = make_fidelity(f"discriminator:{path}", bounds=(0.0, 255.0))
    torch.testing.assert_close(fid255.reference(x * 255), torch.tensor([-1.0, -0.5, 0.0, 1.0]))


def test_discriminator_passes_when_score_reaches_the_roots(tmp_path, mean_pixel_arch):
    fid = make_fidelity(f"discriminator:{_mean_pixel_file(tmp_path / 'd.pt')}", bounds=(0.0, 1.0))
    roots = torch.stack([torch.full((1, 4, 4), 0.5), torch.full((1, 4, 4), 0.2)])
    ref = fid.reference(roots)
    mutants = torch.stack([torch.full((1, 4, 4), v) for v in (0.6, 0.4, 0.2, 0.1)])
    rows = ref[torch.tensor([0, 0, 1, 1])]
    check = fid.check(mutants, rows)
    assert check.passed.tolist() == [True, False, True, False]
    torch.testing.assert_close(check.limits, torch.tensor([0.0, 0.0, -0.6, -0.6]))
    assert fid.passes(mutants, rows).tolist() == [True, False, True, False]


def test_discriminator_without_recorded_range_warns_and_uses_its_bounds(tmp_path, mean_pixel_arch):
    path = _mean_pixel_file(tmp_path / "d.pt", input_range=None, bounds=(0.0, 1.0))
    with pytest.warns(UserWarning, match="input_range"):
        fid = make_fidelity(f"discriminator:{path}", bounds=(0.0, 1.0))
    assert fid.input_range == (0.0, 1.0)
    torch.testing.assert_close(fid.reference(torch.full((1, 1, 4, 4), 0.25)), torch.tensor([0.25]))


def test_discriminator_leaves_the_callers_model_alone():
    model = MeanPixel().train()
    fid = DiscriminatorFidelity(model, bounds=(0.0, 1.0), input_range=(-1.0, 1.0))
    fid.reference(torch.rand(2, 1, 4, 4))
    assert model.training
    assert model.unused.requires_grad


def test_trained_dcgan_discriminator_file_works_as_fidelity(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.random((48, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, 48)
    from deepfault.data import Dataset

    data = Dataset("rand", x, y, x[:8], y[:8], (0.0, 1.0), tuple("0123456789"))
    result = gan.train_gan(data, epochs=1, batch_size=16, images_per_epoch=None, seed=0)
    again = gan.train_gan(data, epochs=1, batch_size=16, images_per_epoch=None, seed=0)
    for a, b in zip(result.discriminator.model.state_dict().values(),
                    again.discriminator.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    disc_path, gen_path = gan.save_gan(result, tmp_path / "disc.pt")
    assert gen_path.name == "disc.generator.pt"
    disc = load_model(disc_path)
    assert disc.meta["input_range"] == [-1.0, 1.0]
    assert disc.meta["generator_file"] == "disc.generator.pt"
    assert disc.dataset == "rand"
    assert disc.output_kind == "probabilities"
    assert disc.model.fc1.in_features == 128 * 5 * 5  # the Keras model's 3200
    generator = load_model(gen_path).model
    with torch.no_grad():
        images = generator(torch.rand(3, gan.LATENT_DIM) * 2 - 1)
    assert images.shape == (3, 1, 28, 28)
    assert images.abs().max() <= 1
    fid = make_fidelity(f"discriminator:{disc_path}", bounds=(0.0, 1.0), dataset="rand")
    scores = fid.reference(torch.as_tensor(x[:5]))
    assert scores.shape == (5,)
    assert ((scores > 0) & (scores < 1)).all()
    with torch.no_grad():
        direct = disc.model(torch.as_tensor(x[:5]) * 2 - 1)[:, 0]
    torch.testing.assert_close(scores, direct)
    with pytest.warns(UserWarning, match="trained on rand, not mnist"):
        make_fidelity(f"discriminator:{disc_path}", bounds=(0.0, 1.0), dataset="mnist")


# --- errors -----------------------------------------------------------------------------------


def test_registry_and_bad_specs(tmp_path):
    assert {"ssim", "discriminator"} <= set(list_fidelities())
    with pytest.raises(DeepFaultError, match="unknown fidelity check 'gan'; known: discriminator, dsa, linf, "
                                             "lsa, mdsa, none, ssim, ssim-compat"):
        make_fidelity("gan", bounds=(0, 1))
    with pytest.raises(DeepFaultError, match="no discriminator for data set None.*"
                                             "deepfault gan train.*--fidelity"):
        make_fidelity("discriminator", bounds=(0, 1))
    with pytest.raises(DeepFaultError, match="does not exist"):
        make_fidelity(f"discriminator:{tmp_path / 'missing.pt'}", bounds=(0, 1))
    for spec in ("ssim:abc", "ssim:1.5", "ssim:0"):
        with pytest.raises(DeepFaultError, match="SSIM threshold"):
            make_fidelity(spec, bounds=(0, 1))
    with pytest.raises(DeepFaultError, match="bounds"):
        make_fidelity("ssim", bounds=(1, 0))
    fid = make_fidelity("ssim", bounds=(0, 1))
    with pytest.raises(DeepFaultError, match=r"shape \(B, C, H, W\)"):
        fid.passes(torch.rand(2, 784), torch.rand(2, 784))
    with pytest.raises(DeepFaultError, match="one reference row per mutant"):
        fid.passes(torch.rand(2, 1, 8, 8), torch.rand(3, 1, 8, 8))


def test_discriminator_of_the_wrong_shape_says_so():
    fid = DiscriminatorFidelity(gan.dcgan_discriminator(), bounds=(0, 1), input_range=(-1, 1))
    with pytest.raises(DeepFaultError, match="cannot take inputs of shape"):
        fid.reference(torch.rand(2, 1, 8, 8))
    two = DiscriminatorFidelity(nn.Sequential(nn.Flatten(), nn.Linear(16, 2)), bounds=(0, 1),
                                input_range=(0, 1))
    with pytest.raises(DeepFaultError, match="one score per input"):
        two.reference(torch.rand(2, 1, 4, 4))


def test_gan_cli_bad_input_writes_nothing(tmp_path, capsys):
    out = tmp_path / "d.pt"
    assert main(["gan", "train", "--dataset", "nosuch", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "unknown data set 'nosuch'" in err
    assert main(["gan", "train", "--dataset", "digits", "--out", str(out)]) == 2
    assert "multiple of 4" in capsys.readouterr().err
    assert not out.exists()
    assert not list(tmp_path.iterdir())


def test_gan_cli_trains_and_writes_both_files(tmp_path, capsys):
    rng = np.random.default_rng(1)
    data = tmp_path / "tiny.npz"
    np.savez(data, x=rng.random((8, 1, 28, 28)), y=rng.integers(0, 2, 8),
             x_train=rng.random((32, 1, 28, 28)), y_train=rng.integers(0, 2, 32))
    out = tmp_path / "d.pt"
    code = main(["gan", "train", "--dataset", str(data), "--out", str(out), "--epochs", "1",
                 "--batch-size", "16", "--images-per-epoch", "all", "--no-progress", "--device", "cpu"])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "wrote" in text
    assert out.is_file()
    assert (tmp_path / "d.generator.pt").is_file()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_model(out).meta["gan"]["epochs_completed"] == 1


def _tiny_square_data(n=32):
    from deepfault.data import Dataset

    rng = np.random.default_rng(5)
    x = rng.random((n, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, n)
    return Dataset("rand", x, y, x[:8], y[:8], (0.0, 1.0), tuple("0123456789"))


def test_gan_ctrl_c_keeps_the_last_completed_epoch(monkeypatch):
    data = _tiny_square_data()
    one = gan.train_gan(data, epochs=1, batch_size=16, images_per_epoch=None, seed=3)
    calls = {"n": 0}
    noise = gan._noise

    def interrupt_in_epoch_two(*args):
        calls["n"] += 1
        if calls["n"] == 3:  # two steps per epoch: the first step of epoch 2
            raise KeyboardInterrupt
        return noise(*args)

    monkeypatch.setattr(gan, "_noise", interrupt_in_epoch_two)
    cut = gan.train_gan(data, epochs=3, batch_size=16, images_per_epoch=None, seed=3)
    assert cut.interrupted
    assert cut.epochs_completed == 1
    for a, b in zip(one.discriminator.model.state_dict().values(),
                    cut.discriminator.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_train_command_arguments_dispatch_to_the_gan(tmp_path, capsys):
    import argparse

    from deepfault.cli.gan import train_from_train_args

    data = tmp_path / "tiny.npz"
    tiny = _tiny_square_data()
    np.savez(data, x=tiny.x_test, y=tiny.y_test, x_train=tiny.x_train, y_train=tiny.y_train)
    out = tmp_path / "disc.pt"
    argv = ["deepfault", "train", "--arch", "dcgan_discriminator", "--epochs", "1", "--batch-size=16"]
    args = argparse.Namespace(dataset=str(data), data_dir=None, out=str(out), epochs=1, batch_size=16,
                              lr=1e-3, seed=0, device="cpu", threads="auto", no_progress=True,
                              argv=argv)
    assert train_from_train_args(args) == 0
    meta = load_model(out).meta["gan"]
    # --epochs and --batch-size were given; --lr was not, so the GAN's own rate applies
    assert (meta["epochs"], meta["batch_size"], meta["lr"]) == (1, 16, gan.GanConfig.lr)
    assert "wrote" in capsys.readouterr().out


def test_discriminator_pooling_before_tanh_equals_the_keras_order():
    torch.manual_seed(6)
    model = gan.dcgan_discriminator().eval()
    m = dict(model.named_children())
    keras_order = nn.Sequential(m["conv1"], nn.Tanh(), nn.MaxPool2d(2),
                                m["conv2"], nn.Tanh(), nn.MaxPool2d(2),
                                nn.Flatten(), m["fc1"], nn.Tanh(), m["fc2"], nn.Sigmoid())
    x = torch.rand(5, 1, 28, 28) * 2 - 1
    with torch.no_grad():
        assert torch.equal(model(x), keras_order(x))
