"""The inputs a coverage action reads: a split of the model's data set, or an .npz file's inputs
(:func:`split_inputs`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import NamedTuple

from ..data import Dataset
from ..errors import DeepFaultError
from ..models.prepare import PreparedModel, prepare_model
from ..models.source import ModelSource

__all__ = ["SplitInputs", "split_inputs", "load_split"]


class SplitInputs(NamedTuple):
    """What :func:`split_inputs` gives.

    Attributes:
        model: The model, with its own data set (a surprise fit's training split).
        data: The inputs: the split as a data set named after it (its test part).
        dataset: The data set a result records.
        label: How the inputs are named (``"digits test"``, ``"x.npz (x)"``).
    """

    model: PreparedModel
    data: Dataset
    dataset: Dataset
    label: str

    def records(self, file, data_dir: str | os.PathLike | None, selection) -> dict:
        """The model's record (``file`` it came from, its weights' hash, the layer ``selection``
        of the result) and the data set's (``data_dir`` it was read from, the split) that a
        coverage result file holds.
        """
        from ..experiment.results import dataset_record, model_record
        from .profile import model_hash

        prep, data, mf = self.model, self.dataset, self.model.model_file
        model = model_record(prep, file, label=prep.name, arch_kwargs=mf and mf.arch_kwargs,
                             weights_sha256=model_hash(prep.module), layer_selection=selection)
        dataset = dataset_record(data, data_dir, split=self.label, layout=prep.layout,
                                 input_shape=list(data.input_shape))
        return {"model": model, "dataset": dataset}

    def pass_count(self, fit_first: bool = False) -> int:
        """The inputs one pass reads, that a batch size is chosen for: the split's, or the
        training split's where more when a surprise state is fitted on it first (``fit_first``).
        """
        base = self.model.data
        count = len(self.data.x_test)
        return max(count, len(base.x_train)) if fit_first and base is not None else count


def split_inputs(prepared: PreparedModel, split: str, *,
                 data_dir: str | os.PathLike | None = None) -> SplitInputs:
    """The inputs named ``split`` of a model prepared on its data set: ``"test"``, ``"train"``, or
    an .npz file whose ``x`` (and ``y``) are the inputs, adapted to the model as its own data is.

    Raises:
        DeepFaultError: ``prepared`` has no data set.
    """
    base = prepared.data
    if base is None:
        raise DeepFaultError("the model has no data set; prepare it on one (prepare_model(model, 'NAME'))")
    if split in ("test", "train"):
        x, y = (base.x_test, base.y_test) if split == "test" else (base.x_train, base.y_train)
        label = f"{base.name} {split}"
        return SplitInputs(prepared, dataclasses.replace(base, name=label, x_test=x, y_test=y), base, label)
    other = prepare_model(prepared, split, data_dir=data_dir)
    assert other.data is not None  # prepared on the .npz's data
    label = f"{split} (x)"
    return SplitInputs(dataclasses.replace(other, data=base), dataclasses.replace(other.data, name=label),
                       other.data, label)


def load_split(source: ModelSource, split: str | os.PathLike, device=None) -> SplitInputs:
    """The inputs named ``split`` (:func:`split_inputs`) of ``source``'s model, prepared on its
    data set, the model on ``device`` (``None``: where it is).

    Raises:
        DeepFaultError: ``split`` is not ``test``, ``train`` or an .npz file, or no data set is
            given and the model file names none.
    """
    split = str(split)
    if split not in ("test", "train") and not split.lower().endswith(".npz"):
        raise DeepFaultError(f"--split must be 'test', 'train' or an .npz file; got {split!r}")
    loaded = split_inputs(source.prepare(need_data=True), split, data_dir=source.data_dir)
    return loaded if device is None else loaded._replace(model=loaded.model.to(device))
