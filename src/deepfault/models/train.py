"""A plain, seeded training loop (Adam, cross-entropy) for zoo models.

Stopping with Ctrl-C keeps the weights of the last completed epoch.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..checks import MAX_INPUTS
from ..core.capture import model_device, user_code_error
from ..core.constraints import EPOCHS, LEARNING_RATE, SEED, Interval, Options, param, validate
from ..data import Dataset
from ..errors import DeepFaultError
from ._api import build_model
from .io import ModelFile, check_build, warn_if_chance

__all__ = ["TrainConfig", "TrainResult", "fit", "accuracy", "train_model", "trained_model", "check_trainable",
           "build_trainable", "TRAIN_COMMAND"]

#: ``deepfault train``'s help line and description.
TRAIN_COMMAND = (
    "train a zoo architecture on a data set and write a model file",
    "Train with the DeepFault prototype's recipe by default (Adam, batch 32, 10 epochs, 1/6 of the training "
    "set held out for validation), with the learning rate decayed on a cosine unless --schedule constant. "
    "Ctrl-C stops after keeping the last completed epoch, which is then saved.")

log = logging.getLogger(__name__)


#: Learning-rate schedules: constant (the prototype's), or cosine decay to 0 over the run.
SCHEDULES = ("cosine", "constant")


@dataclass(frozen=True)
class TrainConfig:
    """The training recipe: the DeepFault prototype's (Adam, lr 1e-3, batch 32, 10 epochs,
    1/6 held out), plus a cosine decay of the learning rate by default; with the
    prototype's constant rate the paper's MNIST accuracies are not reached (README).
    """

    epochs: int = param(10, EPOCHS, help="passes over the training set")
    batch_size: int = param(32, Interval(int, 1, MAX_INPUTS), help="inputs per step")
    lr: float = param(1e-3, LEARNING_RATE, help="Adam learning rate")
    val_fraction: float = param(1 / 6, Interval(float, 0.0, 1.0, closed="left"),
                                help="share of the training set held out for validation")
    seed: int = param(0, SEED, help="seed of the weights, the split and the shuffling")
    schedule: str = param("cosine", Options(SCHEDULES),
                          help="learning-rate schedule; 'constant' is exactly the prototype's recipe")

    def __post_init__(self):
        validate(self)

    def validate(self) -> None:
        """Check every field against its declaration (the constructor does it too)."""
        validate(self)


@dataclass(frozen=True)
class TrainResult:
    """What a training run reached, and whether Ctrl-C cut it short."""

    epochs_completed: int
    train_loss: float
    train_accuracy: float
    val_accuracy: float | None
    interrupted: bool
    seconds: float
    threads: int | None = None

    @property
    def finished(self) -> bool:
        """Whether every epoch of the recipe ran (not cut short by an interruption)."""
        return not self.interrupted

    def summary(self, test_accuracy: float) -> str:
        """What ``deepfault train`` prints once the weights are saved: the epochs, the time and the
        accuracies (train, validation, the saved model's ``test_accuracy``), after a line naming
        the kept epoch when Ctrl-C cut the run short.
        """
        val = "-" if self.val_accuracy is None else f"{self.val_accuracy:.4f}"
        lines = [f"interrupted: kept the weights of epoch {self.epochs_completed}"] * self.interrupted
        lines.append(f"epochs {self.epochs_completed}, {self.seconds:.1f} s; train accuracy "
                     f"{self.train_accuracy:.4f}, validation {val}, test {test_accuracy:.4f}")
        return "\n".join(lines)


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray, *, batch_size: int = 1024) -> float:
    """Share of inputs whose arg-max prediction equals the label."""
    from ..core.batches import predict

    if len(x) == 0:
        return float("nan")
    return float((predict(model, x, batch_size=batch_size).argmax(1).numpy() == y).mean())


class _Rows:
    """Rows of several arrays taken as one, end to end, without joining them (a joined copy
    would be one more copy of every training input at the peak).
    """

    def __init__(self, parts: tuple[np.ndarray, ...], device: torch.device):
        self.parts = [torch.as_tensor(np.asarray(p), dtype=torch.float32, device=device) for p in parts]
        self.starts = np.cumsum([0] + [len(p) for p in self.parts])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, idx: torch.Tensor) -> torch.Tensor:
        if len(self.parts) == 1:
            return self.parts[0][idx]
        out = torch.empty((len(idx), *self.parts[0].shape[1:]), dtype=torch.float32, device=idx.device)
        for part, start in zip(self.parts, self.starts[:-1].tolist(), strict=True):
            inside = (idx >= start) & (idx < start + len(part))
            out[inside] = part[idx[inside] - start]
        return out


@dataclass
class _Loop:
    """What :func:`fit`'s epochs share: the model, the rows it trains on, the optimiser, the
    schedule and the progress bar.
    """

    model: nn.Module
    x_all: _Rows
    rows: torch.Tensor
    yt: torch.Tensor
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LRScheduler | None
    config: TrainConfig
    bar: Any = None  # a progress bar (tqdm's or the log's)

    @classmethod
    def start(cls, model: nn.Module, x_all: _Rows, train_idx: np.ndarray, y: np.ndarray,
              config: TrainConfig, *, device: torch.device, progress: bool) -> _Loop:
        """The loop over the rows ``train_idx`` on ``device``: Adam, the schedule, and a bar
        when ``progress``.
        """
        rows = torch.as_tensor(train_idx, device=device)
        yt = torch.as_tensor(y[train_idx], dtype=torch.long, device=device)
        opt = torch.optim.Adam(model.parameters(), lr=config.lr)
        steps_per_epoch = -(-len(yt) // config.batch_size)
        sched = None
        if config.schedule == "cosine":
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, config.epochs * steps_per_epoch)
        loop = cls(model=model, x_all=x_all, rows=rows, yt=yt, opt=opt, sched=sched, config=config)
        if progress:
            from ..core.progress import progress_bar

            loop.bar = progress_bar(config.epochs * steps_per_epoch, desc="training", unit="batch")
        return loop

    def epoch(self, epoch: int, perm: torch.Tensor) -> tuple[float, float]:
        """One pass over the training rows in the order ``perm``: ``(mean loss, accuracy)``."""
        model, yt, size = self.model, self.yt, self.config.batch_size
        model.train()
        total, hits = torch.zeros((), device=yt.device), torch.zeros((), device=yt.device)
        for i in range(0, len(yt), size):
            idx = perm[i : i + size]
            self.opt.zero_grad(set_to_none=True)
            try:
                out = model(self.x_all[self.rows[idx]])
            except Exception as err:  # the user's forward in training mode: one line naming it
                found = user_code_error(err)
                if found is None:
                    raise
                raise found from err
            loss = F.cross_entropy(out, yt[idx])
            loss.backward()
            self.opt.step()
            if self.sched is not None:
                self.sched.step()
            total += loss.detach() * len(idx)
            hits += (out.argmax(1) == yt[idx]).sum()
            if self.bar is not None:
                self._show(epoch, min(i + size, len(yt)), total, hits)
        return float(total) / max(len(yt), 1), float(hits) / max(len(yt), 1)

    def _show(self, epoch: int, seen: int, total: torch.Tensor, hits: torch.Tensor) -> None:
        bar = self.bar
        bar.update(1)
        if bar.n % 50 == 0:
            bar.set_postfix(epoch=f"{epoch + 1}/{self.config.epochs}",
                            loss=f"{float(total) / seen:.4f}", acc=f"{float(hits) / seen:.4f}")


def fit(
    model: nn.Module,
    x: np.ndarray | tuple[np.ndarray, ...],
    y: np.ndarray,
    config: TrainConfig = TrainConfig(),
    *,
    progress: bool = False,
    threads: int | str | None = "auto",
) -> TrainResult:
    """Train ``model`` in place with Adam on shuffled mini-batches.

    ``x`` is the inputs, or a tuple of arrays whose rows are the inputs end to end (``y``
    has a label for each), read in place.

    The validation split and the shuffling come from generators seeded by
    ``config.seed``; dropout draws inside a forked RNG state, so the caller's global RNG
    is untouched. On ``KeyboardInterrupt`` the weights of the last completed epoch are
    restored and the result says ``interrupted``.

    ``threads`` follows every command's rule (:func:`deepfault.core.entry.resolve_threads`):
    ``"auto"`` (:data:`~deepfault.core.entry.THREADS_ENV` when set) trains a small model on
    the CPU on the cores no other process is using, never more than PyTorch's setting; a
    count as given; ``None`` leaves PyTorch's setting. Inside an entry point that applied its
    own threads already (repair's fine-tuning), those stay. The count used is restored
    afterwards and recorded in the result.
    """
    from ..core.entry import default_threads, use_threads

    config.validate()
    device = model_device(model)
    with use_threads(default_threads() if threads == "auto" else threads, [model], device) as count:
        return replace(_fit(model, x, y, config, device=device, progress=progress), threads=count)


def _fit(model: nn.Module, x: np.ndarray | tuple[np.ndarray, ...], y: np.ndarray, config: TrainConfig, *,
         device: torch.device, progress: bool) -> TrainResult:
    """:func:`fit`'s loop under the threads it chose."""
    start = time.perf_counter()
    rng = np.random.default_rng(config.seed)
    # The inputs as they are (no copy of float32 CPU inputs, nor a joined copy of several
    # arrays; issue 26: a copy of the training inputs grew the peak with them), each batch
    # gathered through ``train_idx``.
    x_all = _Rows(x if isinstance(x, tuple) else (x,), device)
    order = rng.permutation(len(x_all))
    n_val = int(round(len(x_all) * config.val_fraction))
    val_idx, train_idx = order[:n_val], order[n_val:]
    loop = _Loop.start(model, x_all, train_idx, y, config, device=device, progress=progress)
    yt = loop.yt
    snapshot = {k: v.detach().clone() for k, v in model.state_dict().items()}
    completed, loss_value, acc_value, interrupted = 0, float("nan"), float("nan"), False
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(config.seed)
            for epoch in range(config.epochs):
                perm = torch.as_tensor(rng.permutation(len(yt)), device=device)
                loss_value, acc_value = loop.epoch(epoch, perm)
                completed = epoch + 1
                snapshot = {k: v.detach().clone() for k, v in model.state_dict().items()}
                log.debug("epoch %d: loss %.4f accuracy %.4f", completed, loss_value, acc_value)
    except KeyboardInterrupt:
        interrupted = True
        model.load_state_dict(snapshot)
    finally:
        if loop.bar is not None:
            loop.bar.close()
    model.eval()
    val_acc = None
    if n_val:
        val_x = x_all[torch.as_tensor(val_idx, device=device)].cpu().numpy()
        val_acc = accuracy(model, val_x, y[val_idx])
    return TrainResult(completed, loss_value, acc_value, val_acc, interrupted,
                       time.perf_counter() - start)


def check_trainable(model: nn.Module, data: Dataset, arch: str) -> None:
    """Refuse, before the first step, a model that training cannot make one every command reads:
    the checks a loaded model gets (:func:`~deepfault.core.outputs.check_model_outputs`: class
    scores ``(N, classes)``, floating point and finite, independent of the batch) on the first
    training inputs, then as many scores as ``data``'s classes, and logits: no final
    ``nn.Softmax`` and no rows of probabilities (cross-entropy applies the softmax itself; every
    later command would refuse the trained model's probabilities). A ``forward`` that raises is
    one line naming its class (:class:`~deepfault.errors.UserCodeError`).

    Args:
        model: The freshly built model (left in ``eval()`` mode).
        data: The data set it will be trained on.
        arch: The architecture's name, for messages.

    Raises:
        DeepFaultError: Naming what is wrong and what to change in the class.
    """
    from ..core.capture import forward
    from ..core.outputs import SAMPLE, check_model_outputs, ends_in_softmax, probability_rows

    logits = ("training needs logits (cross-entropy applies the softmax itself) and every command would "
              "refuse the trained model")
    if ends_in_softmax(model):
        raise DeepFaultError(f"--arch {arch!r} ends in a softmax, so it returns probabilities: {logits}; "
                             "remove the final softmax from the class")
    x = torch.as_tensor(data.x_train[:SAMPLE], device=model_device(model))
    with torch.no_grad():  # lazy modules take their shapes here, outside inference mode
        out = forward(model.eval(), x)
    width = check_model_outputs(model, x, output_kind="probabilities", what=f"--arch {arch!r}")
    known = bool(data.meta.get("class_names_given", True))
    if width < data.num_classes or (width > data.num_classes and known):
        raise DeepFaultError(f"--arch {arch!r} gives {width} scores per input but data set {data.name!r} has "
                             f"{data.num_classes} classes; build it with {data.num_classes} outputs (its "
                             "--arch-args)")
    if probability_rows(out):
        raise DeepFaultError(f"--arch {arch!r} returns probabilities (every output row is >= 0 and sums to "
                             f"1): {logits}; return the scores before the softmax from forward()")


def build_trainable(arch: str, arch_kwargs: dict, data: Dataset, *, seed: int,
                    device: torch.device | str = "cpu") -> nn.Module:
    """``arch`` built with ``arch_kwargs`` and weights seeded by ``seed`` on ``device``, once it is
    known to fit the memory free here (built on the ``meta`` device first:
    :func:`~deepfault.models.io.check_build`) and to give scores training can use
    (:func:`check_trainable`). The global RNG is untouched.

    Raises:
        DeepFaultError: Too large to build, or outputs no command could read after training.
    """
    check_build(arch, arch_kwargs)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_model(arch, **arch_kwargs)
    model.to(device)
    check_trainable(model, data, arch)
    return model.eval()


def train_model(
    arch: str,
    data: Dataset,
    config: TrainConfig = TrainConfig(),
    *,
    arch_kwargs: dict | None = None,
    device: torch.device | str = "cpu",
    progress: bool = False,
    threads: int | str | None = "auto",
) -> tuple[ModelFile, TrainResult]:
    """Build ``arch`` with weights seeded by ``config.seed``, train it on ``data``'s training
    split and measure its test accuracy.

    ``threads`` as :func:`fit` takes them (default ``"auto"``, every command's rule).

    Returns:
        The model file (weights, architecture, data set, bounds, test accuracy, recipe, and
        ``meta["data_dir"]``, the data root, when it was not the default; ``meta["training"]``
        records whether the training ``finished`` or was ``interrupted``) and the training
        result.
    """
    config.validate()
    arch_kwargs = dict(arch_kwargs or {})
    model = build_trainable(arch, arch_kwargs, data, seed=config.seed, device=device)
    result = fit(model, data.x_train, data.y_train, config, progress=progress, threads=threads)
    test_acc = accuracy(model, data.x_test, data.y_test)
    from ..data._api import data_dir_to_record

    data_dir = data_dir_to_record(data)  # so that later commands find the data without --data-dir
    mf = ModelFile(
        model=model,
        arch=arch,
        arch_kwargs=arch_kwargs,
        dataset=data.name,
        bounds=data.bounds,
        meta={
            "test_accuracy": test_acc,
            "val_accuracy": result.val_accuracy,
            "input_shape": list(data.input_shape),
            "training": {**asdict(config), "epochs_completed": result.epochs_completed,
                         "interrupted": result.interrupted, "finished": result.finished,
                         "seconds": result.seconds, "threads": result.threads},
            **({"data_dir": data_dir} if data_dir else {}),
        },
    )
    return mf, result


def trained_model(arch: str, data, path, config: TrainConfig, *, device="cpu", progress: bool = False,
                  threads: int | str | None = "auto"):
    """The zoo model ``arch`` kept at ``path``: opened when the file is there and readable,
    otherwise trained on ``data`` with ``config`` (on ``threads``, as :func:`fit` takes them)
    and saved there (atomically).

    The presets of every method keep their models this way, so a rerun reuses them.

    Raises:
        KeyboardInterrupt: The training was interrupted; nothing is saved (a half-trained
            model kept there would be reused by every rerun).
    """
    import logging
    from pathlib import Path

    from .io import save_model
    from .load import open_model

    log = logging.getLogger(__name__)
    path = Path(path)
    if path.is_file():
        try:
            return open_model(path)
        except DeepFaultError as err:
            log.warning("%s unreadable (%s); training again", path, err)
    log.info("training %s on %s (no model file at %s)...", arch, data.name, path)
    mf, result = train_model(arch, data, config, device=device, arch_kwargs={"num_classes": data.num_classes},
                             progress=progress, threads=threads)
    if result.interrupted:
        raise KeyboardInterrupt
    save_model(path, mf)
    warn_if_chance(mf, str(path))
    return mf
