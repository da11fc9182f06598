"""The float-sensitive tests (marker ``float_sensitive``: float results computed two ways) run again
in child processes under other PyTorch CPU kernels and thread counts, so that a tolerance which
holds on one kind of CPU only fails on the developer's machine too (the rule and the helpers:
``tests/helpers/float_tolerance.py``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.float_tolerance import assert_close_two_ways, assert_orders_agree, gamma, two_way_rtol

TESTS = Path(__file__).resolve().parents[1]
MARKED = re.compile(r"pytest\.mark\.float_sensitive")
CHILD = "DEEPFAULT_FLOAT_PORTABILITY_CHILD"


def _marked_files() -> list[str]:
    """The test files with a float_sensitive test: only they are collected by the child."""
    return sorted(str(p.relative_to(TESTS.parent)) for p in TESTS.rglob("test_*.py")
                  if MARKED.search(p.read_text(encoding="utf-8")))


@pytest.mark.skipif(bool(os.environ.get(CHILD)), reason="already a float-portability child")
@pytest.mark.parametrize(("capability", "threads"), [("default", 1), ("avx2", 2)])
def test_the_float_sensitive_tests_pass_on_other_kernels_and_threads(capability, threads):
    files = _marked_files()
    assert files, "no test is marked float_sensitive"
    assert "tests/core/test_float_portability.py" not in files  # the child must not run this test again
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability, "DEEPFAULT_TEST_THREADS": str(threads),
           "OMP_NUM_THREADS": str(threads), CHILD: "1"}
    # not -q: the child's header says which kernels and how many threads ran
    cmd = [sys.executable, "-m", "pytest", "-m", "float_sensitive", "-p", "no:cacheprovider",
           "-o", "addopts=", "-r", "fE", *files]
    proc = subprocess.run(cmd, cwd=TESTS.parent, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    out = proc.stdout + proc.stderr
    print(f"ATEN_CPU_CAPABILITY={capability}, {threads} thread(s):\n{out}")
    assert proc.returncode == 0, f"float-sensitive tests fail with ATEN_CPU_CAPABILITY={capability} " \
                                 f"and {threads} thread(s):\n{out[-6000:]}"
    assert f", {threads} threads" in out  # the child's header (tests/conftest.py): the thread count took
    assert " passed" in out


# --------------------------------------------------------------------------- the helpers themselves


def test_gamma_is_highams_bound():
    u32 = 2.0**-24
    assert gamma(1, torch.float32) == pytest.approx(u32 / (1 - u32))
    assert gamma(10, np.float32) == pytest.approx(10 * u32 / (1 - 10 * u32))
    assert gamma(10, torch.float64) == pytest.approx(10 * 2.0**-53, rel=1e-12)
    assert two_way_rtol(14, torch.float32) == pytest.approx(2 * gamma(14, torch.float32))
    with pytest.raises(ValueError, match="at least one term"):
        gamma(0, torch.float32)
    with pytest.raises(ValueError, match="unbounded"):
        gamma(2**24, torch.float32)


def test_a_regrouped_float32_sum_is_within_the_tolerance_and_a_real_change_is_not():
    rng = np.random.default_rng(0)
    terms = rng.normal(size=(50, 27)).astype(np.float32)
    forward = terms.sum(1, dtype=np.float32)
    backward = terms[:, ::-1].cumsum(1, dtype=np.float32)[:, -1]  # another order of the same sums
    atol = assert_close_two_ways(forward, backward, n=27, dtype=np.float32)
    assert 0 < atol < 1e-4
    with pytest.raises(AssertionError, match="n=27"):
        assert_close_two_ways(forward * 1.001, backward, n=27, dtype=np.float32)
    with pytest.raises(AssertionError, match="finite"):
        assert_close_two_ways(np.append(forward, np.inf), np.append(backward, 1.0), n=27, dtype=np.float32)


def test_orders_agree_up_to_ties_by_tolerance():
    scores = np.array([0.5, 0.1, 0.1 + 1e-9, 0.9, np.inf, np.inf])
    order = np.array([4, 5, 3, 0, 1, 2])
    assert_orders_agree(order, [5, 4, 3, 0, 2, 1], scores, atol=1e-9)  # equal infinities, a tie
    with pytest.raises(AssertionError, match="positions 4..4"):
        assert_orders_agree(order, [4, 5, 3, 0, 2, 1], scores, atol=0.0)  # no tie without tolerance
    with pytest.raises(AssertionError, match="positions 2..2"):
        assert_orders_agree(order, [4, 5, 0, 3, 1, 2], scores, atol=1e-9)  # 0.9 and 0.5: a swap
    with pytest.raises(AssertionError, match="not the same inputs"):
        assert_orders_agree(order, [4, 5, 3, 0, 1, 1], scores, atol=1e-9)
