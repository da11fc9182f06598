"""The keyword forms of coverage's entries before the one call shape, kept for one release.

``measure_coverage(model, x, criteria="nc", batch_size=32)`` and ``rank_inputs(model, x, y,
by="gini", output_kind="probabilities")`` still work, with a :class:`FutureWarning` that shows
the one shape: config fields and runtime fields go where they belong
(:func:`deepfault.core.entry.split_arguments`), the old ``inputs=`` is the data, ``labels``
(the third positional argument, or ``labels=``) go with the data as an ``(inputs, labels)``
pair, and ``output_kind=`` goes with the model (a prepared model carries it).
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Any

from ..core.entry import split_arguments

__all__ = ["legacy_keywords", "labels_third"]


def _warn(name: str, what: str) -> None:
    warnings.warn(f"{name}(..., {what}) is deprecated: {_WHERE[what]}", FutureWarning, stacklevel=4)


_WHERE = {
    "labels": "pass the labels with the data, as an (inputs, labels) pair or a data set",
    "output_kind=...": "pass a prepared model, which carries its output kind "
                       "(deepfault.prepare_model(model, output_kind=...))",
}


def _with_output_kind(model, kind: str):
    from ..models.prepare import PreparedModel, prepare_model

    if isinstance(model, PreparedModel):
        return dataclasses.replace(model, output_kind=kind)
    return prepare_model(model, output_kind=kind)


def legacy_keywords(name: str, fields: set, args: tuple, kwargs: dict) -> tuple[Any, Any, dict, dict]:
    """``(models, data, config keywords, runtime keywords)`` of an old call (the entry's
    ``legacy`` hook).
    """
    kwargs = dict(kwargs)
    if "inputs" in kwargs and len(args) < 2:
        args = (*args, kwargs.pop("inputs"))
    labels = kwargs.pop("labels", None)
    kind = kwargs.pop("output_kind", None)
    models, data, config_kw, runtime_kw = split_arguments(name, fields, args, kwargs)
    if labels is not None:
        _warn(name, "labels")
        data = (data, labels)
    if kind is not None:
        _warn(name, "output_kind=...")
        models = _with_output_kind(models, kind)
    return models, data, config_kw, runtime_kw


def labels_third(config_type: type):
    """Take a third positional argument that is no ``config_type`` as ``labels=`` (the old
    ``rank_inputs(model, x, y)`` and ``fit_surprise(model, x, y)``); ``None`` there is no labels
    and the default config alike.
    """
    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            if len(args) > 2 and not isinstance(args[2], config_type):
                if args[2] is not None:
                    kwargs["labels"] = args[2]
                args = (*args[:2], *args[3:])
            return fn(*args, **kwargs)

        return inner
    return wrap
