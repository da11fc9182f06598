"""What ``deepfault xplore`` prints and its page shows of one run: the models, data and settings,
the finds per target, which model agrees with the true label, coverage, times and realism.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from types import SimpleNamespace

from ..core.capture import neurons_line
from ..experiment.tables import Table, fmt
from .realism import input_ssim, saturation_warning

__all__ = ["run_summary", "summary_text",
           "summary_table", "coverage_table", "agreement_table", "inputs_table",
           "realism_line", "found_surprise_text"]


def summary_table(result, labels: Sequence[str]) -> Table:
    """Seeds, searches and finds per target model, and all together (printed and on the page)."""
    rows = []
    for s in result.summaries():
        rows.append(["all" if s.target is None else labels[s.target], s.seeds,
                     s.already_differ if s.target is None else "-", s.searched, s.found,
                     "-" if s.found_ratio is None else f"{100 * s.found_ratio:.1f}%",
                     "-" if s.mean_iterations is None else f"{s.mean_iterations:.2f}",
                     "-" if s.mean_l1 is None else f"{s.mean_l1:.1f}"])
    return Table(["target", "seeds", "already differ", "searched", "found", "found/searched", "mean steps",
                  "mean L1"], rows, title="Seeds and difference-inducing inputs")


def coverage_table(result, labels: Sequence[str]) -> Table:
    """Each model's neuron coverage and the pooled coverage (printed and on the page)."""
    rows = [[n, c.covered, c.total, f"{100 * c.ratio:.1f}%"] for n, c in zip(labels, result.coverage,
                                                                              strict=True)]
    rows.append(["pooled", sum(c.covered for c in result.coverage), sum(c.total for c in result.coverage),
                 f"{100 * result.pooled_coverage:.1f}%"])
    return Table(["model", "covered", "neurons", "coverage"], rows,
                 title=f"neuron coverage (layer-minmax, t = {result.config.threshold:g})")


def summary_text(result, labels: Sequence[str], data, device, *, rows: int = 8) -> str:
    """What ``deepfault xplore`` prints: the models, data and settings, the finds, which model
    agrees with the true label (overall and on the first ``rows`` inputs), coverage, times and
    realism.
    """
    out = io.StringIO()
    w = out.write
    cfg = result.config
    con = result.config.constraint().to_dict()
    constraint = " ".join([con.pop("name"), *(f"{k}={v}" for k, v in con.items())])
    w(f"models {', '.join(f'{n} ({m} neurons)' for n, m in zip(labels, result.num_neurons, strict=True))}\n")
    picked = "given indices" if cfg.seed_indices is not None else f"seed {cfg.seed}"
    w(f"data {data.name}: {result.num_seeds} seeds of {len(data.y_test)} test inputs ({picked}), "
      f"bounds {data.bounds[0]:g}..{data.bounds[1]:g} · {device}\n")
    w(f"lambda1 {cfg.lambda1:g}, lambda2 {cfg.lambda2:g}, step {cfg.step:g}, {cfg.iterations} iterations, "
      f"t {cfg.threshold:g}, constraint {constraint}, target "
      f"{'random' if cfg.target is None else labels[cfg.target]}, neurons {cfg.neurons}, "
      f"objective {cfg.objective}, layers {cfg.layers}, "
      f"{'clipped to the bounds' if cfg.clip else 'no clipping'}"
      f"{', seeds with replacement' if cfg.replace else ''}\n\n")
    w(summary_table(result, labels).text() + "\n\n")
    agree = agreement_table(result, labels)
    if agree is not None:
        w(f"{agree.title}\n{agree.text()}\n{agree.note}\n\n")
        shown = inputs_table(result, labels, class_names=getattr(data, "class_names", None), rows=rows)
        if shown is not None:
            w(f"{shown.title}\n{shown.text()}\n\n")
    cov = coverage_table(result, labels)
    w(f"{cov.title}\n{cov.text()}\n\n")
    w(f"time {result.seconds:.2f} s; {fmt(result.seconds_per_found, 4)} s per difference-inducing input; "
      f"first after {fmt(result.first_found_seconds, 3)} s\n")
    r = result.realism
    if r is not None and r.found:
        w(f"{realism_line(r)}\n")
        message = saturation_warning(r, cfg)
        if message:
            w(f"warning: {message}\n")
    if result.surprise is not None and result.num_found:
        w("surprise against each model's training data, mean per input (seeds'): "
          f"{found_surprise_text(result, labels)}\n")
    if result.num_found == 0:
        w(f"no difference-inducing input found in {result.num_seeds} seeds"
          + (" (the models agree on every input tried)\n" if result.num_already_differ == 0 else "\n"))
    return out.getvalue()


def realism_line(r) -> str:
    """``realism: mean SSIM to the seed 0.76, 23% below 0.7 (...); mean L1 ...`` of a
    :class:`~.results.Realism` with inputs.
    """
    if r.mean_ssim is not None:
        head = (f"realism: mean SSIM to the seed {r.mean_ssim:.2f}, {100 * r.low_ssim:.1f}% below "
                f"{r.ssim_threshold:g} (visibly noisy, shifted or washed out)")
    else:
        head = "realism: no SSIM (the inputs are not images)"
    text = f"{head}; mean L1 {r.mean_l1:.1f}, mean L_inf {r.mean_linf:.3f} (data units)"
    if r.still_differ_clipped is not None:
        text += (f"; {100 * r.outside_bounds:.1f}% leave the bounds, {100 * r.still_differ_clipped:.1f}% "
                 "still differ once clipped")
    return text


def agreement_table(result, labels: Sequence[str]) -> Table | None:
    """How often each model agrees with the true label on the difference-inducing inputs, and
    how often none does (``None`` without true labels or found inputs).
    """
    summary = result.agreement_summary()
    if summary is None or not summary["inputs"]:
        return None
    n = summary["inputs"]
    rows = [[name, m["agrees"], f"{100 * m['share']:.1f}%"]
            for name, m in zip(labels, summary["models"], strict=True)]
    rows.append(["none of them", summary["none"], f"{100 * summary['none_share']:.1f}%"])
    return Table(["model", "agrees with the true label", "share"], rows,
                 title=f"Which model is right on the {n} difference-inducing inputs",
                 note="The true label is the seed's label in the data set (the search keeps the seed's "
                      "class in every model but the target); the models disagree on every input, so at "
                      "most all but one are right.")


def inputs_table(result, labels: Sequence[str], *, class_names=None, rows: int | None = None) -> Table | None:
    """One row per difference-inducing input (the first ``rows``): its seed, true label, every
    model's prediction, the models that agree with the true label and the SSIM to the seed
    (``None`` without true labels).
    """
    agrees = result.agreement()
    if agrees is None:
        return None
    f = result.found
    n = len(f) if rows is None else min(rows, len(f))
    name = (lambda c: str(class_names[int(c)])) if class_names is not None else (lambda c: str(int(c)))
    similarity = input_ssim(f.inputs[:n], f.seeds[:n], result.bounds)
    out = []
    for i in range(n):
        right = [m for m, ok in zip(labels, agrees[i], strict=True) if ok]
        out.append([i, int(f.seed_index[i]), name(result.true_labels[i]), name(f.common_class[i]),
                    *[name(p) for p in f.predictions[i]], ", ".join(right) or "none",
                    "-" if similarity is None else f"{similarity[i]:.2f}"])
    headers = ["input", "seed #", "true label", "seed: all predict", *[f"{m} predicts" for m in labels],
               "agree with the true label", "SSIM to the seed"]
    more = f" (first {n} of {len(f)})" if n < len(f) else ""
    return Table(headers, out, title=f"Difference-inducing inputs{more}")


def found_surprise_text(result, labels: Sequence[str]) -> str:
    """``DSA lenet1 0.84 (0.31), lenet5 ...; LSA ...``: the found inputs' mean scores per model,
    their seeds' in brackets.
    """
    sa = result.surprise
    found, seeds = sa.means("found"), sa.means("seeds")
    return "; ".join(f"{k.upper()} " + ", ".join(f"{n} {_g(a)} ({_g(b)})" for n, a, b in
                                                  zip(labels, found[k], seeds[k], strict=True))
                     for k in sa.kinds)


def _g(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def run_summary(result) -> str:
    """The whole text of one run (:meth:`~.results.XploreResult.summary`): the batch the memory
    chose, each model's neurons, :func:`summary_text` with what the run's
    :class:`~.results.RunNotes` say of its data, then the notes' lines.
    """
    n = result.notes
    head = [] if n.batch is None else [n.batch]
    head += [neurons_line(count, len(names), source, of=name) for name, count, names, source in
             zip(result.model_names, result.num_neurons, result.layer_names, n.sources, strict=False)]
    pool = result.num_seeds if n.pool is None else n.pool
    data = SimpleNamespace(name=n.data or "inputs", y_test=range(pool),
                           bounds=result.bounds if n.data_bounds is None else n.data_bounds,
                           class_names=n.class_names)
    text = summary_text(result, result.model_names, data, n.device or result.device, rows=n.grid)
    return "".join(f"{line}\n" for line in head) + text + "".join(f"{line}\n" for line in n.lines)
