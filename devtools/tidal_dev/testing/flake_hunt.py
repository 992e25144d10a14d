# SPDX-License-Identifier: Apache-2.0
"""`make flake-hunt`: run the same tests N times, each run a pytest session of its own, and
report the pass rate of every test.

Each run writes a JUnit XML report; a test counts as passed, failed (failures and errors,
set-up and tear-down included) or skipped in that run. A test that passes in some runs and
fails in others is a flake. Without a running lab at $TIDAL_LAB_DIR every session brings up a
clean lab of its own and wipes it at its end (the `lab` fixture), so no run inherits another's
state. Prints a table, then one JSON line (the last): {"runs", "tests": {nodeid: {"passed",
"failed", "skipped"}}, "flaky", "failing", "seconds"}; exits 1 when any test failed in any run.

`--budget SECONDS` starts no run after the first that the time left cannot hold (the longest
run so far taken as the next one's length), so a hunt ends on time with fewer runs, said in its
report ("runs" counts the runs made, "planned" the runs asked for); `--keep DIR` keeps each
run's JUnit report there, and `--tally` reads kept reports (a hunt stopped early, or several
hunts as one) instead of running.

    python -m tidal_dev.testing.flake_hunt --runs 10 tests/lab tests/faults tests/nri -- -x
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def outcomes(report: Path) -> dict[str, str]:
    """nodeid-like name -> passed | failed | skipped, from one JUnit XML report (pure reading)."""
    out: dict[str, str] = {}
    root = ET.parse(report).getroot()
    for case in root.iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        test = f"{classname.replace('.', '/')}.py::{name}" if classname else name
        tags = {child.tag for child in case}
        if tags & {"failure", "error"}:
            outcome = "failed"
        elif "skipped" in tags:
            outcome = "skipped"
        else:
            outcome = "passed"
        # a test whose tear-down errored appears twice: failed wins
        if out.get(test) != "failed":
            out[test] = outcome
    return out


def tally(runs: list[dict[str, str]]) -> dict[str, dict[str, int]]:
    """Per test, how many runs it passed, failed and was skipped in (a test missing from a run,
    e.g. after a crash of the session, counts as failed in it)."""
    tests = sorted({t for run in runs for t in run})
    table: dict[str, dict[str, int]] = defaultdict(lambda: {"passed": 0, "failed": 0, "skipped": 0})
    for test in tests:
        for run in runs:
            table[test][run.get(test, "failed")] += 1
    return dict(table)


def format_table(table: dict[str, dict[str, int]], runs: int) -> str:
    width = max((len(t) for t in table), default=4)
    lines = [f"{'test':<{width}}  pass rate  failed  skipped"]
    for test, counts in table.items():
        ran = runs - counts["skipped"]
        rate = f"{counts['passed']}/{ran}" if ran else "skipped"
        lines.append(f"{test:<{width}}  {rate:>9}  {counts['failed']:>6}  {counts['skipped']:>7}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flake_hunt", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="start no run the time left cannot hold (the longest run so far as its length)")
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="keep each run's JUnit report in DIR (run-N.xml)")
    parser.add_argument("--tally", action="store_true",
                        help="run nothing: the paths are kept JUnit reports (files, or directories of "
                             "run-*.xml), e.g. of a hunt stopped early or of several hunts, tallied as one")
    parser.add_argument("paths", nargs="+", help="test paths; after `--`, extra pytest arguments")
    args, extra = parser.parse_known_args(argv)
    if args.tally:
        reports = [r for p in map(Path, args.paths)
                   for r in (sorted(p.glob("run-*.xml"), key=_run_number) if p.is_dir() else [p])]
        return _report([outcomes(r) for r in reports], len(reports), 0.0)
    if "--" in args.paths:
        index = args.paths.index("--")
        args.paths, extra = args.paths[:index], args.paths[index + 1:] + extra
    started = time.monotonic()
    results = []
    longest = 0.0
    with tempfile.TemporaryDirectory(prefix="flake-hunt-") as tmp:
        reports = args.keep or Path(tmp)
        reports.mkdir(parents=True, exist_ok=True)
        for run in range(1, args.runs + 1):
            if results and args.budget is not None and time.monotonic() - started + longest > args.budget:
                print(f"flake-hunt: run {run} not started: {args.budget - (time.monotonic() - started):.0f}s "
                      f"of the budget left, the longest run took {longest:.0f}s", flush=True)
                break
            report = reports / f"run-{run}.xml"
            began = time.monotonic()
            code = subprocess.call([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                                    f"--junitxml={report}", *args.paths, *extra])
            found = outcomes(report) if report.exists() else {}
            results.append(found)
            failed = sorted(t for t, o in found.items() if o == "failed")
            took = time.monotonic() - began
            longest = max(longest, took)
            print(f"flake-hunt run {run}/{args.runs}: exit {code}, {len(found)} tests, {len(failed)} failed "
                  f"in {took:.0f}s" + (f": {failed}" if failed else ""), flush=True)
    return _report(results, args.runs, time.monotonic() - started)


def _run_number(report: Path) -> int:
    digits = report.stem.rpartition("-")[2]
    return int(digits) if digits.isdigit() else 0


def _report(results: list[dict[str, str]], planned: int, seconds: float) -> int:
    """The table and the JSON line of these runs' outcomes; 1 when any test failed in any run."""
    table = tally(results)
    print(format_table(table, len(results)))
    flaky = sorted(t for t, c in table.items() if c["failed"] and c["passed"])
    failing = sorted(t for t, c in table.items() if c["failed"] and not c["passed"])
    print(json.dumps({"runs": len(results), "planned": planned, "tests": table, "flaky": flaky, "failing": failing,
                      "seconds": round(seconds)}))
    return 1 if flaky or failing else 0


if __name__ == "__main__":
    sys.exit(main())
