"""Neuron profiles: each neuron's range, mean and spread on the training data (coverage spec 2).

The profile of a model is, for every neuron ``n``, ``low_n = min_x v(x, n)``,
``high_n = max_x v(x, n)``, the mean ``mu_n`` and the (population) standard deviation
``std_n = sqrt(sum_x (v(x, n) - mu_n)^2 / N)`` over the training split. It is computed in
one streaming pass: each batch's count, mean and sum of squared deviations ``M2`` (in
float64) are folded in with Chan et al.'s pairwise formula

    n = n_a + n_b,  d = mu_b - mu_a,  mu = mu_a + d * n_b / n,
    M2 = M2_a + M2_b + d^2 * n_a * n_b / n,

so memory does not grow with ``N`` and two partial profiles merge exactly like one. A profile
remembers its layers, transform and a SHA-256 of the model's weights, and is saved as an
``.npz`` file (no pickle); using it with another model, other layers or another transform
is an error that says which.

Examples:
    >>> import torch
    >>> from torch import nn
    >>> model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 2))
    >>> p = compute_profile(model, torch.rand(100, 2), ProfileConfig(layers=["0"]))
    >>> p.layers, p.count, p.low.shape
    (('0',), 100, (3,))
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch
from torch import nn

if TYPE_CHECKING:
    from ..core.inputs import InputData
    from ..core.runtime import Runtime
    from ..models.prepare import PreparedModel

from .._io import write_npz
from ..core.accumulator import Accumulator
from ..core.batches import iterate_batches
from ..core.capture import NeuronLayout, check_transform
from ..core.constraints import Options, param, validate
from ..core.entry import entry
from ..core.outcome import Artifact, Outcome
from ..core.shards import ShardContext, sharded_pass
from ..errors import DeepFaultError
from ._shape import _DEFAULT_LAYERS, _LAYERS, TRANSFORMS, Config, LayerNames, inputs_of, progress_label
from .results import About

__all__ = ["PROFILE_FORMAT", "Profile", "ProfileAccumulator", "ProfileConfig", "compute_profile",
           "load_profile", "model_hash"]

PROFILE_FORMAT = "deepfault-profile/1"


def _module(model: nn.Module | PreparedModel) -> nn.Module:
    """The module of a :class:`~deepfault.models.prepare.PreparedModel`, or ``model`` itself."""
    from ..models.prepare import resolve_model

    return resolve_model(model)[0] if not isinstance(model, nn.Module) else model


def model_hash(model: nn.Module) -> str:
    """The whole SHA-256 (64 hex) :func:`~deepfault.models.fingerprint.fingerprint` of a
    model's weights; a model's short fingerprint is this hash's first 16 digits.
    """
    from ..models.fingerprint import fingerprint

    return fingerprint(model, length=64)


def check_same_model(what: str, fitted_hash: str, model: nn.Module, fix: str) -> None:
    """Raise unless ``model``'s weights hash to ``fitted_hash``: the one check of every state
    fitted for a model (a profile, a surprise state). ``what`` reads "the profile was computed".
    """
    mine = model_hash(model)
    if mine != fitted_hash:
        raise DeepFaultError(f"{what} for another model (weights sha256 {fitted_hash[:12]}..., this model "
                             f"{mine[:12]}...); {fix}")


def check_same_layers(what: str, layers: Sequence[str], sizes: Sequence[int], layout: NeuronLayout,
                      fix: str) -> None:
    """Raise unless ``layout`` has these layers and sizes (``what`` as :func:`check_same_model`)."""
    have = tuple((la.name, la.size) for la in layout.layers)
    want = tuple(zip(layers, sizes, strict=True))
    if have != want:
        def show(pairs):
            return ", ".join(f"{n}[{s}]" for n, s in pairs)
        raise DeepFaultError(f"{what} for other layers ({show(want)}) than these ({show(have)}); {fix}")


def selection_arrays(selection: str | tuple[str, ...] | None) -> dict[str, np.ndarray]:
    """The ``layers`` argument a state was fitted with, as two ``.npz`` fields."""
    return {
        "selection_kind": np.array("none" if selection is None else
                                   "name" if isinstance(selection, str) else "list"),
        "selection": np.array([] if selection is None else
                              [selection] if isinstance(selection, str) else list(selection), dtype=str),
    }


def state_summary(state, fmt: str, count: int, **extra) -> dict:
    """A fitted state's summary for result files (a :class:`Profile`, a surprise state): its
    format, layers, transform, model and ``count``, then ``extra``, then the layer selection.
    """
    selection = state.selection
    return {
        "format": fmt,
        "layers": [{"name": n, "size": s} for n, s in zip(state.layers, state.sizes, strict=True)],
        "transform": state.transform, "model_sha256": state.model_hash, "count": count, **extra,
        "selection": list(selection) if isinstance(selection, tuple) else selection,
    }


def write_state(state, path: str | os.PathLike, fmt: str, **arrays: np.ndarray) -> Path:
    """Write a fitted state as an ``.npz`` file, atomically (what :func:`read_state` reads): its
    format, layers, sizes, transform and model, then ``arrays``, then the layer selection.
    """
    return write_npz(path, {
        "format": np.array(fmt),
        "layers": np.array(state.layers, dtype=str),
        "sizes": np.array(state.sizes, dtype=np.int64),
        "transform": np.array(state.transform),
        "model_hash": np.array(state.model_hash),
        **arrays,
        **selection_arrays(state.selection),
    })


def selection_from(a: dict) -> str | tuple[str, ...] | None:
    """The inverse of :func:`selection_arrays`, checked."""
    kind = str(_field(a, "selection_kind", 0, "U"))
    names = tuple(str(s) for s in _field(a, "selection", 1, "U"))
    if kind not in ("none", "name", "list") or (kind == "name" and len(names) != 1):
        raise ValueError(f"field 'selection_kind' must be none, name or list; got {kind!r}")
    return None if kind == "none" else names[0] if kind == "name" else names


@dataclass(frozen=True, eq=False)
class _FittedOnLayers:
    """What a state fitted on a model's layers knows of them (a :class:`Profile`, a surprise state):
    their first fields, in this order.
    """

    layers: tuple[str, ...]
    sizes: tuple[int, ...]
    transform: str
    model_hash: str

    @property
    def layout(self) -> NeuronLayout:
        return NeuronLayout.from_sizes(self.layers, self.sizes)

    @property
    def num_neurons(self) -> int:
        return int(sum(self.sizes))


@dataclass(frozen=True, eq=False)
class Profile(_FittedOnLayers, Outcome):
    """Each neuron's statistics on the training data.

    Attributes:
        layers: Layer names, in layout order.
        sizes: Units per layer.
        transform: The value transform the statistics were taken under.
        model_hash: :func:`model_hash` of the model.
        count: Number of inputs ``N``.
        low, high, mean, std: ``(M,)`` float64 arrays: min, max, mean and population standard
            deviation of each neuron's value.
        selection: The ``layers`` argument the profile was computed with (a selection name
            such as ``"deepxplore"``, a list of names, or ``None`` for the default layers).
    """

    count: int
    low: np.ndarray
    high: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    selection: str | tuple[str, ...] | None = None
    #: What the summary says of the pass (set on a computed profile; not a field: not saved).
    about: ClassVar[About] = About()

    def summary(self) -> str:
        """What ``coverage profile`` prints: the run, the neurons and each layer's range."""
        from .text import profile_text

        return profile_text(self)

    def outputs(self) -> tuple[Artifact, ...]:
        """The profile's ``.npz`` (:meth:`save`)."""
        return (Artifact("profile", ".npz", self.save),)

    def same_as(self, other: Profile) -> bool:
        """Whether ``other`` holds the same statistics for the same model and layers."""
        return (
            self is other
            or (
                (self.layers, self.sizes, self.transform, self.model_hash, self.count)
                == (other.layers, other.sizes, other.transform, other.model_hash, other.count)
                and all(np.array_equal(getattr(self, a), getattr(other, a))
                        for a in ("low", "high", "mean", "std"))
            )
        )

    # ------------------------------------------------------------------ checks

    def check_model(self, model: nn.Module) -> None:
        """Raise unless ``model`` has the weights the profile was computed with."""
        check_same_model("the profile was computed", self.model_hash, model,
                         "compute a profile for this model with 'deepfault coverage profile' "
                         "(compute_profile)")

    def check_transform(self, transform: str) -> None:
        if transform != self.transform:
            raise DeepFaultError(
                f"the profile was computed on {self.transform!r} values but coverage is measured on "
                f"{transform!r} values; use the same --transform or compute a new profile"
            )

    def check_layout(self, layout: NeuronLayout) -> None:
        """Raise unless ``layout`` has the profile's layers and sizes."""
        check_same_layers("the profile was computed", self.layers, self.sizes, layout,
                          "use the profile's --layers or compute a profile for these layers")

    # ------------------------------------------------------------------ output

    def to_dict(self) -> dict:
        """A summary (no per-neuron arrays) for result files."""
        return state_summary(self, PROFILE_FORMAT, self.count)

    def layer_summary(self) -> list[dict]:
        """Per layer: units, the smallest ``low``, the largest ``high``, the mean of the means and
        of the standard deviations, and how many neurons were constant (``low == high``).
        """
        rows = []
        for la in self.layout.layers:
            s = slice(la.offset, la.offset + la.size)
            rows.append({
                "layer": la.name, "units": la.size,
                "low": float(self.low[s].min()), "high": float(self.high[s].max()),
                "mean": float(self.mean[s].mean()), "std": float(self.std[s].mean()),
                "constant": int((self.low[s] == self.high[s]).sum()),
            })
        return rows

    def save(self, path: str | os.PathLike) -> Path:
        """Write the profile as an ``.npz`` file, atomically; returns the path."""
        return write_state(self, path, PROFILE_FORMAT, count=np.array(self.count, dtype=np.int64),
                           low=self.low, high=self.high, mean=self.mean, std=self.std)


def read_state(path: str | os.PathLike, *, fmt: str, what: str, missing: str, unreadable: str,
               marker: str, damaged: str, build):
    """Read a fitted state's ``.npz`` (``allow_pickle=False``) and ``build`` it from its arrays,
    every failure one :class:`DeepFaultError` (a profile, a surprise state): ``what`` names the
    kind of file, the other strings end each message with its fix.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise DeepFaultError(f"{what} file {str(path)!r} does not exist; {missing}")
    try:
        with np.load(path, allow_pickle=False) as npz:
            a = {k: npz[k] for k in npz.files}
    except Exception as err:  # BadZipFile, ValueError (object arrays), OSError, EOFError
        raise DeepFaultError(
            f"{str(path)!r} is not a readable {what} ({type(err).__name__}); {unreadable}") from err
    if "format" not in a or str(a["format"]) != fmt:
        raise DeepFaultError(f"{str(path)!r} is not a deepfault {what} (no {fmt!r} marker){marker}")
    try:
        return build(a)
    except (KeyError, ValueError, IndexError, TypeError, OverflowError, DeepFaultError) as err:
        raise DeepFaultError(f"{str(path)!r} is a damaged {what} ({err}); {damaged}") from None


def load_profile(path: str | os.PathLike) -> Profile:
    """Read a profile written by :meth:`Profile.save` (``allow_pickle=False``).

    Raises:
        DeepFaultError: The file is missing, not an ``.npz`` file, or not a deepfault profile.
    """
    fix = "compute one with 'deepfault coverage profile'"
    return read_state(path, fmt=PROFILE_FORMAT, what="profile", missing=fix, unreadable=fix, marker="",
                      damaged="compute it again with 'deepfault coverage profile'", build=_profile_from)


def _field(a: dict, key: str, ndim: int, kinds: str) -> np.ndarray:
    v = np.asarray(a[key])
    if v.ndim != ndim or v.dtype.kind not in kinds:
        raise ValueError(f"field {key!r} must be a {ndim}-d array of kind {kinds!r}; got shape {v.shape}, "
                         f"dtype {v.dtype}")
    return v


def _profile_from(a: dict) -> Profile:
    """A :class:`Profile` from the arrays of its file, every field checked (rank, type, values)."""
    sizes_a = _field(a, "sizes", 1, "iu")
    layers_a = _field(a, "layers", 1, "U")
    if len(sizes_a) == 0 or len(layers_a) != len(sizes_a) or (sizes_a < 1).any() or sizes_a.sum() > 1 << 31:
        raise ValueError("layers and sizes must be non-empty, of the same length, with sizes >= 1")
    sizes = tuple(int(s) for s in sizes_a)
    m = sum(sizes)
    stats = {k: _field(a, k, 1, "f").astype(np.float64) for k in ("low", "high", "mean", "std")}
    if any(v.shape != (m,) for v in stats.values()):
        raise ValueError(f"low, high, mean and std must hold {m} values, one per neuron")
    for k, v in stats.items():
        if not np.isfinite(v).all():
            raise ValueError(f"field {k!r} holds NaN or infinite values")
    if (stats["low"] > stats["high"]).any():
        raise ValueError("a neuron's low is above its high")
    if (stats["std"] < 0).any():
        raise ValueError("field 'std' holds a negative standard deviation")
    count = _field(a, "count", 0, "iu")
    if int(count) < 1:
        raise ValueError("field 'count' must be >= 1")
    transform = str(_field(a, "transform", 0, "U"))
    check_transform(transform)
    selection = selection_from(a)
    return Profile(tuple(str(n) for n in layers_a), sizes, transform, str(_field(a, "model_hash", 0, "U")),
                   int(count), selection=selection, **stats)


def _chan(n_a: int, mean_a: torch.Tensor, m2_a: torch.Tensor, n_b: int, mean_b: torch.Tensor,
          m2_b: torch.Tensor) -> tuple[int, torch.Tensor, torch.Tensor]:
    """Chan et al.'s pairwise combination of two (count, mean, M2) summaries."""
    n = n_a + n_b
    delta = mean_b - mean_a
    return n, mean_a + delta * (n_b / n), m2_a + m2_b + delta * delta * (n_a * n_b / n)


class ProfileAccumulator(Accumulator):
    """Streaming per-neuron min, max, mean and ``M2`` (float64), mergeable.

    State: ``count``, ``low``, ``high``, ``mean``, ``m2`` (``None`` before the first batch).
    ``merge`` is Chan's formula (see the module docstring), not an element-wise reduction,
    so it is overridden; ``update`` folds each batch in with the same formula, which is why
    the result does not depend on the batch size beyond float64 rounding.
    """

    # State (add_state): the tensors are (M,) float64 on the CPU, None until count > 0.
    count: int
    low: torch.Tensor | None
    high: torch.Tensor | None
    mean: torch.Tensor | None
    m2: torch.Tensor | None

    def __init__(self) -> None:
        super().__init__()
        self.add_state("count", 0, "sum")
        self.add_state("low", None, "min")
        self.add_state("high", None, "max")
        self.add_state("mean", None, "sum")  # merged by Chan's formula in merge()
        self.add_state("m2", None, "sum")

    def update(self, values) -> None:
        v = torch.as_tensor(values).double()
        if v.ndim != 2:
            raise DeepFaultError(f"profile values must be (N, M); got {tuple(v.shape)}")
        if len(v) == 0:
            return
        mean = v.mean(dim=0)
        m2 = ((v - mean) ** 2).sum(dim=0)
        self._fold(len(v), v.amin(dim=0).cpu(), v.amax(dim=0).cpu(), mean.cpu(), m2.cpu())

    def _stats(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``low, high, mean, m2``: set by the first batch, so only for ``count > 0``."""
        low, high, mean, m2 = self.low, self.high, self.mean, self.m2
        if low is None or high is None or mean is None or m2 is None:
            raise DeepFaultError("no inputs were profiled: the input set is empty")
        return low, high, mean, m2

    def _fold(self, n: int, low: torch.Tensor, high: torch.Tensor, mean: torch.Tensor,
              m2: torch.Tensor) -> None:
        if self.count == 0:
            self.count, self.low, self.high, self.mean, self.m2 = n, low, high, mean, m2
            return
        my_low, my_high, my_mean, my_m2 = self._stats()
        if my_mean.shape != mean.shape:
            raise DeepFaultError(
                f"cannot combine profiles of {my_mean.numel()} and {mean.numel()} neurons"
            )
        self.low = torch.minimum(my_low, low)
        self.high = torch.maximum(my_high, high)
        self.count, self.mean, self.m2 = _chan(self.count, my_mean, my_m2, n, mean, m2)

    def merge(self, other: Accumulator) -> ProfileAccumulator:
        self._check_compatible(other)
        assert isinstance(other, ProfileAccumulator)  # _check_compatible refused any other type
        if other.count:
            self._fold(other.count, *other._stats())
        return self

    def compute(self) -> dict[str, np.ndarray]:
        """``{"low", "high", "mean", "std"}``: ``(M,)`` float64 arrays (population std)."""
        if not self.count:
            raise DeepFaultError("no inputs were profiled: the input set is empty")
        low, high, mean, m2 = self._stats()
        return {
            "low": low.numpy().copy(),
            "high": high.numpy().copy(),
            "mean": mean.numpy().copy(),
            "std": np.sqrt(np.maximum(m2.numpy() / self.count, 0.0)),
        }


@dataclass(frozen=True)
class ProfileConfig(Config):
    """Everything that determines a profile (:func:`~deepfault.coverage.compute_profile`).

    A config of its own: a profile is fitted once per model, layers and transform, and read by
    every measurement after it, whatever their criteria.

    Attributes:
        layers: As in :func:`~deepfault.core.capture.capture` (a selection name such as
            ``"deepxplore"``, module names, or ``None`` for the default layers).
        transform: ``"raw"`` or ``"layer-minmax"``.
    """

    layers: str | Sequence[str] | None = param(None, LayerNames(), metavar="NAMES",
                                               help=_LAYERS.format(_DEFAULT_LAYERS))
    transform: str = param("raw", Options(TRANSFORMS),
                           help="neuron values: 'raw', or 'layer-minmax' (each input's layer output scaled "
                           "to [0, 1], DeepXplore's)")

    def __post_init__(self):
        check_transform(self.transform)
        self._tuple("layers")
        validate(self)


@entry(ProfileConfig)
def compute_profile(model: nn.Module | PreparedModel, data: InputData, config: ProfileConfig, *,
                    runtime: Runtime) -> Profile:
    """The profile of ``model``'s neurons on the inputs (normally its training split), in one
    streaming pass.

    Args:
        model: The network, or a prepared model (run in ``eval()`` mode, restored afterwards).
        data: The inputs: ``(N, ...)`` array or tensor, an ``(inputs, labels)`` pair, a torch
            ``Dataset`` or ``DataLoader`` (streamed), or a deepfault data set (its test split:
            ``deepfault coverage profile`` passes the split it reads as one).
        config: A :class:`~deepfault.coverage.config.ProfileConfig`: the layers and the transform.
        runtime: A :class:`~deepfault.core.runtime.Runtime`; the result does not depend on it.

    Returns:
        A :class:`Profile` (an outcome: its summary is each layer's range, its output the
        ``.npz``); memory used does not grow with ``N`` beyond the inputs themselves.

    Raises:
        DeepFaultError: No inputs, an unknown layer, or inputs the model cannot take.
    """
    from ..core.inputs import num_inputs
    from .text import neurons_text

    inputs, _, data_name = inputs_of(data)
    module = _module(model)
    if num_inputs(inputs) == 0:
        raise DeepFaultError("no inputs to profile: the input set is empty (a data set without "
                             "a training split? use --split test or another file)")
    if runtime.parallel.spread:
        acc, layout, spread = _spread_profile(module, inputs, config, runtime)
    else:
        progress = progress_label(runtime, "profile")
        acc, layout = _profile_pass(module, inputs, config, runtime.batch_size, progress)
        spread = None
    stats = acc.compute()  # raises for no inputs, so the loop set layout
    assert layout is not None
    p = next(module.parameters(), None)
    about = About(None if isinstance(model, nn.Module) else getattr(model, "name", None), data_name,
                  str(runtime.device or (p.device if p is not None else "cpu")),
                  neurons_text(layout, module, config.layers))
    sizes = tuple(la.size for la in layout.layers)
    profile = Profile(layout.names, sizes, config.transform, model_hash(module), int(acc.count),
                      selection=_selection(config.layers), **stats)
    object.__setattr__(profile, "about", about)
    return profile.spread_over(spread)


def _profile_pass(module: nn.Module, inputs, config: ProfileConfig, batch_size, progress
                  ) -> tuple[ProfileAccumulator, NeuronLayout | None]:
    """The profile's pass over ``inputs``: the accumulator and the layout of its neurons."""
    acc = ProfileAccumulator()
    layout = None
    for batch in iterate_batches(module, inputs, layers=config.layers, transform=config.transform,
                                 batch_size=batch_size, progress=progress):
        layout = batch.layout
        acc.update(batch.values)
    return acc, layout


def _profile_shard(module: nn.Module, columns: tuple, config: ProfileConfig, context: ShardContext) -> dict:
    """One shard's profile (a worker's job): its accumulator's state and the layout."""
    acc, layout = _profile_pass(module, columns[0], config, context.batch_size, False)
    return {"state": acc.state_dict(), "layout": layout}


def _spread_profile(module: nn.Module, inputs, config: ProfileConfig, runtime: Runtime):
    """The profile's pass spread over ``runtime.parallel``'s workers: their states merged in shard order."""
    results, spread = sharded_pass("coverage profile", _profile_shard, module, (inputs,), config,
                                   runtime=runtime)
    acc = ProfileAccumulator()
    for result in results:
        acc.merge(ProfileAccumulator().load_state_dict(result["state"]))
    return acc, results[0]["layout"], spread


def _selection(layers) -> str | tuple[str, ...] | None:
    """The ``layers`` a profile records: one name as it is, several as a tuple."""
    return tuple(layers) if layers is not None and not isinstance(layers, str) else layers
