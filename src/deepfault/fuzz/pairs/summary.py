"""What ``deepfault scenario`` prints: the pairs its scenarios wrote (:func:`scenarios_summary`)
and a deployment's files against ``M1`` (:func:`deployment_summary`), as tables.
"""

from __future__ import annotations

from pathlib import Path

from ...experiment.tables import fmt, text_table
from ...models.deploy import DeploymentResult
from .scenarios import ScenarioResult

__all__ = ["scenarios_summary", "deployment_summary"]


def scenarios_summary(results: list[ScenarioResult]) -> str:
    """What ``deepfault scenario`` prints after its scenarios: a table of both accuracies, the
    regressions and the fixes of each, a legend, and the files written.
    """
    rows = [(r.scenario, r.label, fmt(r.m1_accuracy, 4), fmt(r.m2_accuracy, 4), r.regressions, r.fixes,
             fmt(r.seconds, 1)) for r in results]
    return "\n".join([
        text_table(("scenario", "label", "M1 acc", "M2 acc", "regressions", "fixes", "seconds"), rows),
        "regressions: test inputs M1 classifies correctly and M2 does not; fixes: the other way round",
        "wrote " + ", ".join(str(p) for r in results for p in (r.m1_path, r.m2_path))])


def deployment_summary(model, result: DeploymentResult) -> str:
    """What ``deepfault scenario deploy`` prints: ``M1``'s test accuracy, a table of each deployed
    file against it, a legend, and the files written.
    """
    r = result
    headers = ("format", "file", "accuracy", "regressions", "fixes", "agreement", "max |p1 - p2|")
    rows = [(f, Path(p).name, fmt(r.accuracy[f], 4), r.regressions[f], r.fixes[f], fmt(r.agreement[f], 4),
             fmt(r.max_abs_diff[f], 4)) for f, p in r.files.items()]
    return "\n".join([
        f"scenario deploy: {model}, M1 test accuracy {r.m1_accuracy:.4f} on {r.n_test} test inputs",
        text_table(headers, rows),
        "each file runs in ONNX Runtime; regressions: test inputs M1 gets right and the file wrong",
        "wrote " + ", ".join([*([str(r.m1_path)] if r.m1_path else []), *map(str, r.files.values())])])
