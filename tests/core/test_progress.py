"""Progress: a bar on a terminal, plain periodic lines anywhere else."""

import io
import logging

from deepfault.core.progress import LogProgress, progress_bar


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_log_progress_writes_plain_lines_at_most_every_interval(caplog):
    clock = _Clock()
    bar = LogProgress(100, desc="training", unit="batch", interval=30, clock=clock)
    with caplog.at_level(logging.INFO, logger="deepfault.progress"):
        for _ in range(100):
            clock.t += 1.0
            bar.update(1)
        bar.set_postfix(loss="0.25")
        bar.close()
        bar.close()  # once
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 100 // 30 + 1
    assert all("\r" not in line for line in lines)
    assert lines[0] == "training: 30/100 batch, 30 s, 1 batch/s, about 70 s left"
    assert lines[-1].startswith("training: 100/100 batch, 100 s")
    assert lines[-1].endswith("(loss=0.25)")


def test_resumed_counts_rate_only_new_steps():
    clock = _Clock()
    bar = LogProgress(10, initial=6, interval=1e9, clock=clock)
    clock.t = 2.0
    bar.update(2)
    assert bar.line() == "progress: 8/10 it, 2 s, 1 it/s, about 2 s left"


def test_a_terminal_gets_tqdm_and_a_file_gets_lines():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    bar = progress_bar(3, stream=Tty())
    assert type(bar).__module__.startswith("tqdm")
    bar.close()
    assert isinstance(progress_bar(3, stream=io.StringIO()), LogProgress)


def test_first_line_comes_after_the_first_step_with_the_time_left(caplog):
    clock = _Clock()
    bar = LogProgress(10, desc="synthesis", unit="input", interval=30, clock=clock, first_line=True)
    with caplog.at_level(logging.INFO, logger="deepfault.progress"):
        clock.t = 4.0
        bar.update(2)
        clock.t = 8.0
        bar.update(2)  # then every interval again
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["synthesis: 2/10 input, 4 s, 0.5 input/s, about 16 s left"]
    assert isinstance(progress_bar(3, stream=io.StringIO(), first_line=True), LogProgress)
