"""Every method on models at their real size, against the bare passes its work needs (issue 26,
"Each method close to the model's own cost").

The models are written as a user writes them (``benchmarks/models/``: ``ResNet18Cifar`` on
3x32x32, ``ResNet50`` on 3x224x224, ``ViTTiny`` on 3x224x224), built with seeded random
weights, saved as ``state_dict`` files and read back through the tool exactly as a user's
would be: ``prepare_model(FILE, DATA.npz, arch="benchmarks/models/resnet.py:ResNet50",
arch_kwargs={"num_classes": 10})`` (the API form of ``--arch`` and ``--arch-args``). Before
saving, each model's BatchNorm statistics are set by train-mode passes over the synthetic data
and its last layer's bias is centred, so that its predictions spread over the ten classes.

**Data.** Structured synthetic images (a smooth class-dependent pattern plus noise, in
``[0, 1]``) in the tool's ``.npz`` format (``x``, ``y``, ``x_train``, ``y_train``, ``bounds``);
the labels are the saved model's own predictions with a quarter of them changed, so that
about 75% of the inputs are classified correctly and every class has failures. Two files per
model: N and 4N test inputs (with as many training inputs).

**Methods** (each model x method x size in a fresh subprocess):

=========  ==============================================  =====================================
method     what is timed                                   the bare passes (same batches)
=========  ==============================================  =====================================
spectrum   ``compute_class_spectra`` over every class      one forward per input
profile    ``compute_profile``                             one forward per input
measure    ``measure_coverage``, all seven criteria,       one forward per input
           with a profile of the training split
rank       ``rank_inputs`` (default prioritisers)          one forward per input
run        ``run_deepfault`` (spectrum, selection,         one forward per input, plus one forward
           synthesis from one seed per class,              and ``iterations`` x (forward+backward)
           evaluation; k=10, 1 iteration)                  per synthesized input; and the spec's
                                                           per-neuron loop (below)
synthesis  ``synthesize`` from every input, 10 neurons,    ``iterations`` x (forward+backward to
           ``--synthesis-iterations`` steps, the RMS-      the input) per input; and the spec's
           normalised direction (the default)              per-neuron loop (below)
synthesis- the same with ``normalize=False`` (the mean     ``iterations`` x (forward+backward to
raw        of raw gradients: one backward per step)        the input) per input
xplore     ``xplore`` of the model and a perturbed copy    per model: one forward per seed, and
           (``--xplore-iterations`` at most)               forward+backward per step a seed took
regress    ``regress`` (DRFuzz, SSIM fidelity, M2 the      two forwards per executed mutant and
           perturbed copy, ``--regress-iterations``)       per seed (the seeds' evaluation)
repair     the fine-tuning inside ``repair`` (1 epoch,     forward+backward+Adam step per
           mix 1, no baselines); ``repair_total_s`` is     fine-tuning batch (train mode)
           the whole call
=========  ==============================================  =====================================

The bare passes are timed in the same subprocess, after the method, with the same batch size,
on the same inputs (where a method's count of passes depends on what it found, e.g. the steps
xplore took, the bare time is the measured per-input rate times that count). Peak memory: the
subprocess's peak RSS while the method runs (``VmHWM``, reset through
``/proc/self/clear_refs`` once the model and data are loaded), its RSS before the method, and
on a GPU ``torch.cuda.max_memory_allocated``; and the peak of glibc's live bytes
(``deepfault/core/heap.py``, sampled every 5 ms) above their value before the method. **Memory is
flat** from N to 4N when the method's own peak of live bytes (less what it holds by design:
repair's fine-tuning set of found and mixed-in inputs, ``held_mib``) at 4N is at most 1.2 x that
at N plus 32 MiB; the resident set's verdict (peak RSS minus RSS before it, less the same) is
reported beside it, since it also counts freed memory glibc's heap keeps. The data set itself,
loaded before, is not counted.

**The per-neuron loop.** DeepFault's default direction (spec/deepfault.md, "Gradient scale" and
"Batching") is the mean of the k selected neurons' gradients, each RMS-normalised, so each step
needs one backward pass to the input per neuron: the spec's reference is a loop of k
``torch.autograd.grad`` calls after one forward. ``bare_per_neuron_grad`` times exactly that
loop in plain PyTorch (hooks on the neurons' layers, no deepfault code), and the goal of
``run`` and ``synthesis`` is checked against it, since the spec fixes the work; the ratio to one
forward and backward per step, the issue's reference, is reported beside it, and
``synthesis-raw`` (one backward per step) is checked against that.

Goals (issue 26): time / bare <= 1.5 for spectrum, profile, measure, rank; <= 2 for run,
synthesis, synthesis-raw, xplore, regress and repair; memory flat.

Usage::

    PYTHONPATH=src .venv/bin/python benchmarks/bench_scale.py            # about 25 min, 2 idle cores
    PYTHONPATH=src .venv/bin/python benchmarks/bench_scale.py --quick    # ResNet-18 only, small N
    PYTHONPATH=src .venv/bin/python benchmarks/bench_scale.py --models resnet50 --methods spectrum,run
    PYTHONPATH=src .venv/bin/python benchmarks/bench_scale.py --table    # the JSON as a markdown table

Writes ``benchmarks/results/bench_scale.json`` (``--out``), after every subprocess, so an
interrupted run keeps what it measured.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from deepfault.core.heap import LivePeak

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
MIB = 2**20

#: name: the class as ``--arch`` names it, its arguments, input shape, default N, --quick N, batch.
MODELS = {
    "resnet18": {"arch": "benchmarks/models/resnet.py:ResNet18Cifar", "kwargs": {"num_classes": 10},
                 "shape": (3, 32, 32), "n": 32, "quick_n": 8, "batch": 32},
    "resnet50": {"arch": "benchmarks/models/resnet.py:ResNet50", "kwargs": {"num_classes": 10},
                 "shape": (3, 224, 224), "n": 8, "quick_n": 4, "batch": 8},
    "vit": {"arch": "benchmarks/models/vit.py:ViTTiny", "kwargs": {"num_classes": 10},
            "shape": (3, 224, 224), "n": 16, "quick_n": 4, "batch": 16},
}
METHODS = ("spectrum", "profile", "measure", "rank", "run", "synthesis", "synthesis-raw", "xplore", "regress",
           "repair")
GOALS = {"spectrum": 1.5, "profile": 1.5, "measure": 1.5, "rank": 1.5,
         "run": 2.0, "synthesis": 2.0, "synthesis-raw": 2.0, "xplore": 2.0, "regress": 2.0, "repair": 2.0}
CLASSES = 10
#: memory is flat when extra(4N) <= FLAT_FACTOR * extra(N) + FLAT_SLACK_MIB
FLAT_FACTOR, FLAT_SLACK_MIB = 1.2, 32.0


# ----------------------------------------------------------------------------- the inputs


def _build_user(name: str) -> torch.nn.Module:
    """The class, imported from its file as a user's script would (not through deepfault)."""
    import importlib.util

    spec = MODELS[name]
    path, cls = spec["arch"].split(":")
    mod_spec = importlib.util.spec_from_file_location(f"_bench_{Path(path).stem}", REPO / path)
    assert mod_spec is not None
    assert mod_spec.loader is not None
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return getattr(module, cls)(**spec["kwargs"])


def _images(rng: np.random.Generator, n: int, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Smooth class-dependent patterns plus noise in [0, 1], and the pattern's class."""
    c, h, w = shape
    cls = rng.integers(0, CLASSES, n)
    yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    x = np.empty((n, c, h, w), np.float32)
    for i in range(n):
        k = cls[i]
        for ch in range(c):
            phase = rng.uniform(0, 2 * np.pi)
            wave = (k % 5 + 1) * xx + (k // 5 + 1) * yy + 0.3 * ch
            x[i, ch] = 0.5 + 0.3 * np.sin(2 * np.pi * wave + phase)
    x += rng.normal(0, 0.1, x.shape).astype(np.float32)
    return np.clip(x, 0, 1).astype(np.float32), cls


def _forward_all(model: torch.nn.Module, x: np.ndarray, batch: int) -> np.ndarray:
    with torch.inference_mode():
        return np.concatenate([model(torch.from_numpy(x[i:i + batch])).numpy()
                               for i in range(0, len(x), batch)])


def prepare_inputs(name: str, n: int, folder: Path, seed: int) -> dict:
    """Write the model's state_dict, its perturbed copy and the N and 4N data files."""
    spec = MODELS[name]
    torch.manual_seed(seed)
    model = _build_user(name)
    rng = np.random.default_rng(seed)
    big = 4 * n
    x_all, _ = _images(rng, 2 * big, spec["shape"])
    # BatchNorm statistics from the data (cumulative average over train-mode passes), as training
    # would leave them.
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if bns:
        for m in bns:
            m.reset_running_stats()
            m.momentum = None
        model.train()
        with torch.no_grad():
            for i in range(0, min(len(x_all), 64), 16):
                model(torch.from_numpy(x_all[i:i + 16]))
        for m in bns:
            m.momentum = 0.1
    model.eval()
    logits = _forward_all(model, x_all, spec["batch"])
    head = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():  # centre the logits so that predictions spread over the classes
        head.bias -= torch.from_numpy(logits.mean(0))
    pred = (logits - logits.mean(0)).argmax(1)
    y = pred.copy()
    flip = rng.random(len(y)) < 0.25
    y[flip] = (y[flip] + rng.integers(1, CLASSES, flip.sum())) % CLASSES
    torch.save(model.state_dict(), folder / f"{name}.pt")
    m2 = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed + 1)
    # M2: every weight moved by 0.1% of its tensor's spread, a close new version. (At 5% or 1% a random
    # ResNet-50's M2 agreed with M1 on so few inputs that regress queued no seed and ran no mutant.)
    with torch.no_grad():
        for p in m2.parameters():
            if p.ndim > 1:
                p += 0.001 * p.std() * torch.randn(p.shape, generator=g)
    torch.save(m2.state_dict(), folder / f"{name}-m2.pt")
    files = {}
    for label, size in (("N", n), ("4N", big)):
        path = folder / f"{name}-{label}.npz"
        np.savez(path, x=x_all[:size], y=y[:size], x_train=x_all[big:big + size], y_train=y[big:big + size],
                 bounds=np.array([0.0, 1.0], np.float32))
        files[label] = str(path)
    params = sum(p.numel() for p in model.parameters())
    return {"params": params, "data": files, "weights": str(folder / f"{name}.pt"),
            "weights_m2": str(folder / f"{name}-m2.pt"), "accuracy": float((pred == y).mean()),
            "predicted_classes": int(len(np.unique(pred)))}


# ----------------------------------------------------------------------------- the child


def _status(key: str) -> float | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _batches(x: np.ndarray, batch: int, device: torch.device):
    for i in range(0, len(x), batch):
        yield torch.from_numpy(x[i:i + batch]).to(device)


def bare_forward(model, x, batch, device) -> float:
    """Seconds for one forward per input (inference mode)."""
    _sync(device)
    t = time.perf_counter()
    with torch.inference_mode():
        for xb in _batches(x, batch, device):
            model(xb)
    _sync(device)
    return time.perf_counter() - t


@contextlib.contextmanager
def _frozen_timer(model, device):
    """Times the block with ``model``'s weights frozen (gradients to the input only), the
    device synchronised at both ends; yields a dict whose ``seconds`` is set on exit, and
    restores each weight's ``requires_grad``."""
    flags = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    timing = {"seconds": 0.0}
    try:
        _sync(device)
        t = time.perf_counter()
        with torch.enable_grad():
            yield timing
        _sync(device)
        timing["seconds"] = time.perf_counter() - t
    finally:
        for p, f in zip(model.parameters(), flags, strict=True):
            p.requires_grad_(f)


def bare_input_grad(model, x, batch, device, repeats: int = 1) -> float:
    """Seconds for ``repeats`` x (forward + backward to the input) per input, weights frozen."""
    with _frozen_timer(model, device) as timing:
        for xb in _batches(x, batch, device):
            for _ in range(repeats):
                xb = xb.detach().requires_grad_(True)
                torch.autograd.grad(model(xb).sum(), xb)
    return timing["seconds"]


def _unit_values(out: torch.Tensor, unit: int) -> torch.Tensor:
    """One neuron's value per input, by the tool's definition (docs/coverage.md): a channel's
    spatial mean, a (tokens, features) output's feature averaged over the tokens."""
    if out.ndim == 2:
        return out[:, unit]
    if out.ndim == 3:  # the benchmark's only 3-D outputs are a ViT block's (N, tokens, features)
        return out[..., unit].mean(dim=1)
    return out[:, unit].flatten(1).mean(dim=1)


def bare_per_neuron_grad(model, x, batch, device, neurons, repeats: int = 1) -> float:
    """Seconds for the normalised direction's passes written as plain PyTorch, the spec's
    per-neuron loop (spec/deepfault.md, "Batching"): per step one forward, then one backward
    to the input per selected neuron (``retain_graph``), each gradient RMS-normalised and summed."""
    modules = dict(model.named_modules())
    seen: dict[str, torch.Tensor] = {}
    handles = [modules[name].register_forward_hook(lambda _m, _i, o, name=name: seen.__setitem__(name, o))
               for name in {layer for layer, _ in neurons}]
    try:
        with _frozen_timer(model, device) as timing:
            for xb in _batches(x, batch, device):
                for _ in range(repeats):
                    xb = xb.detach().requires_grad_(True)
                    model(xb)
                    direction = torch.zeros_like(xb)
                    for j, (layer, unit) in enumerate(neurons):
                        (g,) = torch.autograd.grad(_unit_values(seen[layer], unit).sum(), xb,
                                                   retain_graph=j < len(neurons) - 1)
                        rms = g.flatten(1).pow(2).mean(dim=1).sqrt().view(-1, *[1] * (g.ndim - 1))
                        direction += g / (rms + 1e-5)
                    seen.clear()
        return timing["seconds"]
    finally:
        for h in handles:
            h.remove()


def bare_train(model, x, y, batch, device, lr: float = 1e-3) -> float:
    """Seconds for one epoch of forward + backward + Adam step per batch on a copy (train mode)."""
    net = copy.deepcopy(model).to(device).train()
    for p in net.parameters():
        p.requires_grad_(True)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    yt = torch.as_tensor(y, dtype=torch.long)
    _sync(device)
    t = time.perf_counter()
    for i in range(0, len(x), batch):
        xb = torch.from_numpy(x[i:i + batch]).to(device)
        if len(xb) < 2:  # BatchNorm needs two values per channel in train mode
            continue
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(net(xb), yt[i:i + batch].to(device)).backward()
        opt.step()
    _sync(device)
    return time.perf_counter() - t


def _neurons(obj) -> int | None:
    for path in (("layout", "num_neurons"), ("spectrum", "layout", "num_neurons"), ("num_neurons",),
                 ("profile", "layout", "num_neurons")):
        cur = obj
        try:
            for attr in path:
                cur = getattr(cur, attr)
        except AttributeError:
            continue
        if isinstance(cur, (int, np.integer)):
            return int(cur)
        if isinstance(cur, tuple) and cur and all(isinstance(v, (int, np.integer)) for v in cur):
            return int(cur[0])
    return None


class _Cell:
    """What one subprocess works with: the prepared model(s), the data and the settings."""

    def __init__(self, spec: dict):
        import deepfault as df

        self.df, self.spec = df, spec
        self.device = torch.device(spec["device"])
        m = MODELS[spec["model"]]
        self.arch, self.kwargs = str(REPO / m["arch"]), m["kwargs"]
        self.batch, self.method = int(spec["batch"]), spec["method"]
        self.pm = self.prepare(spec["weights"], spec["data"])
        self.data = self.pm.data
        self.x, self.y = self.data.x_test, self.data.y_test
        self.net = self.pm.module.eval()
        self.pm2 = None
        self.out: dict = {"n": int(len(self.x)), "batch": self.batch, "threads": torch.get_num_threads()}

    def prepare(self, weights, data):
        """A state_dict and the user's class, as ``--arch FILE.py:Class --arch-args JSON`` reads them."""
        pm = self.df.prepare_model(weights, data, arch=self.arch, arch_kwargs=self.kwargs)
        if self.device.type != "cpu":
            pm.module.to(self.device)
        return pm

    def forwards(self, model=None) -> float:
        return bare_forward(model or self.net, self.x, self.batch, self.device)

    def grads(self, model=None, repeats: int = 1) -> float:
        return bare_input_grad(model or self.net, self.x, self.batch, self.device, repeats)


# Each method: (set-up, not timed) -> the timed call -> the bare passes its work needs.

def _spectrum(c: _Cell) -> None:
    res = c.df.compute_class_spectra(c.net, c.x, c.y, list(range(CLASSES)), batch_size=c.batch)
    c.out["neurons"] = next(iter(res.values())).layout.num_neurons


def _profile(c: _Cell) -> None:
    c.out["neurons"] = _neurons(c.df.compute_profile(c.pm, c.x, runtime=c.df.Runtime(batch_size=c.batch)))


def _measure_setup(c: _Cell) -> None:  # the training split's profile, as `coverage profile` saves it
    c.profile = c.df.compute_profile(c.pm, c.data.x_train, runtime=c.df.Runtime(batch_size=c.batch))


def _measure(c: _Cell) -> None:
    config = c.df.CoverageConfig(criteria=c.df.list_criteria(), profile=c.profile)
    res = c.df.measure_coverage(c.pm, c.x, config, runtime=c.df.Runtime(batch_size=c.batch))
    c.out["neurons"] = _neurons(res) or _neurons(c.profile)


def _rank(c: _Cell) -> None:
    c.out["neurons"] = _neurons(c.df.rank_inputs(c.pm, (c.x, c.y), runtime=c.df.Runtime(batch_size=c.batch)))


def _forwards_bare(c: _Cell) -> float:
    c.out["bare_what"] = f"{len(c.x)} forwards"
    return c.forwards()


def _run(c: _Cell) -> None:
    classes = tuple(int(k) for k in np.unique(c.y))  # every class with inputs (a small N may miss one)
    # One synthesis seed per class (``--inputs 1``) at every size: the spectrum grows with N, the
    # synthesis batches do not, so N and 4N compare the same synthesis working set (with every
    # input synthesized, N's classes hold 1-2 seeds and 4N's fill the batch: a bigger graph, not
    # memory that grows with the inputs).
    res = c.df.run_deepfault(c.pm, c.data, c.df.RunConfig(k=10, classes=classes, batch_size=c.batch,
                                                           num_inputs=1))
    reps = [r for cls in res.classes for r in cls.repetitions]
    c.out["synthesized"] = int(sum(len(r.input_indices) for r in reps))
    c.selections = [([(n.layer, n.unit) for n in r.selection.neurons], np.asarray(r.input_indices))
                    for r in reps if len(r.input_indices)]
    c.out["neurons"] = res.classes[0].spectrum.layout.num_neurons if res.classes else None


def _run_bare(c: _Cell) -> float:
    n, s = len(c.x), c.out["synthesized"]
    c.out["bare_what"] = f"{n} + {s} forwards, {s} forward+backward"
    fwd, grad = c.forwards() / n, c.grads() / n
    # The RMS-normalised direction needs one backward per selected neuron (k = 10): the bare
    # passes of that algorithm are one forward per test input and per synthesized input (the
    # spectrum and the evaluation), plus the per-neuron loop on each class's synthesis seeds.
    per_neuron = sum(bare_per_neuron_grad(c.net, c.x[idx], c.batch, c.device, neurons)
                     for neurons, idx in c.selections)
    c.out["bare_per_neuron_seconds"] = fwd * (n + s) + per_neuron
    return fwd * (n + s) + grad * s


def _synthesis_setup(c: _Cell) -> None:
    sp = c.df.compute_spectrum(c.net, c.x[:c.batch], c.y[:c.batch], target_class=int(c.y[0]),
                               runtime=c.df.Runtime(batch_size=c.batch))
    total = sp.layout.num_neurons
    chosen = np.random.default_rng(0).choice(total, min(10, total), replace=False)
    c.neurons = [sp.layout.neuron(int(i)) for i in chosen]
    c.out["neurons"] = sp.layout.num_neurons


def _synthesis(c: _Cell) -> None:
    config = c.df.RunConfig(iterations=c.spec["synthesis_iterations"], normalize=c.method != "synthesis-raw")
    c.df.synthesize(c.pm, c.x, c.neurons, config, bounds=c.data.bounds,
                    runtime=c.df.Runtime(batch_size=c.batch))


def _synthesis_bare(c: _Cell) -> float:
    it, k = c.spec["synthesis_iterations"], len(c.neurons)
    c.out["bare_what"] = f"{it} x {len(c.x)} forward+backward"
    grad = c.grads(repeats=it)
    if c.method == "synthesis":  # normalised: the spec's per-neuron loop, one backward per neuron
        c.out["bare_per_neuron_seconds"] = bare_per_neuron_grad(c.net, c.x, c.batch, c.device, c.neurons, it)
    else:
        c.out["bare_what"] += f" (raw gradients of k = {k} neurons: one backward)"
    return grad


def _pair_setup(c: _Cell) -> None:
    c.pm2 = c.prepare(c.spec["weights_m2"], c.data)


def _xplore(c: _Cell) -> None:
    from deepfault.xplore.config import XploreConfig

    cfg = XploreConfig(seeds=len(c.x), iterations=c.spec["xplore_iterations"], seed=0)
    res = c.df.xplore([c.pm, c.pm2], c.x, config=cfg, batch_size=c.batch, labels=c.y)
    agree = int((~res.already_differ).sum())
    steps = int(np.sum(res.found.iteration)) + (agree - len(res.found)) * cfg.iterations
    c.out.update(seed_steps=steps, found=len(res.found), agreed=agree, neurons=int(res.num_neurons[0]))


def _xplore_bare(c: _Cell) -> float:
    n, steps = len(c.x), c.out["seed_steps"]
    c.out["bare_what"] = f"2 models x ({n} forwards + {steps} forward+backward)"
    return sum(c.forwards(m) + c.grads(m) / n * steps for m in (c.net, c.pm2.module.eval()))


def _regress(c: _Cell) -> None:
    res = c.df.regress(c.pm, c.pm2, dataset=c.data, store=None, device=c.device,
                       budget=f"{c.spec['regress_iterations']}it", strategy="drfuzz", fidelity="ssim",
                       inputs_per_step=c.spec["regress_per_step"], checkpoint_every=1e9)
    r = res.result
    c.out.update(queries=int(r.queries), generated=int(r.generated), rf=int(r.metrics.rf),
                 fuzz_s=float(r.seconds), setup_s=float(r.setup_seconds),
                 timings={k: round(float(v), 3) for k, v in r.timings.items()})


def _regress_bare(c: _Cell) -> float:
    n, q = len(c.x), c.out["queries"]
    c.out["bare_what"] = f"2 models x ({q} mutants + {n} seeds) forwards"
    return (c.forwards() + c.forwards(c.pm2.module.eval())) / n * (q + n)


def _repair_setup(c: _Cell) -> None:
    from deepfault.repair import protocol
    from deepfault.repair.inputs import InputFile

    found = np.clip(c.x + np.random.default_rng(1).normal(0, 0.05, c.x.shape).astype(np.float32), 0, 1)
    c.found = InputFile(Path("found.npz"), "run", found, np.arange(len(c.x)), labels=c.y.astype(np.int64))
    c.tuned = []
    original = protocol.finetune

    def timed_finetune(model, xs, ys, **kw):
        t = time.perf_counter()
        res = original(model, xs, ys, **kw)
        _sync(c.device)
        # the fine-tuning set as given (found and mixed-in inputs, read end to end), no copy
        parts = xs if isinstance(xs, tuple) else (xs,)
        c.tuned.append((time.perf_counter() - t, parts, np.asarray(ys)))
        return res

    protocol.finetune = timed_finetune  # instrumentation only: the same function, timed


def _repair(c: _Cell) -> None:
    from deepfault.repair import RepairConfig

    c.df.repair(c.df.prepare_model(c.pm, c.data), [c.found],
                RepairConfig(epochs=1, mix=1.0, baselines=(), batch_size=c.batch),
                runtime=c.df.Runtime(device=str(c.device)))


def _repair_bare(c: _Cell) -> float:
    c.out["repair_total_s"] = c.out["seconds"]  # the whole call; "seconds" becomes the fine-tuning's
    c.out["seconds"] = sum(t for t, _, _ in c.tuned)
    c.out["finetuned_inputs"] = int(sum(len(p) for _, parts, _ in c.tuned for p in parts))
    # the fine-tuning set is held by design (one copy: the found inputs and as many training
    # inputs, mix 1), as surprise-fit's state is in tests/memory; it grows with the found inputs
    c.out["held_mib"] = max(sum(p.nbytes for p in parts) for _, parts, _ in c.tuned) / MIB
    c.out["bare_what"] = f"{c.out['finetuned_inputs']} inputs, 1 epoch of forward+backward+Adam step"
    return sum(bare_train(c.net, np.concatenate(parts), ys, c.batch, c.device) for _, parts, ys in c.tuned)


def _nothing(c: _Cell) -> None:
    pass


#: method: (set-up, not timed; the timed call; the bare passes)
RECIPES = {
    "spectrum": (_nothing, _spectrum, _forwards_bare),
    "profile": (_nothing, _profile, _forwards_bare),
    "measure": (_measure_setup, _measure, _forwards_bare),
    "rank": (_nothing, _rank, _forwards_bare),
    "run": (_nothing, _run, _run_bare),
    "synthesis": (_synthesis_setup, _synthesis, _synthesis_bare),
    "synthesis-raw": (_synthesis_setup, _synthesis, _synthesis_bare),
    "xplore": (_pair_setup, _xplore, _xplore_bare),
    "regress": (_pair_setup, _regress, _regress_bare),
    "repair": (_repair_setup, _repair, _repair_bare),
}


def child(spec: dict) -> dict:
    """One method at one size in this process: time, peak memory, then the bare passes."""
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    c = _Cell(spec)
    setup, call, bare = RECIPES[c.method]
    # Warm-up on one input, not timed: one batch would leave its freed buffers resident and hide
    # the method's own from the peak (benchmarks/NOTES.md, issue 6).
    bare_forward(c.net, c.x[:1], 1, c.device)
    # The first optimiser a process makes imports torch._dynamo (1-7 s, torch's lazy import):
    # paid here, not by the first fine-tuning timed (the bare training makes its Adam untimed).
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])
    setup(c)
    if c.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(c.device)
    rss_before = _status("VmRSS")
    peak_reset = _reset_peak()
    _sync(c.device)
    t0 = time.perf_counter()
    with LivePeak(interval=0.005) as live:  # glibc's live bytes, sampled every 5 ms
        call(c)
        _sync(c.device)
    c.out["seconds"] = time.perf_counter() - t0
    c.out["peak_rss_mib"] = _status("VmHWM") if peak_reset else None
    c.out["rss_before_mib"] = rss_before
    c.out["live_peak_mib"] = None if live.peak is None else live.peak / MIB
    if c.device.type == "cuda":
        c.out["cuda_peak_mib"] = torch.cuda.max_memory_allocated(c.device) / MIB
    seconds = c.out["bare_seconds"] = bare(c)
    c.out["overhead"] = c.out["seconds"] / seconds if seconds > 0 else None
    if c.out.get("bare_per_neuron_seconds"):
        c.out["overhead_per_neuron"] = c.out["seconds"] / c.out["bare_per_neuron_seconds"]
    return c.out


# ----------------------------------------------------------------------------- the parent


def _flat(extra_n: float | None, extra_4n: float | None) -> bool | None:
    if extra_n is None or extra_4n is None:
        return None
    return extra_4n <= FLAT_FACTOR * max(extra_n, 0.0) + FLAT_SLACK_MIB


def _extra(cell: dict) -> float | None:
    """The method's own peak: peak RSS less the RSS before it, less what its result must hold
    by design (``held_mib``: repair's fine-tuning set, the found and mixed-in inputs)."""
    if cell.get("peak_rss_mib") is None or cell.get("rss_before_mib") is None:
        return None
    return cell["peak_rss_mib"] - cell["rss_before_mib"] - cell.get("held_mib", 0.0)


def _live(cell: dict) -> float | None:
    """The method's own peak of glibc's live bytes (``core/heap.py``), less what it holds by design."""
    if cell.get("live_peak_mib") is None:
        return None
    return cell["live_peak_mib"] - cell.get("held_mib", 0.0)


def summarise(doc: dict) -> None:
    """Add each row's verdicts (overhead at both sizes, memory flat) in place."""
    for row in doc["rows"]:
        goal = GOALS[row["method"]]
        # Where the method's algorithm needs one backward per neuron (the RMS-normalised direction of
        # spec/deepfault.md), the goal is checked against that algorithm's bare passes, as the spec
        # defines the work; the ratio to one forward and backward per step is reported beside it.
        cells = [row[s] for s in ("N", "4N") if isinstance(row.get(s), dict)]
        per_neuron = any(cell.get("overhead_per_neuron") for cell in cells)
        key = "overhead_per_neuron" if per_neuron else "overhead"
        row["goal_reference"] = "per-neuron backward passes" if per_neuron else "bare passes"
        overheads = [row[s].get(key) for s in ("N", "4N") if isinstance(row.get(s), dict)]
        overheads = [o for o in overheads if o is not None]
        row["goal_overhead"] = goal
        row["overhead_met"] = bool(overheads) and max(overheads) <= goal if overheads else None
        cn, c4 = row.get("N") or {}, row.get("4N") or {}
        # flat by glibc's live bytes (the allocator's statistics, issue 26's own test), the
        # resident set's verdict beside it: it also counts freed memory glibc's heap keeps
        row["rss_flat"] = _flat(_extra(cn), _extra(c4))
        row["live_flat"] = _flat(_live(cn), _live(c4))
        row["memory_flat"] = row["live_flat"] if row["live_flat"] is not None else row["rss_flat"]


def _verdict(flat: bool | None) -> str:
    return "yes" if flat else "**no**" if flat is False else "-"


def _fmt(v, spec: str = ".1f", none: str = "-") -> str:
    return none if v is None else format(v, spec)


def render_markdown(doc: dict) -> str:
    """The result as the markdown table of docs/performance.md."""
    lines = ["| model | method | neurons | N: time / bare (ratio) | 4N: time / bare (ratio) | goal | "
             "peak RSS N -> 4N (MiB above the loaded model and data, less what it holds by design) | "
             "peak live bytes N -> 4N (MiB, the same) | RSS flat | flat (live bytes) |",
             "| --- | --- | ---: | --- | --- | --- | --- | --- | --- | --- |"]
    for row in doc["rows"]:
        cells = []
        for s in ("N", "4N"):
            c = row.get(s) or {}
            if "error" in c:
                cells.append(f"error: {c['error'][:60]}")
            elif "seconds" in c:
                per_neuron = c.get("overhead_per_neuron")
                cells.append(f"{c['seconds']:.1f} s / {c['bare_seconds']:.1f} s "
                             f"({_fmt(c.get('overhead'), '.2f')}x"
                             + (f"; **{per_neuron:.2f}x of k backward passes**" if per_neuron else "")
                             + f"), n={c['n']}")
            else:
                cells.append("-")
        met = row.get("overhead_met")
        goal = f"<= {row['goal_overhead']:g}x: " + ("met" if met else "**missed**" if met is False else "-")
        flat = row.get("memory_flat")
        mem = f"{_fmt(_extra(row.get('N') or {}), '.0f')} -> {_fmt(_extra(row.get('4N') or {}), '.0f')}"
        live = f"{_fmt(_live(row.get('N') or {}), '.0f')} -> {_fmt(_live(row.get('4N') or {}), '.0f')}"
        rss_flat = row.get("rss_flat")
        neurons = (row.get("N") or {}).get("neurons") or (row.get("4N") or {}).get("neurons")
        lines.append(f"| {row['model']} | {row['method']} | {_fmt(neurons, ',')} | {cells[0]} | {cells[1]} "
                     f"| {goal} | {mem} | {live} | {_verdict(rss_flat)} | {_verdict(flat)} |")
    return "\n".join(lines)


def _provenance(device: str) -> dict:
    sys.path.insert(0, str(HERE))
    from _common import busy_fraction  # benchmarks/ is on sys.path when run as a script

    from deepfault.provenance import provenance

    return {**provenance(device, argv=sys.argv), "cpu_count": os.cpu_count(),
            "threads": torch.get_num_threads(), "background_cpu_busy_fraction": busy_fraction()}


def _run_child(spec: dict, env: dict, timeout: float) -> dict:
    """One subprocess; its result, or the error that ended it."""
    load = os.getloadavg()[0]
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode or not lines:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            cell = {"error": f"exit {proc.returncode}: {tail}"}
        else:
            cell = json.loads(lines[-1][len("RESULT "):])
    except subprocess.TimeoutExpired:
        cell = {"error": f"timed out after {timeout:g} s"}
    cell["load_average"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    return cell


def _print_cell(method: str, label: str, cell: dict) -> None:
    if "error" in cell:
        print(f"  {method:9s} {label:2s} {cell['error']}", flush=True)
        return
    print(f"  {method:9s} {label:2s} n={cell['n']:4d} {cell['seconds']:7.2f} s, "
          f"bare {cell['bare_seconds']:7.2f} s, "
          f"{_fmt(cell['overhead'], '.2f')}x; peak {_fmt(cell['peak_rss_mib'], '.0f')} MiB "
          f"(before {_fmt(cell['rss_before_mib'], '.0f')}); neurons {cell.get('neurons')}; "
          f"load {cell['load_average'][0]:.1f}", flush=True)


def _bench_model(args, name: str, info: dict, batch: int, regress_iterations: int, env: dict):
    """Every method at N and 4N on one model, a row at a time."""
    for method in args.methods.split(","):
        row: dict = {"model": name, "method": method}
        for label in ("N", "4N"):
            spec = {"model": name, "method": method, "device": args.device, "threads": args.threads,
                    "batch": batch, "weights": info["weights"], "weights_m2": info["weights_m2"],
                    "data": info["data"][label], "synthesis_iterations": args.synthesis_iterations,
                    "xplore_iterations": args.xplore_iterations, "regress_iterations": regress_iterations,
                    "regress_per_step": args.regress_per_step}
            if args.verbose:
                print(f"  {sys.executable} {__file__} --child '{json.dumps(spec)}'", flush=True)
            cell = _run_child(spec, env, args.timeout)
            row[label] = cell
            _print_cell(method, label, cell)
        yield row


def _sizes(args, ap) -> tuple[list[str], dict, dict]:
    """The models, and each one's N and batch."""
    models = (args.models or ("resnet18" if args.quick else ",".join(MODELS))).split(",")
    methods = args.methods.split(",")
    for name in models:
        if name not in MODELS:
            ap.error(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    for name in methods:
        if name not in METHODS:
            ap.error(f"unknown method {name!r}; known: {', '.join(METHODS)}")

    def per_model(text: str | None, key: str) -> dict:
        vals = {name: MODELS[name]["quick_n" if (args.quick and key == "n") else key] for name in models}
        if text:
            if "=" in text:
                for part in text.split(","):
                    k, v = part.split("=")
                    vals[k] = int(v)
            else:
                vals = {k: int(text) for k in vals}
        return vals

    sizes, batches = per_model(args.n, "n"), per_model(args.batch_size, "batch")
    if args.batch_size is None:  # N fits one batch and 4N takes four, so a growth with N shows
        batches = {k: min(v, sizes[k]) for k, v in batches.items()}
    return models, sizes, batches


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="ResNet-18 only (unless --models), small N")
    ap.add_argument("--models", default=None,
                    help=f"comma list of {', '.join(MODELS)} (default: all; --quick: resnet18)")
    ap.add_argument("--methods", default=",".join(METHODS), help="comma list (default: all)")
    ap.add_argument("--n", default=None, help="N for every model, or name=N,... (default: per model)")
    ap.add_argument("--batch-size", default=None,
                    help="batch for every model, or name=B,... (default: per model)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads in each subprocess (default: torch's)")
    ap.add_argument("--synthesis-iterations", type=int, default=1, help="synthesis steps (the paper's 1)")
    ap.add_argument("--xplore-iterations", type=int, default=2)
    ap.add_argument("--regress-iterations", type=int, default=None,
                    help="DRFuzz iterations (default 8; --quick 4)")
    ap.add_argument("--regress-per-step", type=int, default=4, help="inputs selected per DRFuzz step")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds per subprocess")
    ap.add_argument("--out", default=str(RESULTS / "bench_scale.json"))
    ap.add_argument("--workdir", default=None,
                    help="keep the model and data files here (default: a temporary folder), e.g. to "
                         "profile one subprocess with the --child line printed by -v")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each subprocess's command line")
    ap.add_argument("--table", action="store_true", help="print the markdown table of --out and stop")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child is not None:
        print("RESULT " + json.dumps(child(json.loads(args.child))), flush=True)
        return 0
    if args.table:
        doc = json.loads(Path(args.out).read_text())
        summarise(doc)
        print(render_markdown(doc))
        return 0

    models, sizes, batches = _sizes(args, ap)
    regress_iterations = args.regress_iterations or (4 if args.quick else 8)
    out_path = Path(args.out)
    doc: dict = {
        "benchmark": "bench_scale",
        "provenance": _provenance(args.device),
        "load_average_before": list(os.getloadavg()),
        "settings": {"quick": args.quick, "sizes": sizes, "batches": batches, "device": args.device,
                     "synthesis_iterations": args.synthesis_iterations,
                     "xplore_iterations": args.xplore_iterations,
                     "regress_iterations": regress_iterations, "regress_per_step": args.regress_per_step,
                     "flat_rule": f"extra(4N) <= {FLAT_FACTOR} x extra(N) + {FLAT_SLACK_MIB:g} MiB, extra = "
                                  "peak live bytes during the method - live bytes before it (memory_flat, "
                                  "live_flat), or peak RSS - RSS before it (rss_flat); less held_mib",
                     "goals": GOALS},
        "models": {}, "rows": [],
    }
    from deepfault._io import write_json

    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    with contextlib.ExitStack() as stack:
        if args.workdir:
            tmp = args.workdir
            Path(tmp).mkdir(parents=True, exist_ok=True)
        else:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench_scale-"))
        for name in models:
            t = time.perf_counter()
            info = prepare_inputs(name, sizes[name], Path(tmp), args.seed)
            doc["models"][name] = {"arch": MODELS[name]["arch"], "arch_kwargs": MODELS[name]["kwargs"],
                                   "input_shape": list(MODELS[name]["shape"]), "params": info["params"],
                                   "batch": batches[name], "N": sizes[name], "accuracy": info["accuracy"],
                                   "predicted_classes": info["predicted_classes"],
                                   "prepare_seconds": time.perf_counter() - t}
            print(f"{name}: {info['params']:,} parameters, N={sizes[name]}, batch {batches[name]}, "
                  f"{info['accuracy']:.0%} correct, {info['predicted_classes']} classes predicted",
                  flush=True)
            for row in _bench_model(args, name, info, batches[name], regress_iterations, env):
                doc["rows"].append(row)
                summarise(doc)
                doc["load_average_after"] = list(os.getloadavg())
                doc["seconds"] = time.perf_counter() - start
                out_path.parent.mkdir(parents=True, exist_ok=True)
                write_json(out_path, doc)
    print()
    print(render_markdown(doc))
    print()
    for row in doc["rows"]:
        verdict = {True: "pass", False: "MISS", None: "n/a"}
        print(f"{row['model']:9s} {row['method']:9s} overhead <= {row['goal_overhead']:g}x: "
              f"{verdict[row['overhead_met']]:4s}  memory flat: {verdict[row['memory_flat']]}")
    print(f"{time.perf_counter() - start:.0f} s; load average {doc['load_average_before'][0]:.1f} -> "
          f"{os.getloadavg()[0]:.1f}; wrote {out_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
