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

from ...checks import MAX_INPUTS
from ...core.constraints import EPOCHS, LEARNING_RATE, SEED, Declared, Interval, file_param, param, validate
from ...core.entry import default_threads, use_threads
from ...errors import DeepFaultError
from ...models.dcgan import LATENT_DIM, dcgan_discriminator, dcgan_generator

if TYPE_CHECKING:
    from ...data import Dataset
    from ...models.io import ModelFile

__all__ = [
    "GanFiles",
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
    "generator_file",
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

    epochs: int = param(2, EPOCHS, help="passes")
    batch_size: int = param(128, Interval(int, 1, MAX_INPUTS), help="real images per step")
    lr: float = param(2e-4, LEARNING_RATE, help="Adam learning rate (beta1 0.5)")
    images_per_epoch: int | None = param(20_000, Interval(int, 1, MAX_INPUTS, none=True, words=("all",)),
                                         help="training images per pass, a fresh random subset each time")
    seed: int = param(0, SEED, help="seed of the weights, subsets, shuffling and noise")

    def __post_init__(self):
        if isinstance(self.images_per_epoch, str) and self.images_per_epoch.strip().lower() == "all":
            object.__setattr__(self, "images_per_epoch", None)  # the command line's word for None
        validate(self)

    def validate(self) -> None:
        """Check every field against its declaration (the constructor does it too)."""
        validate(self)

    def to_dict(self) -> dict:
        return asdict(self)

    def per_epoch(self, training_images: int) -> int:
        """The training images each epoch sees, of ``training_images``."""
        chosen = self.images_per_epoch
        return training_images if chosen is None else min(chosen, training_images)


@dataclass(frozen=True)
class GanFiles(Declared):
    """Where a trained DCGAN is written: the discriminator (a deepfault model file) and the
    generator, each ``None`` for the default name.

    Attributes:
        out: The discriminator file (default: ``dcgan-DATASET-discriminator.pt``).
        generator_out: The generator file (default: beside ``out``, :func:`generator_file`).
    """

    out: str | os.PathLike | None = file_param(
        None, "discriminator file to write (default: dcgan-DATASET-discriminator.pt)")
    generator_out: str | os.PathLike | None = file_param(
        None, "generator file to write (default: beside --out, OUT-STEM.generator.pt)")

    def paths(self, dataset: str | os.PathLike) -> tuple[Path, Path | None]:
        """``(discriminator, generator)`` of a DCGAN trained on ``dataset`` (``None``: no generator
        file for an ``out`` that names no file, which its own check refuses).
        """
        out = Path(self.out or f"dcgan-{Path(dataset).stem}-discriminator.pt")
        if self.generator_out:
            return out, Path(self.generator_out)
        return out, generator_file(out) if out.name not in ("", ".", "..") else None


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

    def summary(self) -> str:
        """What ``deepfault gan train`` prints once both files are saved: the epochs, the time,
        the losses and the quality report (after a line naming the kept epoch when interrupted).
        """
        lines = [f"interrupted: kept the weights of epoch {self.epochs_completed}"] * self.interrupted
        return "\n".join([
            *lines, f"epochs {self.epochs_completed}, {self.seconds:.1f} s; losses: discriminator "
            f"{self.d_loss:.4f}, generator {self.g_loss:.4f}",
            f"quality, mean discriminator score: test images {self.real_score:.3f}, uniform noise "
            f"{self.noise_score:.3f}, heavily mutated test images (30% of pixels noise) "
            f"{self.mutated_score:.3f}, generated {self.fake_score:.3f}"])


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


def _quality_rows(shape: tuple[int, ...]) -> int:
    """Images per chunk when scoring the GAN's quality: 500 of 28x28 (as before), fewer of larger
    images, so that a chunk's widest activation (64 channels at full size) stays near 100 MB.
    """
    pixels = math.prod(shape[1:]) if len(shape) > 1 else math.prod(shape)
    return max(1, min(500, 500 * 28 * 28 // max(1, pixels)))


def train_gan(
    data: Dataset,
    config: GanConfig | None = None,
    *,
    device: torch.device | str = "cpu",
    progress: bool = False,
    threads: int | str | None = "auto",
    **settings,
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
        config: The recipe (:class:`GanConfig`: epochs, batch size, learning rate, images per
            epoch, seed); default ``GanConfig()``.
        device: Where to train.
        progress: Show the progress: a bar on a terminal, a logged line (batches done of the
            total, epoch, elapsed and estimated time left) every 30 s otherwise.
        threads: CPU threads, every command's rule (:func:`deepfault.core.entry.resolve_threads`):
            ``"auto"`` (the default; :data:`~deepfault.core.entry.THREADS_ENV` when set) the
            cores no other process is using, a count, or ``None`` for PyTorch's setting.
        **settings: :class:`GanConfig` fields that replace ``config``'s (``epochs=1``, ...).

    Returns:
        The two model files (CPU weights, ``eval()`` mode) and the training figures.

    Raises:
        DeepFaultError: Bad settings or images the DCGAN cannot take.

    Examples:
        >>> from deepfault.models import save_model
        >>> result = train_gan(load_dataset("mnist"), GanConfig(epochs=1))  # doctest: +SKIP
        >>> save_model("disc.pt", result.discriminator)  # doctest: +SKIP
    """
    config = replace(config or GanConfig(), **settings)
    config.validate()
    start = time.perf_counter()
    run = _GanTraining(data, config, torch.device(device))
    with use_threads(default_threads() if threads == "auto" else threads, [run.disc, run.gen], device):
        completed, losses, interrupted = run.fit(progress)
    seconds = time.perf_counter() - start
    figures = {"epochs_completed": completed, "interrupted": interrupted, "seconds": seconds,
               "d_loss": losses[0], "g_loss": losses[1], **run.quality()}
    disc_file, gen_file = run.model_files(figures)
    return GanResult(disc_file, gen_file, config, completed, losses[0], losses[1],
                     figures["test_real_score"], figures["fake_score"], interrupted, seconds,
                     figures["noise_score"], figures["mutated_score"])


class _GanTraining:
    """One adversarial training run: the two networks, their optimisers and random streams."""

    def __init__(self, data: Dataset, config: GanConfig, device: torch.device):
        self.data, self.config, self.device = data, config, device
        self.channels, self.size = check_gan_data(data)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.disc = dcgan_discriminator(in_channels=self.channels, image_size=self.size)
            self.gen = dcgan_generator(out_channels=self.channels, image_size=self.size)
        self.disc.to(device).train()
        self.gen.to(device).train()
        self.opt_d = torch.optim.Adam(self.disc.parameters(), lr=config.lr, betas=(0.5, 0.999))
        self.opt_g = torch.optim.Adam(self.gen.parameters(), lr=config.lr, betas=(0.5, 0.999))
        self.bce = nn.BCELoss()
        self.rng = np.random.default_rng(config.seed)
        self.noise_gen = torch.Generator().manual_seed(config.seed)
        n_train = len(data.x_train)
        per_epoch = config.images_per_epoch
        self.per_epoch = n_train if per_epoch is None else min(per_epoch, n_train)

    def fit(self, progress: bool) -> tuple[int, tuple[float, float], bool]:
        """Train for the configured epochs: ``(epochs completed, (d_loss, g_loss) of the last one,
        interrupted)``; the networks keep the weights of the last completed epoch.
        """
        epochs, batch = self.config.epochs, self.config.batch_size
        saved = self._snapshot()
        completed, losses, interrupted = 0, (float("nan"), float("nan")), False
        bar = None
        if progress:
            from ...core.progress import progress_bar

            bar = progress_bar(epochs * -(-self.per_epoch // batch), desc="gan", unit="batch")
        try:
            for epoch in range(epochs):
                losses = self._epoch(epoch, bar)
                completed = epoch + 1
                saved = self._snapshot()
                log.debug("GAN epoch %d: d_loss %.4f g_loss %.4f", completed, *losses)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            if bar is not None:
                bar.close()
        self.disc.load_state_dict(saved[0])
        self.gen.load_state_dict(saved[1])
        self.disc.eval()
        self.gen.eval()
        return completed, losses, interrupted

    def _snapshot(self) -> tuple[dict, dict]:
        return ({k: v.detach().clone() for k, v in self.disc.state_dict().items()},
                {k: v.detach().clone() for k, v in self.gen.state_dict().items()})

    def _epoch(self, epoch: int, bar) -> tuple[float, float]:
        """One pass over a fresh random subset of the training split; its mean losses."""
        data, batch = self.data, self.config.batch_size
        order = self.rng.permutation(len(data.x_train))[: self.per_epoch]
        d_total = g_total = 0.0
        for i in range(0, self.per_epoch, batch):
            idx = np.sort(order[i : i + batch])  # sorted: faster gather, same set
            real = to_gan_range(torch.as_tensor(data.x_train[idx], dtype=torch.float32, device=self.device),
                                data.bounds)
            loss_d, loss_g = self._step(real)
            d_total += loss_d * len(real)
            g_total += loss_g * len(real)
            if bar is not None:
                if (bar.n + 1) % 10 == 0 or i == 0:  # before the count, so a line names its epoch
                    seen = min(i + batch, self.per_epoch)
                    bar.set_postfix(epoch=f"{epoch + 1}/{self.config.epochs}", d_loss=f"{d_total / seen:.3f}",
                                    g_loss=f"{g_total / seen:.3f}")
                bar.update(1)
        return d_total / self.per_epoch, g_total / self.per_epoch

    def _step(self, real: torch.Tensor) -> tuple[float, float]:
        """One discriminator step and one generator step on ``real`` and as many generated images."""
        n = len(real)
        fake = self.gen(_noise(n, self.noise_gen, self.device))
        ones = torch.ones(n, 1, device=self.device)
        zeros = torch.zeros(n, 1, device=self.device)
        self.opt_d.zero_grad(set_to_none=True)
        loss_d = self.bce(self.disc(real), ones) + self.bce(self.disc(fake.detach()), zeros)
        loss_d.backward()
        self.opt_d.step()
        self.opt_g.zero_grad(set_to_none=True)
        loss_g = self.bce(self.disc(fake), ones)
        loss_g.backward()  # also fills the discriminator's grads; zeroed before its next step
        self.opt_g.step()
        return float(loss_d.detach()), float(loss_g.detach())

    def quality(self) -> dict[str, float]:
        """Mean discriminator scores of test images, generated ones, noise and heavily mutated
        test images (30% of the pixels replaced by noise), as :class:`GanResult` reports them.

        Streamed in chunks of :func:`_quality_rows` images (500 of MNIST's, 7 of 3x224x224), so
        memory stays flat whatever the image size: the 1,000 generated images in one pass took
        12.8 GB of activations at 224x224 (the kernel killed ``gan train`` at 16 GB). The random
        draws are those of whole-set draws (a CPU generator's stream does not depend on how it
        is split), so the noise and mutated scores are the same as before.
        """
        data, device, seed, disc = self.data, self.device, self.config.seed, self.disc
        n_eval = min(1000, len(data.x_test))
        shape = tuple(data.x_test.shape[1:])
        rows = _quality_rows(shape)
        latent = _noise(max(n_eval, 1), torch.Generator().manual_seed(seed + 1), torch.device("cpu"))
        noise_gen = torch.Generator().manual_seed(seed + 2)
        mask_gen = torch.Generator().manual_seed(seed + 2)
        # the noise is drawn first, then the mask, each for the whole set: skip the mask generator
        # past the noise (drawn and dropped in chunks, so no whole-set tensor is held)
        for i in range(0, n_eval, rows):
            torch.rand((min(rows, n_eval - i), *shape), generator=mask_gen)
        totals = dict.fromkeys(("test_real_score", "fake_score", "noise_score", "mutated_score"), 0.0)
        with torch.inference_mode():
            for i in range(0, max(n_eval, 1), rows):
                fakes = self.gen(latent[i : i + rows].to(device))
                totals["fake_score"] += float(disc(fakes).sum())
                if i >= n_eval:
                    continue
                real = torch.as_tensor(data.x_test[i : i + rows], dtype=torch.float32, device=device)
                real = to_gan_range(real, data.bounds)
                noise = torch.rand(real.shape, generator=noise_gen).to(device) * 2 - 1
                mask = (torch.rand(real.shape, generator=mask_gen) < 0.3).to(device)
                totals["test_real_score"] += float(disc(real).sum())
                totals["noise_score"] += float(disc(noise).sum())
                totals["mutated_score"] += float(disc(torch.where(mask, noise, real)).sum())
        out = {k: (v / n_eval if n_eval else float("nan")) for k, v in totals.items()}
        out["fake_score"] = totals["fake_score"] / max(n_eval, 1)
        return out

    def model_files(self, figures: dict) -> tuple[ModelFile, ModelFile]:
        """Both networks' model files (CPU weights), with the recipe and ``figures`` in their meta."""
        from ...models.io import ModelFile

        data, channels, size = self.data, self.channels, self.size
        gan = {**self.config.to_dict(), **figures}
        disc_file = ModelFile(
            model=self.disc.cpu(), arch="dcgan_discriminator",
            arch_kwargs={"in_channels": channels, "image_size": size}, dataset=data.name,
            bounds=(float(data.bounds[0]), float(data.bounds[1])), output_kind="probabilities",
            meta={"role": "gan-discriminator", "input_range": list(GAN_RANGE),
                  "input_shape": [channels, size, size], "gan": gan},
        )
        gen_file = ModelFile(
            model=self.gen.cpu(), arch="dcgan_generator",
            arch_kwargs={"latent_dim": LATENT_DIM, "out_channels": channels, "image_size": size},
            dataset=data.name, bounds=GAN_RANGE, output_kind="images",
            meta={"role": "gan-generator", "input_shape": [LATENT_DIM], "output_range": list(GAN_RANGE),
                  "data_bounds": list(data.bounds), "gan": dict(gan)},
        )
        return disc_file, gen_file


def generator_file(path: str | os.PathLike) -> Path:
    """Where :func:`save_gan` writes the generator of the discriminator file ``path`` by default:
    ``<path stem>.generator.pt`` beside it.
    """
    path = Path(path)
    return path.with_name(f"{path.stem}.generator.pt")


def save_gan(result: GanResult, path: str | os.PathLike,
             generator_path: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """Write the discriminator to ``path`` and the generator beside it, as one unit (both or neither).

    Args:
        result: What :func:`train_gan` returned.
        path: The discriminator's model file.
        generator_path: The generator's file; default ``<path stem>.generator.pt``.

    Returns:
        ``(discriminator path, generator path)``.
    """
    from ..._io import atomic_paths
    from ...models.io import save_model

    path = Path(path)
    generator_path = Path(generator_path) if generator_path else generator_file(path)
    if generator_path.resolve() == path.resolve():
        raise DeepFaultError(f"the generator and the discriminator cannot share the file {str(path)!r}")
    disc = replace(result.discriminator,
                   meta={**result.discriminator.meta, "generator_file": generator_path.name})
    gen = replace(result.generator, meta={**result.generator.meta, "discriminator_file": path.name})
    with atomic_paths(generator_path, path) as (gen_tmp, disc_tmp):  # both files, or neither
        save_model(gen_tmp, gen)
        save_model(disc_tmp, disc)
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
    a terminal, a line every 30 s otherwise: :func:`~deepfault.core.progress.progress_bar`),
    once; the quality report (mean score of test images, noise and heavily mutated images) is
    logged and kept in the file's ``meta["gan"]``.

    Args:
        dataset: The data set's name.
        data: The data set itself (else loaded by name from ``data_dir``).
        data_dir: Data root.
        device: Where to train.
        progress: Show the training's progress (default ``None``: yes; a bar on a terminal, a
            logged line every 30 s otherwise); ``False``: nothing.

    Raises:
        DeepFaultError: No discriminator can be made for ``dataset``; the message names the
            two ways to get one.
    """
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
    result = train_gan(data, AUTO_RECIPE, device=device, progress=progress is not False)
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
