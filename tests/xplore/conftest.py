"""DeepXplore's tests run their tiny models on one thread."""

import pytest


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here: tiny models are fastest on one thread (two wait on each other on a busy machine)."""
