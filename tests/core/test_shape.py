"""The one call shape's engine parts: declared constraints, the runtime and the entry wrapper."""

from __future__ import annotations

import argparse
import math
import warnings
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from deepfault.cli._common import add_field
from deepfault.core.constraints import (
    Each,
    Flag,
    Interval,
    Options,
    Text,
    constraints,
    param,
    undeclared,
    validate,
)
from deepfault.core.entry import entry
from deepfault.core.outcome import Outcome
from deepfault.core.runtime import Runtime
from deepfault.errors import DeepFaultError


@dataclass(frozen=True)
class ToyConfig:
    k: int = param(3, Interval(int, 1, 100), help="neurons")
    rate: float = param(0.5, Interval(float, 0.0, 1.0, closed="right"), help="share")
    name: str = param("a", Options(("a", "b")), help="which")
    many: tuple | None = param(None, Each(Interval(int, 0, 9), max_items=4, none=True), help="classes")
    flag: bool = param(True, Flag(), help="normalise", option="--raw")
    label: str | None = param(None, Text(none=True), help="a label")

    def __post_init__(self):
        validate(self)


@dataclass(frozen=True)
class ToyOutcome(Outcome):
    n: int
    batch: int | str

    def summary(self) -> str:
        return f"{self.n} inputs"

    def to_dict(self) -> dict:
        return {"n": self.n}


@entry(ToyConfig)
def toy(model, data, config, *, runtime):
    return ToyOutcome(n=len(data) * config.k, batch=runtime.batch_size)


def test_every_hostile_value_is_refused_by_the_api_and_the_cli_alike():
    parser = argparse.ArgumentParser(exit_on_error=False)
    for name in constraints(ToyConfig):
        add_field(parser, ToyConfig, name)
    for name, c in constraints(ToyConfig).items():
        for bad in c.invalid():
            with pytest.raises(DeepFaultError, match=rf"^{name} must be "):
                ToyConfig(**{name: bad})
            typed = isinstance(bad, str) or (isinstance(c, Interval) and type(bad) in (int, float))
            if isinstance(c, Flag) or not typed or bad == "":
                continue  # what cannot be typed after an option (None, a tuple, an int for a text)
            with pytest.raises(DeepFaultError, match="must be"):
                c.parse(name, str(bad))


@given(st.integers(min_value=-(2**40), max_value=2**40))
def test_interval_accepts_exactly_its_range(v):
    c = Interval(int, 1, 100)
    assert c.accepts(v) == (1 <= v <= 100)
    if 1 <= v <= 100:
        assert c.parse("k", str(v)) == v


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_half_open_interval_of_floats(v):
    c = Interval(float, 0.0, 1.0, closed="right")
    assert c.accepts(v) == (math.isfinite(v) and 0.0 < v <= 1.0)


def test_messages_name_the_field_range_and_value():
    with pytest.raises(DeepFaultError, match=r"^k must be an integer from 1 to 100; got 0$"):
        ToyConfig(k=0)
    with pytest.raises(DeepFaultError, match=r"^rate must be a number > 0 and <= 1; got nan$"):
        ToyConfig(rate=math.nan)
    with pytest.raises(DeepFaultError, match=r"name must be one of a, b; got 'c'"):
        ToyConfig(name="c")
    assert Interval(int, 1, None, words=("auto",)).describe() == "'auto' or an integer >= 1"


def test_field_options_come_from_the_declaration():
    parser = argparse.ArgumentParser()
    for name in ("k", "rate", "flag", "many"):
        add_field(parser, ToyConfig, name)
    args = parser.parse_args(["--k", "7", "--rate", "0.25", "--raw", "--many", "1,2"])
    assert (args.k, args.rate, args.flag, args.many) == (7, 0.25, False, (1, 2))
    assert "neurons: an integer from 1 to 100" in parser.format_help()
    with pytest.raises(SystemExit):
        parser.parse_args(["--k", "101"])


def test_undeclared_fields_are_found():
    @dataclass(frozen=True)
    class Half:
        a: int = param(1, Interval(int, 0))
        b: int = 2

    assert undeclared(Half) == ["b"]
    assert undeclared(ToyConfig) == []
    assert undeclared(Runtime) == []


def test_runtime_checks_its_fields():
    assert Runtime(device=torch.device("cpu")).device == "cpu"
    assert Runtime(progress=print).progress is print
    for bad in ({"threads": 0}, {"batch_size": "big"}, {"batch_size": True}):
        with pytest.raises(DeepFaultError, match="must be"):
            Runtime(**bad)


def test_entry_one_shape_and_the_old_keywords():
    model = torch.nn.Linear(2, 2)
    out = toy(model, [1, 2], ToyConfig(k=2), runtime=Runtime(batch_size=5))
    assert (out.n, out.batch, out.summary(), out.payload(), out.outputs()) == (4, 5, "4 inputs", {"n": 4}, ())
    assert toy(model, [1], ToyConfig()).batch == "auto"
    shape = r"config=ToyConfig\(k=\.\.\.\) and runtime=Runtime\(batch_size=\.\.\.\)"
    with pytest.warns(FutureWarning, match=shape):
        old = toy(model, [1, 2], k=2, batch_size=5)
    assert (old.n, old.batch) == (4, 5)
    with pytest.raises(TypeError, match="unexpected keyword arguments: nosuch"):
        toy(model, [1], nosuch=1)
    with pytest.raises(DeepFaultError, match="config must be a ToyConfig"):
        toy(model, [1], {"k": 2})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        toy(model, [1], config=ToyConfig(), runtime=Runtime())


def test_entry_applies_and_restores_threads():
    before = torch.get_num_threads()
    seen = []

    @entry(ToyConfig)
    def probe(model, data, config, *, runtime):
        seen.append(torch.get_num_threads())
        return ToyOutcome(n=0, batch=runtime.batch_size)

    probe(torch.nn.Linear(2, 2), [], ToyConfig(), runtime=Runtime(threads=1))
    assert seen == [1]
    assert torch.get_num_threads() == before
