"""The chain run many steps at once draws from the same distribution as step by step."""

from __future__ import annotations

import numpy as np
import pytest

from deepfault.fuzz.mutation.mcmc import MCMCChooser, UniformChooser

RULES = [f"r{i}" for i in range(15)]


def _chooser(cls=MCMCChooser, previous=3):
    c = cls(RULES)
    rng = np.random.default_rng(0)
    c.selected[:] = rng.integers(1, 50, 15)
    c.faithful[:] = rng.integers(0, 40, 15)
    c.gain[:] = rng.integers(0, 20, 15)
    c.previous = previous
    return c


def _transitions(x: np.ndarray) -> np.ndarray:
    t = np.zeros((15, 15))
    np.add.at(t, (x[:-1], x[1:]), 1)
    return t / t.sum()


def test_many_steps_at_once_follow_the_chain_of_single_steps():
    n = 60_000
    one = _chooser()
    rng = np.random.default_rng(1)
    single = np.array([one.choose(rng) for _ in range(n)])
    many = _chooser().choose_many(np.random.default_rng(2), n)
    assert many.dtype == np.int64
    assert many.shape == (n,)
    # rule frequencies and the transition matrix (each step depends on the previous rule)
    assert np.abs(np.bincount(single, minlength=15) - np.bincount(many, minlength=15)).max() / n < 0.006
    assert np.abs(_transitions(single) - _transitions(many)).max() < 0.003


def test_many_steps_continue_from_the_previous_rule_and_are_seeded():
    a, b = _chooser(), _chooser()
    x, y = a.choose_many(np.random.default_rng(5), 40), b.choose_many(np.random.default_rng(5), 40)
    assert np.array_equal(x, y)
    assert a.previous == x[-1]
    fresh = _chooser(previous=-1)
    assert fresh.choose_many(np.random.default_rng(0), 3).shape == (3,)
    assert _chooser().choose_many(np.random.default_rng(0), 0).shape == (0,)


def test_top_ranked_rule_is_preferred():
    c = MCMCChooser(RULES)
    c.selected[:] = 10
    c.faithful[:] = 10
    c.gain[:] = 1
    c.gain[7] = 9  # rule 7 is ranked first
    c.previous = 0
    draws = c.choose_many(np.random.default_rng(0), 5_000)
    assert np.bincount(draws, minlength=15).argmax() == 7


@pytest.mark.parametrize("cls", [MCMCChooser, UniformChooser])
def test_record_equals_one_update_per_call(cls):
    a, b = _chooser(cls), _chooser(cls)
    rules = np.array([1, 4, 4, 9, 1, 1])
    ok = np.array([True, False, True, True, False, True])
    gain = np.array([False, False, True, False, False, True])
    a.record(rules, faithful=ok, gain=gain)
    for r, f, g in zip(rules, ok, gain, strict=True):
        b.update(int(r), faithful=bool(f), gain=bool(g))
    for key in ("selected", "faithful", "gain"):
        assert np.array_equal(getattr(a, key), getattr(b, key))
