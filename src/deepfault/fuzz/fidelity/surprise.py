"""Surprise adequacy as a fidelity check: a mutant is realistic when M1's activations on it lie
near the training data's (issue 28; Kim, Feldt and Yoo, ICSE 2019).

| spec | a mutant passes when | threshold ``T`` |
| --- | --- | --- |
| ``dsa`` | its DSA ``<= T`` | the 90th percentile of the test inputs' DSA (:data:`DEFAULT_PERCENTILE`) |
| ``dsa:T`` | its DSA ``<= T`` | the number ``T`` |
| ``dsa:pQ`` | its DSA ``<= T`` | the ``Q``-th percentile of the test inputs' DSA (``0 < Q <= 100``) |
| ``dsa:T:FILE``, ``dsa::FILE``, ``dsa:pQ:FILE`` | the same | the same, from the state in ``FILE`` |
| ``lsa...``, ``mdsa...`` | the same with LSA or MDSA | the same |

``FILE`` is a state :func:`~deepfault.coverage.surprise.save_surprise` wrote, used instead of
the cached fit.

The score is M1's own: :mod:`deepfault.coverage.surprise` on the activation traces (ATs) of
the layer before the logits (its default), each input within the class M1 predicts for it.
A campaign takes the ATs from the forward pass of M1 that the oracle runs anyway
(:class:`TraceFidelity`), so the check costs no forward pass and no second model, and it
works on any input shape. The threshold is absolute (the mutant's own score, not the rise
over its seed's): the test inputs are realistic by definition, so a high percentile of their
scores says how surprising a realistic input may be; a rise over the seed would let the
mutants of an already unusual seed drift further than those of a typical one.

The state is fitted with M1 on the training split, once, and cached under
``$DEEPFAULT_CACHE/surprise/`` (else the user cache directory), keyed by M1's weights, the
layers and the training data's bytes; the test inputs' scores that a percentile needs are
cached beside it, keyed by the state, the kind and the test data's bytes.

Examples:
    >>> import torch
    >>> from torch import nn
    >>> torch.manual_seed(0) and None
    >>> m1 = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    >>> fid = make_surprise_fidelity("dsa:p90", model=m1, train_inputs=torch.randn(200, 4),
    ...                              test_inputs=torch.randn(50, 4), bounds=(-5.0, 5.0), cache=False)
    >>> fid.check(torch.randn(6, 4)).passed.shape
    torch.Size([6])
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ...core.batches import iterate_batches
from ...core.capture import as_tensor
from ...core.memory import check_batch_size
from ...core.registry import suggestion
from ...coverage.surprise import (
    SURPRISE_KINDS,
    Surprise,
    load_surprise,
)
from ...coverage.surprise_cache import cached_surprise
from ...errors import DeepFaultError
from .checks import FidelityCheck, TraceFidelity, register_fidelity

__all__ = ["DEFAULT_PERCENTILE", "SurpriseFidelity", "SurpriseSpec",
           "make_surprise_fidelity", "parse_surprise_spec", "percentile_threshold", "reference_scores",
           "surprise_cache_dir"]

log = logging.getLogger(__name__)

#: ``dsa`` without a threshold: ``T`` is this percentile of the test inputs' scores. Measured on
#: MNIST (docs/drfuzz.md, "A realism filter from M1's activations"): it keeps 90% of the real
#: test images and rejects 99.8% of uniform noise and 84% of test images with 30% of their
#: pixels replaced by noise, near the best trade-off (Youden's J 0.74 against the best 0.76 at
#: the 85th); the 99th rejects only 22% of the noise.
DEFAULT_PERCENTILE = 90.0
#: Bumped when what the cache holds changes meaning.
CACHE_VERSION = 1


@dataclass(frozen=True)
class SurpriseSpec:
    """A parsed ``--fidelity`` spec of a surprise check.

    Attributes:
        kind: ``lsa``, ``dsa`` or ``mdsa``.
        threshold: ``T``, the largest score that passes; ``None`` when a percentile sets it.
        percentile: ``Q``: ``T`` is the ``Q``-th percentile of the test inputs' scores.
        file: A fitted state to use instead of the cached fit (``None``: fit, cached).
    """

    kind: str
    threshold: float | None = None
    percentile: float | None = DEFAULT_PERCENTILE
    file: str | None = None

    @property
    def rule(self) -> str:
        """How the threshold is set, in words."""
        if self.threshold is not None:
            return f"{self.kind} <= {self.threshold:g}"
        return f"{self.kind} <= the {self.percentile:g}th percentile of the test inputs' {self.kind}"


def parse_surprise_spec(spec: str) -> SurpriseSpec:
    """``KIND``, ``KIND:T``, ``KIND:pQ``, ``KIND:T:FILE``, ``KIND::FILE`` or ``KIND:pQ:FILE``
    (``KIND`` one of lsa, dsa, mdsa) as a :class:`SurpriseSpec`, every part checked, the
    file's existence included, so a command can refuse a bad spec before any work.

    Raises:
        DeepFaultError: A one-line message naming the part that is wrong and what it takes.

    Examples:
        >>> parse_surprise_spec("dsa:0.8")
        SurpriseSpec(kind='dsa', threshold=0.8, percentile=None, file=None)
        >>> parse_surprise_spec("lsa:p95").percentile
        95.0
    """
    if not isinstance(spec, str):
        raise DeepFaultError(f"a surprise fidelity spec must be a string such as 'dsa:0.9'; got {spec!r}")
    kind, sep, rest = spec.partition(":")
    kind = kind.strip().lower()
    if kind not in SURPRISE_KINDS:
        raise DeepFaultError(f"unknown surprise check {kind!r} in {spec!r}"
                             f"{suggestion(kind, SURPRISE_KINDS)}; known: "
                             f"{', '.join(SURPRISE_KINDS)}")
    arg, sep2, file = rest.partition(":")
    arg = arg.strip()
    form = (f"'{kind}:T' (T a number: the largest {kind} that passes{', >= 0' if kind != 'lsa' else ''}) or "
            f"'{kind}:pQ' (the Q-th percentile of the test inputs' {kind}, 0 < Q <= 100)")
    if sep and not arg and not sep2:
        raise DeepFaultError(f"the threshold in {spec!r} is empty; give {form}, or plain '{kind}'")
    threshold: float | None = None
    percentile: float | None = DEFAULT_PERCENTILE
    if arg[:1].lower() == "p":
        try:
            percentile = float(arg[1:])
        except ValueError:
            percentile = math.nan
        if not (math.isfinite(percentile) and 0 < percentile <= 100):
            raise DeepFaultError(f"the percentile in {spec!r} must be pQ with 0 < Q <= 100; "
                                 f"got {arg!r}")
    elif arg:
        try:
            threshold = float(arg)
        except ValueError:
            threshold = math.nan
        if not math.isfinite(threshold) or (kind != "lsa" and threshold < 0):
            raise DeepFaultError(f"the threshold in {spec!r} must be {form}; got {arg!r}")
        percentile = None
    if sep2:
        if not file.strip():
            raise DeepFaultError(f"the state file in {spec!r} is empty; give '{kind}:T:FILE' or leave "
                                 "out the second ':'")
        if not Path(file).expanduser().is_file():
            raise DeepFaultError(f"the surprise state {file!r} in {spec!r} does not exist; fit one with "
                                 "deepfault.coverage.fit_surprise and save_surprise, or leave out ':FILE' to "
                                 "fit it on the training split")
    return SurpriseSpec(kind, threshold, percentile, file if sep2 else None)


# --- the check ---------------------------------------------------------------------------------


class SurpriseFidelity(TraceFidelity):
    """Passes a mutant whose surprise adequacy (``kind``) against the training data is at most
    ``threshold``.

    A campaign scores it from the activation traces of the forward pass of M1 it runs anyway
    (:meth:`check_traces`); on its own, :meth:`check` runs ``model`` (M1) itself.

    Args:
        surprise: The fitted state (:func:`~deepfault.coverage.surprise.fit_surprise` of M1).
        kind: ``lsa``, ``dsa`` or ``mdsa``.
        threshold: ``T``: a mutant passes when its score is ``<= T`` (NaN never passes).
        model: M1, for :meth:`check` on inputs (``None``: only :meth:`check_traces`).
        bounds: The data's range (recorded; the score does not use it).
        device: Where the scores are computed when :meth:`check` runs the model.
        batch_size: Inputs per forward pass of :meth:`check`; the answers do not depend on it.
        rule: How ``threshold`` was chosen, for results.
    """

    name = "surprise"

    def __init__(self, surprise: Surprise, *, kind: str = "dsa", threshold: float,
                 model: nn.Module | None = None, bounds: tuple[float, float],
                 device: torch.device | str = "cpu", batch_size: int | str = "auto", rule: str | None = None):
        super().__init__(bounds=bounds, device=device)
        if not isinstance(surprise, Surprise):
            raise DeepFaultError(f"surprise must be a fitted Surprise state; got {type(surprise).__name__}")
        if kind not in SURPRISE_KINDS:
            raise DeepFaultError(f"kind must be one of {', '.join(SURPRISE_KINDS)}; got {kind!r}")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or math.isnan(threshold):
            raise DeepFaultError(f"the {kind} threshold must be a number; got {threshold!r}")
        if model is not None:
            surprise.check_model(model)
        self.surprise, self.kind, self.threshold = surprise, kind, float(threshold)
        self.model, self.batch_size = model, check_batch_size(batch_size)
        self.rule = rule or f"{kind} <= {self.threshold:g}"
        self.name = kind

    @property
    def layers(self) -> tuple[str, ...]:
        return tuple(self.surprise.layers)

    @property
    def transform(self) -> str:
        return self.surprise.transform

    def reference(self, roots: torch.Tensor) -> torch.Tensor:
        """``(R,)`` zeros: the threshold is absolute, no root contributes to it."""
        return torch.zeros(len(roots), device=self.device)

    def trace_scores(self, ats: torch.Tensor, classes) -> torch.Tensor:
        """``(B,)`` float64 scores of ``(B, M)`` ATs of inputs that M1 assigns to ``classes``."""
        return torch.from_numpy(self.surprise.score(self.kind, ats, classes))

    def input_scores(self, inputs) -> torch.Tensor:
        """``(B,)`` float64 scores of ``inputs`` ``(B, ...)``: one pass of :attr:`model`."""
        if self.model is None:
            raise DeepFaultError("this surprise check has no model to run; score activation traces with "
                                 "check_traces, or give model=M1")
        x = as_tensor(inputs, name="mutants")
        out = torch.empty(len(x), dtype=torch.float64)
        for batch in iterate_batches(self.model, x, layers=list(self.layers), transform=self.transform,
                                     batch_size=self.batch_size):
            assert batch.values is not None
            assert batch.layout is not None
            if batch.start == 0:
                self.surprise.check_layout(batch.layout)
            out[batch.start : batch.stop] = self.trace_scores(batch.values, batch.outputs.argmax(dim=1))
        return out

    def scores(self, mutants: torch.Tensor, ref_rows: torch.Tensor) -> torch.Tensor:
        return self.input_scores(mutants)

    def limits(self, ref_rows: torch.Tensor) -> torch.Tensor:
        return torch.full((len(ref_rows),), self.threshold, dtype=torch.float64)

    def verdict(self, scores: torch.Tensor, device: torch.device | str | None = None) -> FidelityCheck:
        """The check's outcome for ``scores``: passed when ``score <= threshold``."""
        scores = scores.to(torch.float64).cpu()
        limits = torch.full_like(scores, self.threshold)
        out = torch.device(device) if device is not None else scores.device
        return FidelityCheck(scores.to(out), limits.to(out), (scores <= limits).to(out))

    def check(self, mutants, ref_rows=None) -> FidelityCheck:
        """Score inputs of any shape ``(B, ...)`` by running M1 (``ref_rows`` is not needed)."""
        x = as_tensor(mutants, name="mutants")
        if ref_rows is not None and len(ref_rows) != len(x):
            raise DeepFaultError(f"ref_rows must hold one reference row per mutant ({len(x)}); "
                                 f"got {len(ref_rows)}")
        return self.verdict(self.input_scores(x), x.device)

    def check_traces(self, ats: torch.Tensor, classes) -> FidelityCheck:
        return self.verdict(self.trace_scores(ats, classes), ats.device)

    def to_dict(self) -> dict:
        return {"name": self.kind, "bounds": list(self.bounds), "threshold": self.threshold,
                "rule": self.rule, "layers": list(self.layers), "transform": self.transform,
                "model_sha256": self.surprise.model_hash, "fitted_on": self.surprise.num_inputs,
                "grouping": self.surprise.grouping}


# --- the fitted state and the test scores, cached ----------------------------------------------


def surprise_cache_dir() -> Path:
    """``$DEEPFAULT_CACHE/surprise`` (else the user cache directory's)."""
    from ...coverage.surprise_cache import _user_folder

    return _user_folder()


def _data_hash(x) -> str:
    t = as_tensor(x).detach().cpu().contiguous()
    h = hashlib.blake2b(digest_size=16)
    h.update(str((tuple(t.shape), str(t.dtype))).encode())
    h.update(t.numpy().view(np.uint8).reshape(-1).data if t.numel() else b"")
    return h.hexdigest()


def _state_hash(s: Surprise) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(json.dumps(s.to_dict(), sort_keys=True, default=str).encode())
    h.update(np.ascontiguousarray(s.ats).data)
    h.update(np.ascontiguousarray(s.classes).data)
    return h.hexdigest()


def reference_scores(state: Surprise, model: nn.Module, test_inputs, kind: str, *,
                     cache: bool | str | os.PathLike = True, batch_size: int | str = "auto") -> np.ndarray:
    """``(N,)`` float64 ``kind`` scores of the test inputs (what a percentile threshold reads), cached."""
    from ...coverage.surprise import surprise_scores

    folder = _folder(cache)
    path = None
    if folder is not None:
        key = json.dumps([CACHE_VERSION, _state_hash(state), kind, _data_hash(test_inputs)])
        path = folder / f"test-{hashlib.sha256(key.encode()).hexdigest()[:16]}.npz"
        if path.is_file():
            try:
                with np.load(path, allow_pickle=False) as npz:
                    scores = np.asarray(npz["scores"], dtype=np.float64)
                if scores.shape == (len(test_inputs),):
                    return scores
            except Exception as err:  # noqa: BLE001 - any unreadable cache file is recomputed
                log.warning("cached test scores %s unreadable (%s); scoring again", path, err)
    scores = surprise_scores(model, test_inputs, state, kinds=(kind,), batch_size=batch_size)[kind]
    if path is not None:
        from ..._io import write_npz

        try:
            write_npz(path, {"scores": scores})
        except OSError as err:
            log.warning("cannot cache the test scores in %s (%s)", path, err)
    return scores


def _folder(cache) -> Path | None:
    if cache is False or cache is None:
        return None
    return surprise_cache_dir() if cache is True else Path(cache)


def percentile_threshold(scores: np.ndarray, q: float) -> float:
    """The smallest score with at least ``q``% of ``scores`` at or below it (NaN counts as
    ``inf``): the test inputs that pass a threshold of ``T`` are then at least ``q``%.
    """
    s = np.where(np.isnan(scores), np.inf, np.asarray(scores, dtype=np.float64))
    if len(s) == 0:
        raise DeepFaultError("a percentile threshold needs test inputs to score; give the threshold as a "
                             "number")
    return float(np.quantile(s, q / 100.0, method="inverted_cdf"))


def make_surprise_fidelity(spec: str | SurpriseSpec, *, model: nn.Module | None, train_inputs=None,
                           test_inputs=None, bounds: tuple[float, float], device: torch.device | str = "cpu",
                           cache: bool | str | os.PathLike = True,
                           progress: bool = False) -> SurpriseFidelity:
    """The surprise check that ``spec`` names, fitted (or loaded) for ``model`` (M1).

    Args:
        spec: A spec (:func:`parse_surprise_spec`) or a parsed :class:`SurpriseSpec`.
        model: M1, whose activations are scored.
        train_inputs: The training split the state is fitted on (not needed with a ``FILE``).
        test_inputs: Realistic inputs whose scores a percentile threshold reads (the test split).
        bounds: The data's range.
        device: Where scores are computed.
        cache: ``True``: the cache folder; a folder; ``False``: none.
        progress: Progress bar while fitting.

    Raises:
        DeepFaultError: A bad spec, no model, a state fitted for another model, no training
            inputs to fit on, or no test inputs for a percentile.
    """
    parsed = spec if isinstance(spec, SurpriseSpec) else parse_surprise_spec(spec)
    if not isinstance(model, nn.Module):
        raise DeepFaultError(f"the {parsed.kind} check scores M1's activations: give model=M1 "
                             "(a torch.nn.Module)")
    if parsed.file is not None:
        state = load_surprise(parsed.file)
        state.check_model(model)
    elif train_inputs is None or len(train_inputs) == 0:
        raise DeepFaultError("the surprise check fits on the data set's training split, and there is none; "
                             "fit a state on other realistic inputs (deepfault.coverage.fit_surprise, "
                             "save_surprise) and give it as 'dsa:T:FILE'")
    else:  # fitted with the defaults, through the one cache of fitted states (run and xplore share it)
        state = cached_surprise(model, train_inputs, cache_dir=_folder(cache), progress=progress).surprise
    threshold = parsed.threshold
    if threshold is None:
        if test_inputs is None or len(test_inputs) == 0:
            raise DeepFaultError(f"'{parsed.kind}:p{parsed.percentile:g}' reads the test inputs' scores and "
                                 f"there are none; give the threshold as a number ('{parsed.kind}:T')")
        assert parsed.percentile is not None
        scores = reference_scores(state, model, test_inputs, parsed.kind, cache=cache)
        threshold = percentile_threshold(scores, parsed.percentile)
    rule = parsed.rule if parsed.threshold is not None else f"{parsed.rule} ({threshold:.4g})"
    return SurpriseFidelity(state, kind=parsed.kind, threshold=threshold, model=model, bounds=bounds,
                            device=device, rule=rule)


def _factory(kind: str):
    def make(arg: str | None, *, bounds, device="cpu", train_inputs=None, model=None, test_inputs=None,
             **_) -> SurpriseFidelity:
        spec = kind if arg is None else f"{kind}:{arg}"
        return make_surprise_fidelity(spec, model=model, train_inputs=train_inputs, test_inputs=test_inputs,
                                      bounds=bounds, device=device)

    make.__doc__ = f"``{kind}``, ``{kind}:T``, ``{kind}:pQ``, ``{kind}:T:FILE``: see make_surprise_fidelity"
    return make


def _arg_check(kind: str):
    def check(arg: str | None) -> SurpriseSpec:
        return parse_surprise_spec(kind if arg is None else f"{kind}:{arg}")

    return check


for _kind in SURPRISE_KINDS:
    register_fidelity(_kind, check_arg=_arg_check(_kind))(_factory(_kind))
