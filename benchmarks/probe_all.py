"""The whole probe: every option of every sub-command with hostile values, every reader with
hostile files, every output pointed at the command's own inputs, a FIFO and report folders,
``data`` over damaged trees, results against references (``tests/helpers/probe.py``, outside
the installed package); writes the counts per outcome class to ``benchmarks/results/probe.json``.
The unit suite runs a sample of it (``tests/cli/test_probe.py``).

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/probe_all.py [--limit N] [--quick] [--only KIND]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the probe is a test helper

from helpers.probe import CLASSES, FAILURES, all_cases, make_fixtures, run_case  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "probe.json"


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="run only the first N cases")
    parser.add_argument("--quick", action="store_true",
                        help="the new surfaces whole, and the first 5 cases of each option and reader")
    parser.add_argument("--only", default=None, help="only cases whose kind starts with this word "
                        "(option, positional, file, output, report, data, reference, size, trained, nan, "
                        "disk)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as a hang")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    t0 = time.perf_counter()
    load_before = os.getloadavg()
    commit = _commit()  # the code the run imported, not a commit made while it ran
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        fixtures = make_fixtures(tmp / "fixtures")
        work = tmp / "work"
        cases = all_cases(fixtures)
        if args.only:
            cases = [c for c in cases if c.kind.split()[0] == args.only]
        if args.quick:
            seen: Counter = Counter()
            kept = []
            for case in cases:
                seen[case.kind] += 1
                if case.kind.split()[0] not in ("option", "positional", "file") or seen[case.kind] <= 5:
                    kept.append(case)
            cases = kept
        cases = cases[: args.limit] if args.limit else cases
        failures, by_kind, classes = [], Counter(), Counter()
        per_kind_class: dict[str, Counter] = defaultdict(Counter)
        for i, case in enumerate(cases, 1):
            outcome = run_case(case, work, fixtures, timeout=args.timeout)
            kind = case.kind.split()[0]
            by_kind[kind] += 1
            classes[outcome.outcome] += 1
            per_kind_class[kind][outcome.outcome] += 1
            if not outcome.ok:
                failures.append({"class": outcome.outcome, "kind": case.kind,
                                 "argv": ["deepfault", *(a.replace(str(tmp), "$TMP") for a in case.argv)],
                                 "setup": case.setup, "problem": outcome.problem.replace(str(tmp), "$TMP"),
                                 "stderr": outcome.stderr.replace(str(tmp), "$TMP")})
            if i % 100 == 0:
                print(f"{i}/{len(cases)} cases, {len(failures)} failures, {time.perf_counter() - t0:.0f} s",
                      file=sys.stderr, flush=True)
    report = {"commit": commit, "tried": len(cases), "passed": len(cases) - len(failures),
              "failed": len(failures), "by_kind": dict(by_kind),
              "by_class": {c: classes[c] for c in CLASSES if classes[c]},
              "by_kind_and_class": {k: dict(v) for k, v in per_kind_class.items()},
              "seconds": round(time.perf_counter() - t0, 1),
              "load_average": {"before": [round(x, 2) for x in load_before],
                               "after": [round(x, 2) for x in os.getloadavg()]},
              "options": {"quick": args.quick, "limit": args.limit, "only": args.only},
              "failures": sorted(failures, key=lambda f: (FAILURES.index(f["class"]), f["kind"]))}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"probe: {report['tried']} tried, {report['passed']} passed, {report['failed']} failed "
          f"({', '.join(f'{k} {v}' for k, v in report['by_class'].items())}) in {report['seconds']} s; "
          f"wrote {args.out}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
