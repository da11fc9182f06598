"""Running mutants through both versions of the model: the pair as the campaign executes it."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ...core.capture import eval_mode, forward, model_device
from ...errors import DeepFaultError
from .oracle import to_probabilities

__all__ = ["MIN_ROWS", "PASS_BYTES", "PASS_ROWS", "SLOTS_PER_ROW", "Executed", "ModelPair", "execution_copy",
           "fixed_passes", "pass_rows"]

#: Inputs per forward pass of the campaign's models at most (:func:`fixed_passes`, :func:`pass_rows`).
PASS_ROWS = 128
#: Bytes of input per forward pass at most (:func:`pass_rows`).
PASS_BYTES = 16 << 20
#: A step's mutant slots per row of its passes at least (:func:`pass_rows`): a pass is at most
#: an eighth of the slots, so a step that executes a few of them does not pay a whole large pass.
SLOTS_PER_ROW = 8
#: Rows per pass at least when sized by a step's slots (kernels keep their speed per input).
MIN_ROWS = 8


def pass_rows(shape: tuple[int, ...], itemsize: int = 4, *, limit: int = PASS_ROWS,
              slots: int | None = None) -> int:
    """Inputs per forward pass for inputs of ``shape``: ``limit``, or the largest power of two
    whose inputs take at most :data:`PASS_BYTES` when ``limit`` of them would take more (at
    least one); with ``slots``, the mutant slots of one step (inputs per step x mutants per
    input), also at most the largest power of two within ``slots / SLOTS_PER_ROW``, but not
    below :data:`MIN_ROWS`.

    Every pass of a campaign is padded to this many rows (:func:`fixed_passes`), so it sets
    the campaign's working memory: 128 images of 3x224x224 are 75 MiB of input, and a ViT's
    activations on them about ten times that, run for every step however few mutants it
    executes (issue 26: 928 MiB and 4.5x the forwards needed for 56 mutants). It depends on the
    input's shape and the campaign's configuration alone, so a seeded campaign stays
    reproducible. A step of few slots (4 inputs x 20 mutants, of which about half pass SSIM)
    paid a whole pass of 128 rows for each model: 3.2x the bare forwards on a CIFAR ResNet-18
    (benchmarks/bench_scale.py), which runs 8 rows a pass within 7% of 128's speed per input.
    The default step (64 inputs x 20 mutants: 1,280 slots) and MNIST- and CIFAR-sized inputs
    keep 128 rows, and their campaigns are unchanged.

    Examples:
        >>> pass_rows((1, 28, 28)), pass_rows((3, 32, 32)), pass_rows((3, 224, 224))
        (128, 128, 16)
        >>> [pass_rows((3, 32, 32), slots=b * 20) for b in (64, 16, 4, 1)]
        [128, 32, 8, 8]
    """
    per = max(1, math.prod(shape) * int(itemsize))
    rows = max(1, min(int(limit), PASS_BYTES // per))
    rows = 1 << (rows.bit_length() - 1) if rows < limit else int(limit)
    if slots is not None:
        by_slots = max(1, int(slots) // SLOTS_PER_ROW)
        rows = min(rows, max(MIN_ROWS, 1 << (by_slots.bit_length() - 1)))
    return rows


@dataclass(frozen=True)
class Executed:
    """The mutants of a step that ran, in draw order.

    Attributes:
        rows: ``(E,)`` their rows in the step's :class:`~.generate.Generated`.
        inputs: ``(E, C, H, W)`` the mutants.
        p1, p2: ``(E, classes)`` both models' probabilities.
        values: ``(E, M)`` M2's neuron values (coverage keep rules), else ``None``.
        queries_before: Queries made before this step.
        queries_at: ``(E,)`` the query count when each ran (itself included); ``None``:
            ``queries_before + 1, + 2, ...`` (every executed mutant is a query).
    """

    rows: np.ndarray
    inputs: torch.Tensor
    p1: np.ndarray
    p2: np.ndarray
    values: torch.Tensor | None
    queries_before: int
    queries_at: np.ndarray | None = None


def execution_copy(model: nn.Module, device: torch.device) -> nn.Module:
    """The model the campaign runs: on the CPU, a copy of a convolutional network with its
    weights in channels-last memory format, which oneDNN runs 2-3x faster on batches of
    mutants (LeNet-5, 1,280 images, one thread: 105 -> 41 us per image;
    ``benchmarks/bench_drfuzz_yield.py``). The caller's model is never changed; the outputs
    equal the original's up to float rounding. Anything else, or a model that cannot be
    copied, runs as given.
    """
    if device.type != "cpu" or not any(isinstance(m, nn.Conv2d) for m in model.modules()):
        return model
    try:
        fast = copy.deepcopy(model)
    except Exception:  # noqa: BLE001 - an uncopyable model still runs, only slower
        return model
    # Module.to(memory_format=...) exists at runtime (torch docs); torch's overloads omit it
    return fast.to(memory_format=torch.channels_last)  # type: ignore[call-overload]


def fixed_passes(fn, x: torch.Tensor, rows: int) -> torch.Tensor:
    """``fn(x)`` computed in passes of exactly ``rows`` inputs, the last one padded with copies
    of its first input (their outputs dropped).

    Every pass has the same shape, so the kernels (oneDNN, MKL) take the same path each time
    and an input's output does not depend on how many others run with it: with passes of
    varying size the same LeNet-5 or discriminator input came out different in the last
    bits (about 3e-8) depending on its batch, which would make the campaign's result depend
    on which mutants are executed together (the lazy order of checks, :mod:`.lazy`, runs
    other batches than the order before it). Observed on this project's CPU kernels, one and
    two threads (``tests/fuzz/test_check_order.py``, ``benchmarks/bench_drfuzz_yield.py``); not a
    guarantee the libraries give.
    """
    if len(x) == 0:
        return fn(x)
    outs = []
    for i in range(0, len(x), rows):
        xb = x[i : i + rows]
        n = len(xb)
        if n < rows:
            xb = torch.cat([xb, xb[:1].expand(rows - n, *xb.shape[1:])])
        outs.append(fn(xb)[:n])
    return torch.cat(outs)


class ModelPair:
    """``M1`` and ``M2`` as the campaign runs them: on one device, as execution copies, with
    their outputs turned into probabilities.

    Args:
        m1, m2: The original and the new model (same device); never modified.
        output_kinds: What each outputs (``logits`` or ``probabilities``).
        rows: Inputs per forward pass (:func:`pass_rows`).
    """

    def __init__(self, m1: nn.Module, m2: nn.Module, output_kinds: tuple[str, str], rows: int = PASS_ROWS):
        if not isinstance(m1, nn.Module) or not isinstance(m2, nn.Module):
            raise DeepFaultError("m1 and m2 must be torch.nn.Module models")
        self.device = model_device(m1)
        if model_device(m2) != self.device:
            raise DeepFaultError(
                f"M1 is on {self.device} and M2 on {model_device(m2)}; put both models on the same device"
            )
        self.m1 = execution_copy(m1, self.device)
        self.m2 = self.m1 if m2 is m1 else execution_copy(m2, self.device)
        self.kinds = output_kinds
        self.rows = int(rows)

    @contextmanager
    def evaluating(self) -> Iterator[None]:
        """Both models in ``eval()`` mode (restored afterwards), without gradients."""
        with eval_mode(self.m1), eval_mode(self.m2), torch.no_grad():
            yield

    def seed_probabilities(self, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """Both models' probabilities on the test inputs ``x`` (M1 first)."""
        p1 = _probabilities(self.m1, x, self.kinds[0], "M1")
        p2 = _probabilities(self.m2, x, self.kinds[1], "M2")
        return p1.cpu().numpy(), p2.cpu().numpy()

    def run(self, x: torch.Tensor, recorder=None) -> tuple[np.ndarray, np.ndarray, torch.Tensor | None]:
        """``(p1, p2, values)``: both models' probabilities ``(B, classes)`` on ``x`` and, with a
        ``recorder`` (a capture of M2), M2's neuron values. Without a recorder the models run
        in passes of :attr:`rows` inputs (:func:`fixed_passes`).
        """
        if recorder is None:
            p2 = fixed_passes(lambda xb: _probabilities(self.m2, xb, self.kinds[1], "M2"), x, self.rows)
            p1 = fixed_passes(lambda xb: _probabilities(self.m1, xb, self.kinds[0], "M1"), x, self.rows)
            return p1.cpu().numpy(), p2.cpu().numpy(), None
        p2 = _probabilities(self.m2, x, self.kinds[1], "M2")
        values = recorder.collect() if recorder is not None else None
        p1 = _probabilities(self.m1, x, self.kinds[0], "M1")
        if recorder is not None and self.m1 is self.m2:
            recorder.collect()  # the same model: drop the values its second pass recorded
        return p1.cpu().numpy(), p2.cpu().numpy(), values

    def run_m1(self, x: torch.Tensor, traces=None, recorder=None) -> tuple[np.ndarray, torch.Tensor | None]:
        """M1 alone (a campaign whose checks read M1's activations runs it first, then M2 on the
        mutants that pass: :meth:`run_m2`): ``(p1, ats)``, M1's probabilities ``(B, classes)``
        and, with ``traces`` (a capture of :attr:`m1`), its activation traces ``(B, M)``.
        ``recorder`` is M2's capture, cleared when M1 and M2 are one model.
        """
        p1 = _probabilities(self.m1, x, self.kinds[0], "M1")
        ats = traces.collect() if traces is not None else None
        if recorder is not None and self.m1 is self.m2:
            recorder.collect()  # the same model: M2's capture saw M1's pass
        return p1.cpu().numpy(), ats

    def run_m2(self, x: torch.Tensor, recorder=None, traces=None) -> tuple[np.ndarray, torch.Tensor | None]:
        """M2 alone: ``(p2, values)``, with M2's neuron values when ``recorder`` captures it;
        ``traces`` (M1's capture) is cleared when M1 and M2 are one model.
        """
        p2 = _probabilities(self.m2, x, self.kinds[1], "M2")
        values = recorder.collect() if recorder is not None else None
        if traces is not None and self.m1 is self.m2:
            traces.collect()  # the same model: M1's capture saw M2's pass
        return p2.cpu().numpy(), values


def _probabilities(model: nn.Module, x: torch.Tensor, kind: str, which: str) -> torch.Tensor:
    try:
        out = forward(model, x)
    except DeepFaultError as err:
        raise DeepFaultError(f"{which}: {err}") from err
    if out.ndim != 2:
        raise DeepFaultError(f"{which}'s output must be (N, classes); got shape {tuple(out.shape)}")
    return to_probabilities(out, kind)
