"""Regression scenarios: make the model pair ``M1``/``M2`` that DRFuzz fuzzes (``spec/drfuzz.md``, section 9).

| scenario | ``M1`` | ``M2`` |
| --- | --- | --- |
| ``supply`` (SUPPLY) | trained on 80% of the training split | ``M1`` trained further on the other 20% |
| ``adv-bim`` (ADV:BIM) | trained on the whole split | ``M1`` fine-tuned on BIM adversarial examples |
| ``adv-cw`` (ADV:CW) | trained on the whole split | ``M1`` fine-tuned on C&W L2 adversarial examples |
| ``fixing`` (FIXING) | trained on the whole split | ``M1`` repaired Apricot-style from per-class sub-models |
| ``prune`` (PRUNE) | trained on the whole split | smallest 50% of each layer's weights removed, fine-tuned |
| ``quant-fp16`` (QUANT) | trained on the whole split | every float rounded to float16 (stored as float32) |
| ``quant-int8`` (QUANT) | trained on the whole split | per-tensor symmetric int8 weights (dequantised) |

``M1`` comes from one of two *base* models, trained once per (architecture, data, seed,
epochs) and cached in the output folder, so the five scenarios share their training. Both
models are written as ordinary deepfault model files (float32, loadable on any device) with
``meta["scenario"]`` saying what was done. Everything random is drawn from ``seed``.

New scenarios register a builder with :func:`register_scenario`.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import inspect
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..._deprecation import grouped, moved_names
from ...checks import MAX_SEED, check_int
from ...core.attacks import bim, carlini_wagner_l2
from ...core.registry import Registry, suggestion
from ...errors import DeepFaultError
from ...models import deploy
from ...models.deploy import safe_stem

__all__ = [
    "Scenario",
    "ScenarioContext",
    "ScenarioResult",
    "SCENARIOS",
    "register_scenario",
    "list_scenarios",
    "make_scenario",
    "apricot_repair",
    "ApricotSettings",
]

log = logging.getLogger(__name__)

#: The transformations that moved to :mod:`deepfault.models.deploy` answer here with a warning.
__getattr__ = moved_names(__name__, {name: "deepfault.models.deploy" for name in (
    "prune_weights", "sparsity", "quantize_fp16", "quantize_int8", "quantize_int8_tensor")})

#: Share of the training split that SUPPLY's ``M1`` is trained on (README note 2).
SUPPLY_FRACTION = 0.8
#: Training recipe of the base models and the fine-tuning: Adam, batch 32, cosine decay.
BATCH_SIZE = 32
LR = 1e-3


# --- the registry ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScenarioContext:
    """What a scenario builder may use besides ``M1`` and the data.

    :func:`make_scenario` takes one (its seed, epochs, device and progress; ``rest_idx`` is its
    own to fill) and hands it, filled, to the scenario's builder.

    Attributes:
        seed: The run's seed (of the weights, the splits, the shuffling and the attack's subset);
            builders derive their own from it.
        epochs: The run's epochs (of the base models; SUPPLY and ADV:BIM fine-tune as long).
        device: Where to train (a name is taken as ``torch.device(name)``).
        progress: Show progress bars.
        threads: CPU threads of the training (:func:`deepfault.models.train.fit`'s rule).
        rest_idx: Training inputs the ``M1`` did not see (SUPPLY's 20%); empty otherwise.
    """

    seed: int = 0
    epochs: int = 3
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    progress: bool = False
    threads: int | str | None = "auto"
    rest_idx: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False)

    def __post_init__(self):
        object.__setattr__(self, "device", torch.device(self.device))

    def derived(self, offset: int) -> int:
        """A builder's own seed, ``seed + offset`` wrapped into ``0 .. MAX_SEED``: the run's largest
        seed must not give a builder one that ``fit`` refuses after the base models were written.

        Examples:
            >>> ScenarioContext(seed=3).derived(2)
            5
        """
        return (self.seed + offset) % (MAX_SEED + 1)

    def fit(self, model: nn.Module, x: np.ndarray, y: np.ndarray, *, epochs: int, lr: float, seed: int):
        """Train ``model`` in place (Adam, batch 32, cosine decay, no validation split).

        Raises:
            KeyboardInterrupt: Training was interrupted (nothing half-trained is kept).
        """
        from ...models.train import TrainConfig, fit

        config = TrainConfig(epochs=epochs, batch_size=BATCH_SIZE, lr=lr, val_fraction=0.0, seed=seed)
        result = fit(model, x, y, config, progress=self.progress, threads=self.threads)
        if result.interrupted:
            raise KeyboardInterrupt
        return result


#: ``build(m2, data, ctx, **options) -> details``: turns ``m2`` (a copy of ``M1`` on the
#: device) into ``M2`` in place and returns a dict of plain values describing what it did.
Builder = Callable[..., dict]


@dataclass(frozen=True)
class Scenario:
    """A registered scenario.

    Attributes:
        name: Registry name (``supply``, ``adv-bim``, ...).
        label: The README's name (``SUPPLY``, ``ADV:BIM``, ...).
        m1_fraction: Share of the training split ``M1`` is trained on.
        build: The builder (see :data:`Builder`).
        description: One line.
    """

    name: str
    label: str
    m1_fraction: float
    build: Builder = field(repr=False)
    description: str = ""

    def options(self) -> dict[str, Any]:
        """The builder's keyword options and their defaults."""
        params = inspect.signature(self.build).parameters
        return {n: p.default for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}


SCENARIOS: Registry[Scenario] = Registry("scenario")


def register_scenario(name: str, *, label: str, m1_fraction: float = 1.0, description: str = ""):
    """Decorator registering ``build(m2, data, ctx, *, option=default, ...) -> dict`` as ``name``."""
    if not 0 < m1_fraction <= 1:
        raise ValueError(f"m1_fraction must lie in (0, 1]; got {m1_fraction!r}")

    def decorate(build: Builder) -> Builder:
        doc = description or (build.__doc__ or "").strip().splitlines()[0]
        SCENARIOS.register(name, Scenario(name, label, m1_fraction, build, doc))
        return build

    return decorate


def list_scenarios() -> list[str]:
    """The registered scenarios, sorted."""
    return SCENARIOS.names()


# --- the transformations, as plain functions ----------------------------------------------------


@dataclass(frozen=True)
class ApricotSettings:
    """The settings of :func:`apricot_repair`.

    Attributes:
        rate: Apricot's step.
        batch_size: Failing inputs per adjustment.
        batches: Most adjustments.
        seed: Order of the failing inputs.
    """

    rate: float = 0.05
    batch_size: int = 64
    batches: int = 20
    seed: int = 0


def apricot_repair(
    model: nn.Module,
    submodels: list[nn.Module],
    x: np.ndarray,
    y: np.ndarray,
    *,
    x_val: np.ndarray,
    y_val: np.ndarray,
    settings: ApricotSettings | None = None,
    **old: Any,
) -> dict:
    """An Apricot-style weight repair (Zhang and Chan, ASE 2019), in place.

    For batches of training inputs that ``model`` misclassifies, each sub-model that
    classifies an input correctly is "correct" for it, the others "wrong"; the weights move
    towards the mean of the correct sub-models' weights and away from the wrong ones':
    ``w <- w - rate (w - mean_correct) + rate (w - mean_wrong)`` (averaged over the batch's
    inputs). After each batch the validation accuracy decides whether the adjustment is
    kept (the best weights so far are kept).

    Args:
        model: The network to repair (changed in place); the sub-models have its architecture.
        submodels: Sub-models (Apricot's rDLMs) whose weights guide the repair.
        x: Training inputs (the failing ones are taken from them).
        y: Their labels.
        x_val: Held-out inputs that judge each adjustment.
        y_val: Their labels.
        settings: :class:`ApricotSettings`: the step, the failing inputs per adjustment, the most
            adjustments, the seed of their order.
        **old: The old form's keywords ``rate``, ``batch_size``, ``batches`` and ``seed``
            (:class:`ApricotSettings`' fields; they warn, :class:`FutureWarning`).

    Returns:
        ``{"failing": F, "adjustments": tried, "kept": kept, "val_before": a, "val_after": b}``.
    """
    from torch.nn.utils import parameters_to_vector, vector_to_parameters

    from ...core.batches import predict

    settings = grouped("apricot_repair", "settings", ApricotSettings, settings, old)
    if not submodels:
        raise DeepFaultError("apricot_repair needs at least one sub-model")
    failing = _failing(model, x, y, settings)
    weights = torch.stack([parameters_to_vector(m.parameters()).detach() for m in submodels])
    right = np.stack([predict(m, x[failing]).argmax(1).numpy() == y[failing] for m in submodels], axis=1)
    best_acc = _accuracy(model, x_val, y_val)
    before, kept, tried = best_acc, 0, 0
    best_w = parameters_to_vector(model.parameters()).detach().clone()
    step = settings.batch_size
    for start in range(0, len(failing), step):
        r = torch.as_tensor(right[start : start + step], dtype=weights.dtype, device=weights.device)
        w = best_w + settings.rate * _apricot_step(best_w.clone(), weights, r)
        vector_to_parameters(w, model.parameters())
        tried += 1
        acc = _accuracy(model, x_val, y_val)
        if acc >= best_acc:
            best_acc, best_w, kept = acc, w, kept + 1
    vector_to_parameters(best_w, model.parameters())
    return {"failing": int(len(failing)), "adjustments": tried, "kept": kept, "val_before": before,
            "val_after": best_acc}


def _failing(model: nn.Module, x: np.ndarray, y: np.ndarray, settings: ApricotSettings) -> np.ndarray:
    """The training inputs ``model`` misclassifies, in the seed's order, as many as the
    adjustments take.
    """
    from ...core.batches import predict

    pred = predict(model, x).argmax(1).numpy()
    failing = np.flatnonzero(pred != y)
    rng = np.random.default_rng(settings.seed)
    return failing[rng.permutation(len(failing))][: settings.batch_size * settings.batches]


def _apricot_step(w: torch.Tensor, weights: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """One adjustment's direction from ``w``, averaged over a batch: towards the sub-models right
    on an input (``r`` ``(B, S)``, 1 where sub-model ``s`` is right on input ``b``), away from the
    wrong ones.
    """
    n_right, n_wrong = r.sum(1, keepdim=True), (1 - r).sum(1, keepdim=True)
    mean_right = (r @ weights) / n_right.clamp_min(1)
    mean_wrong = ((1 - r) @ weights) / n_wrong.clamp_min(1)
    return (-(w - mean_right) * (n_right > 0) + (w - mean_wrong) * (n_wrong > 0)).mean(0)


# --- the five scenarios --------------------------------------------------------------------------


@register_scenario("supply", label="SUPPLY", m1_fraction=SUPPLY_FRACTION,
                   description="M1 on 80% of the training split; M2 = M1 trained further on the other 20%")
def _supply(m2: nn.Module, data, ctx: ScenarioContext, *, lr: float = LR,
            epochs: int | None = None) -> dict:
    """M2 = M1 trained further on the 20% of the training split it has not seen."""
    epochs = ctx.epochs if epochs is None else check_int("epochs", epochs)
    idx = ctx.rest_idx
    ctx.fit(m2, data.x_train[idx], data.y_train[idx], epochs=epochs, lr=lr, seed=ctx.derived(1))
    return {"supplementary_inputs": len(idx), "epochs": epochs, "lr": lr}


@register_scenario("adv-bim", label="ADV:BIM",
                   description="M2 = M1 fine-tuned on BIM adversarial examples (and their clean originals)")
def _adv_bim(m2: nn.Module, data, ctx: ScenarioContext, *, eps: float = 0.1, steps: int = 10,
             step_size: float | None = None, samples: int = 10_000, lr: float = LR / 2,
             epochs: int | None = None) -> dict:
    """M2 = M1 fine-tuned on ``samples`` training inputs and their BIM adversarial examples."""
    epochs = ctx.epochs if epochs is None else check_int("epochs", epochs)
    check_int("samples", samples)
    rng = np.random.default_rng(ctx.derived(2))
    idx = np.sort(rng.permutation(len(data.x_train))[:samples])
    x, y = data.x_train[idx], data.y_train[idx]
    attack = {"bounds": data.bounds, "eps": eps, "steps": steps, "step_size": step_size}
    x_adv = bim(m2, x, y, **attack).numpy()
    n_test = min(1000, len(data.x_test))
    xt, yt = data.x_test[:n_test], data.y_test[:n_test]
    m1_robust = _accuracy(m2, bim(m2, xt, yt, **attack).numpy(), yt)
    m1_on_adv = _accuracy(m2, x_adv, y)
    ctx.fit(m2, np.concatenate([x, x_adv]), np.concatenate([y, y]), epochs=epochs, lr=lr, seed=ctx.derived(3))
    return {
        "eps": eps, "steps": steps, "step_size": eps / 4 if step_size is None else step_size,
        "adversarial_inputs": len(idx), "epochs": epochs, "lr": lr,
        "m1_accuracy_on_training_adversarials": m1_on_adv,
        "bim_test_inputs": n_test,
        "m1_bim_accuracy": m1_robust,
        "m2_bim_accuracy": _accuracy(m2, bim(m2, xt, yt, **attack).numpy(), yt),
    }


@register_scenario("adv-cw", label="ADV:CW",
                   description="M2 = M1 fine-tuned on Carlini-Wagner L2 adversarial examples "
                   "(and their clean originals)")
def _adv_cw(m2: nn.Module, data, ctx: ScenarioContext, *, samples: int = 2_000, steps: int = 50,
            binary_steps: int = 4, lr: float = LR / 2, epochs: int | None = None) -> dict:
    """M2 = M1 fine-tuned on ``samples`` training inputs and their C&W L2 adversarial examples."""
    epochs = ctx.epochs if epochs is None else check_int("epochs", epochs)
    check_int("samples", samples)
    rng = np.random.default_rng(ctx.derived(5))
    idx = np.sort(rng.permutation(len(data.x_train))[:samples])
    x, y = data.x_train[idx], data.y_train[idx]
    attack = {"bounds": data.bounds, "steps": steps, "binary_steps": binary_steps}
    x_adv = carlini_wagner_l2(m2, x, y, **attack).numpy()
    m1_on_adv = _accuracy(m2, x_adv, y)
    span = float(data.bounds[1] - data.bounds[0])
    l2 = float(np.sqrt((((x_adv - x) / span) ** 2).reshape(len(x), -1).sum(1)).mean()) if len(x) else 0.0
    # the supplementary data: the adversarial examples and a share of clean training inputs
    ctx.fit(m2, np.concatenate([x, x_adv]), np.concatenate([y, y]), epochs=epochs, lr=lr, seed=ctx.derived(6))
    return {"adversarial_inputs": len(idx), "steps": steps, "binary_steps": binary_steps, "epochs": epochs,
            "lr": lr, "m1_accuracy_on_training_adversarials": m1_on_adv, "mean_l2_share_of_range": l2}


@register_scenario("fixing", label="FIXING",
                   description="M2 = M1 repaired Apricot-style from per-class sub-models")
def _fixing(m2: nn.Module, data, ctx: ScenarioContext, *, subset: int = 3_000, rate: float = 0.05,
            batches: int = 20, lr: float = LR / 2, epochs: int = 1) -> dict:
    """M2 = M1 after an Apricot-style repair (:func:`apricot_repair`) guided by one sub-model per
    class: sub-model ``k`` is M1 fine-tuned on ``subset`` training inputs, half of class ``k``.
    """
    check_int("subset", subset)
    check_int("epochs", epochs)
    rng = np.random.default_rng(ctx.derived(7))
    order = rng.permutation(len(data.x_train))
    n_val = min(2_000, len(order) // 5)
    val, train = np.sort(order[:n_val]), order[n_val:]
    subs = []
    for k in range(data.num_classes):
        own = train[data.y_train[train] == k][: subset // 2]
        rest = train[data.y_train[train] != k][: subset - len(own)]
        idx = np.sort(np.concatenate([own, rest]))
        sub = copy.deepcopy(m2)
        ctx.fit(sub, data.x_train[idx], data.y_train[idx], epochs=epochs, lr=lr, seed=ctx.derived(10 + k))
        subs.append(sub.eval())
    details = apricot_repair(m2, subs, data.x_train[train], data.y_train[train], x_val=data.x_train[val],
                             y_val=data.y_train[val],
                             settings=ApricotSettings(rate=rate, batches=batches, seed=ctx.derived(8)))
    return {"submodels": len(subs), "subset": subset, "rate": rate, "epochs": epochs, "lr": lr, **details}


@register_scenario("prune", label="PRUNE",
                   description="M2 = M1 with the smallest 50% of each layer's weights removed, fine-tuned")
def _prune(m2: nn.Module, data, ctx: ScenarioContext, *, amount: float = 0.5, lr: float = LR / 2,
           epochs: int = 1) -> dict:
    """M2 = M1 pruned by weight magnitude per layer, then fine-tuned with the pruned weights held at 0."""
    check_int("epochs", epochs)
    deploy.prune_weights(m2, amount=amount, permanent=False)
    before = _accuracy(m2, data.x_test, data.y_test)
    try:
        ctx.fit(m2, data.x_train, data.y_train, epochs=epochs, lr=lr, seed=ctx.derived(4))
    finally:
        deploy.prune_weights(m2, amount=amount, permanent=True)  # masks become plain zeros
    return {"amount": amount, "epochs": epochs, "lr": lr, "accuracy_before_fine_tuning": before,
            "sparsity": deploy.sparsity(m2)}


@register_scenario("quant-fp16", label="QUANT:FP16",
                   description="M2 = M1 with every weight rounded to float16 (stored as float32)")
def _quant_fp16(m2: nn.Module, data, ctx: ScenarioContext) -> dict:
    """M2 = M1 rounded to float16."""
    before = _cpu_state(m2)
    m2.load_state_dict(deploy.quantize_fp16(m2).state_dict())
    changed = sum(int((a != b).sum()) for a, b in zip(before.values(), _cpu_state(m2).values(), strict=True))
    return {"dtype": "float16", "changed_values": changed,
            "values": sum(v.numel() for v in before.values() if v.is_floating_point())}


@register_scenario("quant-int8", label="QUANT:INT8",
                   description="M2 = M1 with per-tensor symmetric int8 weights (dequantised to float32)")
def _quant_int8(m2: nn.Module, data, ctx: ScenarioContext) -> dict:
    """M2 = M1 with int8 weights."""
    quantised, scales = deploy.quantize_int8(m2)
    m2.load_state_dict(quantised.state_dict())
    return {"scheme": "per-tensor symmetric int8, round to nearest, [-127, 127]", "scales": scales}


def _cpu_state(model: nn.Module) -> dict:
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


# --- running a scenario ------------------------------------------------------------------------


@dataclass(frozen=True)
class ScenarioResult:
    """The model pair a scenario wrote and how they compare on the test split.

    Attributes:
        scenario, label: Registry name and README name.
        arch, dataset: What was trained on what.
        m1_path, m2_path: The two model files.
        m1_accuracy, m2_accuracy: Test accuracies.
        regressions: Test inputs that ``M1`` classifies correctly and ``M2`` does not.
        fixes: Test inputs that ``M2`` classifies correctly and ``M1`` does not.
        n_test: Test inputs.
        seconds: Wall-clock time, base training included when it was not cached.
        base_reused: ``M1`` came from the cache.
        details: What the scenario did (its options and figures).
    """

    scenario: str
    label: str
    arch: str
    dataset: str
    m1_path: Path
    m2_path: Path
    m1_accuracy: float
    m2_accuracy: float
    regressions: int
    fixes: int
    n_test: int
    seconds: float
    base_reused: bool
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["m1_path"], out["m2_path"] = str(self.m1_path), str(self.m2_path)
        return out


def _accuracy(model: nn.Module, x, y) -> float:
    from ...models.train import accuracy

    return accuracy(model, x, y)


def _fingerprint(data) -> str:
    h = hashlib.blake2b(digest_size=8)
    for a in (data.x_train, data.y_train):
        h.update(np.ascontiguousarray(a).data)
    return h.hexdigest()


def _split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split of ``range(n)`` into ``round(fraction * n)`` and the rest, each sorted."""
    if fraction >= 1:
        return np.arange(n), np.zeros(0, dtype=np.int64)
    order = np.random.default_rng(seed).permutation(n)
    k = int(round(fraction * n))
    return np.sort(order[:k]), np.sort(order[k:])


def _arch_stem(arch: str) -> str:
    """``lenet5`` for a zoo name; ``mynet-Net`` for ``path/mynet.py:Net`` (as ``deepfault train``
    names its file); ``timm-vit_tiny`` ...
    """
    from ...models._api import arch_kind

    if arch_kind(arch) == "zoo":
        return arch
    where, _, name = arch.rpartition(":")
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{Path(where).stem}-{name}")


def _arch_kwargs(arch: str, given: dict | None, num_classes: int) -> dict:
    """The constructor's arguments: a zoo architecture gets the data's number of classes unless
    given; any other architecture (the user's class) exactly ``given``, as ``deepfault train``.
    """
    from ...models._api import arch_kind

    given = dict(given or {})
    return {"num_classes": num_classes, **given} if arch_kind(arch) == "zoo" else given


def _base_model(arch: str, data, ctx: ScenarioContext, *, fraction: float, out_dir: Path, fingerprint: str,
                arch_kwargs: dict):
    """``M1``: trained on ``fraction`` of the training split, or read from the cache."""
    from ...models._api import runs_user_code
    from ...models.io import ModelFile, load_model, save_model
    from ...models.zoo import build_model

    seed, epochs, device = ctx.seed, ctx.epochs, ctx.device

    pct = int(round(fraction * 100))
    path = out_dir / f"base-{_arch_stem(arch)}-{safe_stem(data.name)}-train{pct}-seed{seed}-epochs{epochs}.pt"
    train_idx, rest_idx = _split(len(data.x_train), fraction, seed)
    key = {"arch": arch, "dataset": data.name, "fraction": fraction, "seed": seed, "epochs": epochs,
           "batch_size": BATCH_SIZE, "lr": LR, "train_inputs": len(train_idx), "fingerprint": fingerprint}
    if arch_kwargs != {"num_classes": data.num_classes}:  # the zoo's default keeps older caches' key
        key["arch_kwargs"] = arch_kwargs
    if path.is_file():
        try:  # the user's code is named by the caller's own arch: consent to run it
            cached = load_model(path, map_location=device, arch=arch if runs_user_code(arch) else None)
        except DeepFaultError as err:
            log.warning("ignoring the cached base model %s: %s", path, err)
        else:
            if cached.meta.get("scenario_base") == key:
                log.info("reusing the base model %s", path)
                return cached, train_idx, rest_idx, True
            log.info("the cached base model %s was made differently; training again", path)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_model(arch, **arch_kwargs)
    model.to(device)
    log.info("training the base %s on %d%% of %s (%d inputs, %d epochs)", arch, pct, data.name,
             len(train_idx), epochs)
    result = ctx.fit(model, data.x_train[train_idx], data.y_train[train_idx], epochs=epochs, lr=LR, seed=seed)
    mf = ModelFile(model=model.eval(), arch=arch, arch_kwargs=dict(arch_kwargs),
                   dataset=data.name, bounds=tuple(data.bounds),
                   meta={"scenario_base": key, "input_shape": list(data.input_shape),
                         "test_accuracy": _accuracy(model, data.x_test, data.y_test),
                         "training": {"epochs": epochs, "batch_size": BATCH_SIZE, "lr": LR, "seed": seed,
                                      "schedule": "cosine", "train_inputs": len(train_idx),
                                      "seconds": result.seconds}})
    save_model(path, mf)
    return mf, train_idx, rest_idx, False


def _check_model_fits(arch: str, data, arch_kwargs: dict) -> None:
    from ...core.capture import forward
    from ...errors import UserCodeError
    from ...models.io import check_build
    from ...models.train import check_trainable
    from ...models.zoo import build_model

    if len(data.x_train) == 0 or len(data.x_test) == 0:
        raise DeepFaultError(f"data set {data.name!r} needs a training and a test split for scenarios")
    check_build(arch, arch_kwargs)  # on the meta device: too large is refused before it is built
    with torch.random.fork_rng(devices=[]):
        model = build_model(arch, **arch_kwargs)
    try:
        with torch.no_grad():
            out = forward(model.eval(), torch.as_tensor(data.x_train[:2]))
    except UserCodeError:
        raise
    except DeepFaultError as err:
        raise DeepFaultError(f"architecture {arch!r} does not fit data set {data.name!r}: {err}") from err
    if out.ndim != 2 or out.shape[1] != data.num_classes:
        raise DeepFaultError(
            f"architecture {arch!r} gives outputs of shape {tuple(out.shape[1:])} per input; "
            f"expected {data.num_classes} class scores"
        )
    # a trailing softmax, probabilities or integers: refused before M1 trains, rather than a pair
    # that every later command would refuse
    check_trainable(model, data, arch)


def make_scenario(
    name: str,
    arch: str,
    data,
    *,
    context: ScenarioContext | None = None,
    out_dir: str | os.PathLike = "scenarios",
    options: dict | None = None,
    arch_kwargs: dict | None = None,
    **old: Any,
) -> ScenarioResult:
    """Make and write the ``M1``/``M2`` pair of scenario ``name``.

    Writes ``OUT/NAME-ARCH-DATASET-m1.pt``, ``...-m2.pt`` and ``...json`` (the result), and
    caches the base model ``OUT/base-ARCH-DATASET-trainPCT-seedS-epochsE.pt`` for the other
    scenarios (reused only when it was made from the same data and recipe).

    Args:
        name: A registered scenario (:func:`list_scenarios`).
        arch: An architecture taking ``data``'s inputs: a zoo name, or any form of
            :func:`deepfault.models.build_model` (``path/to/file.py:Class``, ...); the files are
            named after the class and record it (reading them back needs the code named again).
        data: The data set (:func:`deepfault.data.load_dataset`).
        context: A :class:`ScenarioContext`: seed, epochs, device, progress (seed 0, 3, the CPU, none).
        out_dir: Where to write.
        options: The scenario's keyword options (``Scenario.options()``), e.g.
            ``{"eps": 0.05}`` for ``adv-bim`` or ``{"amount": 0.7}`` for ``prune``.
        arch_kwargs: Keyword arguments of ``arch``; a zoo architecture gets ``data``'s number
            of classes unless given, any other architecture exactly these.
        **old: The old form's ``seed``, ``epochs``, ``device``, ``progress`` (they warn).

    Returns:
        A :class:`ScenarioResult`.

    Raises:
        DeepFaultError: Unknown scenario or architecture, bad settings, or an architecture that
            does not take the data's inputs; nothing is written then.
        KeyboardInterrupt: Training was interrupted; the pair is not written.

    Examples:
        >>> from deepfault.data import load_dataset
        >>> r = make_scenario("prune", "lenet5", load_dataset("mnist"),
        ...                   context=ScenarioContext(epochs=3))  # doctest: +SKIP
        >>> r.m1_accuracy, r.m2_accuracy, r.regressions  # doctest: +SKIP
    """
    from ...models._api import canonical_arch

    scenario = SCENARIOS.get(name)
    arch = canonical_arch(arch)  # an unknown zoo name or a malformed form: one line
    ctx, options = _context(context, old), _checked_options(scenario, name, options)
    arch_kwargs = _fitting_kwargs(arch, arch_kwargs, data)
    out_dir = Path(out_dir)
    start = time.perf_counter()
    with _folder(out_dir):
        base, m2, details, reused = _transformed(scenario, arch, data, ctx, out_dir, arch_kwargs, options)
        stem = f"{name}-{_arch_stem(arch)}-{safe_stem(data.name)}"
        paths = out_dir / f"{stem}-m1.pt", out_dir / f"{stem}-m2.pt"
        result = _written_pair(scenario, name, arch, data, ctx, base, (base.model, m2), paths, details)
        return _recorded(replace(result, seconds=time.perf_counter() - start, base_reused=reused),
                         out_dir / f"{stem}.json")


@contextlib.contextmanager
def _folder(out_dir: Path):
    """``out_dir`` made for the run, and removed again when the run fails before writing into it
    (a folder it made and left empty; one with files, or that was there before, is kept).
    """
    made = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        yield out_dir
    except BaseException:
        if made:
            with contextlib.suppress(OSError):
                out_dir.rmdir()  # empty only: it never deletes a file
        raise


def _fitting_kwargs(arch: str, given: dict | None, data) -> dict:
    """The architecture's keyword arguments (:func:`_arch_kwargs`), once it is known to take the
    data's inputs and give one score per class.
    """
    arch_kwargs = _arch_kwargs(arch, given, data.num_classes)
    _check_model_fits(arch, data, arch_kwargs)
    return arch_kwargs


def _transformed(scenario: Scenario, arch: str, data, ctx: ScenarioContext, out_dir: Path, arch_kwargs: dict,
                 options: dict):
    """``(base, m2, details, reused)``: the base model (``M1``, trained or read from the cache, on
    the device in ``eval()`` mode) and ``M2``, a copy of it the scenario changed.
    """
    base, _, rest_idx, reused = _base_model(arch, data, ctx, fraction=scenario.m1_fraction, out_dir=out_dir,
                                            fingerprint=_fingerprint(data), arch_kwargs=arch_kwargs)
    m1 = base.model.to(ctx.device).eval()
    m2 = copy.deepcopy(m1)
    details = scenario.build(m2, data, replace(ctx, rest_idx=rest_idx), **options)
    return base, m2.eval(), details, reused


def _recorded(result: ScenarioResult, path: Path) -> ScenarioResult:
    """``result``, written as JSON to ``path``."""
    from ..._io import write_json

    write_json(path, result.to_dict())
    return result


def _context(context: ScenarioContext | None, old: dict[str, Any]) -> ScenarioContext:
    """``context`` (or the default) with the old form's keywords (warned about) in it; its seed
    and epochs checked.
    """
    ctx = grouped("make_scenario", "context", ScenarioContext, context, old, warn=4)
    check_int("epochs", ctx.epochs)
    check_int("seed", ctx.seed, minimum=0)
    return ctx


def _checked_options(scenario: Scenario, name: str, options: dict | None) -> dict:
    """The scenario's options, each one it knows (one line naming its options otherwise)."""
    options = dict(options or {})
    known = scenario.options()
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise DeepFaultError(
            f"scenario {name!r} has no option {', '.join(map(repr, unknown))}"
            f"{suggestion(unknown[0], known)}; "
            f"its options: {', '.join(known) or 'none'}"
        )
    return options


def _written_pair(scenario: Scenario, name: str, arch: str, data, ctx: ScenarioContext, base,
                  models: tuple[nn.Module, nn.Module], paths: tuple[Path, Path],
                  details: dict) -> ScenarioResult:
    """Both models judged on the test split and written with what was done to them, as a result
    (its time and the base's reuse left for the caller).
    """
    from ...core.batches import predict
    from ...data._api import data_dir_to_record
    from ...models.io import ModelFile, save_model

    m1, m2 = models
    m1_path, m2_path = paths
    y = torch.as_tensor(data.y_test)
    right1 = predict(m1, data.x_test).argmax(1) == y
    right2 = predict(m2, data.x_test).argmax(1) == y
    acc1, acc2 = float(right1.float().mean()), float(right2.float().mean())
    seed, epochs = ctx.seed, ctx.epochs
    common = {"name": name, "label": scenario.label, "seed": seed, "epochs": epochs,
              "m1_file": m1_path.name, "m2_file": m2_path.name}
    m1_meta = {**base.meta, "test_accuracy": acc1,
               "scenario": {**common, "role": "M1",
                            "base_file": f"base-{_arch_stem(arch)}-{safe_stem(data.name)}-train"
                            f"{int(round(scenario.m1_fraction * 100))}-seed{seed}-epochs{epochs}.pt",
                            "trained_on_fraction": scenario.m1_fraction}}
    m2_meta = {"input_shape": list(data.input_shape), "test_accuracy": acc2,
               "scenario": {**common, "role": "M2", "details": details}}
    data_dir = data_dir_to_record(data)  # so that regress on the pair finds the data without --data-dir
    for path, model, meta in ((m1_path, m1, m1_meta), (m2_path, m2, m2_meta)):
        if data_dir:
            meta = {**meta, "data_dir": data_dir}
        save_model(path, ModelFile(model=model, arch=arch, arch_kwargs=dict(base.arch_kwargs),
                                   dataset=data.name, bounds=tuple(data.bounds), meta=meta))
    return ScenarioResult(
        scenario=name, label=scenario.label, arch=arch, dataset=data.name, m1_path=m1_path,
        m2_path=m2_path, m1_accuracy=acc1, m2_accuracy=acc2,
        regressions=int((right1 & ~right2).sum()), fixes=int((~right1 & right2).sum()),
        n_test=len(y), seconds=0.0, base_reused=False, details=details,
    )
