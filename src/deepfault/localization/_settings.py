"""The lower-level steps' settings: a :class:`~.config.RunConfig` and a
:class:`~deepfault.Runtime` instead of a keyword each, the old keywords still taken for one
release with a :class:`FutureWarning`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..core.entry import default_threads, use_threads
from ..core.runtime import RUNTIME_FIELDS, Runtime

if TYPE_CHECKING:
    from .config import RunConfig

#: The settings' config class: :mod:`.config` registers :class:`~.config.RunConfig` here (it
#: imports the steps' modules, so they cannot import it).
CONFIG: list[type] = []


def settings(owner: str, config: RunConfig | None, runtime: Runtime | None, old: dict, *,
             stacklevel: int = 3) -> tuple[RunConfig, Runtime]:
    """``(config, runtime)`` of a step: each old keyword in ``old`` (a field of either) replaces
    its field, with one :class:`FutureWarning` naming the new form; any other is a ``TypeError``.
    """
    (RunConfig,) = CONFIG
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    runtime_kw = {k: old.pop(k) for k in list(old) if k in RUNTIME_FIELDS}  # batch_size: its new place
    config_kw = {k: old.pop(k) for k in list(old) if k in fields}
    if old:
        raise TypeError(f"{owner}() got unexpected keyword arguments: {', '.join(sorted(old))}")
    if config_kw or runtime_kw:
        parts = [f"config=RunConfig({', '.join(f'{k}=...' for k in config_kw)})"] if config_kw else []
        parts += [f"runtime=Runtime({', '.join(f'{k}=...' for k in runtime_kw)})"] if runtime_kw else []
        given = ", ".join(f"{k}=" for k in (*config_kw, *runtime_kw))
        warnings.warn(f"{owner}(..., {given}...) is deprecated: "
                      f"pass {' and '.join(parts)}", FutureWarning, stacklevel=stacklevel)
    config = dataclasses.replace(config, **config_kw) if config is not None else RunConfig(**config_kw)
    runtime = dataclasses.replace(runtime, **runtime_kw) if runtime is not None else Runtime(**runtime_kw)
    return config, runtime


def batch_of(config: RunConfig, runtime: Runtime) -> int | str:
    """The batch a step takes: the runtime's unless ``"auto"``, else the config's (its old place)."""
    return runtime.batch_size if runtime.batch_size != "auto" else config.batch_size


@contextlib.contextmanager
def threads_of(runtime: Runtime, module) -> Iterator[int]:
    """``runtime.threads`` applied for the ``with`` block by the command line's rule (nothing
    changes inside an entry that applied its own).
    """
    threads = default_threads() if runtime.threads == "auto" else runtime.threads
    param = next(module.parameters(), None) if hasattr(module, "parameters") else None
    device = runtime.device or (param.device if param is not None else "cpu")
    with use_threads(threads, [module] if hasattr(module, "parameters") else [], device) as count:
        yield count
