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

    def __len__(self) -> int:
        return len(self.inputs)

    @property
    def name(self) -> str:
        return self.path.name


def read_inputs(path: str | os.PathLike) -> InputFile:
    """Read a ``run``, ``xplore`` or ``regress`` inputs file (see the module's table).

    Raises:
        DeepFaultError: The file is missing, unreadable, of no known kind, or its arrays
            disagree in length.
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
        out = InputFile(
            path,
            kind,
            arrays["synthesized"].astype(np.float32),
            arrays["test_index"].astype(np.int64),
            labels=arrays["labels"].astype(np.int64),
        )
    elif kind == "xplore":
        preds = arrays["predictions"].astype(np.int64)
        out = InputFile(
            path,
            kind,
            arrays["inputs"].astype(np.float32),
            arrays["seed_index"].astype(np.int64),
            predictions=preds.reshape(len(preds), -1),
            model_names=tuple(str(n) for n in arrays["model_names"]),
            common_class=arrays["common_class"].astype(np.int64),
        )
    else:
        out = InputFile(
            path,
            kind,
            arrays["inputs"].astype(np.float32),
            arrays["seed_index"].astype(np.int64),
            labels=arrays["label"].astype(np.int64),
            m1_pred=arrays["m1_pred"].astype(np.int64),
        )
    for name in ("seed_index", "labels", "predictions", "common_class", "m1_pred"):
        value = getattr(out, name)
        if value is not None and len(value) != len(out.inputs):
            raise DeepFaultError(
                f"{str(path)!r} is damaged: {len(out.inputs)} inputs but {len(value)} entries of {name!r}"
            )
    return out
