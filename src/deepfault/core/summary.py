"""What every main result prints: a short repr, a ``summary()``, ``to_dict()`` and ``to_frame()``.

A result of ``run_deepfault``, ``measure_coverage``, ``rank_inputs``, ``xplore``, ``regress``
or ``repair`` holds arrays of every input; the dataclass repr would print them all. A
:class:`Summarised` result prints one line instead (``repr``), a few lines with the answer
first (:meth:`Summarised.summary`), keeps its plain-dict export (``to_dict()``, the body of
the command's result file), and gives a table (:meth:`Summarised.to_frame`) when pandas is
installed (imported only then).
"""

from __future__ import annotations

__all__ = ["Summarised"]


class Summarised:
    """A mixin for result dataclasses (declared with ``repr=False`` so this repr is kept).

    Subclasses define :meth:`headline` (one line), :meth:`summary` (a few lines) and
    :meth:`rows` (one plain dict per row of :meth:`to_frame`).
    """

    def headline(self) -> str:
        """The result in one line."""
        raise NotImplementedError

    def summary(self) -> str:
        """The result in a few lines, the answer first."""
        return self.headline()

    def rows(self) -> list[dict]:
        """One plain dict per row of :meth:`to_frame`."""
        raise NotImplementedError

    def to_frame(self):
        """:meth:`rows` as a ``pandas.DataFrame``.

        Raises:
            ModuleNotFoundError: pandas is not installed (``to_dict()`` needs nothing).
        """
        try:
            import pandas as pd
        except ModuleNotFoundError as err:
            raise ModuleNotFoundError(
                "to_frame() needs pandas: pip install pandas (or use to_dict() or rows(), which need nothing)"
            ) from err
        return pd.DataFrame(self.rows())

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self.headline()}>"

    def _repr_pretty_(self, printer, cycle) -> None:  # IPython and Jupyter
        printer.text(repr(self) if cycle else self.summary())
