"""Coverage's configs: what determines a result of :func:`~deepfault.coverage.measure_coverage`,
:func:`~deepfault.coverage.rank_inputs`, :func:`~deepfault.coverage.compute_profile` and
:func:`~deepfault.coverage.fit_surprise`, each field declared once with its constraint
(:mod:`deepfault.core.constraints`), so the API and ``deepfault coverage ...`` refuse the same
values.

- :class:`CoverageConfig`: measuring and ranking (``coverage measure`` / ``coverage rank``):
  the criteria and their parameters, the prioritisers, and the fitted states they read (a
  profile, a surprise state: the object, or the path of its ``.npz`` file).
- :class:`ProfileConfig` and :class:`SurpriseConfig`: the two fits on the training split. They
  are configs of their own because they make the states a :class:`CoverageConfig` names: a
  fit takes neither criteria nor prioritisers, and a surprise fit's LSA settings mean nothing
  to a measurement.

The name lists (:func:`parse_criteria`, :func:`parse_by`) live here too: a config normalises
its names when it is made, with the one message of each.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .profile import Profile
    from .surprise import Surprise

from ..checks import MAX_INPUTS, MAX_SECTIONS, check_int
from ..core.constraints import Each, FieldConstraint, Flag, Interval, Options, Text, param, validate
from ..core.registry import unknown_name
from ..errors import DeepFaultError
from ._shape import _DEFAULT_LAYERS, _LAYERS, TRANSFORMS, Config, LayerNames
from .criteria import CRITERIA, _scale, _threshold
from .profile import ProfileConfig
from .scored import SA_SECTIONS, SCORE_CRITERIA, _sa_upper
from .surprise import SurpriseConfig
from .uncertainty import UNCERTAINTY

__all__ = ["COVERAGE_ORDERS", "DEFAULT_BY", "TRANSFORMS", "CoverageConfig", "FittedState", "LayerNames",
           "ProfileConfig", "SurpriseConfig", "list_prioritisers", "parse_by", "parse_criteria",
           "parse_thresholds"]

#: The prioritisers that order by coverage of neuron items (one ranking per criterion).
COVERAGE_ORDERS = ("cam", "ctm")

#: What ``by`` ranks with when not told: everything that needs nothing fitted on the training
#: data (the four uncertainty scores, cheap and as good as coverage in Weiss and Tonella's
#: study, and the coverage orders of earlier versions; docs/decisions.md).
DEFAULT_BY = ("gini", "margin", "entropy", "confidence", "cam", "ctm")


_UNCERTAINTY_ORDER = ("gini", "margin", "entropy", "confidence")



def list_prioritisers() -> list[str]:
    """Every name ``by`` takes, in the order ``"all"`` ranks them."""
    from .surprise import SURPRISE_KINDS

    extra = [n for n in UNCERTAINTY.names() if n not in _UNCERTAINTY_ORDER]
    return [*_UNCERTAINTY_ORDER, *extra, *SURPRISE_KINDS, *COVERAGE_ORDERS]


def _criterion_names() -> list[str]:
    return [*CRITERIA.names(), *SCORE_CRITERIA.names()]


def _names(value: str | Iterable[str]) -> list[str]:
    parts = value.split(",") if isinstance(value, str) else list(value)
    return [str(p).strip().lower() for p in parts if str(p).strip()]


def parse_by(by: str | Iterable[str]) -> tuple[str, ...]:
    """Prioritiser names from ``"gini,lsa,cam"``, a list, or ``"all"``, in the order given,
    without repeats.

    Raises:
        DeepFaultError: An unknown name (the message lists the known ones) or none at all.

    Examples:
        >>> parse_by("gini, cam,gini")
        ('gini', 'cam')
    """
    known = list_prioritisers()
    names: list[str] = []
    for part in by.split(",") if isinstance(by, str) else list(by):
        name = str(part).strip().lower()
        for n in known if name == "all" else [name] if name else []:
            if n not in known:
                raise DeepFaultError(unknown_name("prioritiser", str(part).strip(), [*known, "all"]))
            if n not in names:
                names.append(n)
    if not names:
        raise DeepFaultError(f"no prioritiser given; known: {', '.join(known)}, or all")
    return tuple(names)


def parse_criteria(criteria: str | Iterable[str]) -> tuple[str, ...]:
    """Criterion names from ``"nc,kmnc"``, a list, or ``"all"`` (every registered neuron
    criterion, in registration order), in the order given, without repeats. The surprise
    coverages of :data:`~deepfault.coverage.scored.SCORE_CRITERIA` are taken by name.

    Raises:
        DeepFaultError: An unknown name (the message lists the known ones) or none at all.
    """
    names: list[str] = []
    for name in _names(criteria):
        for n in [k for k, _ in CRITERIA.items()] if name == "all" else [name]:
            if n not in SCORE_CRITERIA:
                try:
                    CRITERIA.get(n)
                except DeepFaultError as err:
                    known = ", ".join(k for k, _ in SCORE_CRITERIA.items())
                    raise DeepFaultError(f"{err}; surprise coverage: {known} (with a surprise "
                                         "state)") from None
            if n not in names:
                names.append(n)
    if not names:
        raise DeepFaultError(f"no coverage criterion given; known: {', '.join(CRITERIA.names())}")
    return tuple(names)


def parse_thresholds(text: str) -> tuple[float, ...]:
    """``0,0.25,0.5`` -> ``(0.0, 0.25, 0.5)`` (the command line's ``--threshold``).

    Raises:
        DeepFaultError: Not a finite number or comma-separated finite numbers.
    """
    import math

    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        values = ()
    if not values or not all(math.isfinite(v) for v in values):
        raise DeepFaultError(f"expected a finite number or comma-separated numbers such as 0,0.25,0.5; got "
                             f"{text!r}")
    return values


def _thresholds(threshold) -> tuple[float, ...]:
    """One threshold, several, or groups of several (the command line's ``--threshold 0,0.5 1``),
    as one tuple without repeats.
    """
    values = threshold if isinstance(threshold, (list, tuple)) else [threshold]
    flat = [t for v in values for t in (v if isinstance(v, (list, tuple)) else [v])]
    out = tuple(dict.fromkeys(_threshold(t) for t in flat))
    if not out:
        raise DeepFaultError("threshold needs at least one number")
    return out


# --------------------------------------------------------------------------- two constraints of coverage's


#: What a fitted state's file name must be: a text (the file is read when the entry runs).
_PATH = Text()


@dataclass(frozen=True)
class FittedState(FieldConstraint):
    """A state fitted on the training data: the object (a ``kind``), or the path of its ``.npz``
    file (read when the entry runs).
    """

    kind: str = "Profile"
    none: bool = True
    words: tuple[str, ...] = ()
    role: str | None = "input"

    def state_class(self) -> type:
        """The state's class (``Profile`` or ``Surprise``; imported when asked: the fits import
        their configs).
        """
        from .profile import Profile
        from .surprise import Surprise

        return {"Profile": Profile, "Surprise": Surprise}[self.kind]

    def accepts(self, value) -> bool:
        if isinstance(value, self.state_class()):
            return True
        return isinstance(value, (str, os.PathLike)) and _PATH.accepts(os.fspath(value))

    def convert(self, text: str):
        return _PATH.convert(text)

    def expected(self) -> str:
        return f"a {self.kind} or the path of one"

    def hostile(self) -> tuple:
        return ("", "a\x00b", 3)


# --------------------------------------------------------------------------- the configs


@dataclass(frozen=True)
class CoverageConfig(Config):
    """Everything that determines a coverage measurement or a ranking.

    Attributes:
        criteria: Coverage criteria (``"nc,kmnc"``, a tuple, or ``"all"``: every neuron
            criterion; :mod:`deepfault.coverage.criteria` has the formulas); ``lsc``, ``dsc``
            and ``mdsc`` are Kim et al.'s surprise coverages
            (:data:`~deepfault.coverage.scored.SCORE_CRITERIA`). ``rank_inputs``: the criteria of
            ``cam``/``ctm`` (neuron criteria only).
        threshold: ``t`` of ``nc``/``nac``; several give one result each (DeepXplore's
            coverage-versus-threshold curve).
        sections: ``k`` of ``kmnc``.
        top_k: ``k`` of ``tknc``/``tknp``.
        scale: ``s`` of ``nbc``/``snac``.
        profile: The model's profile (:func:`~deepfault.coverage.compute_profile`) or the
            path of its ``.npz`` (needed by ``kmnc``, ``nbc``, ``snac``); it also supplies
            ``layers`` and ``transform`` when they are ``None``.
        surprise: The fitted surprise state (:func:`~deepfault.coverage.fit_surprise`) or the
            path of its ``.npz``, read by the surprise coverages and by ``lsa``/``dsa``/``mdsa``;
            its own layers and transform are captured. ``None`` with a prepared model whose data
            set has a training split: fitted there first, with :class:`SurpriseConfig`'s
            defaults (the outcome says so).
        sa_upper: ``U`` of the surprise coverages (``None``: the largest finite score of the
            inputs measured, so not comparable between input sets).
        sa_sections: Buckets of the surprise coverages (Kim et al. use 1,000).
        layers: Neuron layers (``"deepxplore"``, module names, or ``None``: the default layers).
        transform: ``"raw"`` (the default) or ``"layer-minmax"`` (``None``: the profile's, else
            raw).
        by: ``rank_inputs``' prioritisers (``"gini,lsa,cam"``, a tuple, or ``"all"``); default:
            everything that needs nothing fitted.
        growth: ``measure_coverage``: record coverage after ``1, 2, 5, 10, ...`` inputs.

    Examples:
        >>> CoverageConfig(criteria="nc,tknc", threshold=[0, 0.5]).criteria
        ('nc', 'tknc')
        >>> CoverageConfig(sections=0)
        Traceback (most recent call last):
        ...
        deepfault.errors.DeepFaultError: sections must be an integer >= 1; got 0
    """

    criteria: tuple[str, ...] = param(("nc",), Options(_criterion_names, many=True, words=("all",)),
                                      metavar="NAMES",
                                      help="coverage criteria, or 'all' (every neuron criterion)")
    threshold: tuple[float, ...] = param((0.0,), Each(Interval(float)), metavar="T",
                                         help="activation threshold of nc/nac; several give coverage "
                                         "versus threshold")
    sections: int = param(10, Interval(int, 1, MAX_SECTIONS),
                          metavar="K", help="KMNC sections per neuron (DeepHunter uses 1000)")
    top_k: int = param(1, Interval(int, 1, MAX_INPUTS), metavar="K", help="TKNC/TKNP: top neurons per layer")
    scale: float = param(0.0, Interval(float, 0.0), metavar="S",
                         help="NBC/SNAC: corners start S standard deviations beyond the profiled range")
    profile: str | Profile | None = param(None, FittedState("Profile"), metavar="FILE",
                                          help="profile from 'deepfault coverage profile' (needed by kmnc, "
                                          "nbc, snac)")
    surprise: str | Surprise | None = param(None, FittedState("Surprise"), metavar="FILE",
                                            help="surprise state from 'deepfault coverage surprise' (needed "
                                            "by lsc, dsc, mdsc and lsa, dsa, mdsa; default: fit one on the "
                                            "model's training split first, with that command's defaults, and "
                                            "say so)")
    sa_upper: float | None = param(None, Interval(float, 0.0, None, closed="neither", none=True), metavar="U",
                                   help="surprise coverage buckets [0, U) (default: the largest finite score "
                                   "of the measured inputs, printed; not comparable between input sets)")
    sa_sections: int = param(SA_SECTIONS, Interval(int, 1, MAX_SECTIONS),
                             metavar="K", help="surprise coverage buckets (Kim et al.'s)")
    layers: str | Sequence[str] | None = param(None, LayerNames(), metavar="NAMES", help=_LAYERS.format(
        _DEFAULT_LAYERS + "; or the profile's layers; a surprise state brings its own"))
    transform: str | None = param(None, Options(TRANSFORMS, none=True),
                                  help="neuron values: 'raw', or 'layer-minmax' (each input's layer output "
                                  "scaled to [0, 1], DeepXplore's) (default: the profile's, else raw)")
    by: tuple[str, ...] = param(DEFAULT_BY, Options(list_prioritisers, many=True, words=("all",)),
                                metavar="NAMES",
                                help="comma-separated prioritisers, or 'all'; cam/ctm rank once per "
                                "--criteria (default: every one that needs nothing fitted, "
                                f"{','.join(DEFAULT_BY)})")
    growth: bool = param(True, Flag(), help="record coverage after 1, 2, 5, 10, ... inputs")

    def __post_init__(self):
        # the checks of earlier versions first, for their messages; then the declarations
        if isinstance(self.criteria, (str, list, tuple)):
            self._set("criteria", parse_criteria(self.criteria))
        if isinstance(self.by, (str, list, tuple)):
            self._set("by", parse_by(self.by))
        self._set("threshold", _thresholds(self.threshold))
        check_int("sections", self.sections)
        check_int("top_k", self.top_k)
        self._set("scale", _scale(self.scale))
        self._set("sa_upper", _sa_upper(self.sa_upper))
        check_int("sa_sections", self.sa_sections, maximum=MAX_SECTIONS)
        if self.transform is not None:
            from ..core.capture import check_transform

            check_transform(self.transform)
        self._tuple("layers")
        validate(self)
        self._check_states()

    def _check_states(self) -> None:
        for name, kind in (("profile", "Profile"), ("surprise", "Surprise")):
            value = getattr(self, name)
            if value is not None and not FittedState(kind).accepts(value):
                got = type(value).__name__
                raise DeepFaultError(f"{name} must be a {kind} or the path of one; got {got}")

    @property
    def neuron_criteria(self) -> tuple[str, ...]:
        """The criteria over neuron values."""
        return tuple(n for n in self.criteria if n not in SCORE_CRITERIA)

    @property
    def scored_criteria(self) -> tuple[str, ...]:
        """The surprise coverages (criteria over one score per input)."""
        return tuple(n for n in self.criteria if n in SCORE_CRITERIA)

    @property
    def scored_by(self) -> tuple[str, ...]:
        """The prioritisers that read a surprise state."""
        from .surprise import SURPRISE_KINDS

        return tuple(n for n in self.by if n in SURPRISE_KINDS)

    def record(self, command: str, batch_size: int | str) -> _Record:
        """What ``coverage measure`` (``command="measure"``) or ``coverage rank`` records as its
        configuration: the fields it reads and the batch size it ran with.
        """
        d = self.to_dict()
        keep = [*_SHARED, *(("sa_upper", "sa_sections") if command == "measure" else ("by",))]
        out = {k: d[k] for k in keep}
        out["layers"] = None if self.layers is None else (
            [self.layers] if isinstance(self.layers, str) else list(self.layers))
        return _Record({**out, "batch_size": batch_size})


_SHARED = ("criteria", "threshold", "sections", "top_k", "scale", "surprise", "layers", "transform",
           "profile")


@dataclass(frozen=True)
class _Record:
    """A configuration as a result document records it (``write_outcome``'s ``config``)."""

    values: dict
    seed: None = None

    def to_dict(self) -> dict:
        return dict(self.values)


def state_of(value, kind: type, load) -> Any:
    """A fitted state named by a config: the object, or read from its path (``None`` stays)."""
    if value is None or isinstance(value, kind):
        return value
    return load(value)

