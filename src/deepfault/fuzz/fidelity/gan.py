"""The DCGAN behind DRFuzz's fidelity check (``spec/drfuzz.md``, section 6).

Two zoo architectures, after the classic Keras DCGAN-MNIST example that DRFuzz's
``dcgan`` folder follows, and an adversarial training loop:

* ``dcgan_discriminator``: conv 64 5x5 ('same') tanh, max-pool 2, conv 128 5x5 ('valid')
  tanh, max-pool 2, dense 1024 tanh, dense 1 sigmoid. On 28x28 inputs the flattened
  features are ``128 * 5 * 5 = 3200``, as in the Keras model. (The modules pool before
  the tanh: the same values, computed faster.)
* ``dcgan_generator``: dense 1024 tanh, dense ``128 * (S/4)**2`` batch-norm tanh, reshape,
  upsample 2, conv 64 5x5 tanh, upsample 2, conv ``C`` 5x5 tanh, for ``S x S`` images.

Both work in the GAN's own pixel range ``[-1, 1]`` (:data:`GAN_RANGE`, the generator's
tanh). :func:`train_gan` rescales the data to it and records it as ``meta["input_range"]``
in the discriminator's model file, so that :mod:`deepfault.fuzz.fidelity` feeds the
discriminator what it was trained on. (The published DRFuzz code fed it [0, 1] inputs
while it had been trained on [-1, 1]; we do not.)

Training differs from the Keras example in the optimiser only: Adam with ``lr = 2e-4``,
``beta1 = 0.5`` (Radford et al. 2016) instead of SGD with Nesterov momentum, which needs far
more epochs than a 2-core CPU can give. Each epoch may see a seeded random subset of the
training split (``images_per_epoch``) so that the default run takes minutes on a CPU.

The two architectures live in :mod:`deepfault.models.dcgan` (zoo architectures like any
other, so ``load_model`` rebuilds a saved discriminator without importing this package).
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from ...errors import DeepFaultError, check_int
from ...models.dcgan import LATENT_DIM, dcgan_discriminator, dcgan_generator

if TYPE_CHECKING:
    from ...data import Dataset
    from ...models.io import ModelFile

__all__ = [
    "GAN_RANGE",
    "LATENT_DIM",
    "GanConfig",
    "GanResult",
    "dcgan_discriminator",
    "dcgan_generator",
    "to_gan_range",
    "check_gan_data",
    "train_gan",
    "save_gan",
    "AUTO_DATASETS",
    "AUTO_RECIPE",
    "cached_discriminator",
    "discriminator_cache_path",
]

log = logging.getLogger(__name__)

#: The pixel range the GAN works in: the generator ends in a tanh.
GAN_RANGE = (-1.0, 1.0)


def to_gan_range(x: torch.Tensor, bounds: tuple[float, float],
                 target: tuple[float, float] = GAN_RANGE) -> torch.Tensor:
    """Map pixels linearly from the data's ``bounds`` onto ``target``: ``lo -> t_lo``, ``hi -> t_hi``."""
    lo, hi = (float(b) for b in bounds)
    t_lo, t_hi = (float(t) for t in target)
    return (x - lo) * ((t_hi - t_lo) / (hi - lo)) + t_lo


@dataclass(frozen=True)
class GanConfig:
    """The adversarial training recipe.

    Attributes:
        epochs: Passes; each sees ``images_per_epoch`` training images.
        batch_size: Real images per step (as many generated ones are added).
        lr: Adam learning rate of both networks (``beta1 = 0.5``).
        images_per_epoch: A fresh seeded random subset of this many training images per
            epoch; ``None`` for the whole split.
        seed: Seed of the weights, the subsets, the shuffling and the noise.
    """

    epochs: int = 2
    batch_size: int = 128
    lr: float = 2e-4
    images_per_epoch: int | None = 20_000
    seed: int = 0

    def validate(self) -> None:
        check_int("epochs", self.epochs)
        check_int("batch_size", self.batch_size)
        check_int("seed", self.seed, 0)
        if self.images_per_epoch is not None:
            check_int("images_per_epoch", self.images_per_epoch)
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise DeepFaultError(f"lr must be a positive number; got {self.lr!r}")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GanResult:
    """A trained discriminator and generator and how the training went.

    Attributes:
        discriminator: Its model file (``meta["input_range"]`` is :data:`GAN_RANGE`).
        generator: The generator's model file (input: noise; output: images in [-1, 1]).
        config: The recipe.
        epochs_completed: Epochs finished (fewer when interrupted).
        d_loss, g_loss: Mean losses of the last completed epoch.
        real_score: Mean discriminator score of (up to 1,000) test images.
        fake_score: Mean discriminator score of as many generated images.
        noise_score: Mean score of as many uniform-noise images in the data's range.
        mutated_score: Mean score of the same test images heavily mutated (30% of the
            pixels replaced by uniform noise). A useful discriminator scores real images well
            above noise and heavily mutated ones (the quality report).
        interrupted: Stopped by Ctrl-C; the weights are those of the last completed epoch.
        seconds: Wall-clock training time.
    """

    discriminator: ModelFile = field(repr=False)
    generator: ModelFile = field(repr=False)
    config: GanConfig
    epochs_completed: int
    d_loss: float
    g_loss: float
    real_score: float
    fake_score: float
    interrupted: bool
    seconds: float
    noise_score: float = float("nan")
    mutated_score: float = float("nan")

    def to_dict(self) -> dict:
        """Everything but the networks, as plain values."""
        return {
            "config": self.config.to_dict(),
            "epochs_completed": self.epochs_completed,
            "d_loss": self.d_loss,
            "g_loss": self.g_loss,
            "real_score": self.real_score,
            "fake_score": self.fake_score,
            "noise_score": self.noise_score,
            "mutated_score": self.mutated_score,
            "interrupted": self.interrupted,
            "seconds": self.seconds,
        }


def check_gan_data(data: Dataset) -> tuple[int, int]:
    """``(channels, side)`` of ``data``'s images when the DCGAN can take them.

    Raises:
        DeepFaultError: The images are not square ``(C, S, S)`` with ``S`` a multiple of 4, at
            least 16, or there are no training images.
    """
    shape = tuple(data.x_train.shape[1:])
    if len(shape) != 3 or shape[1] != shape[2]:
        raise DeepFaultError(
            f"the DCGAN needs square images laid out (C, H, W); data set {data.name!r} has inputs "
            f"of shape {shape}"
        )
    channels, size = int(shape[0]), int(shape[1])
    if size % 4 or size < 16:
        raise DeepFaultError(
            f"the DCGAN needs images of a side that is a multiple of 4 and at least 16 (28 for MNIST); "
            f"data set {data.name!r} has {size}x{size}"
        )
    if len(data.x_train) == 0:
        raise DeepFaultError(f"data set {data.name!r} has no training images")
    return channels, size


def _noise(n: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    # Drawn on the CPU so that a seed gives the same noise on every device.
    return (torch.rand(n, LATENT_DIM, generator=generator) * 2 - 1).to(device)


@torch.inference_mode()
def _mean_score(disc: nn.Module, x: torch.Tensor, batch_size: int = 500) -> float:
    if len(x) == 0:
        return float("nan")
    total = sum(float(disc(x[i : i + batch_size]).sum()) for i in range(0, len(x), batch_size))
    return total / len(x)


def train_gan(
    data: Dataset,
    *,
    epochs: int = GanConfig.epochs,
    batch_size: int = GanConfig.batch_size,
    lr: float = GanConfig.lr,
    images_per_epoch: int | None = GanConfig.images_per_epoch,
    seed: int = GanConfig.seed,
    device: torch.device | str = "cpu",
    progress: bool = False,
) -> GanResult:
    """Train DRFuzz's DCGAN on ``data``'s training split.

    Each step trains the discriminator on ``batch_size`` real images (label 1) and as many
    generated ones (label 0) with binary cross-entropy, then the generator to make the
    discriminator answer 1 on the same generated images. The images are mapped from
    ``data.bounds`` to [-1, 1]. Everything random comes from ``seed`` (the caller's global
    RNG is left alone), so a run is reproducible on one device. Ctrl-C keeps the weights of
    the last completed epoch.

    Args:
        data: Square images ``(N, C, S, S)``, ``S`` a multiple of 4 (MNIST: 1x28x28).
        epochs: Passes; each sees ``images_per_epoch`` training images.
        batch_size: Real images per step (as many generated ones are added).
        lr: Adam learning rate of both networks (``beta1 = 0.5``).
        images_per_epoch: A fresh seeded random subset of this many training images per
            epoch; ``None`` for the whole split.
        seed: Seed of the weights, the subsets, the shuffling and the noise.
        device: Where to train.
        progress: Show a progress bar.

    Returns:
        The two model files (CPU weights, ``eval()`` mode) and the training figures.

    Raises:
        DeepFaultError: Bad settings or images the DCGAN cannot take.

    Example:
        >>> from deepfault.models import save_model
        >>> result = train_gan(load_dataset("mnist"), epochs=1)  # doctest: +SKIP
        >>> save_model("disc.pt", result.discriminator)  # doctest: +SKIP
    """
    from ...models.io import ModelFile

    config = GanConfig(epochs=epochs, batch_size=batch_size, lr=lr, images_per_epoch=images_per_epoch,
                       seed=seed)
    config.validate()
    channels, size = check_gan_data(data)
    device = torch.device(device)
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        disc = dcgan_discriminator(in_channels=channels, image_size=size)
        gen = dcgan_generator(out_channels=channels, image_size=size)
    disc.to(device).train()
    gen.to(device).train()
    opt_d = torch.optim.Adam(disc.parameters(), lr=lr, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(gen.parameters(), lr=lr, betas=(0.5, 0.999))
    bce = nn.BCELoss()
    rng = np.random.default_rng(seed)
    noise_gen = torch.Generator().manual_seed(seed)
    n_train = len(data.x_train)
    per_epoch = n_train if images_per_epoch is None else min(images_per_epoch, n_train)
    steps = -(-per_epoch // batch_size)

    def snapshot():
        return ({k: v.detach().clone() for k, v in disc.state_dict().items()},
                {k: v.detach().clone() for k, v in gen.state_dict().items()})

    saved = snapshot()
    completed, d_loss, g_loss, interrupted = 0, float("nan"), float("nan"), False
    bar = None
    if progress:
        from ...core.progress import progress_bar

        bar = progress_bar(epochs * steps, desc="gan", unit="batch")
    try:
        for epoch in range(epochs):
            order = rng.permutation(n_train)[:per_epoch]
            d_total = g_total = 0.0
            for i in range(0, per_epoch, batch_size):
                idx = np.sort(order[i : i + batch_size])  # sorted: faster gather, same set
                real = to_gan_range(torch.as_tensor(data.x_train[idx], dtype=torch.float32, device=device),
                                    data.bounds)
                n = len(real)
                fake = gen(_noise(n, noise_gen, device))
                ones = torch.ones(n, 1, device=device)
                zeros = torch.zeros(n, 1, device=device)
                opt_d.zero_grad(set_to_none=True)
                loss_d = bce(disc(real), ones) + bce(disc(fake.detach()), zeros)
                loss_d.backward()
                opt_d.step()
                opt_g.zero_grad(set_to_none=True)
                loss_g = bce(disc(fake), ones)
                loss_g.backward()  # also fills the discriminator's grads; zeroed before its next step
                opt_g.step()
                d_total += float(loss_d.detach()) * n
                g_total += float(loss_g.detach()) * n
                if bar is not None:
                    bar.update(1)
                    if bar.n % 10 == 0:
                        seen = min(i + batch_size, per_epoch)
                        bar.set_postfix(epoch=f"{epoch + 1}/{epochs}", d_loss=f"{d_total / seen:.3f}",
                                        g_loss=f"{g_total / seen:.3f}")
            d_loss, g_loss = d_total / per_epoch, g_total / per_epoch
            completed = epoch + 1
            saved = snapshot()
            log.debug("GAN epoch %d: d_loss %.4f g_loss %.4f", completed, d_loss, g_loss)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if bar is not None:
            bar.close()
    disc.load_state_dict(saved[0])
    gen.load_state_dict(saved[1])
    disc.eval()
    gen.eval()
    seconds = time.perf_counter() - start
    n_eval = min(1000, len(data.x_test))
    test_real = to_gan_range(torch.as_tensor(data.x_test[:n_eval], dtype=torch.float32, device=device),
                             data.bounds)
    with torch.inference_mode():
        fakes = gen(_noise(max(n_eval, 1), torch.Generator().manual_seed(seed + 1), device))
    real_score, fake_score = _mean_score(disc, test_real), _mean_score(disc, fakes)
    qgen = torch.Generator().manual_seed(seed + 2)
    noise = torch.rand(test_real.shape, generator=qgen).to(device) * 2 - 1
    mask = (torch.rand(test_real.shape, generator=qgen) < 0.3).to(device)
    mutated = torch.where(mask, noise, test_real)
    noise_score, mutated_score = _mean_score(disc, noise), _mean_score(disc, mutated)
    figures = {"epochs_completed": completed, "interrupted": interrupted, "seconds": seconds,
               "d_loss": d_loss, "g_loss": g_loss, "test_real_score": real_score,
               "fake_score": fake_score, "noise_score": noise_score, "mutated_score": mutated_score}
    disc_file = ModelFile(
        model=disc.cpu(),
        arch="dcgan_discriminator",
        arch_kwargs={"in_channels": channels, "image_size": size},
        dataset=data.name,
        bounds=tuple(data.bounds),
        output_kind="probabilities",
        meta={
            "role": "gan-discriminator",
            "input_range": list(GAN_RANGE),
            "input_shape": [channels, size, size],
            "gan": {**config.to_dict(), **figures},
        },
    )
    gen_file = ModelFile(
        model=gen.cpu(),
        arch="dcgan_generator",
        arch_kwargs={"latent_dim": LATENT_DIM, "out_channels": channels, "image_size": size},
        dataset=data.name,
        bounds=GAN_RANGE,
        output_kind="images",
        meta={
            "role": "gan-generator",
            "input_shape": [LATENT_DIM],
            "output_range": list(GAN_RANGE),
            "data_bounds": list(data.bounds),
            "gan": {**config.to_dict(), **figures},
        },
    )
    return GanResult(disc_file, gen_file, config, completed, d_loss, g_loss, real_score, fake_score,
                     interrupted, seconds, noise_score, mutated_score)


def save_gan(result: GanResult, path: str | os.PathLike,
             generator_path: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """Write the discriminator to ``path`` and the generator beside it.

    Args:
        result: What :func:`train_gan` returned.
        path: The discriminator's model file.
        generator_path: The generator's file; default ``<path stem>.generator.pt``.

    Returns:
        ``(discriminator path, generator path)``.
    """
    from ...models.io import save_model

    path = Path(path)
    generator_path = Path(generator_path) if generator_path else path.with_name(f"{path.stem}.generator.pt")
    if generator_path.resolve() == path.resolve():
        raise DeepFaultError(f"the generator and the discriminator cannot share the file {str(path)!r}")
    disc = replace(result.discriminator,
                   meta={**result.discriminator.meta, "generator_file": generator_path.name})
    gen = replace(result.generator, meta={**result.generator.meta, "discriminator_file": path.name})
    save_model(generator_path, gen)
    save_model(path, disc)
    return path, generator_path


# --- the default discriminator, trained on first use ------------------------------------------

#: Data sets whose discriminator is trained on first use when none is cached.
AUTO_DATASETS = ("mnist", "fashion-mnist")
#: The recipe of those discriminators (part of the cache key): a few minutes on a 2-core CPU.
AUTO_RECIPE = GanConfig(epochs=2, batch_size=128, lr=2e-4, images_per_epoch=12_000, seed=0)
#: Bumped when the recipe's meaning changes, so old cache files are not reused.
AUTO_VERSION = 1


def discriminator_cache_path(dataset: str) -> Path:
    """Where the default discriminator of ``dataset`` is cached (under ``$DEEPFAULT_CACHE``)."""
    from ..._io import user_cache_dir

    name = f"dcgan-{dataset}-v{AUTO_VERSION}-seed{AUTO_RECIPE.seed}-discriminator.pt"
    return user_cache_dir() / "gan" / name


def cached_discriminator(dataset: str | None, *, data: Dataset | None = None, data_dir=None,
                         device: torch.device | str = "cpu", progress: bool | None = None) -> Path:
    """The default discriminator's file for ``dataset``: the cached one, or one trained now.

    For MNIST and Fashion-MNIST (:data:`AUTO_DATASETS`) a missing or stale cache file is
    replaced by training :data:`AUTO_RECIPE` on the training split (seeded; a progress bar on
    a terminal), once; the quality report (mean score of test images, noise and heavily
    mutated images) is logged and kept in the file's ``meta["gan"]``.

    Args:
        dataset: The data set's name.
        data: The data set itself (else loaded by name from ``data_dir``).
        data_dir: Data root.
        device: Where to train.
        progress: Show a progress bar (default: when stderr is a terminal).

    Raises:
        DeepFaultError: No discriminator can be made for ``dataset``; the message names the
            two ways to get one.
    """
    import sys

    from ...models.load import open_model

    path = discriminator_cache_path(str(dataset))
    recipe = {**AUTO_RECIPE.to_dict(), "version": AUTO_VERSION}
    if path.is_file():
        try:
            if open_model(path).meta.get("auto_recipe") == recipe:
                return path
        except DeepFaultError as err:
            log.warning("cached discriminator %s unreadable (%s); training again", path, err)
    if dataset not in AUTO_DATASETS:
        raise DeepFaultError(
            f"there is no discriminator for data set {dataset!r} (one is made on first use only for "
            f"{' and '.join(AUTO_DATASETS)}): train one with 'deepfault gan train --dataset NAME --out FILE' "
            "and pass --fidelity discriminator:FILE, or choose another check with --fidelity "
            "(ssim, ssim-compat or none)"
        )
    if data is None:
        from ...data import load_dataset

        data = load_dataset(dataset, data_dir=data_dir)
    log.warning("training the %s discriminator for the fidelity check (once; cached in %s)...", dataset, path)
    result = train_gan(data, **AUTO_RECIPE.to_dict(), device=device,
                       progress=sys.stderr.isatty() if progress is None else progress)
    if result.interrupted:
        raise KeyboardInterrupt
    result = replace(result, discriminator=replace(
        result.discriminator, meta={**result.discriminator.meta, "auto_recipe": recipe}))
    path.parent.mkdir(parents=True, exist_ok=True)
    save_gan(result, path)
    log.warning("discriminator ready (%.0f s): mean score on test images %.3f, on noise %.3f, on heavily "
                "mutated images %.3f", result.seconds, result.real_score, result.noise_score,
                result.mutated_score)
    return path
