"""The whole bad-input probe: every option of every sub-command with hostile values and every
reader with hostile files (``deepfault.testing.probe``); writes the counts to
``benchmarks/results/probe.json``. The unit suite runs a sample of it (``tests/test_probe.py``).

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/probe_all.py [--limit N]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from deepfault.testing.probe import file_cases, make_fixtures, option_cases, run_case

RESULTS = Path(__file__).parent / "results" / "probe.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="run only the first N cases")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        fixtures = make_fixtures(tmp / "fixtures")
        work = tmp / "work"
        work.mkdir()
        (work / "afile").write_text("x")
        (work / "adir").mkdir()
        cases = option_cases(fixtures) + file_cases(fixtures)
        cases = cases[: args.limit] if args.limit else cases
        failures, by_kind, statuses = [], Counter(), Counter()
        for i, case in enumerate(cases, 1):
            outcome = run_case(case, work)
            by_kind[case.kind.split()[0]] += 1
            statuses[outcome.status] += 1
            if not outcome.ok:
                failures.append({"argv": [a.replace(str(tmp), "$TMP") for a in case.argv],
                                 "problem": outcome.problem,
                                 "stderr": outcome.stderr.replace(str(tmp), "$TMP")})
            if i % 100 == 0:
                print(f"{i}/{len(cases)} cases, {len(failures)} failures, {time.perf_counter() - t0:.0f} s",
                      file=sys.stderr, flush=True)
    report = {"tried": len(cases), "passed": len(cases) - len(failures), "failed": len(failures),
              "by_kind": dict(by_kind), "exit_statuses": {str(k): v for k, v in sorted(statuses.items())},
              "seconds": round(time.perf_counter() - t0, 1), "failures": failures}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"probe: {report['tried']} tried, {report['passed']} passed, {report['failed']} failed "
          f"in {report['seconds']} s; wrote {args.out}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
