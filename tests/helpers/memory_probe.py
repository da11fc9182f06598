"""Peak memory of one method at N and 4N inputs, measured in a fresh process (issue 26: "no
method's memory grows with the number of inputs at a fixed batch").

Three meters, because none sees everything:

* ``tracemalloc`` sees Python objects and numpy's buffers, byte for byte;
* the process's peak resident set (``VmHWM``, reset through ``/proc/self/clear_refs``) sees
  torch's CPU tensors, which tracemalloc does not. glibc is told to mmap every block of 64 KiB
  or more (``MALLOC_MMAP_THRESHOLD_``) and trimmed before each measurement, so a freed tensor
  leaves the resident set at once and the next measurement starts from what is really held;
* glibc's own statistics (``mallinfo2``: the bytes handed out and not yet freed, sampled every
  millisecond) see what is live, without the freed memory that glibc's heap keeps and that
  the resident set counts (a bare loop of forward passes leaves some too).

Each measurement is the peak above what the process held before the call (the model, and for
the methods that take a whole data set, its arrays, which are built before). A warm-up call
first loads what is loaded once (modules, caches). Run as::

    python -c "from helpers.memory_probe import main; main()" METHOD N1 N2 [--leak]

A method ending in ``-conv`` (``profile-conv``, ``run-conv``, ``repair-conv``) runs on
:func:`conv_model`'s 3x64x64 inputs instead of the MLP's 1,024 features. Its caller sets
``MALLOC_MMAP_THRESHOLD_`` to 8 KiB (:data:`CONV_ENV`): the convolution's per-batch blocks
between 8 and 64 KiB otherwise stay in glibc's heap and add 5-20 MB of noise to the resident
set (a bare loop of forward passes shows it too).

which prints one JSON line ``{"N1": {"rss": bytes, "live": bytes, "py": bytes}, "N2": ...}``. ``--leak``
plants a leak (a forward hook keeping every batch's outputs, as a torch tensor and as a numpy
copy), to show that the meters see one.
"""

from __future__ import annotations

import copy
import ctypes
import json
import os
import sys
import tempfile
import tracemalloc
from pathlib import Path

import numpy as np
import torch
from torch import nn

from deepfault.core.heap import LivePeak

FEATURES = 1024  # 4 KiB per input: a copy of the inputs is far above the per-input budget
HIDDEN = 512  # 2 x 512 neurons: 4 KiB of activations per input
CLASSES = 4
BATCH = 100
ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_ARENA_MAX": "1", "OMP_NUM_THREADS": "1",
       "DEEPFAULT_THREADS": "none", "DEEPFAULT_NO_DOWNLOAD": "1"}


CONV_SHAPE = (3, 64, 64)  # 48 KiB per input; a 3x3 convolution's 8 channels are 128 KiB per input


def conv_model() -> nn.Module:
    """A tiny convolutional classifier on 3x64x64 inputs: per input, its activations (128 KiB a
    layer) are far larger than its results, so any per-input retention or a batch that grows
    with the inputs shows at a few hundred inputs."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                        nn.Linear(8 * 16, CLASSES))
    with torch.no_grad():
        net[-1].bias.copy_(-net(torch.full((1, *CONV_SHAPE), 0.5))[0] + net[-1].bias)
    return net.eval()


CONV_ENV = {**ENV, "MALLOC_MMAP_THRESHOLD_": "8192"}


def model() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                        nn.Linear(HIDDEN, CLASSES))
    with torch.no_grad():  # every class predicted on the inputs below
        net[-1].bias.copy_(-net(torch.full((1, FEATURES), 0.5))[0] + net[-1].bias)
    return net.eval()


class Generated(torch.utils.data.Dataset):
    """``n`` inputs made on demand (never all in memory at once), labelled by the model with
    every fifth label moved, so that some inputs are misclassified."""

    def __init__(self, n: int, net: nn.Module, offset: int = 0, shape: tuple[int, ...] = (FEATURES,)):
        self.n, self.offset, self.shape = n, offset, shape
        self.net = copy.deepcopy(net)  # its own copy: the method's hooks never see these passes
        self.net._forward_hooks.clear()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(self.offset + i)
        x = torch.rand(self.shape, generator=g)
        with torch.no_grad():
            y = int(self.net(x[None]).argmax(1))
        return x, (y + 1) % CLASSES if i % 5 == 0 else y


def arrays(n: int, net: nn.Module, offset: int = 0, shape: tuple[int, ...] = (FEATURES,)
           ) -> tuple[np.ndarray, np.ndarray]:
    data = Generated(n, net, offset, shape)
    items = [data[i] for i in range(n)]
    x = np.stack([xi.numpy() for xi, _ in items])
    y = np.array([yi for _, yi in items], dtype=np.int64)
    return x, y


def dataset(n: int, net: nn.Module, shape: tuple[int, ...] = (FEATURES,)):
    from deepfault.data import Dataset

    x, y = arrays(n, net, shape=shape)
    xt, yt = arrays(n, net, offset=10**6, shape=shape)
    return Dataset("generated", xt, yt, x, y, (0.0, 1.0), tuple(str(c) for c in range(CLASSES)))


IMAGE = (3, 224, 224)  # an ImageNet-sized input: 588 KiB in float32


def image_model() -> nn.Module:
    """A small network that still keeps full-size activations (8 channels at 224x224: 1.6 MB
    per input), so that the rows of a forward pass show in the resident set."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                         nn.Linear(8 * 16, CLASSES)).eval()


def image_dataset(n: int, net: nn.Module):
    """``n`` smooth images (7x7 noise upsampled, so that mild mutations keep SSIM high), labelled
    by ``net`` with every fifth label moved."""
    from deepfault.data import Dataset

    g = torch.Generator().manual_seed(0)
    small = torch.rand(2 * n, IMAGE[0], 7, 7, generator=g)
    x = torch.nn.functional.interpolate(small, size=IMAGE[1:], mode="bilinear", align_corners=False)
    with torch.no_grad():
        y = torch.cat([net(x[i:i + 8]).argmax(1) for i in range(0, len(x), 8)]).numpy()
    y = np.where(np.arange(len(y)) % 5 == 0, (y + 1) % CLASSES, y).astype(np.int64)
    x = x.numpy()
    return Dataset("images", x[n:], y[n:], x[:n], y[:n], (0.0, 1.0), tuple(str(c) for c in range(CLASSES)))


def _rss() -> tuple[int, int]:
    """``(peak, current)`` resident set in bytes."""
    values = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                values[key] = int(rest.split()[0]) * 1024
    return values["VmHWM"], values["VmRSS"]


def measure(fn) -> dict:
    """The peak bytes above the start, of torch (resident set), of the allocator's live bytes
    (``live``: the resident set less the freed memory glibc keeps; ``None`` without
    ``mallinfo2``) and of Python/numpy (tracemalloc), while ``fn()`` runs, and the bytes of
    the numpy arrays its result holds (``result``); the result is dropped after the
    measurement."""
    import gc

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak resident set
    _, rss0 = _rss()
    tracemalloc.reset_peak()
    py0, _ = tracemalloc.get_traced_memory()
    with LivePeak() as live:
        out = fn()
    _, py_peak = tracemalloc.get_traced_memory()
    rss_peak, _ = _rss()
    fields = vars(out).values() if hasattr(out, "__dict__") else ()
    held = sum(v.nbytes for v in fields if isinstance(v, np.ndarray))
    del out
    return {"rss": rss_peak - rss0, "live": live.peak,
            "py": py_peak - py0, "result": held}


def _loader(data):
    return torch.utils.data.DataLoader(data, batch_size=BATCH)


def _plant_leak(net: nn.Module) -> None:
    kept: list = []

    def hook(module, inputs, output):
        kept.append(output.detach().clone())  # torch: the resident set
        kept.append(output.detach().numpy().copy())  # numpy: tracemalloc

    net[0].register_forward_hook(hook)


def _setup(method: str, n: int, net: nn.Module, work: Path):
    """What the call at ``n`` inputs needs, built before the measurement; returns the call."""
    import deepfault as df

    if method in ("profile", "profile-conv"):
        data = Generated(n, net, shape=CONV_SHAPE if method == "profile-conv" else (FEATURES,))
        return lambda: df.compute_profile(net, _loader(data), batch_size=BATCH, threads=1)
    if method == "measure":
        profile = df.compute_profile(net, _loader(Generated(200, net, 10**6)), batch_size=BATCH, threads=1)
        data = Generated(n, net)
        return lambda: df.measure_coverage(net, _loader(data), criteria=("nc", "kmnc", "nbc", "tknc"),
                                           profile=profile, batch_size=BATCH, threads=1)
    if method == "rank":
        data = Generated(n, net)
        by = ("gini", "margin", "entropy", "confidence")  # cam/ctm keep each input's covered items by design
        return lambda: df.rank_inputs(net, _loader(data), by=by, batch_size=BATCH, threads=1)
    if method == "surprise-fit":
        data = Generated(n, net)
        # the state holds the training activations by design: counted apart (see the test)
        return lambda: df.fit_surprise(net, _loader(data), batch_size=BATCH, threads=1)
    if method == "surprise-scores":
        state = df.fit_surprise(net, _loader(Generated(200, net, 10**6)), batch_size=BATCH, threads=1)
        data = Generated(n, net)
        return lambda: df.surprise_scores(net, _loader(data), state, kinds=("dsa",), batch_size=BATCH,
                                          threads=1)
    if method in ("run", "run-conv"):
        data = dataset(n, net, CONV_SHAPE if method == "run-conv" else (FEATURES,))
        # the conv model predicts two classes: its other two have no test input
        classes = (0, 1) if method == "run-conv" else None
        config = df.RunConfig(k=5, num_inputs=5, batch_size=BATCH, classes=classes)
        return lambda: df.run_deepfault(net, data, config, threads=1)
    if method == "xplore":
        from deepfault.xplore import XploreConfig

        x, _ = arrays(n, net)
        twin = copy.deepcopy(net)  # the same model: no input is found, the results stay per seed
        config = XploreConfig(seeds=n, iterations=2, inputs_per_step=BATCH)
        return lambda: df.xplore([net, twin], x, config=config, bounds=(0.0, 1.0), batch_size=BATCH,
                                 threads=1)
    if method == "regress":
        data = dataset(n, net)
        twin = copy.deepcopy(net)
        store = work / f"regress-{n}.sqlite"
        return lambda: df.regress(net, twin, dataset=data, store=store, budget="20it", inputs_per_step=8,
                                  fidelity="linf:0.1", queue_capacity=64, threads=1, checkpoint_every=3600)
    if method == "regress-images":  # ImageNet-sized images: one step's working set (its passes, SSIM)
        net = image_model()
        data = image_dataset(n, net)
        twin = copy.deepcopy(net)
        return lambda: df.regress(net, twin, dataset=data, store=None, budget="4it", inputs_per_step=2,
                                  fidelity="ssim:0.5", threads=1, checkpoint_every=3600)
    if method in ("repair", "repair-conv"):
        from deepfault.repair import RepairConfig

        shape = CONV_SHAPE if method == "repair-conv" else (FEATURES,)
        data = dataset(n, net, shape)
        found = work / f"found-{method}.npz"
        if not found.exists():  # the same 40 found inputs for every n: only the data set grows
            x, y = arrays(40, net, offset=2 * 10**6, shape=shape)
            np.savez(found, originals=x, synthesized=np.clip(x + 0.05, 0, 1).astype(np.float32), labels=y,
                     pred_original=y, pred_synthesized=(y + 1) % CLASSES, test_index=np.arange(40))
        config = RepairConfig(epochs=1, baselines=("random-train",), mix=2.0)
        return lambda: df.repair(net, found, config=config, dataset=data, threads=1)
    raise SystemExit(f"unknown method {method!r}")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    method, sizes, leak = argv[0], [int(a) for a in argv[1:] if a.isdigit()], "--leak" in argv
    torch.set_num_threads(1)
    net = conv_model() if method.endswith("-conv") else model()
    if leak:
        _plant_leak(net)
    tracemalloc.start()
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        warm = 4 if method == "regress-images" else 50  # (large images: a few are enough)
        _setup(method, warm, net, Path(tmp))()  # warm-up: imports, caches, the first allocations
        for n in sizes:
            call = _setup(method, n, net, Path(tmp))
            out[str(n)] = measure(call)
    print(json.dumps(out))
    sys.stdout.flush()
    os._exit(0)  # no teardown that could print
