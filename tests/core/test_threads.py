"""The free-core count behind ``--threads auto``."""

from __future__ import annotations

import torch
from torch import nn

from deepfault.core import threads


def test_busy_cores_is_a_count_of_other_running_tasks():
    busy = threads.busy_cores(samples=3, interval=0.0)
    assert 0.0 <= busy <= 4096


def test_auto_threads_never_exceeds_pytorchs_setting(monkeypatch):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        monkeypatch.setattr(threads, "usable_cores", lambda: 64)
        monkeypatch.setattr(threads, "busy_cores", lambda: 0.0)
        assert threads.auto_threads([nn.Linear(3, 2)], "cpu") == 1
        assert threads.auto_threads([nn.Linear(3, 2)], "meta") is None
    finally:
        torch.set_num_threads(before)
