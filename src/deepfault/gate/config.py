"""The settings of a gate (``deepfault gate``): which stages run and the policy that judges them.

Every threshold is a field declared once (:mod:`deepfault.core.constraints`); a policy file
(:mod:`.policy`) and the command line's options set the same fields. ``None`` switches a
check off. Defaults and why:

- ``max_negative_flip_rate=0.01``: at most 1 in 100 held-out inputs that M1 got right may
  M2 get wrong (the negative flip rate of Yan et al., CVPR 2021).
- ``max_class_flip_rate=0.05``: no class may lose more than 5 in 100 of its inputs, so a
  damage concentrated on one class fails even when the overall rate is small; the reason
  names the class.
- ``critical_classes`` with ``max_critical_flip_rate=0.0``: classes named as critical may
  lose none.
- ``not_significantly_worse=True`` at ``alpha=0.05``: M2's accuracy may be lower only when
  an exact McNemar test on the discordant pairs cannot tell it apart from M1's.
- ``max_corpus_regressions=0``: no corpus entry that M1 gets right may M2 get wrong.
- ``budget="1m"``: a one-minute fuzz (``"0"`` skips it); its faults are reported and, with
  ``max_new_faults``, judged.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from ..checks import MAX_CLASSES, MAX_GRID, MAX_INPUTS, MAX_SEED
from ..core.constraints import Checked, Declared, Each, FilePath, Flag, Interval, file_param, param, validate
from ..errors import DeepFaultError

__all__ = ["GateConfig", "GateFiles", "THRESHOLDS", "LABELLED_THRESHOLDS", "parse_gate_budget"]

#: The policy's fields: the thresholds a policy file may set (:mod:`.policy`).
THRESHOLDS = (
    "max_disagreement_rate",
    "max_negative_flip_rate",
    "max_class_flip_rate",
    "critical_classes",
    "max_critical_flip_rate",
    "min_accuracy_delta",
    "not_significantly_worse",
    "alpha",
    "max_corpus_failures",
    "max_corpus_regressions",
    "max_new_faults",
)
#: The thresholds that need labelled held-out inputs.
LABELLED_THRESHOLDS = (
    "max_negative_flip_rate",
    "max_class_flip_rate",
    "max_critical_flip_rate",
    "min_accuracy_delta",
    "not_significantly_worse",
)


def parse_gate_budget(name: str, value: object) -> str:
    """The fuzz stage's budget as text: ``"0"`` (no fuzzing) or a campaign budget (``"1m"``,
    ``"300s"``, ``"5000it"``; :func:`deepfault.fuzz.campaign.budget.parse_budget`).

    Raises:
        DeepFaultError: Neither, naming ``name``.
    """
    from ..fuzz.campaign.budget import parse_budget  # noqa: PLC0415  (the one budget grammar)

    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    if text in ("0", "0s", "0m", "0it"):
        return "0"
    if text is None:
        raise DeepFaultError(
            f"{name} must be 0 (no fuzzing) or a number with a unit ('60s', '1m', '5000it'); got {value!r}"
        )
    try:
        parse_budget(text)
    except DeepFaultError as err:
        raise DeepFaultError(
            f"{name} must be 0 (no fuzzing) or a number with a unit ('60s', '1m', '5000it'); got {value!r}"
        ) from err
    return text


def _fidelity_files(spec: str) -> list[str]:
    from ..fuzz.fidelity.checks import fidelity_files  # noqa: PLC0415  (as _fidelity)

    return fidelity_files(spec)


def _fidelity(name: str, value: object) -> str:
    from ..core.constraints import constraint_of  # noqa: PLC0415
    from ..fuzz.campaign import CampaignConfig  # noqa: PLC0415  (the one fidelity grammar)

    constraint_of(CampaignConfig, "fidelity").check(name, value)
    return str(value)


def _rate(default: float | None, help: str):
    return param(default, Interval(float, 0.0, 1.0, none=True, words=("off",)), help=help)


@dataclass(frozen=True, kw_only=True)
class GateConfig:
    """What a gate runs and how it judges: keyword-only fields, each declared with its range
    and checked when the config is made (also by :func:`dataclasses.replace`).

    Attributes:
        heldout: Run the held-out comparison (stage 1).
        corpus: The regression corpus folder replayed through M2 (stage 2) and grown with the
            gate's flips and faults; ``None``: no corpus.
        budget: The fuzz stage's budget (stage 3): ``"0"`` skips it.
        fidelity: Its fidelity check (:class:`~deepfault.fuzz.campaign.CampaignConfig`'s;
            ``None``: the default for the inputs' kind).
        add_to_corpus: Add the held-out negative flips and the new fuzz faults to ``corpus``.
        seed: Seed of the fuzz stage.
        worst: Flipped (and disagreeing) inputs kept and shown, worst first.
        max_disagreement_rate: Most share of the held-out inputs where the two models' classes
            differ (labels or none: a quantised model against its float original).
        max_negative_flip_rate: Most share of the held-out inputs that M1 gets right and M2
            wrong.
        max_class_flip_rate: Most negative flip rate of any one class (over its inputs).
        critical_classes: Class indices with their own, stricter limit.
        max_critical_flip_rate: Most negative flip rate of each critical class.
        min_accuracy_delta: Least accuracy delta (M2 - M1), e.g. ``-0.005``.
        not_significantly_worse: Fail when M2 is less accurate and the exact McNemar test
            says so at ``alpha``.
        alpha: Significance level of the McNemar test; the intervals are ``1 - alpha``.
        max_corpus_failures: Most corpus entries M2 gets wrong.
        max_corpus_regressions: Most corpus entries M1 gets right and M2 wrong.
        max_new_faults: Most regression faults the fuzz stage may find.
    """

    heldout: bool = param(True, Flag(), option="--no-heldout", help="skip the held-out comparison")
    corpus: str | None = param(None, FilePath("input", folder=True),
                               metavar="DIR", help="regression corpus folder (replayed, then grown)")
    budget: str = param(
        "1m",
        Checked(
            parse_gate_budget,
            "0 (no fuzzing) or a number with a unit: '60s', '1m', '5000it'",
            bad=("-1", "1x", ""),
        ),
        metavar="B", help="fuzz stage's budget; 0 skips it",
    )
    fidelity: str | None = param(
        None,
        Checked(
            _fidelity,
            "a fidelity check of 'deepfault regress --fidelity' "
            "(discriminator, ssim:T, linf:E, mdsa, none, ...)",
            bad=("bogus", ""),
            none=True,
            role="input",
            names=_fidelity_files,
        ),
        metavar="SPEC", help="the fuzz stage's fidelity check (default: regress's for the inputs' kind)",
    )
    add_to_corpus: bool = param(
        True, Flag(), option="--no-add-to-corpus", help="do not add the gate's flips and faults to the corpus"
    )
    seed: int = param(0, Interval(int, 0, MAX_SEED), metavar="S", help="seed of the fuzz stage")
    worst: int = param(16, Interval(int, 1, MAX_GRID), metavar="N",
                       help="worst flipped inputs kept and shown")
    max_disagreement_rate: float | None = _rate(
        None, "most share of inputs where M1 and M2 disagree; needs no labels ('off': not checked)"
    )
    max_negative_flip_rate: float | None = _rate(
        0.01, "most share of inputs M1 gets right and M2 wrong ('off': not checked)"
    )
    max_class_flip_rate: float | None = _rate(
        0.05, "most negative flip rate of any one class ('off': not checked)"
    )
    critical_classes: tuple[int, ...] | None = param(
        None,
        Each(Interval(int, 0, MAX_CLASSES - 1), none=True),
        help="critical class indices (comma-separated)",
    )
    max_critical_flip_rate: float | None = _rate(0.0, "most negative flip rate of each critical class")
    min_accuracy_delta: float | None = param(
        None,
        Interval(float, -1.0, 1.0, none=True, words=("off",)),
        help="least accuracy delta M2 - M1, e.g. -0.005 ('off': not checked)",
    )
    not_significantly_worse: bool = param(
        True,
        Flag(),
        option="--allow-significantly-worse",
        help="do not fail M2 for being significantly less accurate (exact McNemar test)",
    )
    alpha: float = param(
        0.05,
        Interval(float, 0.0, 0.5, closed="neither"),
        help="significance level of the McNemar test (intervals: 1 - alpha)",
    )
    max_corpus_failures: int | None = param(
        None,
        Interval(int, 0, MAX_INPUTS, none=True, words=("off",)),
        help="most corpus entries M2 gets wrong ('off': not checked)",
    )
    max_corpus_regressions: int | None = param(
        0,
        Interval(int, 0, MAX_INPUTS, none=True, words=("off",)),
        help="most corpus entries M1 gets right and M2 wrong ('off': not checked)",
    )
    max_new_faults: int | None = param(
        None,
        Interval(int, 0, MAX_INPUTS, none=True, words=("off",)),
        help="most regression faults the fuzz stage may find ('off': not checked)",
    )

    def __post_init__(self) -> None:
        for name in THRESHOLDS:
            if getattr(self, name) == "off":
                object.__setattr__(self, name, None)
        if isinstance(self.critical_classes, list):
            object.__setattr__(self, "critical_classes", tuple(self.critical_classes))
        if isinstance(self.budget, int) and not isinstance(self.budget, bool):
            object.__setattr__(self, "budget", str(self.budget))
        validate(self)
        if self.critical_classes is not None and self.max_critical_flip_rate is None:
            raise DeepFaultError(
                "critical_classes needs max_critical_flip_rate (a share from 0 to 1); got 'off'"
            )
        if self.budget != "0":
            object.__setattr__(self, "budget", parse_gate_budget("budget", self.budget))

    @property
    def needs_labels(self) -> tuple[str, ...]:
        """The thresholds set that need labelled held-out inputs."""
        if not self.heldout:
            return ()
        needed = [
            n for n in LABELLED_THRESHOLDS if getattr(self, n) is not None and getattr(self, n) is not False
        ]
        if self.critical_classes is None and "max_critical_flip_rate" in needed:
            needed.remove("max_critical_flip_rate")  # without critical classes it judges nothing
        return tuple(needed)

    def to_dict(self) -> dict:
        """The config as the result document records it."""
        out = asdict(self)
        if self.critical_classes is not None:
            out["critical_classes"] = list(self.critical_classes)
        return out


@dataclass(frozen=True)
class GateFiles(Declared):
    """The files a gate reads beside its models (its own held-out split, its policy) and those a
    pipeline reads after it (JSON, JUnit XML, Markdown), each ``None`` for none.

    Attributes:
        split: Held-out inputs in place of the data set's test split (``.npy`` or ``.npz``).
        policy: The thresholds as a TOML file (:func:`~deepfault.gate.policy.read_policy`).
        out: The JSON result.
        junit: The checks as JUnit XML.
        summary: A Markdown summary.
    """

    split: str | os.PathLike | None = file_param(
        None, "held-out inputs of your own instead: .npy (unlabelled: the disagreement only), .npz with x "
        "(and y for labels), or a data set's .npz (its x_test, y_test)", role="input")
    policy: str | os.PathLike | None = file_param(
        None, f"the thresholds as a TOML file (keys: {', '.join(THRESHOLDS)})", role="input",
        metavar="FILE.toml")
    out: str | os.PathLike | None = file_param(None, "the JSON result", metavar="FILE.json")
    junit: str | os.PathLike | None = file_param(None, "the checks as JUnit XML", metavar="FILE.xml")
    summary: str | os.PathLike | None = file_param(
        None, "a Markdown summary (for $GITHUB_STEP_SUMMARY or a pull request comment)", metavar="FILE.md")
