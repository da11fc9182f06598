"""Fidelity checks: is a mutant still a realistic input? (``spec/drfuzz.md``, section 6).

A check compares each mutant with its *root* seed (the test input its lineage started
from). The fuzzing loop computes the roots' reference once and passes each mutant's row::

    fid = make_fidelity("ssim", bounds=data.bounds, device=device)
    ref = fid.reference(roots)                      # (R, ...) once per campaign
    ok = fid.passes(mutants, ref[root_of_mutant])   # (B,) bool

| spec | score of a mutant | passes when |
| --- | --- | --- |
| ``discriminator`` (default) | the data set's cached DCGAN discriminator (below) | ``>=`` the root's score |
| ``discriminator:FILE`` | the discriminator in ``FILE`` | ``score >=`` the root's score |
| ``ssim`` or ``ssim:T`` | mean SSIM to its root (Gaussian 11, sigma 1.5, true range) | ``>= T`` (0.99) |
| ``ssim-compat`` | the published code's SSIM (below) | ``score >= 0.99``; 50 tries |
| ``none`` | 1 | always (for measurement) |
| ``linf:T`` | largest absolute difference to its root, in the data's units | ``<= T`` (10% of the range) |
| ``dsa``, ``dsa:T``, ``lsa...``, ``mdsa...`` | M1's surprise adequacy (:mod:`.surprise`) | ``<= T`` |

The surprise checks are :class:`TraceFidelity`: scored from the activation traces of M1's
forward pass, which a campaign runs anyway, so they are applied after M1 has run and before
M2 runs (:mod:`deepfault.fuzz.campaign.step`), where the others are applied before either.

``ssim-compat`` reproduces the published DRFuzz code's SSIM path, a compatibility mode,
never the default: scikit-image's ``structural_similarity`` defaults (uniform 7x7 window,
covariances normalised by ``N - 1``) with the data range taken from the array's dtype. The
published images were ``int16`` holding 0..255, so that range was 65535, 257 times the
true one, and about 97% of mutants pass. Our data are floats in ``bounds``; we map the
published range onto them as ``L = 65535 * (hi - lo) / 255`` (65535 on 0..255 data, 257 on
0..1 data), which gives the same SSIM the published code computed on the same pixels. Its
``tries`` (50) tells the DRFuzz strategy to use the published loop structure (up to 20
accepted mutants per iteration, each tried up to 50 times with a fresh MCMC rule).

SSIM and the discriminator judge images only (``images_only``); vectors ``(N, F)`` and
sequences ``(N, C, L)`` take the surprise checks, ``linf:T`` or ``none``, and
:func:`default_fidelity` gives each kind of input its default (``mdsa`` for vectors and
sequences: :func:`check_fidelity_inputs` refuses an image-only check for them).

The discriminator sees its inputs in the range it was trained on: the model file's
``meta["input_range"]`` (``[-1, 1]`` for :mod:`deepfault.fuzz.fidelity.gan`), mapped linearly from
the data's ``bounds``. New checks register a factory with :func:`register_fidelity`.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ...checks import check_bounds, check_int
from ...core.registry import Registry
from ...core.ssim import COMPAT_WINDOW, SSIM_SIGMA, SSIM_WINDOW, ssim
from ...errors import DeepFaultError

__all__ = [
    "fidelity_files",
    "Fidelity",
    "FidelityCheck",
    "SSIMFidelity",
    "DiscriminatorFidelity",
    "distinct_rows",
    "make_fidelity",
    "register_fidelity",
    "list_fidelities",
    "TraceFidelity",
    "check_fidelity_spec",
    "ssim",
    "SSIM_THRESHOLD",
    "SSIMCompatFidelity",
    "NoFidelity",
    "LinfFidelity",
    "DEFAULT_FIDELITY",
    "check_fidelity_inputs",
    "default_fidelity",
]

log = logging.getLogger(__name__)

#: The spec's SSIM threshold: a mutant passes when its SSIM to the root is at least this.
SSIM_THRESHOLD = 0.99
#: The published code's data range: ``int16``'s 65535 for images holding 0..255.
COMPAT_RANGE_PER_255 = 65535.0 / 255.0
#: Tries per mutant slot of the published SSIM path.
COMPAT_TRIES = 50

#: Factories ``factory(arg: str | None, *, bounds, device, dataset, train_inputs, model,
#: test_inputs) -> Fidelity`` by name (a factory takes ``**_`` for what it does not use).
FIDELITIES: Registry[Callable[..., Fidelity]] = Registry("fidelity check")
#: Per name, a function that checks a spec's argument without doing any work (raises).
_ARG_CHECKS: dict[str, Callable[[str | None], object]] = {}
#: The checks that judge images only (SSIM, the discriminator).
_IMAGES_ONLY: set[str] = set()
#: The default check per kind of input (``--fidelity`` left out): the cached discriminator for
#: images; for vectors and sequences, which have no discriminator, M1's MDSA (the surprise
#: check that found the most unique faults per minute on MNIST, ``docs/drfuzz.md``).
DEFAULT_FIDELITY = {"image": "discriminator", "sequence": "mdsa", "vector": "mdsa"}


def register_fidelity(name: str, *, check_arg: Callable[[str | None], object] | None = None,
                      images_only: bool = False):
    """Decorator registering ``factory(arg, *, bounds, device, dataset, ...) -> Fidelity`` as
    ``name``; ``arg`` is what follows the first ``:`` of the spec (``None`` without one).
    ``check_arg(arg)``, if given, raises :class:`~deepfault.errors.DeepFaultError` for a bad
    argument without doing any work (:func:`check_fidelity_spec`). ``images_only``: the check
    judges images ``(N, C, H, W)`` only, and campaigns on other inputs refuse it.
    """
    def add(factory):
        FIDELITIES.register(name, factory)
        if check_arg is not None:
            _ARG_CHECKS[name] = check_arg
        if images_only:
            _IMAGES_ONLY.add(name)
        return factory

    return add


def default_fidelity(kind: str) -> str:
    """The default fidelity spec for inputs of ``kind`` (``image``, ``sequence``, ``vector``)."""
    return DEFAULT_FIDELITY[kind]


def check_fidelity_inputs(spec: str | None, kind: str, *, option: str = "fidelity") -> None:
    """Refuse an image-only check (SSIM, the discriminator) for inputs of ``kind`` other than images.

    Raises:
        DeepFaultError: One line naming the checks that take such inputs.
    """
    if spec is None or kind == "image":
        return
    name = spec.partition(":")[0].strip().lower()
    if name in _IMAGES_ONLY:
        others = sorted(n for n in FIDELITIES.names() if n not in _IMAGES_ONLY)
        raise DeepFaultError(
            f"{option} {spec!r} judges images only and the inputs are {kind}s; use one of "
            f"{', '.join(others)} (e.g. 'mdsa', the default for {kind}s, 'dsa:p90' or 'linf:0.1')")


def check_fidelity_spec(spec: str) -> None:
    """Raise for a spec whose check is unknown or whose argument its check refuses (for the
    checks that registered an argument checker), before anything is loaded or fitted.
    """
    if not isinstance(spec, str) or not spec:
        raise DeepFaultError(f"fidelity must be a string such as 'ssim' or 'dsa:0.9'; got {spec!r}")
    name, sep, arg = spec.partition(":")
    name = name.strip().lower()
    FIDELITIES.get(name)
    if name in _ARG_CHECKS:
        _ARG_CHECKS[name](arg if sep else None)


def check_spec(name: str, spec) -> str:
    """``spec`` when it is a fidelity spec that :func:`check_fidelity_spec` accepts, whose ``ssim:T``
    threshold is in (0, 1] and whose ``discriminator:FILE`` exists; else one line naming ``name``
    (a config field, or nothing for a command line's option, which the parser names).

    Raises:
        DeepFaultError: An unknown check (with the closest names), a bad argument.
    """
    from ...checks import error
    from ...core.registry import suggestion

    head, sep, arg = str(spec).partition(":")
    known = FIDELITIES.names()
    if not isinstance(spec, str) or head.strip().lower() not in known:
        raise error(name, f"one of {', '.join(known)} (ssim:T, discriminator:FILE)", spec,
                    suggestion(head.strip(), known).strip(" ()"))
    if head == "ssim" and sep:
        try:
            t = float(arg)
        except ValueError:
            t = math.nan
        if not (math.isfinite(t) and 0.0 < t <= 1.0):
            raise error(name, "ssim:T with a threshold 0 < T <= 1", spec)
    if head == "discriminator" and sep and (not arg or not os.path.isfile(arg)):
        raise error(name, "discriminator:FILE naming an existing model file", spec,
                    "train one with 'deepfault gan train', or give plain 'discriminator' for the data set's "
                    "own")
    try:
        check_fidelity_spec(spec)
    except DeepFaultError as err:
        raise DeepFaultError(f"{name}: {err}" if name else str(err)) from None
    return spec


def fidelity_files(spec: str) -> list[str]:
    """The files a fidelity spec reads: ``discriminator:FILE``'s model, or ``dsa::FILE``'s (and
    ``KIND:T:FILE``'s) surprise state; none for the other forms.
    """
    head, _, arg = spec.partition(":")
    head = head.strip().lower()
    if head == "discriminator":
        return [arg] if arg else []
    return [arg.partition(":")[2]] if head in ("lsa", "dsa", "mdsa") and arg.partition(":")[2] else []


def list_fidelities() -> list[str]:
    """The registered fidelity checks, sorted."""
    return FIDELITIES.names()


def _check_images(x, name: str, *, images: bool = True) -> torch.Tensor:
    """``x`` if it is a batch of images ``(B, C, H, W)`` (``images=False``: of rank 2 to 4)."""
    want = "(B, C, H, W)" if images else "(B, C, H, W), (B, C, L) or (B, F)"
    if not isinstance(x, torch.Tensor):
        raise DeepFaultError(f"{name} must be a torch.Tensor of shape {want}; got {type(x).__name__}")
    if (x.ndim != 4) if images else (x.ndim not in (2, 3, 4)):
        raise DeepFaultError(f"{name} must have shape {want}; got shape {tuple(x.shape)}")
    return x


@dataclass(frozen=True)
class FidelityCheck:
    """The outcome of checking a batch of mutants.

    Attributes:
        scores: ``(B,)`` float scores (SSIM, the discriminator's output, a surprise adequacy).
        limits: ``(B,)`` what each score had to reach (a surprise adequacy: not exceed).
        passed: ``(B,)`` bool, ``scores >= limits`` (a surprise adequacy: ``scores <= limits``).
    """

    scores: torch.Tensor
    limits: torch.Tensor
    passed: torch.Tensor

    def to_dict(self) -> dict:
        return {"scores": self.scores.tolist(), "limits": self.limits.tolist(),
                "passed": self.passed.tolist()}


class Fidelity(ABC):
    """A fidelity check: subclasses say how a mutant is scored (:meth:`scores`) and what
    score it must reach (:meth:`limits`).

    Args:
        bounds: ``(lo, hi)``, the data's pixel range.
        device: Where the check computes; inputs are moved there and answers come back on
            the mutants' device.
    """

    #: Registry name.
    name: str = ""
    #: Judges images ``(B, C, H, W)`` only (else any batch of rank 2 to 4).
    images_only: bool = False
    #: Costs far more per mutant than running the models (the discriminator): a campaign in
    #: the lazy order of checks runs the models first and scores only the mutants whose
    #: verdict can change its result (:mod:`~..campaign.lazy`).
    expensive: bool = False
    #: :meth:`reference` is the root itself, row by row (L-inf, SSIM): a campaign computes
    #: those rows when it needs them instead of keeping a copy of every seed.
    reference_is_input: bool = False

    def __init__(self, *, bounds: tuple[float, float], device: torch.device | str = "cpu"):
        self.bounds = check_bounds(bounds, finite=True)
        self.device = torch.device(device)

    @abstractmethod
    def reference(self, roots: torch.Tensor) -> torch.Tensor:
        """What each root contributes to the check, computed once per root.

        Args:
            roots: ``(R, C, H, W)`` root seeds.

        Returns:
            ``(R, ...)`` on :attr:`device`; row ``r`` belongs to root ``r``.
        """

    @abstractmethod
    def scores(self, mutants: torch.Tensor, ref_rows: torch.Tensor) -> torch.Tensor:
        """``(B,)`` float scores of ``mutants`` ``(B, C, H, W)``, given their roots' reference rows."""

    @abstractmethod
    def limits(self, ref_rows: torch.Tensor) -> torch.Tensor:
        """``(B,)`` the score each mutant must reach, from its root's reference row."""

    def check(self, mutants: torch.Tensor, ref_rows: torch.Tensor) -> FidelityCheck:
        """Scores, limits and verdicts in one pass (each score computed once)."""
        mutants = _check_images(mutants, "mutants", images=self.images_only)
        if not isinstance(ref_rows, torch.Tensor) or len(ref_rows) != len(mutants):
            got = tuple(ref_rows.shape) if isinstance(ref_rows, torch.Tensor) else type(ref_rows).__name__
            raise DeepFaultError(
                f"ref_rows must hold one reference row per mutant ({len(mutants)}); got {got}"
            )
        scores = self.scores(mutants, ref_rows)
        limits = self.limits(ref_rows).to(scores.device, scores.dtype)
        out = mutants.device
        return FidelityCheck(scores.to(out), limits.to(out), (scores >= limits).to(out))

    def passes(self, mutants: torch.Tensor, ref_rows: torch.Tensor) -> torch.Tensor:
        """``(B,)`` bool: which mutants pass, on the mutants' device.

        Args:
            mutants: ``(B, C, H, W)`` mutants in the data's range.
            ref_rows: ``(B, ...)`` reference rows of each mutant's root (``reference(roots)[root_idx]``).
        """
        return self.check(mutants, ref_rows).passed

    def to_dict(self) -> dict:
        """The check's name and settings, for results and stores."""
        return {"name": self.name, "bounds": list(self.bounds)}


class TraceFidelity(Fidelity):
    """A fidelity check scored from a model's activation traces (M1's, in a campaign) instead
    of the images: a campaign captures :attr:`layers` (under :attr:`transform`) during the
    forward pass of M1 that the oracle runs anyway and calls :meth:`check_traces`, so the
    check costs no forward pass. :meth:`check` (inputs of any shape) runs the model itself.
    """

    @property
    @abstractmethod
    def layers(self) -> tuple[str, ...]:
        """The layers whose traces :meth:`check_traces` takes, in order."""

    @property
    @abstractmethod
    def transform(self) -> str:
        """The neuron value transform of those traces (:data:`deepfault.core.capture.TRANSFORMS`)."""

    @abstractmethod
    def check_traces(self, ats: torch.Tensor, classes) -> FidelityCheck:
        """The outcome for ``(B, M)`` activation traces of inputs the model assigns to ``classes``
        (``(B,)`` ints).
        """


# --- SSIM ---------------------------------------------------------------------------------


class SSIMFidelity(Fidelity):
    """Passes a mutant whose :func:`ssim` to its root is at least ``threshold``.

    The reference of a root is the root image itself.

    Args:
        bounds: The data's pixel range; ``L = hi - lo``.
        threshold: In (0, 1]; the spec's is 0.99.
        device: Where SSIM is computed.
    """

    name = "ssim"
    reference_is_input = True
    images_only = True

    def __init__(self, *, bounds: tuple[float, float], threshold: float = SSIM_THRESHOLD,
                 device: torch.device | str = "cpu"):
        super().__init__(bounds=bounds, device=device)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold <= 1:
            raise DeepFaultError(f"the SSIM threshold must be a number in (0, 1]; got {threshold!r}")
        self.threshold = float(threshold)

    def reference(self, roots: torch.Tensor) -> torch.Tensor:
        return _check_images(roots, "roots").detach().to(self.device, torch.float32)

    def scores(self, mutants: torch.Tensor, ref_rows: torch.Tensor) -> torch.Tensor:
        lo, hi = self.bounds
        return ssim(mutants.detach().to(self.device), ref_rows.to(self.device), data_range=hi - lo)

    def limits(self, ref_rows: torch.Tensor) -> torch.Tensor:
        return torch.full((len(ref_rows),), self.threshold, device=self.device)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "threshold": self.threshold, "window": SSIM_WINDOW, "sigma": SSIM_SIGMA}


def _ssim_threshold(arg: str | None) -> float:
    if not arg:
        return SSIM_THRESHOLD
    try:
        threshold = float(arg)
    except ValueError:
        threshold = math.nan
    if not 0 < threshold <= 1:  # NaN fails too
        raise DeepFaultError(f"the SSIM threshold in 'ssim:{arg}' must be a number in (0, 1]")
    return threshold


@register_fidelity("ssim", check_arg=_ssim_threshold, images_only=True)
def _make_ssim(arg: str | None, *, bounds, device="cpu", **_) -> SSIMFidelity:
    return SSIMFidelity(bounds=bounds, threshold=_ssim_threshold(arg), device=device)


class SSIMCompatFidelity(SSIMFidelity):
    """The published DRFuzz code's SSIM path (module docstring): scikit-image's default SSIM
    (uniform 7x7 window, sample covariance) with the range ``65535 (hi - lo) / 255`` that
    its ``int16`` images implied, threshold 0.99 against the root, and :attr:`tries` = 50
    tries per mutant slot for the loop. A compatibility mode, for comparison with the
    published code; :class:`SSIMFidelity` is the correct-range check.
    """

    name = "ssim-compat"
    tries = COMPAT_TRIES

    def __init__(self, *, bounds: tuple[float, float], threshold: float = SSIM_THRESHOLD,
                 device: torch.device | str = "cpu"):
        super().__init__(bounds=bounds, threshold=threshold, device=device)
        lo, hi = self.bounds
        self.data_range = COMPAT_RANGE_PER_255 * (hi - lo)

    def scores(self, mutants: torch.Tensor, ref_rows: torch.Tensor) -> torch.Tensor:
        return ssim(mutants.detach().to(self.device), ref_rows.to(self.device), data_range=self.data_range,
                    window="uniform", win_size=COMPAT_WINDOW, sample_covariance=True)

    def to_dict(self) -> dict:
        return {"name": self.name, "bounds": list(self.bounds), "threshold": self.threshold,
                "window": f"uniform {COMPAT_WINDOW}x{COMPAT_WINDOW}", "data_range": self.data_range,
                "tries": self.tries, "compatibility_mode": True}


@register_fidelity("ssim-compat", images_only=True)
def _make_ssim_compat(arg: str | None, *, bounds, device="cpu", **_) -> SSIMCompatFidelity:
    if arg:
        raise DeepFaultError("'ssim-compat' takes no argument: it is the published code's SSIM path, "
                             "as it was")
    return SSIMCompatFidelity(bounds=bounds, device=device)


class NoFidelity(Fidelity):
    """Passes every mutant (``--fidelity none``: to measure what the checks cost and remove)."""

    name = "none"

    def reference(self, roots: torch.Tensor) -> torch.Tensor:
        return torch.zeros(len(roots), device=self.device)

    def scores(self, mutants: torch.Tensor, ref_rows: torch.Tensor) -> torch.Tensor:
        return torch.ones(len(mutants), device=self.device)

    def limits(self, ref_rows: torch.Tensor) -> torch.Tensor:
        return torch.zeros(len(ref_rows), device=self.device)


@register_fidelity("none")
def _make_none(arg: str | None, *, bounds, device="cpu", **_) -> NoFidelity:
    return NoFidelity(bounds=bounds, device=device)


# --- a distance bound in the data's units -------------------------------------------------------

#: ``linf``'s bound without an argument: this share of the data's range.
LINF_SHARE = 0.1


class LinfFidelity(Fidelity):
    """Passes a mutant whose largest absolute difference to its root, over all elements, is at
    most ``threshold`` (in the data's units): a check that needs no GAN and takes any input.

    Args:
        bounds: The data's range.
        threshold: ``T > 0``; ``None``: 10% of ``hi - lo``.
        device: Where the distance is computed.
    """

    name = "linf"
    reference_is_input = True

    def __init__(self, *, bounds: tuple[float, float], threshold: float | None = None,
                 device: torch.device | str = "cpu"):
        super().__init__(bounds=bounds, device=device)
        lo, hi = self.bounds
        t = LINF_SHARE * (hi - lo) if threshold is None else threshold
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0 or not math.isfinite(t):
            raise DeepFaultError(f"the linf bound must be a finite number > 0 (data units); "
                                 f"got {threshold!r}")
        self.threshold = float(t)

    def reference(self, roots: torch.Tensor) -> torch.Tensor:
        return _check_images(roots, "roots", images=False).detach().to(self.device, torch.float32)

    def scores(self, mutants: torch.Tensor, ref_rows: torch.Tensor) -> torch.Tensor:
        diff = (mutants.detach().to(self.device, torch.float32) - ref_rows.to(self.device)).abs().flatten(1)
        return diff.amax(dim=1) if diff.shape[1] else torch.zeros(len(diff), device=self.device)

    def limits(self, ref_rows: torch.Tensor) -> torch.Tensor:
        return torch.full((len(ref_rows),), self.threshold, device=self.device)

    def check(self, mutants: torch.Tensor, ref_rows: torch.Tensor) -> FidelityCheck:
        """Scores, limits and verdicts: passed when ``score <= threshold``."""
        mutants = _check_images(mutants, "mutants", images=False)
        if not isinstance(ref_rows, torch.Tensor) or len(ref_rows) != len(mutants):
            raise DeepFaultError(f"ref_rows must hold one reference row per mutant ({len(mutants)})")
        scores, limits = self.scores(mutants, ref_rows), self.limits(ref_rows)
        out = mutants.device
        return FidelityCheck(scores.to(out), limits.to(out), (scores <= limits).to(out))

    def to_dict(self) -> dict:
        return {**super().to_dict(), "threshold": self.threshold}


def _linf_threshold(arg: str | None) -> float | None:
    if not arg:
        return None
    try:
        t = float(arg)
    except ValueError:
        t = math.nan
    if not (t > 0 and math.isfinite(t)):
        raise DeepFaultError(f"the bound in 'linf:{arg}' must be a finite number > 0, in the data's units")
    return t


@register_fidelity("linf", check_arg=_linf_threshold)
def _make_linf(arg: str | None, *, bounds, device="cpu", **_) -> LinfFidelity:
    return LinfFidelity(bounds=bounds, threshold=_linf_threshold(arg), device=device)


# --- the DCGAN discriminator -----------------------------------------------------------------


def distinct_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(first, inverse)``: the index of the first of each group of bit-identical rows of
    ``x`` (``(N, ...)`` float32), ascending, and each row's group, so that
    ``x[first][inverse]`` is ``x``.

    Rows are compared by their bits, not their values (``-0.0`` and ``0.0`` differ). The
    groups keep the rows' order, not ``torch.unique``'s sorted one, so the distinct rows are
    scored in the order they came.

    Examples:
        >>> first, inverse = distinct_rows(torch.tensor([[1.0, 2.0], [0.5, 0.0], [1.0, 2.0]]))
        >>> first.tolist(), inverse.tolist()
        ([0, 1], [0, 1, 0])
    """
    bits = x.reshape(len(x), -1).contiguous().view(torch.int32)
    _, inverse = torch.unique(bits, dim=0, return_inverse=True)
    groups = int(inverse.max()) + 1 if len(inverse) else 0
    rows = torch.arange(len(x), device=x.device)
    first = torch.full((groups,), len(x), dtype=torch.long, device=x.device)
    first = first.scatter_reduce(0, inverse, rows, reduce="amin")
    first, order = first.sort()  # group g of torch.unique becomes group rank[g]
    rank = torch.empty_like(order)
    rank[order] = torch.arange(groups, device=x.device)
    return first, rank[inverse]


class DiscriminatorFidelity(Fidelity):
    """Passes a mutant whose discriminator score is at least its root's.

    Args:
        model: The discriminator: ``(N, C, H, W)`` images in ``input_range`` ->
            ``(N,)`` or ``(N, 1)`` scores. Copied; the caller's module is left alone.
        bounds: The data's pixel range, mapped linearly onto ``input_range``.
        input_range: The range the discriminator was trained on.
        device: Where it runs.
        batch_size: Inputs per forward pass, every pass exactly this many (the last padded):
            an input's score then does not depend on which others are scored with it
            (:func:`~..campaign.execution.fixed_passes`), so scoring only some mutants (the
            lazy order of checks) gives each the score it gets among all. Default: 64 on the
            CPU (MNIST images run fastest per image so on this machine: small passes stay in
            cache), 1,024 on an accelerator.
        source: Where the model came from, for messages.
        dedupe: Score each distinct input once per call (byte-identical inputs, such as two
            mutants a discrete rule made alike, share the first one's score; exact, as every
            pass has the same shape). ``False`` runs every row, as before this option.

    Attributes:
        evaluated: Inputs run through the discriminator so far (after the duplicates are removed).
    """

    name = "discriminator"
    images_only = True
    expensive = True

    def __init__(self, model: nn.Module, *, bounds: tuple[float, float],
                 input_range: tuple[float, float], device: torch.device | str = "cpu",
                 batch_size: int | None = None, source: str = "the discriminator", dedupe: bool = True):
        super().__init__(bounds=bounds, device=device)
        self.dedupe = bool(dedupe)
        self.evaluated = 0
        if not isinstance(model, nn.Module):
            raise DeepFaultError(f"model must be a torch.nn.Module; got {type(model).__name__}")
        if batch_size is None:
            batch_size = 64 if self.device.type == "cpu" else 1024
        self.batch_size = check_int("batch_size", batch_size)
        self.input_range = check_bounds(input_range, "input_range", finite=True)
        self.source = source
        self.model = copy.deepcopy(model).to(self.device).eval()
        if self.device.type == "cpu":  # oneDNN runs its convolutions 1.6-1.9x faster this way
            # Module.to(memory_format=...) exists at runtime (torch docs); torch's overloads omit it
            self.model = self.model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        for p in self.model.parameters():
            p.requires_grad_(False)

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` mapped from :attr:`bounds` onto :attr:`input_range` (what the discriminator saw)."""
        from .gan import to_gan_range

        return to_gan_range(x, self.bounds, self.input_range)

    def _score(self, x: torch.Tensor) -> torch.Tensor:
        x = self.normalise(x.detach().to(self.device, torch.float32))
        if self.dedupe and len(x) > 1:
            first, inverse = distinct_rows(x)
            if len(first) < len(x):
                return self._score_rows(x[first])[inverse]
        return self._score_rows(x)

    def _score_rows(self, x: torch.Tensor) -> torch.Tensor:
        self.evaluated += len(x)
        parts = []
        with torch.inference_mode():
            for i in range(0, len(x), self.batch_size):
                xb = x[i : i + self.batch_size]
                n = len(xb)
                if n < self.batch_size:  # every pass the same shape (the docstring)
                    xb = torch.cat([xb, xb[:1].expand(self.batch_size - n, *xb.shape[1:])])
                try:
                    out = self.model(xb)
                except RuntimeError as err:
                    first = str(err).splitlines()[0] if str(err) else type(err).__name__
                    if "out of memory" in first.lower():
                        raise
                    raise DeepFaultError(
                        f"{self.source} cannot take inputs of shape {tuple(xb.shape[1:])}: {first}; "
                        "use a discriminator trained on this data set ('deepfault gan train')"
                    ) from err
                if out.ndim > 2 or (out.ndim == 2 and out.shape[1] != 1) or out.shape[0] != len(xb):
                    raise DeepFaultError(
                        f"{self.source} must return one score per input, shape (N,) or (N, 1); "
                        f"got {tuple(out.shape)}"
                    )
                parts.append(out.reshape(len(xb))[:n].float())
        return torch.cat(parts) if parts else torch.zeros(0, device=self.device)

    def reference(self, roots: torch.Tensor) -> torch.Tensor:
        """``(R,)``: the discriminator's score of each root."""
        return self._score(_check_images(roots, "roots"))

    def scores(self, mutants: torch.Tensor, ref_rows: torch.Tensor) -> torch.Tensor:
        return self._score(mutants)

    def limits(self, ref_rows: torch.Tensor) -> torch.Tensor:
        return ref_rows.to(self.device, torch.float32).reshape(len(ref_rows))

    def to_dict(self) -> dict:
        return {**super().to_dict(), "input_range": list(self.input_range), "source": self.source}

    @classmethod
    def from_file(cls, path: str | os.PathLike, *, bounds: tuple[float, float],
                  device: torch.device | str = "cpu", dataset: str | None = None) -> DiscriminatorFidelity:
        """Load a discriminator's model file (``deepfault gan train`` writes one).

        The input range is ``meta["input_range"]``; a file without one (another format) is
        taken to expect its recorded ``bounds``, else the data's, with a warning.

        Args:
            path: The model file.
            bounds: The data's pixel range.
            device: Where it runs.
            dataset: The data set being fuzzed; a warning when the discriminator was trained on
                another one.
        """
        from ...models.load import open_model
        from . import gan as _gan  # noqa: F401  (registers the DCGAN architectures)

        mf = open_model(path)
        input_range = mf.meta.get("input_range")
        if input_range is None:
            input_range = mf.bounds if mf.bounds is not None else bounds
            warnings.warn(
                f"{str(path)!r} does not record the input range its discriminator was trained on "
                f"(meta 'input_range'); assuming {tuple(input_range)}", stacklevel=2,
            )
        if dataset is not None and mf.dataset is not None and mf.dataset != dataset:
            warnings.warn(f"the discriminator {str(path)!r} was trained on {mf.dataset}, not {dataset}",
                          stacklevel=2)
        return cls(mf.model, bounds=bounds, input_range=tuple(input_range), device=device,
                   source=f"discriminator {str(path)!r}")


@register_fidelity("discriminator", images_only=True)
def _make_discriminator(arg: str | None, *, bounds, device="cpu", dataset=None, **_) -> DiscriminatorFidelity:
    if not arg:
        from .gan import cached_discriminator

        arg = str(cached_discriminator(dataset))
    return DiscriminatorFidelity.from_file(arg, bounds=bounds, device=device, dataset=dataset)


def make_fidelity(spec: str, *, bounds: tuple[float, float], device: torch.device | str = "cpu",
                  dataset: str | None = None, train_inputs=None, model: nn.Module | None = None,
                  test_inputs=None) -> Fidelity:
    """The fidelity check that ``spec`` names.

    Args:
        spec: ``"discriminator"`` (the data set's cached one), ``"discriminator:FILE"``,
            ``"ssim"``, ``"ssim:T"`` (threshold ``T``), ``"ssim-compat"``, ``"none"``, or a
            surprise check (``"dsa"``, ``"dsa:T"``, ``"lsa:pQ"``, ... : :mod:`.surprise`); the part
            after the first ``:`` is the check's argument.
        bounds: The data's pixel range ``(lo, hi)``.
        device: Where the check computes.
        dataset: The fuzzed data set's name: which cached discriminator ``"discriminator"``
            means, and a warning for one trained on another data set.
        train_inputs: The training split (the surprise checks fit on it; a plug-in may too).
        model: M1 (the surprise checks score its activations).
        test_inputs: Realistic inputs (the surprise checks' percentile thresholds read their scores).

    Returns:
        A :class:`Fidelity`.

    Raises:
        DeepFaultError: An unknown check (the message lists the known ones) or a bad argument.

    Examples:
        >>> fid = make_fidelity("ssim", bounds=(0.0, 1.0))
        >>> roots = torch.rand(2, 1, 28, 28)
        >>> fid.passes(roots[[1, 1, 0]], fid.reference(roots)[[1, 1, 0]]).tolist()
        [True, True, True]
    """
    if not isinstance(spec, str) or not spec:
        raise DeepFaultError(
            f"fidelity must be a string such as 'ssim' or 'discriminator:FILE'; got {spec!r}"
        )
    name, sep, arg = spec.partition(":")
    factory = FIDELITIES.get(name.strip().lower())
    return factory(arg if sep else None, bounds=bounds, device=device, dataset=dataset,
                   train_inputs=train_inputs, model=model, test_inputs=test_inputs)
