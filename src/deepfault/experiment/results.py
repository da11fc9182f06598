"""The one result document every command writes, and the one reader of it.

Every ``deepfault`` command that writes a JSON result (``run``, ``coverage measure`` and
``rank``, ``xplore``, ``regress``, ``repair``) builds it here, so that each has the same
envelope, and writes it atomically (:func:`deepfault._io.write_json`)::

    {
      "schema": "deepfault-result", "version": 1,
      "command": "run",                 # the sub-command ("coverage measure", ...)
      "tool": "deepfault run",          # the same, as the command line spells it
      "config": {...},                  # the method's configuration (its to_dict())
      "seed": 0,                        # the run's seed (null where none applies)
      "versions": {"deepfault": ..., "torch": ..., "numpy": ..., "python": ...},
      "device": "cpu",
      "provenance": {...},              # deepfault.provenance.provenance(): versions, platform,
                                        # time, argv, threads
      "outputs": {...},                 # the other files the command wrote, by role (may be empty)
      ...                               # the method's payload: its result's keys ("classes",
                                        # "model", "dataset", "results", "approaches", ...)
    }

The payload's keys sit beside the envelope's (readers of one command's results read them
where they always were); a payload that uses an envelope key is refused.
:func:`read_result` reads any of them back and refuses a file that is not one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .._io import write_json
from ..errors import DeepFaultError
from ..provenance import provenance

if TYPE_CHECKING:
    import torch

    from ..data import Dataset
    from ..models.prepare import PreparedModel

__all__ = ["SCHEMA", "VERSION", "ENVELOPE", "result_document", "write_result", "read_result",
           "check_document", "model_record", "dataset_record"]

SCHEMA = "deepfault-result"
VERSION = 1
#: The keys every result document has, whatever command wrote it.
ENVELOPE = ("schema", "version", "command", "tool", "config", "seed", "versions", "device", "provenance",
            "outputs")
#: The provenance entries repeated at the top as ``versions``.
_VERSIONS = ("deepfault", "torch", "numpy", "python")


def result_document(command: str, payload: Mapping, *, config: Mapping | None, seed: int | None = None,
                    device: torch.device | str | None = None, argv: list[str] | None = None,
                    threads: int | None = None, outputs: Mapping[str, str | None] | None = None) -> dict:
    """The result document of one run of ``command``.

    Args:
        command: The sub-command, e.g. ``"run"`` or ``"coverage measure"``.
        payload: The method's result (what its ``to_dict()`` gives, and the model and data
            it ran on); none of its keys may be an :data:`ENVELOPE` key.
        config: The method's configuration (a dict), ``None`` where it has none.
        seed: The run's random seed, ``None`` where none applies.
        device: Where it ran (a :class:`torch.device` or its name; default the CPU).
        argv: The command line, recorded in the provenance.
        threads: The PyTorch CPU threads it ran with, recorded in the provenance.
        outputs: The other files the run wrote, by role (``{"inputs": "r.npz"}``).

    Returns:
        The document, a dict of JSON values.

    Raises:
        DeepFaultError: The payload uses an envelope key.
    """
    clash = sorted(set(payload) & set(ENVELOPE))
    if clash:
        raise DeepFaultError(f"a result payload may not use the envelope's keys; it has {', '.join(clash)}")
    prov = provenance(device, argv=argv)
    if threads is not None:
        prov["threads"] = int(threads)
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "command": command,
        "tool": f"deepfault {command}",
        "config": None if config is None else dict(config),
        "seed": seed,
        "versions": {k: prov[k] for k in _VERSIONS},
        "device": prov["device"],
        "provenance": prov,
        "outputs": dict(outputs or {}),
        **payload,
    }


def model_record(prepared: PreparedModel, file: str | os.PathLike | None, **extra) -> dict:
    """How a result names a model it ran: the file given, the name results use, the architecture,
    the output kind and the weights' fingerprint, then a command's ``extra`` fields.
    """
    return {"file": None if file is None else str(file), "name": prepared.name, "arch": prepared.arch,
            "output_kind": prepared.output_kind, "fingerprint": prepared.fingerprint, **extra}


def dataset_record(data: Dataset, data_dir: str | os.PathLike | None, **extra) -> dict:
    """How a result names the data set it ran on: its name, the folder it was read from, its
    bounds, test-split size and class names, then a command's ``extra`` fields.
    """
    return {"name": data.name, "data_dir": None if data_dir is None else str(data_dir),
            "bounds": list(data.bounds), "num_test": len(data.y_test), "class_names": list(data.class_names),
            **extra}


def check_document(document, what: str = "result", command: str | None = None) -> dict:
    """``document`` when it is a result document (of ``command``, when given), else an error.

    Raises:
        DeepFaultError: It is not a dict with every :data:`ENVELOPE` key, of this schema and a
            version this code reads, or it was written by another command.
    """
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise DeepFaultError(f"{what} is not a deepfault result (no \"schema\": {SCHEMA!r}); give a JSON "
                             "file a deepfault command wrote")
    if document.get("version") != VERSION:
        raise DeepFaultError(f"{what} is a deepfault result of version {document.get('version')!r}; this "
                             f"deepfault reads version {VERSION}")
    missing = [k for k in ENVELOPE if k not in document]
    if missing:
        raise DeepFaultError(f"{what} is damaged: it lacks {', '.join(missing)}")
    if command is not None and document["command"] != command:
        raise DeepFaultError(f"{what} is a result of 'deepfault {document['command']}', not of "
                             f"'deepfault {command}'")
    return document


def write_result(path: str | os.PathLike, document: Mapping) -> Path:
    """Write a result document atomically, after checking that :func:`read_result` reads it."""
    check_document(dict(document), f"the result for {str(path)!r}")
    return write_json(path, document)


def read_result(path: str | os.PathLike, command: str | None = None) -> dict:
    """Read a result document (of ``command``, when given).

    Raises:
        DeepFaultError: The file is missing, is no JSON, or is no result document of ``command``.
    """
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DeepFaultError(f"result file {str(path)!r} does not exist; check the path") from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise DeepFaultError(f"cannot read {str(path)!r} as a result ({type(err).__name__}); give a JSON "
                             "file a deepfault command wrote") from err
    return check_document(document, repr(str(path)), command)
