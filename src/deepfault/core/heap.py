"""The C allocator's live bytes: memory measured without the freed memory its heap keeps.

A process's resident set counts every page it touched and has not handed back, and glibc keeps
freed blocks in its heap for reuse; after torch's forward passes on large activations it can
keep tens of MiB that no object holds (a bare loop of forward passes does too, and
``malloc_trim`` gives it back). To tell "this method holds more memory for more inputs" from
"the allocator kept more freed memory", the memory tests (``tests/memory``) and
``benchmarks/bench_scale.py`` also read glibc's own count, ``mallinfo2()``: ``uordblks`` (the
heap's blocks in use) plus ``hblkhd`` (the mmapped blocks in use). numpy's and torch's CPU
buffers are allocated by ``malloc``, so they are in it; Python's small objects (pymalloc's
arenas) are not, and tracemalloc sees those.

Only glibc 2.33 or later has ``mallinfo2``; elsewhere :func:`live_bytes` is ``None`` and
:class:`LivePeak` measures nothing (its ``peak`` is ``None``).
"""

from __future__ import annotations

import ctypes
import threading

__all__ = ["LivePeak", "live_bytes"]


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
        "keepcost")]


def _reader():
    try:
        fn = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _Mallinfo2
    return fn


_MALLINFO2 = _reader()


def live_bytes() -> int | None:
    """Bytes that glibc's allocator has handed out and not had back, or ``None`` without
    ``mallinfo2``.
    """
    if _MALLINFO2 is None:
        return None
    info = _MALLINFO2()
    return int(info.uordblks + info.hblkhd)


class LivePeak:
    """The peak of :func:`live_bytes` above its value at the start, while a block runs.

    A thread samples every ``interval`` seconds; torch's kernels release the GIL, so samples
    fall inside its passes too (a peak shorter than the interval can be missed).

    The peak is net of what other code frees meanwhile (a garbage collection, or another
    thread, inside the block lowers it), so measure in a quiet process: the memory tests run
    each measurement in a fresh one (``tests/helpers/memory_probe.py``, whose planted leak
    every meter must see).

    Examples:
        >>> with LivePeak() as live:
        ...     block = bytearray(64 << 20)
        >>> live.peak is None or isinstance(live.peak, int)
        True
    """

    def __init__(self, interval: float = 0.001):
        self.interval = interval
        self.start = live_bytes()
        self._top = self.start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @property
    def peak(self) -> int | None:
        """Peak bytes above the start (``None`` without ``mallinfo2``)."""
        return None if self.start is None or self._top is None else self._top - self.start

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._top = max(self._top or 0, live_bytes() or 0)

    def __enter__(self) -> LivePeak:
        if self.start is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.start is not None:
            self._stop.set()
            self._thread.join()
            self._top = max(self._top or 0, live_bytes() or 0)
