"""The argparse types carry their bounds: out-of-range values are refused while parsing, in one
line that names the option and the bound."""

from __future__ import annotations

import argparse
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deepfault.cli import build_parser, main
from deepfault.cli._common import FieldType, threads_value
from deepfault.core.constraints import Interval

#: The bounds the options declare, as argparse types (every bounded option is one of these shapes).
positive_int = FieldType(Interval(int, 1))
non_negative_int = FieldType(Interval(int, 0))
number = FieldType(Interval(float))
positive_number = FieldType(Interval(float, 0, closed="right"))
fraction = FieldType(Interval(float, 0, 1, closed="left"))
positive_share = FieldType(Interval(float, 0, 1, closed="right"))


@given(st.integers(min_value=-(10**6), max_value=10**6))
def test_positive_int_takes_exactly_the_counts(value):
    if value >= 1:
        assert positive_int(str(value)) == value
    else:
        with pytest.raises(argparse.ArgumentTypeError, match=rf"must be an integer >= 1; got {value}$"):
            positive_int(str(value))


@given(st.integers(min_value=-(10**6), max_value=10**6))
def test_non_negative_int_takes_zero_and_up(value):
    if value >= 0:
        assert non_negative_int(str(value)) == value
    else:
        with pytest.raises(argparse.ArgumentTypeError, match=r"must be an integer >= 0"):
            non_negative_int(str(value))


@given(st.integers(min_value=-50, max_value=50), st.integers(min_value=0, max_value=20))
def test_a_bounded_int_names_both_ends(value, span):
    parse = FieldType(Interval(int, -5, -5 + span))
    if -5 <= value <= -5 + span:
        assert parse(str(value)) == value
    else:
        expected = rf"an integer from -5 to {-5 + span}; got {value}"
        with pytest.raises(argparse.ArgumentTypeError, match=expected):
            parse(str(value))


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_number_types_refuse_what_is_out_of_their_range(value):
    text = repr(value)
    for parse, ok in (
        (number, math.isfinite(value)),
        (positive_number, math.isfinite(value) and value > 0),
        (fraction, math.isfinite(value) and 0 <= value < 1),
        (positive_share, math.isfinite(value) and 0 < value <= 1),
    ):
        if ok:
            assert parse(text) == value
        else:
            with pytest.raises(argparse.ArgumentTypeError, match="must be a"):
                parse(text)


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (positive_int, "-5", "must be an integer >= 1; got -5"),
        (positive_int, "many", "must be an integer >= 1; got 'many'"),
        (fraction, "1", "must be a number >= 0 and < 1; got 1.0"),
        (positive_number, "0", "must be a number > 0; got 0.0"),
        (positive_share, "1.5", "must be a number > 0 and <= 1; got 1.5"),
        (number, "nan", "must be a finite number; got 'nan'"),
        (FieldType(Interval(float, 1.0)), "0.5", "must be a number >= 1; got 0.5"),
        (threads_value, "0", "must be 'auto' or an integer from 1 to 1,024; got 0"),
    ],
)
def test_messages_name_the_bound_and_the_value(parse, text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        parse(text)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["run", "-k", "-5"], "-k must be an integer from 1 to 16,777,216; got -5"),
        (["run", "--repeat", "0"], "--repeat must be an integer from 1 to 10,000; got 0"),
        (["run", "--class", "-2"],
         "--class must be 'all' or one or more (at most 100,000) of: an integer from 0 to 99,999; got (-2,)"),
        (["xplore", "--model", "a,b", "--iterations", "-1"],
         "--iterations must be an integer from 1 to 100,000; got -1"),
        (["coverage", "measure", "--top-k", "0"], "--top-k must be an integer from 1 to 16,777,216; got 0"),
        (["train", "--arch", "digits_mlp", "--dataset", "digits", "--val-fraction", "1"],
         "--val-fraction must be a number >= 0 and < 1; got 1.0"),
        (["train", "--arch", "digits_mlp", "--dataset", "digits", "--lr", "0"],
         "--lr must be a number > 0 and <= 10; got 0.0"),
        (["gan", "train", "--dataset", "digits", "--epochs", "-5"],
         "--epochs must be an integer from 1 to 100,000; got -5"),
    ],
)
def test_the_command_line_refuses_them_while_parsing(capsys, argv, needle):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    assert exit_.value.code == 2
    assert needle in capsys.readouterr().err
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("deepfault: error: "), err
    assert err.count("\n") == 1, err
    assert needle in err
