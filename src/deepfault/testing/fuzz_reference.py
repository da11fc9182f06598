"""DRFuzz one input at a time: the published loop written straight from spec/drfuzz.md.

Every iteration selects one queued input, chooses a rule with the MCMC chain, and then
makes, checks and executes its mutants **one at a time** (a rule call, a fidelity call and
one forward pass of each model per mutant), with the bookkeeping in Python lists and
dicts, as the published code does. It is the throughput baseline of
``benchmarks/bench_fuzz.py`` and a readable statement of the algorithm; for real work use
:func:`deepfault.fuzz.run_campaign`, which does the same with ``B`` inputs per step in a
handful of batched calls.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from .._deprecation import grouped
from ..core.capture import eval_mode, model_device
from ..fuzz.campaign.strategies import DRFUZZ_RULES
from ..fuzz.mutation.rules import apply_rule

__all__ = ["ReferenceSettings", "drfuzz_reference"]


def _probs(model: nn.Module, x: torch.Tensor) -> list[float]:
    return torch.softmax(model(x[None]), dim=1)[0].tolist()


def _seed_queue(m1: nn.Module, m2: nn.Module, x: torch.Tensor, y: list[int], device, fidelity):
    """The first queue (the seeds M1 and M2 both get right), the table of each seed's
    ``p2[k] - p1[k]`` (every seed M1 gets right) and each queued seed's fidelity reference.
    """
    queue: list[dict] = []
    table: dict[tuple[int, int], float] = {}
    root_ref = {}
    for i in range(len(x)):  # seeds: M1 right and M2 right are queued
        xi = x[i].to(device)
        p1, p2 = _probs(m1, xi), _probs(m2, xi)
        y1, y2 = int(np.argmax(p1)), int(np.argmax(p2))
        if y1 != y[i]:
            continue
        for k in range(len(p1)):
            if k != y1:
                table[(i, k)] = p2[k] - p1[k]
        if y2 != y[i]:
            continue
        root_ref[i] = fidelity.reference(xi[None])[0]
        tend = max((k for k in range(len(p1)) if k != y1), key=lambda k: p2[k] - p1[k])
        queue.append({"x": xi, "root": i, "gen": 0, "times": 0, "parent": -1, "banned": False,
                      "d": p1[y1] - p2[y1], "p2y": p2[y[i]], "tend": tend})
    return queue, table, root_ref


def _choose_rule(rng: np.random.Generator, rules: list[str], stats: dict, previous: str | None) -> str:
    """The iteration's mutation rule: uniform at first, then the MCMC chain over the rules' scores."""
    n_rules = len(rules)
    if previous is None:
        return rules[int(rng.integers(n_rules))]
    # the MCMC chain: shuffle, sort by score, accept rank k2 with (1 - 1/n)^(k2 - k1)
    order = [rules[int(j)] for j in rng.permutation(n_rules)]
    score = {r: s["gain"] * s["faithful"] / s["selected"] ** 2 if s["selected"] else 0.0
             for r, s in stats.items()}
    order.sort(key=lambda r: -score[r])
    k1 = order.index(previous)
    while True:
        k2 = int(rng.integers(n_rules))
        if k2 <= k1 or rng.random() < (1 - 1 / n_rules) ** (k2 - k1):
            break
    return order[k2]


def _raise_table(table: dict[tuple[int, int], float], root: int, label: int,
                 raised: list[tuple[list[float], list[float]]]) -> None:
    """Raise the root's ``p2[k] - p1[k]`` table to the kept candidates' and faults' values."""
    for p1, p2 in raised:
        for k in range(len(p1)):
            if k != label:
                table[(root, k)] = max(table[(root, k)], p2[k] - p1[k])


def _ban_chain(queue: list[dict], pick: int, keys: set[int]) -> None:
    """Ban ``pick`` and its ancestors whose tendency is one of the new faults' classes ``keys``."""
    j = pick
    while j >= 0:
        if queue[j]["tend"] in keys:
            queue[j]["banned"] = True
        j = queue[j]["parent"]


@dataclass(frozen=True)
class ReferenceSettings:
    """How long :func:`drfuzz_reference` runs and what it draws.

    Attributes:
        iterations: Stop after this many iterations (``None``: no limit).
        seconds: Stop after this many seconds of the loop (``None``: no limit).
        seed: Seed of every random choice.
        mutants: Mutants per iteration.
    """

    iterations: int | None = None
    seconds: float | None = None
    seed: int = 0
    mutants: int = 10


@dataclass
class _Run:
    """The loop's state: the queue, the diversity table, the fidelity references, the rules'
    statistics, the unique failures and the counts.
    """

    queue: list[dict]
    table: dict[tuple[int, int], float]
    root_ref: dict
    stats: dict[str, dict[str, int]]
    failures: set[tuple[int, int, int]] = field(default_factory=set)
    per_root: dict[int, int] = field(default_factory=dict)
    rf: int = 0
    gf: int = 0
    generated: int = 0
    executed: int = 0


@dataclass
class _Iteration:
    """What one iteration's mutants found: whether one passed the check (faithful) and one
    gained, the candidates kept, the faults' M2 labels and the outputs that raise the table.
    """

    faithful: bool = False
    gained: bool = False
    kept: list[dict] = field(default_factory=list)
    found: list[int] = field(default_factory=list)
    raised: list[tuple[list[float], list[float]]] = field(default_factory=list)


def drfuzz_reference(
    m1: nn.Module,
    m2: nn.Module,
    inputs,
    labels,
    *,
    bounds: tuple[float, float],
    fidelity,
    settings: ReferenceSettings | None = None,
    **old: Any,
) -> dict:
    """Run DRFuzz (``B = 1``) one mutant at a time.

    Args:
        m1: The original model (logits out).
        m2: The new model (logits out).
        inputs: Test inputs ``(N, C, H, W)``.
        labels: Their labels.
        bounds: Pixel range.
        fidelity: A fidelity check (``reference`` / ``passes``), called on one mutant at a time.
        settings: :class:`ReferenceSettings`: the iterations, the seconds, the seed, the mutants
            per iteration.
        **old: The old form's keywords ``iterations``, ``seconds``, ``seed`` and ``mutants``
            (:class:`ReferenceSettings`' fields; they warn, :class:`FutureWarning`).

    Returns:
        ``rf``, ``urf``, ``seeds``, ``gf``, ``iterations``, ``generated``, ``executed``,
        ``seconds`` (the loop only) and ``mutants_per_second``.
    """
    settings = grouped("drfuzz_reference", "settings", ReferenceSettings, settings, old)
    rng = np.random.default_rng(settings.seed)
    gen = torch.Generator().manual_seed(settings.seed)
    device = model_device(m1)
    x = torch.as_tensor(np.asarray(inputs), dtype=torch.float32)
    y = [int(v) for v in np.asarray(labels)]
    rules = list(DRFUZZ_RULES)
    with eval_mode(m1), eval_mode(m2), torch.no_grad():
        queue, table, root_ref = _seed_queue(m1, m2, x, y, device, fidelity)
        run = _Run(queue, table, root_ref, {r: {"selected": 0, "faithful": 0, "gain": 0} for r in rules})
        previous = None
        start = time.perf_counter()
        done = 0
        while (settings.iterations is None or done < settings.iterations) and (
                settings.seconds is None or time.perf_counter() - start < settings.seconds):
            pick = _select(rng, run)
            if pick is None:
                break
            rule = previous = _choose_rule(rng, rules, run.stats, previous)
            found = _mutate_and_execute(run, run.queue[pick], pick, rule, (m1, m2), y, fidelity,
                                        generator=gen, bounds=bounds, mutants=settings.mutants)
            _update(run, pick, rule, y, found)
            done += 1
        elapsed = time.perf_counter() - start
    seeds = len({r for r, _, _ in run.failures})
    return {"rf": run.rf, "urf": len(run.failures), "seeds": seeds, "gf": run.gf, "iterations": done,
            "generated": run.generated, "executed": run.executed, "seconds": elapsed,
            "mutants_per_second": run.generated / elapsed if elapsed > 0 else None}


def _select(rng: np.random.Generator, run: _Run) -> int | None:
    """The power schedule: a queued input drawn with weight ``exp(-a (gen + times / 2))``, none
    for a banned input, one selected more than ten times or whose root has nine unique failures.
    """
    a = math.log(20) / 20
    w = [0.0 if e["banned"] or e["times"] > 10 or run.per_root.get(e["root"], 0) >= 9
         else math.exp(-a * (e["gen"] + e["times"] / 2)) for e in run.queue]
    total = sum(w)
    if total == 0:
        return None
    return int(rng.choice(len(run.queue), p=np.array(w) / total))


def _mutate_and_execute(run: _Run, parent: dict, pick: int, rule: str, models: tuple[nn.Module, nn.Module],
                        y: list[int], fidelity, *, generator: torch.Generator, bounds: tuple[float, float],
                        mutants: int) -> _Iteration:
    """The iteration's mutants, one at a time: made, checked, run through both models, judged."""
    m1, m2 = models
    root, label = parent["root"], y[parent["root"]]
    out = _Iteration()
    for _ in range(mutants):
        m, _ = apply_rule(rule, parent["x"][None], generator=generator, bounds=bounds)
        run.generated += 1
        changed = bool((m != parent["x"][None]).any())
        if not changed or not bool(fidelity.passes(m, run.root_ref[root][None])[0]):
            continue
        out.faithful = True
        run.executed += 1
        _judge(run, out, m[0], _probs(m1, m[0]), _probs(m2, m[0]), parent, pick, label)
    return out


def _judge(run: _Run, out: _Iteration, m: torch.Tensor, p1: list[float], p2: list[float], parent: dict,
           pick: int, label: int) -> None:
    """The oracle on one executed mutant: a regression fault, a fault of both, a confident drop
    (discarded), or a candidate the diversity table keeps when it raises a class's ``p2 - p1``.
    """
    root = parent["root"]
    y1, y2 = int(np.argmax(p1)), int(np.argmax(p2))
    delta = (2 / 3) * (parent["p2y"] - p2[label]) + (1 / 3) * (p1[label] - p2[label])
    if y1 == label and y2 != label:
        run.rf += 1
        run.gf += 1
        out.found.append(y2)
        out.raised.append((p1, p2))
        out.gained |= delta > 0
        return
    if y1 != label:
        run.gf += y2 != label
        return
    d = p1[y1] - p2[y1]
    if d < 0 and parent["d"] != 0 and parent["d"] - d > 0.15:
        return
    out.gained |= delta > 0
    if any(p2[k] - p1[k] > run.table[(root, k)] for k in range(len(p1)) if k != y2 and k != y1):
        tend = max((k for k in range(len(p1)) if k != y1), key=lambda k: p2[k] - p1[k])
        out.kept.append({"x": m, "root": root, "gen": parent["gen"] + 1, "times": 0,
                         "parent": pick, "banned": False, "d": d, "p2y": p2[label], "tend": tend})
        out.raised.append((p1, p2))


def _update(run: _Run, pick: int, rule: str, y: list[int], it: _Iteration) -> None:
    """After the iteration: the table raised, the rule's statistics, the parent's count, the
    kept candidates queued, the unique failures counted and the fault chain banned.
    """
    parent = run.queue[pick]
    root, label = parent["root"], y[parent["root"]]
    _raise_table(run.table, root, label, it.raised)
    run.stats[rule]["selected"] += 1
    run.stats[rule]["faithful"] += it.faithful
    run.stats[rule]["gain"] += it.gained
    parent["times"] += 1
    run.queue.extend(it.kept)
    if it.found:
        keys = set(it.found)
        for y2 in keys:
            if (root, label, y2) not in run.failures:
                run.failures.add((root, label, y2))
                run.per_root[root] = run.per_root.get(root, 0) + 1
        _ban_chain(run.queue, pick, keys)
