"""DRFuzz's 15 mutation rules as batched tensor operations (``spec/drfuzz.md``, section 5).

Every rule is a pure function ::

    rule(x, *, generator=None, bounds, params=None) -> (x_new, params)

of a float batch ``x`` of shape ``(N, C, H, W)`` (any ``C``, ``H, W >= 8``, any device). It
draws one parameter per image from ``generator``, applies all of them in one batched pass
(no loop over images or pixels), clips the result to ``bounds = (lo, hi)`` and returns it
with the parameters it used: a dict of CPU tensors whose first axis is the image. ``x`` is
never modified.

Randomness:
    Parameters are drawn from ``generator``, which must be a CPU :class:`torch.Generator`,
    and only then moved to ``x.device``, so the same seed gives the same mutants on every
    device. Passing ``params`` (a dict like the one returned, whole or in part) fixes those
    entries and draws nothing for them; with every entry given, no generator is needed.
    The returned dict holds everything needed to replay the mutation: the per-image
    parameters and, for the noise rules, the per-pixel draws (``noise``, ``salt``,
    ``pepper``).

Units:
    Parameters are recorded in the spec's units, that is DRFuzz's 0..255 pixel scale, and
    converted to the data's range ``(lo, hi)`` when applied, with ``s = (hi - lo) / 255``:
    brightness adds ``beta * s``; Gaussian noise has standard deviation ``sqrt(var) * s``
    (the variance is in 0..255 units squared and scaled by ``s**2``, as in DRFuzz's code,
    which adds it to 0..255 images: on MNIST scaled to 0..1 the largest, ``var = 2``, gives a
    standard deviation of 0.0055); the bilateral filter's colour sigma is ``50 * s``.
    Contrast and multiplicative noise act on ``v - lo`` (``lo + (v - lo) * alpha`` and
    ``v + (v - lo) * sqrt(var) * z``), the published formulas when ``lo = 0``. Patches and
    salt-and-pepper set ``hi``, ``lo`` or ``lo + hi - v``, and the affine rules fill vacated
    pixels with ``lo``. So every rule commutes with an affine change of the pixel range:
    mutating 0..1 data gives the 0..255 result divided by 255.

Families:
    ``"affine"`` (translation, scale, shear, rotation) and ``"pixel"`` (the other eleven).
    DeepHunter (section 10) allows at most one affine change per lineage.

Conventions and where they differ from the published OpenCV code:
    * Affine warps use :func:`kornia.geometry.transform.warp_affine` with OpenCV's pixel
      convention (pixel centres at integer coordinates, ``align_corners=True``).
    * translation: integer shifts, nearest-neighbour sampling, so the moved pixels keep
      their exact values.
    * scale and rotation turn about the image centre ``((W - 1) / 2, (H - 1) / 2)``. The
      published code rotates about ``(W / 2, H / 2)`` and scales by resizing then cropping
      or padding with integer offsets, which puts its centre up to half a pixel away.
    * shear is ``x' = x - factor * y`` about the top-left corner, as in the published code
      (so a large factor moves the lower rows far sideways).
    * blur: box, Gaussian and bilateral filters reflect the border without repeating the
      edge pixel and the median replicates it, as OpenCV does. The even 4x4 box keeps
      OpenCV's anchor (taps at offsets -2..+1). Gaussian kernels are OpenCV's fixed tables
      for ``sigma = 0`` (``[1, 2, 1] / 4``, ``[1, 4, 6, 4, 1] / 16``,
      ``[1, 3.5, 7, 9, 7, 3.5, 1] / 32``). The bilateral filter (OpenCV's ``d = 6``, a
      radius of 3) weighs the whole 7x7 square with kornia, where OpenCV keeps the 29 taps
      within radius 3; the colour distance is the sum of absolute channel differences in
      both.
    * erode and dilate use OpenCV's anchor ``(kh // 2, kw // 2)`` and ignore pixels outside
      the image, so the even kernels (1x2, 2x1, 2x2) shift the same way as in OpenCV.
    * patches: the top-left corner is uniform over every 2x2 patch inside the image (the
      published code leaves out the last row and column of positions); ``reverse_patch``
      sets ``lo + hi - v`` (``max - v`` when ``lo = 0``).
    * salt_pepper: ``ceil(0.002 * H * W)`` pixels go to ``hi`` and as many others to ``lo``
      (0.4% in all, at least one each), chosen without replacement; a pixel is a spatial
      position, all channels together. The published code picks channel elements with
      replacement, which is the same for one channel up to the repeats.
    * Every rule clips to ``bounds`` in floating point; the published noise rules cast to
      8 bits before clipping, so negative values wrapped around (spec section 5).

Examples:
    >>> import torch
    >>> from deepfault.fuzz.mutation.rules import apply_rule
    >>> x = torch.rand(10, 1, 28, 28)
    >>> y, params = apply_rule("rotation", x, generator=torch.Generator().manual_seed(0), bounds=(0.0, 1.0))
    >>> y.shape, params["angle"].shape
    (torch.Size([10, 1, 28, 28]), torch.Size([10]))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ...core.kinds import INPUT_KINDS, input_kind
from ...core.registry import Registry, suggestion
from ...errors import DeepFaultError

__all__ = [
    "AFFINE",
    "PIXEL",
    "BLUR_FILTERS",
    "BRIGHTNESS_RANGE",
    "CONTRAST_RANGE",
    "GAUSS_NOISE_VARIANCES",
    "MORPH_KERNELS",
    "MULTIPLICATIVE_NOISE_VARIANCES",
    "ROTATION_RANGE",
    "SALT_PEPPER_AMOUNT",
    "SCALE_RANGE",
    "SHEAR_RANGE",
    "TRANSLATION_SHIFTS",
    "MutationRule",
    "apply_rule",
    "get_rule",
    "list_rules",
    "neutral_params",
    "register_rule",
    "rule_kind",
    "salt_pepper_count",
]

Bounds = tuple[float, float]
Params = dict[str, torch.Tensor]
RuleFn = Callable[..., tuple[torch.Tensor, Params]]

AFFINE = "affine"
PIXEL = "pixel"
_FAMILIES = (AFFINE, PIXEL)


#: Translation shifts, each of ``dx`` and ``dy`` uniform over these.
TRANSLATION_SHIFTS = tuple(range(-3, 3))
SCALE_RANGE = (0.7, 1.2)
SHEAR_RANGE = (-0.6, 0.6)
ROTATION_RANGE = (-50.0, 50.0)
CONTRAST_RANGE = (0.5, 1.5)
#: Brightness offset, in 0..255 units.
BRIGHTNESS_RANGE = (-20.0, 20.0)
#: The nine blur filters, indexed by ``params["filter"]``.
BLUR_FILTERS = (
    "box3", "box4", "box5", "gaussian3", "gaussian5", "gaussian7", "median3", "median5", "bilateral",
)
#: Erode and dilate kernel shapes ``(rows, cols)``.
MORPH_KERNELS = ((1, 1), (1, 2), (2, 1), (2, 2), (1, 3), (3, 1), (3, 3))
PATCH_SIZE = 2
#: Gaussian noise variances, in 0..255 units squared.
GAUSS_NOISE_VARIANCES = (2.0, 1.0, 0.5, 0.1, 0.05, 0.01, 0.005, 0.001)
#: Multiplicative noise variances (relative, no units).
MULTIPLICATIVE_NOISE_VARIANCES = (1.0, 0.5, 0.1, 0.05, 0.01, 0.005, 0.001)
#: Fraction of the pixels that salt-and-pepper sets, half to ``hi`` and half to ``lo``.
SALT_PEPPER_AMOUNT = 0.004

_BILATERAL_DIAMETER = 7  # OpenCV's d = 6 is a radius of 3 pixels
_BILATERAL_SIGMA = 50.0  # colour (0..255 units) and space (pixels)
_MIN_SIZE = 8


# ----------------------------------------------------------------------------- registry


@dataclass(frozen=True, eq=False)
class MutationRule:
    """A registered mutation rule.

    Attributes:
        name: Registry name.
        family: ``"affine"`` or ``"pixel"``.
        fn: ``fn(x, *, generator=None, bounds, params=None) -> (x_new, params)``.
        neutral: The parameters under which the rule is the identity (one value per key),
            or ``None`` when it has none.
        inputs: The kinds of input it takes (:data:`~deepfault.core.kinds.INPUT_KINDS`:
            ``"image"``, ``"sequence"``, ``"vector"``).
    """

    name: str
    family: str
    fn: RuleFn
    neutral: Mapping[str, int | float] | None = None
    inputs: tuple[str, ...] = ("image",)

    def __call__(
        self,
        x: torch.Tensor,
        *,
        generator: torch.Generator | None = None,
        bounds: Bounds,
        params: Mapping[str, Any] | None = None,
    ) -> tuple[torch.Tensor, Params]:
        return self.fn(x, generator=generator, bounds=bounds, params=params)


_RULES: Registry[MutationRule] = Registry("mutation rule")


def register_rule(
    name: str, *, family: str, neutral: Mapping[str, int | float] | None = None,
    inputs: str | tuple[str, ...] = "image",
) -> Callable[[RuleFn], RuleFn]:
    """Decorator adding ``fn(x, *, generator=None, bounds, params=None)`` to the rules.

    Args:
        name: Registry name.
        family: ``"affine"`` for a geometric change (one that moves values to other
            positions), ``"pixel"`` for a change of values.
        neutral: Parameter values (one per key) that make the rule the identity.
        inputs: The kind(s) of input the rule takes: ``"image"`` (the default), ``"sequence"``,
            ``"vector"`` (:data:`~deepfault.core.kinds.INPUT_KINDS`); a campaign uses the rules of
            its inputs' kind.

    Raises:
        DeepFaultError: ``family`` is not one of the two, or an unknown input kind.
        RuntimeError: ``name`` is registered already.
    """
    if family not in _FAMILIES:
        raise DeepFaultError(f"family must be one of {', '.join(_FAMILIES)}; got {family!r}")
    kinds = (inputs,) if isinstance(inputs, str) else tuple(inputs)
    if not kinds or any(k not in INPUT_KINDS.values() for k in kinds):
        raise DeepFaultError(f"inputs must be among {', '.join(INPUT_KINDS.values())}; got {inputs!r}")

    def decorate(fn: RuleFn) -> RuleFn:
        _RULES.register(name, MutationRule(name, family, fn, dict(neutral) if neutral is not None else None,
                                           kinds))
        return fn

    return decorate


def get_rule(name: str) -> MutationRule:
    """The rule registered as ``name``.

    Raises:
        DeepFaultError: Unknown name; the message lists the known ones.
    """
    return _RULES.get(name)


def list_rules(family: str | None = None, *, inputs: str | None = "image") -> list[str]:
    """Names of the registered rules for ``inputs`` (default the image rules; ``None``: every
    rule), sorted; only those of ``family`` when given.

    Raises:
        DeepFaultError: ``family`` is not ``None``, ``"affine"`` or ``"pixel"``, or an unknown
            input kind.
    """
    if family is not None and family not in _FAMILIES:
        raise DeepFaultError(f"family must be one of {', '.join(_FAMILIES)} or None; got {family!r}")
    if inputs is not None and inputs not in INPUT_KINDS.values():
        raise DeepFaultError(
            f"inputs must be one of {', '.join(INPUT_KINDS.values())} or None; got {inputs!r}")
    return [name for name in _RULES.names()
            if (family is None or _RULES.get(name).family == family)
            and (inputs is None or inputs in _RULES.get(name).inputs)]


def rule_kind(input_shape: Sequence[int]) -> str:
    """``"image"``, ``"sequence"`` or ``"vector"``: the rules that mutate inputs of one input's
    shape ``input_shape`` (:func:`~deepfault.core.kinds.input_kind`'s convention: no batch axis).

    Raises:
        DeepFaultError: A shape of another rank: no rule mutates it.
    """
    if len(tuple(input_shape)) not in INPUT_KINDS:
        raise DeepFaultError(
            "regression fuzzing mutates images (N, C, H, W), sequences (N, C, L) or vectors (N, F); "
            f"got a batch of rank {1 + len(tuple(input_shape))}")
    return input_kind(input_shape)


def apply_rule(
    name: str,
    x: torch.Tensor,
    *,
    generator: torch.Generator | None = None,
    bounds: Bounds,
    params: Mapping[str, Any] | None = None,
) -> tuple[torch.Tensor, Params]:
    """Mutate every image of ``x`` with rule ``name``; see the module docstring.

    Args:
        name: A registered rule (:func:`list_rules`).
        x: Float images ``(N, C, H, W)``, ``H, W >= 8``, on any device.
        generator: CPU generator for the parameters; needed unless ``params`` gives them all.
        bounds: The data's pixel range ``(lo, hi)``.
        params: Per-image values that replace the draws (each with first axis ``N``).

    Returns:
        ``(x_new, params)``: the mutants ``(N, C, H, W)`` on ``x``'s device and dtype, clipped
        to ``bounds``, and the parameters used (CPU tensors, first axis ``N``).

    Raises:
        DeepFaultError: Unknown rule, bad ``x``, ``bounds``, ``generator`` or ``params``.
    """
    return get_rule(name)(x, generator=generator, bounds=bounds, params=params)


def neutral_params(name: str, n: int) -> Params:
    """The parameters under which rule ``name`` leaves ``n`` images unchanged.

    Raises:
        DeepFaultError: Unknown rule, or one without a neutral parameter (the patches,
            blur and salt-and-pepper).
    """
    rule = get_rule(name)
    if rule.neutral is None:
        with_neutral = [r for r in list_rules() if get_rule(r).neutral is not None]
        raise DeepFaultError(
            f"mutation rule {name!r} has no neutral parameter; rules with one: {', '.join(with_neutral)}"
        )
    return {key: torch.full((n,), value) for key, value in rule.neutral.items()}


# ----------------------------------------------------------------------------- helpers


def _kornia():
    try:
        import kornia
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            "the affine, blur, erode and dilate mutation rules need kornia; pip install -e '.[fuzz]'"
        ) from err
    return kornia


def _check_input(rule: str, x: torch.Tensor, bounds: Bounds) -> tuple[torch.Tensor, float, float]:
    if not isinstance(x, torch.Tensor) or x.ndim != 4 or not x.is_floating_point():
        got = f"shape {tuple(x.shape)}, dtype {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise DeepFaultError(f"x for mutation rule {rule!r} must be a float tensor (N, C, H, W); got {got}")
    if x.shape[-2] < _MIN_SIZE or x.shape[-1] < _MIN_SIZE:
        raise DeepFaultError(
            f"x for mutation rule {rule!r} must be at least {_MIN_SIZE}x{_MIN_SIZE} pixels; "
            f"got shape {tuple(x.shape)}"
        )
    try:
        lo, hi = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise DeepFaultError(f"bounds must be a pair (lo, hi) of numbers; got {bounds!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise DeepFaultError(f"bounds must be finite with lo < hi; got {bounds!r}")
    return x.detach(), lo, hi


class _Draws:
    """A rule's per-image parameters: the caller's where given, else drawn on the CPU."""

    def __init__(
        self, rule: str, n: int, generator: torch.Generator | None, params: Mapping[str, Any] | None
    ):
        if generator is not None and (
            not isinstance(generator, torch.Generator) or generator.device.type != "cpu"
        ):
            raise DeepFaultError(
                f"generator must be a CPU torch.Generator (draws are made on the CPU so that results do "
                f"not depend on the device); got {generator!r}"
            )
        self.rule, self.n, self.generator = rule, n, generator
        self.given = dict(params or {})
        self.used: Params = {}

    def take(
        self,
        key: str,
        draw: Callable[[torch.Generator], torch.Tensor],
        *,
        shape: tuple[int, ...] | None = None,
        dtype: torch.dtype = torch.float64,
        low: float | None = None,
        high: float | None = None,
    ) -> torch.Tensor:
        shape = (self.n,) if shape is None else shape
        if key in self.given:
            value = torch.as_tensor(self.given.pop(key)).detach().cpu()
            where = f"params[{key!r}] for mutation rule {self.rule!r}"
            if tuple(value.shape) != shape:
                raise DeepFaultError(f"{where} must have shape {shape}; got {tuple(value.shape)}")
            fractional = value.is_floating_point() and bool((value != value.round()).any())
            if not dtype.is_floating_point and fractional:
                raise DeepFaultError(f"{where} must hold integers; got {value.tolist()}")
            value = value.to(dtype)
            too_low = low is not None and bool((value < low).any())
            if too_low or (high is not None and bool((value > high).any())):
                got = value.flatten().tolist()[:20]
                raise DeepFaultError(f"{where} must lie in [{low}, {high}]; got {got}")
        else:
            if self.generator is None:
                raise DeepFaultError(
                    f"mutation rule {self.rule!r} needs a generator to draw {key!r}; pass "
                    f"generator=torch.Generator().manual_seed(...) or give params[{key!r}]"
                )
            value = draw(self.generator)
        self.used[key] = value
        return value

    def done(self) -> Params:
        if self.given:
            raise DeepFaultError(
                f"unknown params {sorted(self.given)} for mutation rule {self.rule!r}"
                f"{suggestion(sorted(self.given)[0], sorted(self.used))}; "
                f"it takes {sorted(self.used)}"
            )
        return self.used


#: ``kernel(x, d, lo, hi) -> x_new``: a rule's own work, on the checked batch ``x``, its draws ``d``
#: and the bounds.
Kernel = Callable[..., torch.Tensor]


def _kernel_rule(name: str, *, family: str, neutral: Mapping[str, int | float] | None = None,
                 inputs: str | tuple[str, ...] = "image", check: Callable[..., tuple] | None = None
                 ) -> Callable[[Kernel], RuleFn]:
    """Decorator registering ``kernel(x, d, lo, hi) -> x_new`` as the rule ``name``
    (:func:`register_rule`'s arguments): the rule ``rule(x, *, generator=None, bounds,
    params=None) -> (x_new, params)`` checks ``x`` and ``bounds`` (``check(name, x, bounds,
    kinds)``; default the image rules' check), gives the kernel the batch, its draws
    (:class:`_Draws`: ``d.take(key, draw, ...)``) and ``(lo, hi)``, and returns what the kernel
    made with the parameters it took (refusing ``params`` it did not take).
    """
    kinds = (inputs,) if isinstance(inputs, str) else tuple(inputs)

    def decorate(kernel: Kernel) -> RuleFn:
        def rule(x: torch.Tensor, *, generator: torch.Generator | None = None, bounds,
                 params: Mapping[str, Any] | None = None) -> tuple[torch.Tensor, Params]:
            x, lo, hi = _check_input(name, x, bounds) if check is None else check(name, x, bounds, kinds)
            d = _Draws(name, x.shape[0], generator, params)
            return kernel(x, d, lo, hi), d.done()

        rule.__name__ = rule.__qualname__ = kernel.__name__
        rule.__doc__, rule.__module__ = kernel.__doc__, kernel.__module__
        return register_rule(name, family=family, neutral=neutral, inputs=inputs)(rule)

    return decorate


def _uniform(n: int, low: float, high: float) -> Callable[[torch.Generator], torch.Tensor]:
    return lambda g: low + (high - low) * torch.rand(n, generator=g, dtype=torch.float64)


def _choice(n: int, values, dtype: torch.dtype = torch.float64) -> Callable[[torch.Generator], torch.Tensor]:
    table = torch.tensor(values, dtype=dtype)
    return lambda g: table[torch.randint(len(table), (n,), generator=g)]


def _on(x: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """A per-image parameter as an ``(N, 1, 1, 1)`` tensor on ``x``'s device and dtype."""
    return value.to(device=x.device, dtype=x.dtype).view(-1, 1, 1, 1)


def _centre(x: torch.Tensor) -> torch.Tensor:
    h, w = x.shape[-2:]
    return torch.tensor([[(w - 1) / 2, (h - 1) / 2]], dtype=torch.float64).expand(x.shape[0], 2)


def _warp(x: torch.Tensor, matrix: torch.Tensor, lo: float, hi: float, mode: str) -> torch.Tensor:
    """Warp every image by its ``(2, 3)`` source-to-destination pixel matrix, filling with ``lo``."""
    kornia = _kornia()
    if x.shape[0] == 0:
        return x.clone()
    out = kornia.geometry.transform.warp_affine(
        x - lo,
        matrix.to(device=x.device, dtype=x.dtype),
        (x.shape[-2], x.shape[-1]),
        mode=mode,
        padding_mode="zeros",
        align_corners=True,
    )
    return (out + lo).clamp_(lo, hi)


def _groups(codes: torch.Tensor, device: torch.device) -> Iterator[tuple[list[int], torch.Tensor]]:
    """``(code, row indices on device)`` for each distinct row of a CPU ``(N, k)`` tensor."""
    for code in torch.unique(codes, dim=0):
        rows = (codes == code).all(dim=1)
        yield code.tolist(), torch.nonzero(rows).flatten().to(device)


# ----------------------------------------------------------------------------- affine rules


@_kernel_rule("translation", family=AFFINE, neutral={"dx": 0, "dy": 0})
def translation(x: torch.Tensor, d: _Draws, lo: float, hi: float) -> torch.Tensor:
    """Shift each image by whole pixels; vacated pixels become ``lo``.

    ``dx`` (columns, positive to the right) and ``dy`` (rows, positive down) are each
    uniform over ``{-3, ..., 2}``.

    Parameters (``params``; drawn where not given): ``dx``, ``dy`` (int, ``(N,)``).
    """
    n = x.shape[0]
    dx = d.take("dx", _choice(n, TRANSLATION_SHIFTS, torch.int64), dtype=torch.int64)
    dy = d.take("dy", _choice(n, TRANSLATION_SHIFTS, torch.int64), dtype=torch.int64)
    matrix = torch.zeros(n, 2, 3, dtype=torch.float64)
    matrix[:, 0, 0] = matrix[:, 1, 1] = 1.0
    matrix[:, 0, 2], matrix[:, 1, 2] = dx, dy
    return _warp(x, matrix, lo, hi, "nearest")


@_kernel_rule("scale", family=AFFINE, neutral={"factor": 1.0})
def scale(x: torch.Tensor, d: _Draws, lo: float, hi: float) -> torch.Tensor:
    """Zoom each image about its centre by ``factor`` ~ U(0.7, 1.2), bicubic.

    Shrinking pads with ``lo``; enlarging crops to the centre.

    Parameters (``params``; drawn where not given): ``factor`` ``(N,)`` replacing the draw (must be
    positive).
    """
    n = x.shape[0]
    factor = d.take("factor", _uniform(n, *SCALE_RANGE), low=1e-6)
    kornia = _kornia()
    matrix = kornia.geometry.transform.get_rotation_matrix2d(
        _centre(x), torch.zeros(n, dtype=torch.float64), factor[:, None].expand(n, 2)
    )
    return _warp(x, matrix, lo, hi, "bicubic")


@_kernel_rule("shear", family=AFFINE, neutral={"factor": 0.0})
def shear(x: torch.Tensor, d: _Draws, lo: float, hi: float) -> torch.Tensor:
    """Shear each image horizontally, ``x' = x - factor * y``, ``factor`` ~ U(-0.6, 0.6).

    The origin is the top-left pixel, as in DRFuzz's code; bilinear; vacated pixels
    become ``lo``.

    Parameters (``params``; drawn where not given): ``factor`` ``(N,)``.
    """
    n = x.shape[0]
    factor = d.take("factor", _uniform(n, *SHEAR_RANGE))
    matrix = torch.zeros(n, 2, 3, dtype=torch.float64)
    matrix[:, 0, 0] = matrix[:, 1, 1] = 1.0
    matrix[:, 0, 1] = -factor
    return _warp(x, matrix, lo, hi, "bilinear")


@_kernel_rule("rotation", family=AFFINE, neutral={"angle": 0.0})
def rotation(x: torch.Tensor, d: _Draws, lo: float, hi: float) -> torch.Tensor:
    """Rotate each image about its centre by ``angle`` ~ U(-50, 50) degrees, bilinear.

    A positive angle turns counter-clockwise as displayed (OpenCV's convention); vacated
    pixels become ``lo``.

    Parameters (``params``; drawn where not given): ``angle`` ``(N,)`` in degrees.
    """
    n = x.shape[0]
    angle = d.take("angle", _uniform(n, *ROTATION_RANGE))
    kornia = _kornia()
    matrix = kornia.geometry.transform.get_rotation_matrix2d(
        _centre(x), angle, torch.ones(n, 2, dtype=torch.float64)
    )
    return _warp(x, matrix, lo, hi, "bilinear")


# ----------------------------------------------------------------------------- intensity rules


@_kernel_rule("contrast", family=PIXEL, neutral={"alpha": 1.0})
def contrast(x: torch.Tensor, d: _Draws, lo: float, hi: float) -> torch.Tensor:
    """Multiply each image by ``alpha`` ~ U(0.5, 1.5): ``lo + (v - lo) * alpha``.

    Parameters (``params``; drawn where not given): ``alpha`` ``(N,)``.
    """
    n = x.shape[0]
    alpha = d.take("alpha", _uniform(n, *CONTRAST_RANGE))
    return (lo + (x - lo) * _on(x, alpha)).clamp_(lo, hi)


@_kernel_rule("brightness", family=PIXEL, neutral={"beta": 0.0})
def brightness(x: torch.Tensor, d: _Draws, lo: float, hi: float) -> torch.Tensor:
    """Add ``beta`` ~ U(-20, 20) (0..255 units, so ``beta * (hi - lo) / 255``) to each image.

    Parameters (``params``; drawn where not given): ``beta`` ``(N,)`` in 0..255 units.
    """
    n = x.shape[0]
    beta = d.take("beta", _uniform(n, *BRIGHTNESS_RANGE))
    return (x + _on(x, beta * ((hi - lo) / 255.0))).clamp_(lo, hi)


# ----------------------------------------------------------------------------- filters


def _linear_blur_kernels() -> torch.Tensor:
    """The six box and Gaussian kernels of :data:`BLUR_FILTERS`, each placed in a 7x7 frame
    whose centre is OpenCV's anchor, so one per-image 7x7 correlation applies any of them.
    """

    def frame(taps: list[float], start: int) -> torch.Tensor:
        row = torch.zeros(7, dtype=torch.float64)
        row[start : start + len(taps)] = torch.tensor(taps, dtype=torch.float64) / sum(taps)
        return torch.outer(row, row)

    return torch.stack(
        [
            frame([1.0] * 3, 2),
            frame([1.0] * 4, 1),  # OpenCV anchors an even box at k // 2: taps at offsets -2..+1
            frame([1.0] * 5, 1),
            frame([1.0, 2.0, 1.0], 2),  # OpenCV's fixed Gaussian tables for sigma = 0
            frame([1.0, 4.0, 6.0, 4.0, 1.0], 1),
            frame([1.0, 3.5, 7.0, 9.0, 7.0, 3.5, 1.0], 0),
        ]
    )


_LINEAR_BLURS = 6  # indices 0..5 of BLUR_FILTERS are linear
_MEDIAN_SIZES = {6: 3, 7: 5}
_BILATERAL = 8


@_kernel_rule("blur", family=PIXEL)
def blur(x: torch.Tensor, d: _Draws, lo: float, hi: float) -> torch.Tensor:
    """Blur each image with one of nine filters, uniform over :data:`BLUR_FILTERS`.

    Box 3/4/5, Gaussian 3/5/7 (OpenCV's ``sigma = 0`` kernels), median 3/5 and bilateral
    (OpenCV's ``d = 6``, sigma colour 50 in 0..255 units, sigma space 50 pixels), with
    kornia. The six linear filters run as one per-image 7x7 correlation; the median and
    bilateral filters run once per filter on the images that drew it.

    Parameters (``params``; drawn where not given): ``filter`` (int index into :data:`BLUR_FILTERS`,
    ``(N,)``).
    """
    n = x.shape[0]
    choice = d.take(
        "filter", _choice(n, range(len(BLUR_FILTERS)), torch.int64), dtype=torch.int64, low=0,
        high=len(BLUR_FILTERS) - 1,
    )
    kornia = _kornia()
    out = x.clone()
    linear = torch.nonzero(choice < _LINEAR_BLURS).flatten()
    if len(linear):
        kernels = _linear_blur_kernels()[choice[linear]].to(device=x.device, dtype=x.dtype)
        rows = linear.to(x.device)
        out[rows] = kornia.filters.filter2d(x[rows], kernels, border_type="reflect")
    for code in torch.unique(choice[choice >= _LINEAR_BLURS]).tolist():
        rows = torch.nonzero(choice == code).flatten().to(x.device)
        if code == _BILATERAL:
            out[rows] = kornia.filters.bilateral_blur(
                x[rows],
                (_BILATERAL_DIAMETER, _BILATERAL_DIAMETER),
                _BILATERAL_SIGMA * (hi - lo) / 255.0,
                (_BILATERAL_SIGMA, _BILATERAL_SIGMA),
                border_type="reflect",
                color_distance_type="l1",
            )
        else:
            k = _MEDIAN_SIZES[code]
            out[rows] = kornia.filters.median_blur(x[rows], (k, k), border_type="replicate")
    return out.clamp_(lo, hi)


def _morphology(x: torch.Tensor, d: _Draws, lo: float, hi: float, *, erode: bool) -> torch.Tensor:
    n = x.shape[0]
    shapes = torch.tensor(MORPH_KERNELS, dtype=torch.int64)
    pick: dict[str, torch.Tensor] = {}

    def draw(column: int) -> Callable[[torch.Generator], torch.Tensor]:
        def f(g: torch.Generator) -> torch.Tensor:
            if "i" not in pick:  # one shape per image, both sides from the same draw
                pick["i"] = torch.randint(len(MORPH_KERNELS), (n,), generator=g)
            return shapes[pick["i"], column]

        return f

    kh = d.take("kernel_h", draw(0), dtype=torch.int64, low=1)
    kw = d.take("kernel_w", draw(1), dtype=torch.int64, low=1)
    kornia = _kornia()
    out = x.clone()
    for (a, b), rows in _groups(torch.stack([kh, kw], dim=1), x.device):
        if a == b == 1:
            continue  # a 1x1 kernel is the identity
        kernel = torch.ones(a, b, device=x.device, dtype=x.dtype)
        if erode:
            out[rows] = kornia.morphology.erosion(x[rows], kernel, origin=[a // 2, b // 2])
        else:
            # kornia's dilation reflects the kernel (max of f(x - b)) and OpenCV's does not;
            # this origin puts the taps where OpenCV's anchor (a // 2, b // 2) puts them.
            out[rows] = kornia.morphology.dilation(x[rows], kernel, origin=[a - 1 - a // 2, b - 1 - b // 2])
    return out.clamp_(lo, hi)


@_kernel_rule("erode", family=PIXEL, neutral={"kernel_h": 1, "kernel_w": 1})
def erode(x: torch.Tensor, d: _Draws, lo: float, hi: float) -> torch.Tensor:
    return _morphology(x, d, lo, hi, erode=True)


@_kernel_rule("dilate", family=PIXEL, neutral={"kernel_h": 1, "kernel_w": 1})
def dilate(x: torch.Tensor, d: _Draws, lo: float, hi: float) -> torch.Tensor:
    return _morphology(x, d, lo, hi, erode=False)


_MORPH_DOC = """Grey {name} ({what} over a kernel of ones), the shape uniform over :data:`MORPH_KERNELS`.

    Anchor ``(kh // 2, kw // 2)`` as in OpenCV: ``out[y, x] = {op}`` of
    ``v[y + i - kh // 2, x + j - kw // 2]`` over the kernel, pixels outside the image ignored.

    Parameters (``params``; drawn where not given): ``kernel_h``, ``kernel_w`` (int, ``(N,)``, at
    least 1).
    """
erode.__doc__ = _MORPH_DOC.format(name="erosion", what="minimum", op="min")
dilate.__doc__ = _MORPH_DOC.format(name="dilation", what="maximum", op="max")


# ----------------------------------------------------------------------------- patches


def _patch(x: torch.Tensor, d: _Draws, lo: float, hi: float,
           fill: Callable[[torch.Tensor, float, float], torch.Tensor]) -> torch.Tensor:
    n, _, h, w = x.shape
    top = d.take("row", lambda g: torch.randint(h - PATCH_SIZE + 1, (n,), generator=g), dtype=torch.int64,
                 low=0, high=h - PATCH_SIZE)
    left = d.take("col", lambda g: torch.randint(w - PATCH_SIZE + 1, (n,), generator=g), dtype=torch.int64,
                  low=0, high=w - PATCH_SIZE)
    rows = torch.arange(h, device=x.device)[None, :] - top.to(x.device)[:, None]  # (N, H)
    cols = torch.arange(w, device=x.device)[None, :] - left.to(x.device)[:, None]  # (N, W)
    inside = ((rows >= 0) & (rows < PATCH_SIZE))[:, :, None] & ((cols >= 0) & (cols < PATCH_SIZE))[:, None, :]
    out = torch.where(inside[:, None], fill(x, lo, hi), x)
    return out.clamp_(lo, hi)


_PATCH_DOC = """Set a 2x2 patch of each image to {what}.

    The patch's top-left corner ``(row, col)`` is uniform over ``{{0..H-2}} x {{0..W-2}}``.

    Parameters (``params``; drawn where not given): ``row``, ``col`` (int, ``(N,)``).
    """


@_kernel_rule("reverse_patch", family=PIXEL)
def reverse_patch(x: torch.Tensor, d: _Draws, lo: float, hi: float) -> torch.Tensor:
    return _patch(x, d, lo, hi, lambda v, lo, hi: (lo + hi) - v)


@_kernel_rule("white_patch", family=PIXEL)
def white_patch(x: torch.Tensor, d: _Draws, lo: float, hi: float) -> torch.Tensor:
    return _patch(x, d, lo, hi, lambda v, lo, hi: torch.full_like(v, hi))


@_kernel_rule("black_patch", family=PIXEL)
def black_patch(x: torch.Tensor, d: _Draws, lo: float, hi: float) -> torch.Tensor:
    return _patch(x, d, lo, hi, lambda v, lo, hi: torch.full_like(v, lo))


reverse_patch.__doc__ = _PATCH_DOC.format(what="its reverse, ``lo + hi - v`` (``max - v`` for ``lo = 0``)")
white_patch.__doc__ = _PATCH_DOC.format(what="``hi`` (white)")
black_patch.__doc__ = _PATCH_DOC.format(what="``lo`` (black)")


# ----------------------------------------------------------------------------- noise


def _standard_normal(d: _Draws, x: torch.Tensor) -> torch.Tensor:
    shape = tuple(x.shape)
    z = d.take("noise", lambda g: torch.randn(shape, generator=g, dtype=x.dtype), shape=shape, dtype=x.dtype)
    return z.to(x.device)


@_kernel_rule("gauss_noise", family=PIXEL, neutral={"var": 0.0})
def gauss_noise(x: torch.Tensor, d: _Draws, lo: float, hi: float) -> torch.Tensor:
    """Add Gaussian noise N(0, var), ``var`` uniform over :data:`GAUSS_NOISE_VARIANCES`.

    The variances ``{2, 1, 0.5, 0.1, 0.05, 0.01, 0.005, 0.001}`` are in 0..255 units squared:
    the noise added is ``sqrt(var) * (hi - lo) / 255 * z``, ``z`` standard normal per pixel and
    channel.

    Parameters (``params``; drawn where not given): ``var`` ``(N,)`` (0..255 units squared,
    non-negative) and ``noise`` ``(N, C, H, W)`` (the standard normal field).
    """
    n = x.shape[0]
    var = d.take("var", _choice(n, GAUSS_NOISE_VARIANCES), low=0.0)
    z = _standard_normal(d, x)
    return (x + _on(x, var.sqrt() * ((hi - lo) / 255.0)) * z).clamp_(lo, hi)


@_kernel_rule("multiplicative_noise", family=PIXEL, neutral={"var": 0.0})
def multiplicative_noise(x: torch.Tensor, d: _Draws, lo: float, hi: float) -> torch.Tensor:
    """Speckle noise ``v + (v - lo) * sqrt(var) * z``, ``var`` uniform over
    :data:`MULTIPLICATIVE_NOISE_VARIANCES` ``{1, 0.5, 0.1, 0.05, 0.01, 0.005, 0.001}``.

    ``z`` is standard normal per pixel and channel; the noise is relative, so ``var`` has
    no units.

    Parameters (``params``; drawn where not given): ``var`` ``(N,)`` (non-negative) and ``noise``
    ``(N, C, H, W)``.
    """
    n = x.shape[0]
    var = d.take("var", _choice(n, MULTIPLICATIVE_NOISE_VARIANCES), low=0.0)
    z = _standard_normal(d, x)
    return (x + (x - lo) * _on(x, var.sqrt()) * z).clamp_(lo, hi)


def salt_pepper_count(h: int, w: int) -> int:
    """Pixels set to ``hi`` (and as many to ``lo``) in an ``h x w`` image: ``ceil(0.002 * h * w)``."""
    return math.ceil(SALT_PEPPER_AMOUNT / 2 * h * w)


@_kernel_rule("salt_pepper", family=PIXEL)
def salt_pepper(x: torch.Tensor, d: _Draws, lo: float, hi: float) -> torch.Tensor:
    """Set 0.4% of each image's pixels, half to ``hi`` (salt) and half to ``lo`` (pepper).

    ``k = ceil(0.002 * H * W)`` positions get salt and ``k`` others pepper (at least one
    each; 2 + 2 on 28x28), chosen without replacement per image; a position covers all
    channels.

    Parameters (``params``; drawn where not given): ``salt`` and ``pepper``: int ``(N, k)`` flat
    indices ``row * W + col`` replacing the draws (pepper wins where they meet).
    """
    n, c, h, w = x.shape
    k = salt_pepper_count(h, w)
    picked: dict[str, torch.Tensor] = {}

    def draw(part: slice) -> Callable[[torch.Generator], torch.Tensor]:
        def f(g: torch.Generator) -> torch.Tensor:
            if "i" not in picked:  # the top 2k of random keys: a uniform sample without replacement
                picked["i"] = torch.rand(n, h * w, generator=g).topk(2 * k, dim=1).indices
            return picked["i"][:, part]

        return f

    salt = d.take("salt", draw(slice(0, k)), shape=(n, k), dtype=torch.int64, low=0, high=h * w - 1)
    pepper = d.take("pepper", draw(slice(k, 2 * k)), shape=(n, k), dtype=torch.int64, low=0, high=h * w - 1)
    out = x.reshape(n, c, h * w).clone()
    out.scatter_(2, salt.to(x.device)[:, None, :].expand(n, c, k), hi)
    out.scatter_(2, pepper.to(x.device)[:, None, :].expand(n, c, k), lo)
    return out.reshape(n, c, h, w).clamp_(lo, hi)
