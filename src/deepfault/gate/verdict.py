"""Stage 4, the verdict: each threshold of the policy against its number.

A :class:`Check` is one threshold judged: ``pass``, ``fail`` or ``hold`` (its number could
not be measured: its stage was switched off, interrupted, or had nothing to measure), with a
reason that names the number and the threshold. The verdict is ``fail`` when any check
fails, else ``hold`` when any holds, else ``pass``; :data:`EXIT_STATUS` is what the command
line exits with.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import GateConfig
from .heldout import HeldOutResult

__all__ = ["Check", "Verdict", "EXIT_STATUS", "judge"]

#: The command line's exit status per verdict (2 stays the usage error, 130/143 an interruption).
EXIT_STATUS = {"pass": 0, "fail": 1, "hold": 3}


@dataclass(frozen=True)
class Check:
    """One threshold judged.

    Attributes:
        name: The check's name (the policy field, ``[class]`` for a class's).
        status: ``pass``, ``fail`` or ``hold``.
        value: The measured number (``None``: not measured).
        threshold: The policy's limit.
        reason: One line naming the number and the threshold.
        policy: The policy field that set the threshold.
    """

    name: str
    status: str
    value: float | None
    threshold: float | bool
    reason: str
    policy: str

    def to_dict(self) -> dict:
        """The check's record in the result document."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class Verdict:
    """The gate's answer.

    Attributes:
        verdict: ``pass``, ``fail`` or ``hold``.
        checks: Every check, in policy order.
    """

    verdict: str
    checks: tuple[Check, ...]

    @property
    def passed(self) -> bool:
        """Whether M2 may replace M1."""
        return self.verdict == "pass"

    @property
    def reasons(self) -> tuple[str, ...]:
        """The failing checks' reasons, then the holding ones'; when all pass, each policy
        threshold's closest call (of a per-class limit, the class nearest to it).
        """
        bad = [c.reason for c in self.checks if c.status == "fail"] + [
            c.reason for c in self.checks if c.status == "hold"
        ]
        if bad:
            return tuple(bad)
        closest: dict[str, Check] = {}
        for check in self.checks:  # the per-class limits are upper limits: the largest rate is closest
            kept = closest.setdefault(check.policy, check)
            if check.value is not None and (kept.value is None or check.value > kept.value):
                closest[check.policy] = check
        return tuple(c.reason for c in closest.values())

    @property
    def exit_status(self) -> int:
        """The command line's exit status (:data:`EXIT_STATUS`)."""
        return EXIT_STATUS[self.verdict]


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def _at_most(
    name: str, what: str, value: float | None, limit: float, policy: str, *, shown=_pct, why_missing: str = ""
) -> Check:
    if value is None:
        return Check(
            name,
            "hold",
            None,
            limit,
            f"{what}: not measured ({why_missing}); at most {shown(limit)} allowed ({policy})",
            policy,
        )
    ok = value <= limit
    sign = "<=" if ok else ">"
    return Check(
        name,
        "pass" if ok else "fail",
        value,
        limit,
        f"{what} {shown(value)} {sign} {shown(limit)} allowed ({policy})",
        policy,
    )


def _count(x: float) -> str:
    return f"{int(x):,}"


def _heldout_checks(config: GateConfig, h: HeldOutResult | None, missing: str) -> list[Check]:
    out: list[Check] = []
    labelled = h is not None and h.labelled and h.inputs > 0 and h.complete
    why = (
        missing
        if h is None
        else (
            "no held-out input"
            if h.inputs == 0
            else "the split has no labels"
            if not h.labelled
            else f"interrupted after {h.inputs:,} inputs"
        )
    )
    if config.max_disagreement_rate is not None:
        measured = h is not None and h.inputs > 0 and h.complete
        what = "disagreement rate" + (f" ({h.disagree:,} of {h.inputs:,})" if measured and h else "")
        out.append(
            _at_most(
                "disagreement_rate",
                what,
                h.disagreement_rate if measured and h else None,
                config.max_disagreement_rate,
                "max_disagreement_rate",
                why_missing=missing if h is None else "interrupted",
            )
        )
    if config.max_negative_flip_rate is not None:
        value = h.negative_flip_rate if labelled and h is not None else None
        what = "negative flip rate" + (f" ({h.negative_flips:,} of {h.inputs:,})" if labelled and h else "")
        out.append(
            _at_most(
                "negative_flip_rate",
                what,
                value,
                config.max_negative_flip_rate,
                "max_negative_flip_rate",
                why_missing=why,
            )
        )
    critical = set(config.critical_classes or ())
    for c in sorted(critical):
        rec = h.classes[c] if labelled and h is not None and c < len(h.classes) else None
        what = f"class {c}" + (
            f" ({rec.name!r}) negative flip rate ({rec.negative_flips:,} of {rec.support:,})"
            if rec
            else " negative flip rate"
        )
        out.append(
            _at_most(
                f"critical_flip_rate[{c}]",
                what,
                None if rec is None or rec.support == 0 else rec.negative_flip_rate,
                float(config.max_critical_flip_rate or 0.0),
                "max_critical_flip_rate",
                why_missing=why if rec is None else "no input of the class",
            )
        )
    if config.max_class_flip_rate is not None:
        if not labelled or h is None:
            out.append(
                _at_most(
                    "class_flip_rate",
                    "every class's negative flip rate",
                    None,
                    config.max_class_flip_rate,
                    "max_class_flip_rate",
                    why_missing=why,
                )
            )
        else:
            for rec in h.classes:
                if rec.support == 0 or rec.label in critical:
                    continue
                out.append(
                    _at_most(
                        f"class_flip_rate[{rec.label}]",
                        f"class {rec.label} ({rec.name!r}) negative flip rate ({rec.negative_flips:,} of "
                        f"{rec.support:,}; recall {rec.recall_m1:.4f} -> {rec.recall_m2:.4f})",
                        rec.negative_flip_rate,
                        config.max_class_flip_rate,
                        "max_class_flip_rate",
                    )
                )
    if config.min_accuracy_delta is not None:
        limit = config.min_accuracy_delta
        if not labelled or h is None or h.accuracy_delta is None:
            out.append(
                Check(
                    "accuracy_delta",
                    "hold",
                    None,
                    limit,
                    f"accuracy delta: not measured ({why}); at "
                    f"least {limit:+.4f} required (min_accuracy_delta)",
                    "min_accuracy_delta",
                )
            )
        else:
            d = h.accuracy_delta
            ok = d >= limit
            out.append(
                Check(
                    "accuracy_delta",
                    "pass" if ok else "fail",
                    d,
                    limit,
                    f"accuracy delta {d:+.4f} ({h.accuracy_m1:.4f} -> {h.accuracy_m2:.4f}) "
                    f"{'>=' if ok else '<'} {limit:+.4f} required (min_accuracy_delta)",
                    "min_accuracy_delta",
                )
            )
    if config.not_significantly_worse:
        if not labelled or h is None or h.mcnemar_p is None:
            out.append(
                Check(
                    "not_significantly_worse",
                    "hold",
                    None,
                    config.alpha,
                    f"McNemar test: not measured ({why}) (not_significantly_worse)",
                    "not_significantly_worse",
                )
            )
        else:
            worse = (h.accuracy_delta or 0.0) < 0 and h.mcnemar_p < config.alpha
            out.append(
                Check(
                    "not_significantly_worse",
                    "fail" if worse else "pass",
                    h.mcnemar_p,
                    config.alpha,
                    f"accuracy delta {h.accuracy_delta:+.4f} with McNemar p = {h.mcnemar_p:.4g} "
                    f"({h.negative_flips:,} negative / {h.positive_flips:,} positive flips) "
                    f"{'<' if h.mcnemar_p < config.alpha else '>='} alpha {config.alpha:g}: "
                    f"{'significantly worse' if worse else 'not significantly worse'} "
                    "(not_significantly_worse)",
                    "not_significantly_worse",
                )
            )
    return out


def judge(
    config: GateConfig, heldout: HeldOutResult | None, replay, fuzz, *, off: frozenset[str] = frozenset()
) -> Verdict:
    """Judge every threshold of ``config`` against the stages' numbers.

    Args:
        config: The policy.
        heldout: Stage 1's result (``None``: not run).
        replay: Stage 2's result (``None``: not run), with ``failing`` and ``regressions``.
        fuzz: Stage 3's result (``None``: not run), with ``faults``.
        off: The stages switched off (``"heldout"``, ``"replay"``, ``"fuzz"``): their checks are
            left out. A stage that is on but has no result (interrupted before it) holds.

    Returns:
        The :class:`Verdict`.
    """
    checks = [] if "heldout" in off else _heldout_checks(config, heldout, "not run: interrupted before it")
    for field, attr, what, result, stage in (
        ("max_corpus_failures", "failing", "corpus entries M2 gets wrong", replay, "replay"),
        (
            "max_corpus_regressions",
            "regressions",
            "corpus entries M1 gets right and M2 wrong",
            replay,
            "replay",
        ),
        ("max_new_faults", "faults", "regression faults the fuzz stage found", fuzz, "fuzz"),
    ):
        limit = getattr(config, field)
        if limit is None or stage in off:
            continue
        value = None if result is None or not result.complete else getattr(result, attr)
        why = "not run: interrupted before it" if result is None else "interrupted"
        checks.append(
            _at_most(field.removeprefix("max_"), what, value, limit, field, shown=_count, why_missing=why)
        )
    if not checks:
        checks.append(
            Check(
                "policy",
                "hold",
                None,
                False,
                "no check to judge: every threshold is off or its "
                "stage is switched off; set one (--max-negative-flip-rate, --max-disagreement-rate, "
                "...)",
                "policy",
            )
        )
    if any(c.status == "fail" for c in checks):
        verdict = "fail"
    elif any(c.status == "hold" for c in checks):
        verdict = "hold"
    else:
        verdict = "pass"
    return Verdict(verdict, tuple(checks))
