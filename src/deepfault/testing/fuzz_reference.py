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

import numpy as np
import torch
from torch import nn

from ..core.capture import eval_mode, model_device
from ..fuzz.campaign.strategies import DRFUZZ_RULES
from ..fuzz.mutation.rules import apply_rule

__all__ = ["drfuzz_reference"]


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


def drfuzz_reference(
    m1: nn.Module,
    m2: nn.Module,
    inputs,
    labels,
    *,
    bounds: tuple[float, float],
    fidelity,
    iterations: int | None = None,
    seconds: float | None = None,
    seed: int = 0,
    mutants: int = 10,
) -> dict:
    """Run DRFuzz (``B = 1``) one mutant at a time.

    Args:
        m1: The original model (logits out).
        m2: The new model (logits out).
        inputs: Test inputs ``(N, C, H, W)``.
        labels: Their labels.
        bounds: Pixel range.
        fidelity: A fidelity check (``reference`` / ``passes``), called on one mutant at a time.
        iterations: Stop after this many iterations (``None``: no limit).
        seconds: Stop after this many seconds of the loop (``None``: no limit).
        seed: Seed of every random choice.
        mutants: Mutants per iteration.

    Returns:
        ``rf``, ``urf``, ``seeds``, ``gf``, ``iterations``, ``generated``, ``executed``,
        ``seconds`` (the loop only) and ``mutants_per_second``.
    """
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    device = model_device(m1)
    x = torch.as_tensor(np.asarray(inputs), dtype=torch.float32)
    y = [int(v) for v in np.asarray(labels)]
    rules = list(DRFUZZ_RULES)
    stats = {r: {"selected": 0, "faithful": 0, "gain": 0} for r in rules}
    failures: set[tuple[int, int, int]] = set()
    per_root: dict[int, int] = {}
    rf = gf = 0
    with eval_mode(m1), eval_mode(m2), torch.no_grad():
        queue, table, root_ref = _seed_queue(m1, m2, x, y, device, fidelity)
        previous = None
        start = time.perf_counter()
        done = generated = executed = 0
        a = math.log(20) / 20
        def more() -> bool:
            return (iterations is None or done < iterations) and (
                seconds is None or time.perf_counter() - start < seconds)

        while more():
            w = [0.0 if e["banned"] or e["times"] > 10 or per_root.get(e["root"], 0) >= 9
                 else math.exp(-a * (e["gen"] + e["times"] / 2)) for e in queue]
            total = sum(w)
            if total == 0:
                break
            pick = int(rng.choice(len(queue), p=np.array(w) / total))
            parent = queue[pick]
            rule = _choose_rule(rng, rules, stats, previous)
            previous = rule
            root, label = parent["root"], y[parent["root"]]
            faithful = gained = False
            kept, found, raised = [], [], []
            for _ in range(mutants):
                m, _ = apply_rule(rule, parent["x"][None], generator=gen, bounds=bounds)
                generated += 1
                changed = bool((m != parent["x"][None]).any())
                if not changed or not bool(fidelity.passes(m, root_ref[root][None])[0]):
                    continue
                faithful = True
                executed += 1
                p1, p2 = _probs(m1, m[0]), _probs(m2, m[0])
                y1, y2 = int(np.argmax(p1)), int(np.argmax(p2))
                if y1 == label and y2 != label:
                    rf += 1
                    gf += 1
                    found.append(y2)
                    raised.append((p1, p2))
                    delta = (2 / 3) * (parent["p2y"] - p2[label]) + (1 / 3) * (p1[label] - p2[label])
                    gained |= delta > 0
                    continue
                if y1 != label:
                    gf += y2 != label
                    continue
                d = p1[y1] - p2[y1]
                if d < 0 and parent["d"] != 0 and parent["d"] - d > 0.15:
                    continue
                delta = (2 / 3) * (parent["p2y"] - p2[label]) + (1 / 3) * (p1[label] - p2[label])
                gained |= delta > 0
                if any(p2[k] - p1[k] > table[(root, k)] for k in range(len(p1)) if k != y2 and k != y1):
                    tend = max((k for k in range(len(p1)) if k != y1), key=lambda k: p2[k] - p1[k])
                    kept.append({"x": m[0], "root": root, "gen": parent["gen"] + 1, "times": 0,
                                 "parent": pick, "banned": False, "d": d, "p2y": p2[label], "tend": tend})
                    raised.append((p1, p2))
            _raise_table(table, root, label, raised)  # after the iteration
            stats[rule]["selected"] += 1
            stats[rule]["faithful"] += faithful
            stats[rule]["gain"] += gained
            parent["times"] += 1
            queue.extend(kept)
            if found:
                keys = set(found)
                for y2 in keys:
                    if (root, label, y2) not in failures:
                        failures.add((root, label, y2))
                        per_root[root] = per_root.get(root, 0) + 1
                _ban_chain(queue, pick, keys)
            done += 1
        elapsed = time.perf_counter() - start
    return {"rf": rf, "urf": len(failures), "seeds": len({r for r, _, _ in failures}), "gf": gf,
            "iterations": done, "generated": generated, "executed": executed, "seconds": elapsed,
            "mutants_per_second": generated / elapsed if elapsed > 0 else None}
