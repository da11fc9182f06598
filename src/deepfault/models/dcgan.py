"""DRFuzz's DCGAN architectures, as zoo entries (the training loop is :mod:`deepfault.fuzz.fidelity.gan`).

* ``dcgan_discriminator``: conv 64 5x5 ('same') tanh, max-pool 2, conv 128 5x5 ('valid')
  tanh, max-pool 2, dense 1024 tanh, dense 1 sigmoid, after the Keras DCGAN-MNIST example
  that DRFuzz's ``dcgan`` folder follows.
* ``dcgan_generator``: dense 1024 tanh, dense ``128 * (S/4)**2`` batch-norm tanh, reshape,
  upsample 2, conv 64 5x5 tanh, upsample 2, conv ``C`` 5x5 tanh.

Both work in the GAN's pixel range ``[-1, 1]``.
"""

from __future__ import annotations

from collections import OrderedDict

from torch import nn

from ..checks import check_int
from ..errors import DeepFaultError
from ._api import register_architecture
from .zoo import keras_init

__all__ = ["LATENT_DIM", "dcgan_discriminator", "dcgan_generator"]

#: Size of the generator's latent vector (uniform in [-1, 1]), as in the Keras example.
LATENT_DIM = 100


def _check_image_size(image_size: int, *, multiple: int, minimum: int) -> int:
    check_int("image_size", image_size, minimum=minimum)
    if image_size % multiple:
        raise DeepFaultError(f"image_size must be a multiple of {multiple}; got {image_size}")
    return image_size


@register_architecture("dcgan_discriminator")
def dcgan_discriminator(*, in_channels: int = 1, image_size: int = 28) -> nn.Module:
    """DRFuzz's DCGAN discriminator: ``(N, C, S, S)`` images in [-1, 1] -> ``(N, 1)`` scores
    in (0, 1), high for images that look real.

    Args:
        in_channels: Image channels ``C``.
        image_size: Height and width ``S`` (even, at least 14).
    """
    check_int("in_channels", in_channels)
    _check_image_size(image_size, multiple=2, minimum=14)
    side = (image_size // 2 - 4) // 2  # 'same' conv, pool, 'valid' 5x5 conv, pool
    # Pooling before tanh gives exactly the Keras model's values (tanh is increasing, so it
    # commutes with max) at a quarter of the tanh work.
    return keras_init(nn.Sequential(OrderedDict([
        ("conv1", nn.Conv2d(in_channels, 64, 5, padding=2)), ("pool1", nn.MaxPool2d(2)),
        ("tanh1", nn.Tanh()),
        ("conv2", nn.Conv2d(64, 128, 5)), ("pool2", nn.MaxPool2d(2)), ("tanh2", nn.Tanh()),
        ("flatten", nn.Flatten()),
        ("fc1", nn.Linear(128 * side * side, 1024)), ("tanh3", nn.Tanh()),
        ("fc2", nn.Linear(1024, 1)), ("sigmoid", nn.Sigmoid()),
    ])))


@register_architecture("dcgan_generator")
def dcgan_generator(*, latent_dim: int = LATENT_DIM, out_channels: int = 1,
                    image_size: int = 28) -> nn.Module:
    """DRFuzz's DCGAN generator: ``(N, latent_dim)`` noise in [-1, 1] -> ``(N, C, S, S)``
    images in [-1, 1].

    Args:
        latent_dim: Length of the noise vector.
        out_channels: Image channels ``C``.
        image_size: Height and width ``S`` (a multiple of 4).
    """
    check_int("latent_dim", latent_dim)
    check_int("out_channels", out_channels)
    _check_image_size(image_size, multiple=4, minimum=4)
    side = image_size // 4
    return keras_init(nn.Sequential(OrderedDict([
        ("fc1", nn.Linear(latent_dim, 1024)), ("tanh1", nn.Tanh()),
        ("fc2", nn.Linear(1024, 128 * side * side)), ("bn2", nn.BatchNorm1d(128 * side * side)),
        ("tanh2", nn.Tanh()),
        ("reshape", nn.Unflatten(1, (128, side, side))),
        ("up1", nn.Upsample(scale_factor=2, mode="nearest")),
        ("conv1", nn.Conv2d(128, 64, 5, padding=2)), ("tanh3", nn.Tanh()),
        ("up2", nn.Upsample(scale_factor=2, mode="nearest")),
        ("conv2", nn.Conv2d(64, out_channels, 5, padding=2)), ("tanh4", nn.Tanh()),
    ])))
