"""Degenerate results, named (spec section 1, "activity must carry information").

A spectrum in which most neurons are active on every input of the class, or on none, carries
no information about them: their scores tie, and where the top-k holds them it is the
tie-breaking order. A selection whose
``k`` scores all tie with a neuron left out is that order too. Neither is a finding: a run
says so in one line with the fix (:func:`degenerate_lines`, first in ``summary()`` and at the
top of the report), and cross-class recurrence counts only neurons whose score beats every
neuron left out (:func:`decided`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .selection import Neuron, Selection
from .spectrum import Spectrum

__all__ = ["MOSTLY", "Flatness", "flatness", "tied_selection", "decided", "degenerate_lines"]

#: More than this share of a class's neurons without information makes its spectrum degenerate.
MOSTLY = 0.5


@dataclass(frozen=True)
class Flatness:
    """How many of a spectrum's neurons never vary over its inputs.

    Attributes:
        always: Neurons active on every input (``ns = nf = 0``).
        never: Neurons active on no input (``as = af = 0``).
        neurons: All neurons.
    """

    always: int
    never: int
    neurons: int

    @property
    def share(self) -> float:
        """The share of neurons that never vary (0 for no neuron)."""
        return (self.always + self.never) / self.neurons if self.neurons else 0.0

    @property
    def degenerate(self) -> bool:
        """Whether most neurons never vary (more than :data:`MOSTLY`)."""
        return self.share > MOSTLY


def flatness(spectrum: Spectrum) -> Flatness:
    """The neurons of ``spectrum`` active on every input and on none (an empty spectrum: none)."""
    if spectrum.num_inputs == 0:
        return Flatness(0, 0, spectrum.layout.num_neurons)
    always = int(np.count_nonzero((spectrum.n_s + spectrum.n_f) == 0))
    never = int(np.count_nonzero((spectrum.a_s + spectrum.a_f) == 0))
    return Flatness(always, never, spectrum.layout.num_neurons)


def _scores(selection: Selection) -> list[float] | None:
    scores = [n.score for n in selection.neurons]
    if not scores or any(s is None for s in scores):
        return None
    return [float(s) for s in scores if s is not None]


def tied_selection(selection: Selection) -> bool:
    """Whether every selected neuron's score ties with the best neuron left out: the selection
    is then the tie-breaking order alone (a baseline's draw, without scores, never is).
    """
    scores = _scores(selection)
    if scores is None or selection.runner_up is None:
        return False
    return all(s == selection.runner_up for s in scores)


def decided(neuron: Neuron, selection: Selection) -> bool:
    """Whether ``neuron`` is in ``selection`` by its score: it beats every neuron left out (a
    baseline's neurons, without scores, always are).
    """
    if neuron.score is None or selection.runner_up is None:
        return True
    return neuron.score > selection.runner_up


def _flat(neuron: Neuron) -> bool:
    """Whether ``neuron`` never varied over the class's inputs (active on all, or on none)."""
    return neuron.n_s + neuron.n_f == 0 or neuron.a_s + neuron.a_f == 0


def _picks_flat(cls) -> bool:
    """Whether the class's (first) selection holds a neuron that never varied: a flat spectrum
    whose top-k is all varying neurons still ranks them by information (the paper's MLPs).
    """
    return bool(cls.repetitions) and any(_flat(n) for n in cls.repetitions[0].selection.neurons)


def _classes(values: Sequence[int]) -> str:
    shown = ", ".join(str(c) for c in values[:8])
    return shown + (f" and {len(values) - 8} more" if len(values) > 8 else "")


def degenerate_lines(result) -> list[str]:
    """One line per kind of degenerate result of a run, with its fix (none: ``[]``).

    Looks at the classes with failing inputs (one without has nothing to localise and says so
    itself): most neurons active on every input or on none, and top-k scores that all tie.
    """
    considered = [c for c in result.classes if not c.no_failures]
    lines = []
    bad = [(c.target_class, f) for c, f in ((c, flatness(c.spectrum)) for c in considered)
           if f.degenerate and _picks_flat(c)]
    if bad:
        always, never = max(f.always for _, f in bad), max(f.never for _, f in bad)
        fix = "analyse other layers (--layers linear-conv, or name them)"
        if getattr(result.config, "activity", "zero") != "quantile":
            fix = "take each neuron's own level (activity='quantile', --activity quantile) or " + fix
        lines.append(f"degenerate spectra: in {len(bad)} of {len(considered)} classes "
                     f"({_classes([c for c, _ in bad])}) most of the {bad[0][1].neurons} neurons never vary "
                     f"(up to {always} active on every input, {never} on none) and the top-k holds such "
                     f"neurons: their scores tie, so their order is index order, not a finding; {fix}")
    tied = [c for c in considered if c.repetitions and tied_selection(c.repetitions[0].selection)]
    if tied:
        score = tied[0].repetitions[0].selection.runner_up
        lines.append(f"tied scores: in {len(tied)} of {len(considered)} classes "
                     f"({_classes([c.target_class for c in tied])}) all top-k scores tie with neurons left "
                     "out "
                     f"(e.g. {score:.3g}), so those neurons are index order and count in no recurrence; "
                     "analyse more failing inputs or other layers (--layers), or a measure that separates "
                     "them (--measure)")
    return lines
