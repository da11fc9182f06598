"""Reading the failing inputs the other commands write, whatever wrote them.

===========  =========================  ==================================================
kind         written by                 what is read
===========  =========================  ==================================================
``run``      ``deepfault run``          ``synthesized`` inputs, the originals' ``labels``,
             (``--save-inputs``)        ``test_index`` (the seeds)
``xplore``   ``deepfault xplore``       ``inputs``, every model's ``predictions``,
             (``--out``'s ``.npz``)     ``model_names``, ``common_class``, ``seed_index``
``regress``  ``deepfault regress``      ``inputs``, ``label`` (M1's, the seed's label),
             (``--out``'s ``.npz``)     ``m1_pred``, ``m2_pred``, ``seed_index``
===========  =========================  ==================================================

The kind is recognised from the arrays' names; a file of none of these kinds is refused.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DeepFaultError

__all__ = ["InputFile", "read_inputs", "KINDS"]

#: The input files ``repair`` reads, by the arrays that identify them.
KINDS = {
    "run": ("synthesized", "originals", "labels", "test_index"),
    "xplore": ("inputs", "predictions", "model_names", "common_class", "seed_index"),
    "regress": ("inputs", "seed_index", "label", "m1_pred", "m2_pred"),
}


@dataclass(frozen=True, eq=False)
class InputFile:
    """The failing inputs of one file.

    Attributes:
        path: Where they were read from.
        kind: ``run``, ``xplore`` or ``regress``.
        inputs: ``(F, *input)`` float32 inputs.
        seed_index: ``(F,)`` index in the test split of the input each was made from.
        labels: ``(F,)`` the labels the file defines (the originals' for ``run``, M1's for
            ``regress``); ``None`` for ``xplore`` (labels come from the models' vote).
        predictions: ``(F, n)`` every model's prediction (``xplore``), else ``None``.
        model_names: The ``n`` models' names (``xplore``), else ``()``.
        common_class: ``(F,)`` the class all models gave the seed (``xplore``), else ``None``.
        m1_pred: ``(F,)`` M1's prediction (``regress``), else ``None``.
        m2_pred: ``(F,)`` M2's prediction (``regress``), else ``None``.
    """

    path: Path
    kind: str
    inputs: np.ndarray
    seed_index: np.ndarray
    labels: np.ndarray | None = None
    predictions: np.ndarray | None = None
    model_names: tuple[str, ...] = ()
    common_class: np.ndarray | None = None
    m1_pred: np.ndarray | None = None
    m2_pred: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.inputs)

    @property
    def name(self) -> str:
        return self.path.name

    def check_classes(self, num_classes: int, dataset: str) -> None:
        """Refuse a class-valued array (labels, predictions, ``common_class``) holding a class
        the data set does not have.

        Args:
            num_classes: The data set's class count.
            dataset: Its name, for the message.

        Raises:
            DeepFaultError: One line naming the first such array and its largest value.
        """
        arrays = {"labels" if self.kind == "run" else "label": self.labels, "predictions": self.predictions,
                  "common_class": self.common_class, "m1_pred": self.m1_pred, "m2_pred": self.m2_pred}
        for key, a in arrays.items():
            if a is not None and a.size and int(a.max()) >= num_classes:
                raise DeepFaultError(
                    f"{self.name}: array {key!r} must hold classes 0 to {num_classes - 1} of {dataset!r}; "
                    f"got {int(a.max())}; give the data set the inputs were made for"
                )


def _damaged(path: Path, key: str, expected: str, got: str) -> DeepFaultError:
    return DeepFaultError(f"{str(path)!r} is damaged: array {key!r} must be {expected}; got {got}; write it "
                          "again with the command that made it")


def _inputs(path: Path, key: str, x: np.ndarray) -> np.ndarray:
    """``(F, ...)`` finite numbers as float32."""
    if x.dtype.kind not in "biuf":
        raise _damaged(path, key, "numbers", f"dtype {x.dtype}")
    if x.ndim < 2:
        raise _damaged(path, key, "(inputs, ...)", f"shape {x.shape}")
    x = x.astype(np.float32)
    if not np.isfinite(x).all():
        raise _damaged(path, key, "finite", "NaN or infinite values")
    return x


def _integers(path: Path, key: str, a: np.ndarray, n: int, *, columns: bool = False) -> np.ndarray:
    """``(n,)`` (``columns``: ``(n, k)``, k >= 1) integers >= 0 as int64."""
    if a.dtype.kind == "f":
        if not np.isfinite(a).all() or (a != np.round(a)).any() or (a.size and np.abs(a).max() >= 2**62):
            raise _damaged(path, key, "integers", "non-integer values")
    elif a.dtype.kind not in "iu":  # booleans too: True is no class
        raise _damaged(path, key, "integers", f"dtype {a.dtype}")
    if columns and a.ndim == 1:
        a = a.reshape(-1, 1)
    want = f"({n}, models)" if columns else f"({n},), one per input"
    if a.ndim != (2 if columns else 1) or len(a) != n:
        raise _damaged(path, key, want, f"shape {a.shape}")
    if columns and a.shape[1] == 0:
        raise _damaged(path, key, "at least one model's predictions (the labels are their vote)", "none")
    a = a.astype(np.int64)
    if a.size and a.min() < 0:
        raise _damaged(path, key, "integers >= 0", str(int(a.min())))
    return a


def _names(path: Path, key: str, a: np.ndarray) -> tuple[str, ...]:
    if a.ndim != 1 or a.dtype.kind not in "US":
        raise _damaged(path, key, "a list of names", f"dtype {a.dtype}, shape {a.shape}")
    return tuple(str(n) for n in a.tolist())


def read_inputs(path: str | os.PathLike) -> InputFile:
    """Read a ``run``, ``xplore`` or ``regress`` inputs file (see the module's table).

    Raises:
        DeepFaultError: The file is missing, unreadable, of no known kind, or an array is
            not what its kind writes (numbers, integers >= 0 and not booleans, one entry per input, at least
            one model's predictions), each in one line naming the array.
    """
    path = Path(path)
    if not path.is_file():
        raise DeepFaultError(
            f"inputs file {str(path)!r} does not exist; give a .npz written by "
            "'deepfault run', 'deepfault xplore' or 'deepfault regress'"
        )
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as err:  # numpy raises several types for foreign or damaged files
        raise DeepFaultError(
            f"{str(path)!r} is not a readable .npz file ({type(err).__name__}); give a "
            "file written by 'deepfault run', 'xplore' or 'regress'"
        ) from err
    kind = next((k for k, keys in KINDS.items() if all(key in arrays for key in keys)), None)
    if kind is None:
        raise DeepFaultError(
            f"{str(path)!r} is not an inputs file of 'deepfault run' (--save-inputs), 'xplore' or "
            f"'regress' (arrays: {', '.join(sorted(arrays)) or 'none'})"
        )
    if kind == "run":
        x = _inputs(path, "synthesized", arrays["synthesized"])
        out = InputFile(path, kind, x, _integers(path, "test_index", arrays["test_index"], len(x)),
                        labels=_integers(path, "labels", arrays["labels"], len(x)))
    elif kind == "xplore":
        x = _inputs(path, "inputs", arrays["inputs"])
        preds = _integers(path, "predictions", arrays["predictions"], len(x), columns=True)
        names = _names(path, "model_names", arrays["model_names"])
        if preds.shape[1] != len(names):
            raise DeepFaultError(f"{str(path)!r} is damaged: {preds.shape[1]} models' predictions but "
                                 f"{len(names)} model_names; write it again with 'deepfault xplore'")
        out = InputFile(path, kind, x, _integers(path, "seed_index", arrays["seed_index"], len(x)),
                        predictions=preds, model_names=names,
                        common_class=_integers(path, "common_class", arrays["common_class"], len(x)))
    else:
        x = _inputs(path, "inputs", arrays["inputs"])
        out = InputFile(path, kind, x, _integers(path, "seed_index", arrays["seed_index"], len(x)),
                        labels=_integers(path, "label", arrays["label"], len(x)),
                        m1_pred=_integers(path, "m1_pred", arrays["m1_pred"], len(x)),
                        m2_pred=_integers(path, "m2_pred", arrays["m2_pred"], len(x)))
    return out
