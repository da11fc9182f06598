"""The default transport copies a URL's body, with or without a bar over its bytes."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

from deepfault.data.download import _urllib_transport


@pytest.mark.parametrize("progress", [False, True])
def test_default_transport_copies_the_body(tmp_path, caplog, progress):
    caplog.set_level(logging.INFO)
    body = np.random.default_rng(0).bytes(3 * (1 << 20) + 17)  # more than one 1 MiB chunk
    src = tmp_path / "src.bin"
    src.write_bytes(body)
    dest = tmp_path / f".dest.bin.{os.getpid()}.x1y2.tmp"  # as atomic_path names it
    _urllib_transport(src.as_uri(), dest, progress=progress)
    assert dest.read_bytes() == body
    logged = "download dest.bin" in caplog.text  # not a terminal here: log lines instead of a bar
    assert logged == progress
