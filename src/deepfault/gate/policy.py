"""A gate's policy as a small TOML file: the thresholds of :class:`~.config.GateConfig`.

::

    # gate-policy.toml
    max_negative_flip_rate = 0.01
    max_class_flip_rate = 0.05
    critical_classes = [3, 7]
    max_critical_flip_rate = 0.0
    min_accuracy_delta = -0.005
    max_corpus_regressions = 0
    max_new_faults = "off"

Each key is a threshold field of :data:`~.config.THRESHOLDS` (``"off"`` switches a check off);
the file is read with :mod:`tomllib`, checked by the fields' declarations, and an unknown key
is refused with the closest known one. Command-line options given explicitly win over the file.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from pathlib import Path
from typing import Any

from ..core.registry import suggestion
from ..errors import DeepFaultError
from .config import THRESHOLDS, GateConfig

__all__ = ["read_policy", "policy_config"]


def read_policy(path: str | os.PathLike) -> dict[str, Any]:
    """The thresholds a policy file sets, by field name.

    Raises:
        DeepFaultError: The file is missing or not TOML, a key is unknown (with a did-you-mean),
            or a value is not one its field accepts.
    """
    where = Path(path)
    try:
        text = where.read_bytes()
    except OSError as err:
        raise DeepFaultError(
            f"policy file {str(where)!r} cannot be read ({err.strerror or err}); "
            "check the path given to --policy"
        ) from None
    try:
        table = tomllib.loads(text.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise DeepFaultError(f"policy file {str(where)!r} is not TOML: {err}") from None
    for key, value in table.items():
        if key not in THRESHOLDS:
            raise DeepFaultError(
                f"policy file {str(where)!r}: unknown key {key!r}{suggestion(key, THRESHOLDS)}; "
                f"known: {', '.join(THRESHOLDS)}"
            )
        if isinstance(value, dict):
            raise DeepFaultError(f"policy file {str(where)!r}: {key} must be a value, not a table")
    try:
        GateConfig(**table)
    except DeepFaultError as err:
        raise DeepFaultError(f"policy file {str(where)!r}: {err}") from None
    return dict(table)


def policy_config(
    path: str | os.PathLike | None = None, base: GateConfig | None = None, **overrides: Any
) -> GateConfig:
    """``base`` (default: :class:`~.config.GateConfig` ``()``) with the thresholds of the policy
    file at ``path`` (none when ``None``), then ``overrides`` (the options given explicitly).

    Raises:
        DeepFaultError: As :func:`read_policy`, or an override out of range.
    """
    config = base if base is not None else GateConfig()
    settings = read_policy(path) if path is not None else {}
    return dataclasses.replace(config, **{**settings, **overrides})
