"""The gate as a JUnit XML file, the report every CI system shows as tests.

One ``<testcase>`` per check (``classname="deepfault.gate.check"``): a failing check has a
``<failure>``, a holding one is ``<skipped>``, each with the check's reason. Then one test
case per failing corpus entry (``classname="deepfault.gate.corpus"``), a ``<failure>`` when
the entry is a regression (M1 right, M2 wrong) and its policy limits them, as the failing
entries a pipeline should look at.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from xml.etree import ElementTree as ET

if TYPE_CHECKING:
    from .outcome import GateOutcome

__all__ = ["junit_xml"]


def _case(suite: ET.Element, classname: str, name: str, status: str, message: str) -> None:
    case = ET.SubElement(suite, "testcase", classname=classname, name=name, time="0")
    if status == "fail":
        ET.SubElement(case, "failure", message=message, type="gate").text = message
    elif status == "hold":
        ET.SubElement(case, "skipped", message=message)
    else:
        ET.SubElement(case, "system-out").text = message


def junit_xml(outcome: GateOutcome) -> str:
    """The outcome as JUnit XML text (one suite, ``deepfault gate``)."""
    checks = outcome.judgement.checks
    entries = outcome.replay.failing_entries if outcome.replay is not None else ()
    strict = outcome.config.max_corpus_regressions is not None
    statuses = [c.status for c in checks] + [
        "fail" if (e["regression"] and strict) else "pass" for e in entries
    ]
    suite = ET.Element(
        "testsuite",
        name=f"deepfault gate: {outcome.names[1]} against {outcome.names[0]}",
        tests=str(len(statuses)),
        failures=str(statuses.count("fail")),
        errors="0",
        skipped=str(statuses.count("hold")),
        time="0",
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="verdict", value=outcome.verdict)
    for c in checks:
        _case(suite, "deepfault.gate.check", c.name, c.status, c.reason)
    for e, status in zip(entries, statuses[len(checks) :], strict=True):
        what = "new since the champion (M1 right)" if e["regression"] else "also failed by M1"
        _case(
            suite,
            "deepfault.gate.corpus",
            f"entry {e['id']}",
            status,
            f"corpus entry {e['id']} (found by {e['method'] or 'unknown'}): label {e['label']}, "
            f"M1 {e['m1']}, M2 {e['m2']}: {what}",
        )
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
