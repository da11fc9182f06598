"""Run a handful of short seeded campaigns on tiny models and dump their exact results, for
showing that a refactoring of :mod:`deepfault.fuzz.campaign` changed nothing (issue 40).

Run it on the tree before the change and on the tree after it, on the same machine, and
compare the two files (``--compare``): they must be equal. The dump holds integer
identities as they are and every float array as the sha256 of its bytes, so it is only
meaningful between two runs on one machine; it is not a recorded expectation.

Cases: DRFuzz with SSIM, with a tiny discriminator in both check orders (``before`` and
``lazy``), with ``ssim-compat`` (the retry path) and one input per step; DeepHunter (coverage
keep rule, affine references); a vector pair (tabular inputs, the ``mdsa`` trace check of M1's
activations, and a shared filter); and a campaign checkpointed, interrupted and resumed from
its store.

    PYTHONPATH=src python benchmarks/campaign_equivalence.py --out /tmp/before.json
    PYTHONPATH=src python benchmarks/campaign_equivalence.py --out /tmp/after.json
    python benchmarks/campaign_equivalence.py --compare /tmp/before.json /tmp/after.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

#: Result fields that measure wall time (differ between any two runs).
TIMING = ("elapsed", "seconds", "setup_seconds", "timings", "timeline", "seconds_to_first_rf")


def _sha(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _model(seed: int, noise: float = 0.0, *, classes: int = 3, features: int | None = None) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    if features is None:
        m = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 64, 16),
                          nn.ReLU(), nn.Linear(16, classes))
    else:
        m = nn.Sequential(nn.Linear(features, 16), nn.ReLU(), nn.Linear(16, classes))
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        if noise:
            g2 = torch.Generator().manual_seed(seed + 1)
            for p in m.parameters():
                p.add_(torch.randn(p.shape, generator=g2) * noise)
    return m.eval()


def _problem(features: int | None = None):
    m1, m2 = _model(0, features=features), _model(0, 0.15, features=features)
    shape = (120, 1, 8, 8) if features is None else (120, features)
    x = torch.rand(*shape, generator=torch.Generator().manual_seed(2))
    x_train = torch.rand(300, *shape[1:], generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        y = m1(x).argmax(1)
    y[::10] = (y[::10] + 1) % 3
    return m1, m2, x, y, x_train


def _discriminator():
    from deepfault.fuzz.fidelity.checks import DiscriminatorFidelity

    g = torch.Generator().manual_seed(7)
    model = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.Tanh(), nn.Flatten(), nn.Linear(3 * 64, 1),
                          nn.Sigmoid())
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.4)
    return DiscriminatorFidelity(model, bounds=(0.0, 1.0), input_range=(-1.0, 1.0), batch_size=16)


#: name -> (vector features or None, CampaignConfig settings, use the tiny discriminator)
CASES: dict[str, tuple[int | None, dict, bool]] = {
    "drfuzz-ssim": (None, dict(fidelity="ssim:0.9", budget="120it", inputs_per_step=6, seed=3), False),
    "drfuzz-discriminator-before": (None, dict(budget="120it", inputs_per_step=6, seed=3,
                                               check_order="before"), True),
    "drfuzz-discriminator-lazy": (None, dict(budget="120it", inputs_per_step=6, seed=3, check_order="lazy"),
                                  True),
    "drfuzz-ssim-compat-b1": (None, dict(fidelity="ssim-compat", budget="30it", inputs_per_step=1, seed=1,
                                         mutants=5), False),
    "drfuzz-uniform-shared": (None, dict(fidelity="ssim:0.8", shared_fidelity="ssim:0.95", chooser="uniform",
                                         budget="60it", inputs_per_step=4, seed=5), False),
    "deephunter": (None, dict(strategy="deephunter", criteria="nc", criterion_params=(("threshold", 0.5),),
                              budget="60it", inputs_per_step=4, seed=2, mutants=8), False),
    "vector-mdsa": (6, dict(fidelity="mdsa", shared_fidelity="none", budget="60it", inputs_per_step=4,
                            seed=4), False),
    "vector-none": (6, dict(fidelity="none", budget="60it", inputs_per_step=5, seed=6), False),
    "vector-shared-mdsa": (6, dict(fidelity="none", shared_fidelity="mdsa", budget="60it", inputs_per_step=4,
                                   seed=7), False),
}


def _internals(c) -> dict:
    """The campaign's state after the run: the queue, the references, the keep rule, the unique
    failures, the random generators (through the names of either tree)."""
    if hasattr(c, "corpus"):  # the campaign before issue 40: one object's attributes
        corpus, refs, keep, failures = c.corpus, c.refs, c.keep, c.failures
        rng, tgen, scored = c.rng, c.tgen, c.scored
    else:  # the campaign of parts
        p = c.parts
        corpus, refs, keep, failures = p.queue.corpus, p.queue.refs, p.keep, p.faults.failures
        rng, tgen, scored = p.random.rng, p.random.tgen, p.counters.scored
    n = len(corpus)
    held = np.flatnonzero(corpus.slot[:n] >= 0)
    static = {k: np.asarray(v[:n]).tolist() for k, v in corpus.static.items()}
    return {
        "queue": static,
        "queue_state": {k: _sha(v) for k, v in corpus.state_dict().items()},
        "queue_images": _sha(corpus.images_of(held)),
        "refs": _sha(refs.view()),
        "keep": {k: _sha(v) for k, v in keep.state_dict().items()},
        "failures": sorted(map(list, failures.keys)) if hasattr(failures, "keys") else None,
        "numpy_rng": json.loads(json.dumps(rng.bit_generator.state, default=int)),
        "torch_rng": _sha(tgen.get_state()),
        "scored": int(scored),
    }


def _result(r) -> dict:
    faults = r.faults.to_arrays()
    metrics = {k: v for k, v in r.metrics.to_dict().items() if k not in TIMING}
    return {
        "counts": {k: getattr(r, k) for k in ("iterations", "steps", "queries", "generated", "passed",
                                               "corpus", "evicted", "shared_rejected", "roots",
                                               "queued_seeds", "resumed", "stop_reason")},
        "faults": {k: np.asarray(v).tolist() for k, v in faults.items() if k not in ("elapsed", "ssim")},
        "fault_ssim": _sha(faults["ssim"]),
        "found_inputs": _sha(r.rf_inputs, r.rf_p1, r.rf_p2),
        "rule_usage": r.rule_usage,
        "metrics": json.loads(json.dumps(metrics, default=str)),
        "examples": {k: _sha(v) for k, v in sorted(r.examples.items())},
        "trace_checks": json.loads(json.dumps(r.trace_checks, default=str)),
    }


def run_case(name: str) -> dict:
    from deepfault.fuzz.campaign import Campaign, CampaignConfig

    features, settings, disc = CASES[name]
    m1, m2, x, y, x_train = _problem(features)
    config = CampaignConfig(**settings)
    c = Campaign(m1, m2, x, y, bounds=(0.0, 1.0), config=config, train_inputs=x_train,
                 fidelity=_discriminator() if disc else None)
    c.run()
    return {"result": _result(c.result()), "state": _internals(c)}


def run_resumed(work: Path) -> dict:
    """A campaign interrupted after 48 iterations (checkpoints after every step) and resumed."""
    from deepfault.fuzz.campaign import run_campaign

    m1, m2, x, y, _ = _problem()
    kw = dict(bounds=(0.0, 1.0), budget="120it", inputs_per_step=6, seed=3, fidelity="ssim:0.9",
              checkpoint_every=0)
    stopped: list[int] = []

    def stop_at_48(p):
        if p.iterations >= 48 and not stopped:
            stopped.append(p.iterations)
            raise KeyboardInterrupt

    store = work / "store.sqlite"
    first = run_campaign(m1, m2, x, y, store=store, experiment="e", progress=stop_at_48, **kw)
    resumed = run_campaign(m1, m2, x, y, store=store, experiment="e", **kw)
    again = run_campaign(m1, m2, x, y, store=store, experiment="e", **kw)  # finished: read back
    return {"first": _result(first), "resumed": _result(resumed), "read_back": _result(again)}


def _compare(a: dict, b: dict, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}/{k}: only in one" for k in sorted(set(a) ^ set(b))]
        for k in sorted(set(a) & set(b)):
            out += _compare(a[k], b[k], f"{path}/{k}")
        return out
    return [] if a == b else [f"{path}: {str(a)[:80]} != {str(b)[:80]}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results here (JSON)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    parser.add_argument("--cases", nargs="*", default=[*CASES, "resumed"])
    args = parser.parse_args(argv)
    if args.compare:
        old, new = (json.loads(p.read_text()) for p in args.compare)
        diff = _compare(old, new)
        print("\n".join(diff) if diff else f"equal: {len(old)} cases, every field")
        return 1 if diff else 0
    torch.set_num_threads(1)
    out = {}
    for name in args.cases:
        if name == "resumed":
            with tempfile.TemporaryDirectory() as work:
                out[name] = run_resumed(Path(work))
        else:
            out[name] = run_case(name)
        r = out[name].get("result", out[name].get("resumed"))
        print(f"{name}: {r['counts']['iterations']} iterations, {len(r['faults']['root'])} faults, "
              f"{r['counts']['corpus']} queued", file=sys.stderr)
    text = json.dumps(out, indent=1, sort_keys=True)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
