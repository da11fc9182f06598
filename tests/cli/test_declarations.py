"""Constraints declared once: every config field declares one, and the API and the command line
refuse exactly the same values, derived from the declarations (nothing listed by hand here)."""

from __future__ import annotations

import argparse

import pytest

from deepfault.cli import build_parser
from deepfault.cli._common import FieldType
from deepfault.core.constraints import Flag, Interval, undeclared
from deepfault.errors import DeepFaultError
from helpers.hardening import package_configs


def _subcommands(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub
                yield from ((f"{name} {n}", s) for n, s in _subcommands(sub))


def _declared_options():
    """``(command, option, action)`` of every option made from a config field (``add_field``)."""
    for command, sub in _subcommands(build_parser()):
        for action in sub._actions:
            if getattr(action, "field", None) is not None:
                yield command, max(action.option_strings, key=len), action


CONFIGS = package_configs()
DECLARED = list(_declared_options())


def test_there_are_declared_options_and_configs():
    assert len(DECLARED) >= 10
    assert {c.__name__ for c in CONFIGS} >= {"RunConfig", "TrainConfig", "GanConfig"}


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.__name__)
def test_every_config_field_declares_its_constraint(config):
    assert undeclared(config) == [], f"{config.__name__}: declare these fields with param(...)"


@pytest.mark.parametrize(("command", "option", "action"), DECLARED,
                         ids=lambda v: v if isinstance(v, str) else "")
def test_the_api_and_the_cli_refuse_the_same_values(command, option, action):
    config, name = action.field
    constraint = action.type.constraint if isinstance(action.type, FieldType) else None
    if constraint is None:  # a flag: store_true/false takes no value
        return
    assert not isinstance(constraint, Flag)
    for bad in constraint.invalid():
        with pytest.raises(DeepFaultError):  # the words may be the library's own older ones
            config(**{name: bad})
        typed = isinstance(bad, str) or (isinstance(constraint, Interval) and type(bad) in (int, float))
        if not typed or bad == "":
            continue  # cannot be typed after an option (None, a tuple, a number for a text)
        with pytest.raises(argparse.ArgumentTypeError, match="must be"):
            action.type(str(bad))
