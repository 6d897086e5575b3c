#!/usr/bin/env python3
"""Counts from pytest's JUnit XML files: `N passed, N failed, N skipped` (summed with --total);
`--slowest N FILE...`: the N slowest test cases of the files, slowest first."""
from __future__ import annotations

import sys
import xml.etree.ElementTree as ET


def counts(path: str) -> tuple[int, int, int]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return 0, 1, 0  # no report: the leg broke before its tests ran
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    tests = failed = skipped = 0
    for suite in suites:
        tests += int(suite.get("tests", 0))
        failed += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped += int(suite.get("skipped", 0))
    return tests - failed - skipped, failed, skipped


def slowest(paths: list[str], n: int) -> list[tuple[float, str]]:
    cases = []
    for path in paths:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError):
            continue
        for case in root.iter("testcase"):
            cases.append((float(case.get("time", 0) or 0), f"{case.get('classname', '')}::{case.get('name', '')}"))
    return sorted(cases, reverse=True)[:n]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--slowest"]:
        for seconds, name in slowest(argv[2:], int(argv[1])):
            print(f"{seconds:8.1f} s  {name}")
        return 0
    total = argv[:1] == ["--total"]
    paths = argv[1:] if total else argv
    passed = failed = skipped = 0
    for path in paths:
        p, f, s = counts(path)
        passed, failed, skipped = passed + p, failed + f, skipped + s
    label = "total: " if total else ""
    print(f"{label}{passed} passed, {failed} failed, {skipped} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
