"""Batch sizes set by the machine: ``batch_size="auto"``.

An analysis's peak memory is the model, the neurons' per-neuron state and one batch of
inputs on their way through the network; the number of inputs never enters (every method
streams). So the batch is what has to fit, and ``"auto"`` sizes it from two measurements:

- **the memory one input takes** in this model for this method's work
  (:func:`input_bytes`). On a CUDA device: ``torch.cuda.max_memory_allocated`` around a
  one-input probe pass, less what was allocated before (exact). On the CPU, whose allocator
  keeps no such count: the bytes of every module's output in a hooked one-input forward,
  each storage counted once. That is every intermediate of the pass held at once, so it
  bounds the forward's real peak from above (PyTorch frees each intermediate once its last
  consumer has run; in a deep network the sum is several times the peak), and the margin
  covers functional operations that no hook sees. Work that needs gradients (synthesis,
  xplore) keeps those outputs for the backward pass and adds their gradients:
  :data:`BACKWARD_FACTOR` times the forward's bytes.
- **the memory that is free** (:func:`free_memory`): on the CPU, ``MemAvailable`` of
  ``/proc/meminfo``, less where the cgroup's limit (``memory.max``, cgroup v1's
  ``memory.limit_in_bytes``) leaves less; on a GPU, ``torch.cuda.mem_get_info``'s free
  bytes plus what PyTorch's cache holds unused.

The batch is the budget divided by one input's bytes, with the budget
``min(free * CPU_FRACTION, CPU_CAP)`` on the CPU and ``free * GPU_FRACTION`` on a GPU
(:func:`budget`), then clipped to ``[1, min(AUTO_MAX, inputs)]``. ``AUTO_MAX`` is the fixed
default it replaces (1,024), so small models keep their old batches. docs/decisions.md
("Batch size and memory") says why these numbers.

Results never depend on the batch (every consumer folds batches into per-neuron state),
so ``"auto"`` changes time and memory, never an answer.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ..checks import MAX_INPUTS, check_int, meminfo_bytes
from ..checks import _size as _shown
from ..errors import DeepFaultError

__all__ = ["AUTO", "AUTO_MAX", "BACKWARD_FACTOR", "BatchChoice", "budget", "check_batch_size", "check_fits",
           "choose_batch_size", "free_memory", "input_bytes", "resolve_batch_size", "tensor_bytes"]

#: The value that asks for a batch sized from the memory.
AUTO = "auto"
#: The largest batch ``"auto"`` picks: the fixed default it replaces.
AUTO_MAX = 1024
#: Forward+backward work against the forward alone (see the module's text).
BACKWARD_FACTOR = 2.0
#: Share of the free RAM one batch may take on the CPU, and its cap in bytes.
CPU_FRACTION = 0.25
CPU_CAP = 1 << 30
#: Share of the free device memory one batch may take on a GPU (no cap: the device is
#: there for the work, and the measurement there is exact).
GPU_FRACTION = 0.5
#: Assumed free bytes where nothing can be read (no /proc, no cgroup files).
_FALLBACK_FREE = 2 << 30

BatchSize = int | str


def check_batch_size(value: object, param: str = "batch_size") -> int | str:
    """``"auto"`` or an integer from 1 to ``MAX_INPUTS``; else a one-line error.

    Examples:
        >>> check_batch_size("auto"), check_batch_size(64)
        ('auto', 64)
    """
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    if isinstance(value, str):
        raise DeepFaultError(f"{param} must be 'auto' or an integer from 1 to {MAX_INPUTS:,}; got {value!r}")
    return check_int(param, value, maximum=MAX_INPUTS)


# --------------------------------------------------------------------------- free memory

def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as fh:
            text = fh.read().strip()
    except (OSError, ValueError):
        return None
    if not text or text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _mem_available() -> int | None:
    available = meminfo_bytes("MemAvailable")
    if available is not None:
        return available
    try:  # not Linux: psutil where it is installed (never required)
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - missing or failing: nothing known
        return None


def _cgroup_room() -> int | None:
    """Bytes this process's cgroup still allows (limit less usage), ``None`` without a limit."""
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit = _read_int(limit_file)
        if limit is None or limit >= 1 << 60:  # cgroup v1 writes "no limit" as a huge number
            continue
        usage = _read_int(usage_file) or 0
        return max(limit - usage, 0)
    return None


def free_memory(device: torch.device | str = "cpu") -> int | None:
    """Bytes free for new work on ``device``; ``None`` where nothing can be read.

    CPU: ``MemAvailable`` (or psutil's ``available`` where ``/proc`` is missing), lowered to
    what the cgroup's memory limit and the process's address-space limit (``ulimit -v``) still
    allow. CUDA: ``torch.cuda.mem_get_info``'s free
    bytes plus the bytes PyTorch's caching allocator has reserved but not handed out.
    """
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(free + max(cached, 0))
    now = time.monotonic()
    if _CPU_READING[0] is not None and now - _CPU_READING[0] < _REREAD_SECONDS:
        return _CPU_READING[1]
    readings = [r for r in (_mem_available(), _cgroup_room(), _address_space_room()) if r is not None]
    found = min(readings) if readings else None
    _CPU_READING[:] = [now, found]
    return found


def _address_space_room() -> int | None:
    """What this process's address-space limit (``ulimit -v``, ``RLIMIT_AS``) still allows: the
    limit less the address space in use (``VmSize``); ``None`` without a limit.
    """
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/status", encoding="ascii") as fh:
            size = next((int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:")), None)
    except (ImportError, OSError, ValueError):
        return None
    return None if size is None else max(soft - size, 0)


def tensor_bytes(module: nn.Module) -> int:
    """The bytes of ``module``'s parameters and buffers (each tensor once), also for a module
    built on the ``meta`` device, which has shapes and dtypes but no memory.
    """
    seen: dict[int, int] = {}
    for t in (*module.parameters(), *module.buffers()):
        seen.setdefault(id(t), t.numel() * t.element_size())
    return sum(seen.values())


def check_fits(needed: int, what: str, fix: str, device: torch.device | str = "cpu") -> None:
    """Refuse, before it is allocated, ``needed`` bytes (``what``, in words) that exceed the
    memory free on ``device`` (:func:`free_memory`; nothing is refused where it cannot be read).

    Raises:
        DeepFaultError: ``WHAT needs SIZE, more than the SIZE free here (DEVICE); FIX``.

    Examples:
        >>> check_fits(1 << 10, "a kibibyte", "give less")
    """
    free = free_memory(device)
    if free is not None and needed > free:
        raise DeepFaultError(f"{what} needs {_shown(needed)}, more than the {_shown(free)} of memory free "
                             f"here ({torch.device(device)}); {fix}")


#: The last CPU reading ``[time, bytes]``: analyses called in a loop (a fuzzer's small batches)
#: read /proc at most every :data:`_REREAD_SECONDS`.
_CPU_READING: list = [None, None]
_REREAD_SECONDS = 1.0


def budget(free: int | None, device: torch.device | str = "cpu") -> int:
    """The bytes one batch may take given ``free`` bytes (see the module's text)."""
    free = _FALLBACK_FREE if free is None else free
    if torch.device(device).type == "cuda":
        return int(free * GPU_FRACTION)
    return int(min(free * CPU_FRACTION, CPU_CAP))


# --------------------------------------------------------------------------- one input's bytes

#: Measured bytes per input, per model: (shape, dtype, device, backward) -> bytes.
_MEASURED: weakref.WeakKeyDictionary[nn.Module, dict[tuple, int]] = weakref.WeakKeyDictionary()


def _modules(models: Sequence[nn.Module]) -> list[nn.Module]:
    """The modules of ``models`` (a prepared model gives its own), checked to be modules."""
    from .capture import check_model  # the engine's message for a model that is not a module

    return [check_model(getattr(m, "module", m)) for m in models]


def _device(model: nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    for b in model.buffers():
        return b.device
    return torch.device("cpu")


def _outputs_bytes(model: nn.Module, x: torch.Tensor) -> int:
    """Bytes of every module's output in one forward pass of ``x`` (each storage once)."""
    from .capture import forward, forward_hooks

    # The storages are held until the pass ends: a freed one's address would be reused by the
    # next output, which would then count as seen (one input's outputs: a few MiB to a few
    # hundred, what a batch of one takes anyway).
    seen: dict[int, torch.UntypedStorage] = {}

    def make_hook(name):
        def hook(module, args, output):
            for t in (output if isinstance(output, (tuple, list)) else (output,)):
                if isinstance(t, torch.Tensor):
                    storage = t.untyped_storage()
                    seen.setdefault(storage.data_ptr(), storage)
        return hook

    modules = {name or "<model>": m for name, m in model.named_modules()}
    try:
        hooks = forward_hooks(modules, make_hook)
        with hooks:
            out = forward(model, x)
    except RuntimeError:  # a scripted module takes no hooks: its output and a margin
        out = forward(model, x)
        return 64 * (x.numel() * x.element_size() + out.numel() * out.element_size())
    held = sum(storage.nbytes() for storage in seen.values())
    seen.clear()
    return held + x.numel() * x.element_size() + out.numel() * out.element_size()


def _cuda_bytes(model: nn.Module, x: torch.Tensor, backward: bool) -> int:
    from .capture import forward

    dev = x.device
    torch.cuda.synchronize(dev)
    before = torch.cuda.memory_allocated(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    if backward:
        with torch.enable_grad():
            xg = x.detach().clone().requires_grad_(True)
            forward(model, xg).float().sum().backward(inputs=[xg])
        del xg
    else:
        with torch.inference_mode():
            forward(model, x)
    torch.cuda.synchronize(dev)
    return max(int(torch.cuda.max_memory_allocated(dev) - before), 1)


def input_bytes(models: nn.Module | Sequence[nn.Module], sample: torch.Tensor, *,
                backward: bool = False) -> int:
    """The bytes one input takes in ``models``' pass (the sum over several models).

    Args:
        models: A module or prepared model, or several (xplore runs every model on a batch).
        sample: ``(1, ...)`` one input, as the model takes it.
        backward: The work needs gradients (a forward and a backward pass).

    Returns:
        Bytes per input, measured on CUDA, bounded from above on the CPU (module text). The
        measurement is cached per model, input shape, dtype and device.
    """
    models = _modules([models] if isinstance(models, nn.Module) or not isinstance(models, Sequence)
                      else models)
    total = 0
    for model in models:
        dev = _device(model)
        x = sample[:1].to(dev)
        key = (tuple(x.shape[1:]), x.dtype, str(dev), backward)
        cache = _MEASURED.setdefault(model, {})
        if key not in cache:
            from .capture import eval_mode

            with eval_mode(model):
                if dev.type == "cuda":
                    cache[key] = _cuda_bytes(model, x, backward)
                else:
                    with torch.inference_mode():
                        fwd = _outputs_bytes(model, x)
                    cache[key] = int(math.ceil(fwd * (BACKWARD_FACTOR if backward else 1.0)))
        total += cache[key]
    return max(total, 1)


# --------------------------------------------------------------------------- the choice

@dataclass(frozen=True)
class BatchChoice:
    """A batch size and, for ``"auto"``, what it was sized from.

    Attributes:
        size: Inputs per pass.
        auto: Whether it was sized from the memory.
        per_input: Bytes one input takes (``None`` for a given size).
        free: Free bytes on the device when it was chosen (``None``: unknown or not read).
        device: The device the bytes are on.
        backward: Sized for forward+backward work.
    """

    size: int
    auto: bool = False
    per_input: int | None = None
    free: int | None = None
    device: str = "cpu"
    backward: bool = False

    def describe(self) -> str:
        """One line for the terminal, e.g. ``batch: 48 inputs (auto: about 41.0 MiB each, ...)``."""
        if not self.auto:
            return f"batch: {self.size:,} inputs (--batch-size)"
        what = "each, forward and backward" if self.backward else "each"
        free = "free memory unknown" if self.free is None else f"{_size(self.free)} free"
        where = "" if self.device == "cpu" else f" on {self.device}"
        return (f"batch: {self.size:,} inputs (auto: about {_size(self.per_input or 0)} {what}, "
                f"{free}{where})")

    def to_dict(self) -> dict:
        return {"size": self.size, "auto": self.auto, "per_input_bytes": self.per_input,
                "free_bytes": self.free, "device": self.device, "backward": self.backward}


def _size(nbytes: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:,.0f} {unit}" if unit == "bytes" else f"{nbytes:,.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:,.1f} GiB"  # pragma: no cover - the loop returns


def _sample(inputs) -> torch.Tensor | None:
    """The first input as a ``(1, ...)`` float32 tensor, ``None`` for no inputs."""
    from torch.utils.data import DataLoader

    from .capture import as_tensor
    from .inputs import _is_deepfault_dataset, _is_pair, stream

    array = hasattr(inputs, "__array__") and not isinstance(inputs, DataLoader)
    if isinstance(inputs, torch.Tensor) or array:
        first = inputs[:1]
    elif _is_deepfault_dataset(inputs):
        first = inputs.x_test[:1]
    elif _is_pair(inputs):
        first = inputs[0][:1]
    elif isinstance(inputs, (list, tuple)):
        first = inputs[:1]
    else:  # a loader or a data set: its first item
        for xb, _ in stream(inputs, batch_size=1):
            return as_tensor(xb[:1])
        return None
    if len(first) == 0:
        return None
    return as_tensor(first)


def _count(inputs) -> int:
    from .inputs import num_inputs

    try:
        return num_inputs(inputs)
    except TypeError:
        return -1


def choose_batch_size(models: nn.Module | Sequence[nn.Module], inputs, batch_size: BatchSize = AUTO, *,
                      backward: bool = False, count: int | None = None) -> BatchChoice:
    """The batch for running ``inputs`` through ``models``: ``batch_size`` itself when it is a
    number, else sized from the memory (module text).

    Args:
        models: A module or prepared model, or several run on every batch.
        inputs: The inputs (any form the analyses take), or a ``(1, ...)`` sample of them.
        batch_size: ``"auto"`` or a number of inputs.
        backward: The work needs gradients.
        count: The number of inputs (default: counted from ``inputs``); the batch is at
            most this.

    Returns:
        A :class:`BatchChoice`; ``describe()`` gives the line the command line prints.

    Raises:
        DeepFaultError: ``batch_size`` is neither ``"auto"`` nor a positive integer.

    Examples:
        >>> from torch import nn
        >>> choose_batch_size(nn.Linear(4, 2), torch.zeros(10, 4)).size  # at most the inputs
        10
    """
    size = check_batch_size(batch_size)
    seq = [models] if isinstance(models, nn.Module) or not isinstance(models, Sequence) else list(models)
    device = _device(_modules(seq)[0])
    if not isinstance(size, str):
        return BatchChoice(int(size), device=str(device), backward=backward)
    n = _count(inputs) if count is None else count
    if n == 0:
        return BatchChoice(1, auto=True, device=str(device), backward=backward)
    sample = _sample(inputs)
    if sample is None:
        return BatchChoice(1, auto=True, device=str(device), backward=backward)
    per_input = input_bytes(seq, sample, backward=backward)
    free = free_memory(device)
    chosen = budget(free, device) // per_input
    top = AUTO_MAX if n is None or n < 0 else min(AUTO_MAX, n)
    return BatchChoice(int(max(1, min(chosen, top))), auto=True, per_input=per_input, free=free,
                       device=str(device), backward=backward)


def resolve_batch_size(models, inputs, batch_size: BatchSize = AUTO, *, backward: bool = False,
                       count: int | None = None) -> int:
    """:func:`choose_batch_size`'s size alone."""
    return choose_batch_size(models, inputs, batch_size, backward=backward, count=count).size

