"""What every result file records about where it came from."""

from __future__ import annotations

import datetime as _dt
import platform
import sys

import numpy as np
import torch

__all__ = ["provenance"]


def provenance(device: torch.device | str | None = None, *, argv: list[str] | None = None) -> dict:
    """Versions, device, platform, time and (optionally) the command line."""
    from ._version import __version__

    device = torch.device(device) if device is not None else torch.device("cpu")
    info: dict[str, str | list[str]] = {
        "deepfault": __version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "device": str(device),
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
    if argv is not None:
        info["argv"] = list(argv)
    return info
