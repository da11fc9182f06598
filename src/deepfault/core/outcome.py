"""What every method's entry returns: an :class:`Outcome` that knows how to show itself.

Every front end shows a run the same way, because the outcome decides it once:

- :meth:`Outcome.summary`: the text the terminal prints (the answer first, tables after);
- :meth:`Outcome.payload`: the JSON body of the result document
  (:func:`deepfault.experiment.results.result_document` wraps it in the envelope);
- :meth:`Outcome.outputs`: the files it writes beside the result (synthesized inputs, an
  image grid, the faults found), each an :class:`Artifact` that writes itself to the path
  the caller chose.

A command module is then: parse, call the entry, print ``outcome.summary()``, write the
document and the artifacts. It computes nothing of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from .shards import Spread

__all__ = ["Artifact", "Outcome"]


@dataclass(frozen=True)
class Artifact:
    """A file an outcome writes beside its result document.

    Attributes:
        name: Its key in the document's ``outputs`` record (``"inputs"``, ``"grid"``).
        suffix: Its file ending when it goes beside the result (``".npz"``, ``".png"``).
        write: ``write(path) -> path written or None`` (``None``: nothing to write, e.g. no
            synthesized input); writes atomically.
    """

    name: str
    suffix: str
    write: Callable[[Path], Path | None]


class Outcome:
    """The base of every method's outcome (a frozen dataclass of its results).

    A subclass implements :meth:`summary` and :meth:`payload`; :meth:`outputs` defaults to no
    file. ``to_dict()`` stays the payload, for the code that reads results by that name.
    """

    #: The workers a pass spread over ran on (:class:`~deepfault.core.shards.Spread`, set by
    #: :meth:`spread_over`; ``None``: it ran here, serially). Not a field: it never changes a result.
    spread: ClassVar[Spread | None] = None

    def spread_over(self, spread: Spread | None) -> Any:
        """Record the workers the outcome's pass ran on (a frozen outcome too) and return it."""
        object.__setattr__(self, "spread", spread)
        return self

    def summary(self) -> str:
        """The text every front end prints: the answer first, then the tables."""
        raise NotImplementedError(f"{type(self).__name__} has no summary")

    def payload(self) -> dict:
        """The JSON body of the result document (strict JSON: no NaN, no infinity)."""
        to_dict = getattr(self, "to_dict", None)
        if to_dict is None:
            raise NotImplementedError(f"{type(self).__name__} has no payload")
        return to_dict()

    def outputs(self) -> tuple[Artifact, ...]:
        """The files it writes beside the result document (none by default)."""
        return ()
