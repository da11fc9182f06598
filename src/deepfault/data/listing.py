"""Every data set and the state of its files under a data root (``deepfault data list``)."""

from __future__ import annotations

from pathlib import Path

from ..errors import DeepFaultError
from ._api import DATASETS, default_data_dir, list_datasets
from .download import SOURCES, dataset_status

__all__ = ["DATA_COMMAND", "dataset_states", "listed_root"]

#: ``deepfault data``'s help line and description.
DATA_COMMAND = (
    "list or download data sets",
    "List the data sets and whether their files are present and intact under the data root, or download a "
    "data set's official files (checked by md5).")


def dataset_states(root: Path) -> list[tuple[str, str, str]]:
    """``(name, state, description)`` of every data set under ``root``: ``verified``, ``bundled``,
    ``missing: ...`` or ``incomplete: ...`` (with the command that fetches it again).

    Examples:
        >>> ("digits", "bundled") in [row[:2] for row in dataset_states(Path("/nonexistent"))]
        True
    """
    return [(name, _state(name, root), DATASETS[name].description) for name in list_datasets()]


def listed_root(data_dir: str | None) -> Path:
    """The data root ``deepfault data list`` lists: ``data_dir`` (``--data-dir``), which must be
    a folder, else the default (:func:`~deepfault.data.default_data_dir`).

    Raises:
        DeepFaultError: ``data_dir`` is not a folder.
    """
    root = default_data_dir(data_dir)
    if data_dir is not None and not root.is_dir():
        raise DeepFaultError(f"--data-dir {data_dir!r} is not a folder; give the folder that holds the data "
                             "sets (e.g. ../shared/datasets) or leave it out")
    return root


def _state(name: str, root: Path) -> str:
    if name not in SOURCES:
        return "bundled"
    status = dataset_status(name, root)
    present = sum(st.present for st in status)
    verified = sum(st.verified for st in status)
    if verified == len(status):
        return "verified"
    if not present:
        return f"missing: deepfault data download {name}"
    bad = [st.file.name for st in status if st.present and not st.verified]
    state = f"incomplete: {present}/{len(status)} files, {verified} verified"
    return state + (f"; wrong md5: {', '.join(bad)} (deepfault data download {name} --force)" if bad else "")
