"""What a command that builds a model reads from its ``--arch``: the spelling of a zoo name, the
constructor's keyword arguments and the default name of the model file.
"""

from __future__ import annotations

from pathlib import Path

from ._api import arch_kind, list_architectures

__all__ = ["arch_arguments", "arch_kwargs_json", "arch_spec", "default_stem", "ARCH_ARGS_HELP"]


def arch_spec(text: str) -> str:
    """A zoo name (``-`` read as ``_``: ``digits-mlp`` is ``digits_mlp``) or any other form
    :func:`~deepfault.models.build_model` takes, checked.

    Raises:
        DeepFaultError: An unknown name or a malformed form.

    Examples:
        >>> arch_spec("digits-mlp")
        'digits_mlp'
    """
    zoo = text.replace("-", "_")
    if zoo in list_architectures():
        return zoo
    arch_kind(text)  # a one-line error for an unknown name or a malformed form
    return text


def arch_kwargs_json(text: str) -> dict:
    """An architecture's keyword arguments from a JSON object, e.g. ``'{"num_classes": 10}'``.

    Raises:
        DeepFaultError: Not JSON, or JSON that is no object.
    """
    import json

    from ..errors import DeepFaultError

    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise DeepFaultError(f"must be a JSON object such as '{{\"num_classes\": 10}}'; got {text!r} "
                             f"({err.msg} at character {err.pos})") from None
    if not isinstance(value, dict):
        raise DeepFaultError(f"must be a JSON object such as '{{\"num_classes\": 10}}'; got a "
                             f"{type(value).__name__}: {text!r}")
    return value


def default_stem(arch: str) -> str:
    """The model file's default stem: ``lenet5`` for a zoo name, ``mynet-Net`` for
    ``path/mynet.py:Net``, ``timm-vit_tiny`` for ``timm:vit_tiny``.
    """
    if arch_kind(arch) == "zoo":
        return arch
    where, _, name = arch.rpartition(":")
    return f"{Path(where).stem}-{name}"


#: ``--arch-args`` of the commands that build a model (train, scenario): what :func:`arch_arguments` adds.
ARCH_ARGS_HELP = ("keyword arguments of --arch, a JSON object (default: a zoo architecture gets the data "
                  "set's number of classes, any other none)")


def arch_arguments(arch: str, given: dict | None, num_classes: int) -> dict:
    """The constructor's keyword arguments: ``given``, and for a zoo architecture the data set's
    number of classes unless given.
    """
    given = dict(given or {})
    return {"num_classes": num_classes, **given} if arch_kind(arch) == "zoo" else given
