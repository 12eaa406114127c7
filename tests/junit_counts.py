"""Counts test cases in the JUnit XML Bazel keeps per test target.

Reads "<kind> <//label> <status>" lines on stdin; prints "<kind> <passed> <failed> <skipped>"
per kind, counting GoogleTest/pytest cases from bazel-testlogs/<package>/<name>/test.xml.
A target that did not run (failed to build, incompatible) counts as one case of its status.
"""

import collections
import os
import sys
import xml.etree.ElementTree as ET


def cases(xml_path):
    passed = failed = skipped = 0
    root = ET.parse(xml_path).getroot()
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is not None or case.get("result") == "skipped" or case.get("status") == "notrun":
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped


def main():
    logs = sys.argv[1]
    totals = collections.defaultdict(lambda: [0, 0, 0])
    for line in sys.stdin:
        kind, label, status = line.split(maxsplit=2)
        status = status.strip()
        pkg, name = label.lstrip("/").split(":")
        path = os.path.join(logs, pkg, name, "test.xml")
        t = totals[kind]
        if status == "PASSED" and os.path.exists(path):
            p, f, s = cases(path)
            t[0] += p
            t[1] += f
            t[2] += s
        elif status == "PASSED":
            t[0] += 1
        elif status == "SKIPPED":
            t[2] += 1
        else:
            t[1] += 1
    for kind, (p, f, s) in sorted(totals.items()):
        print(kind, p, f, s)


if __name__ == "__main__":
    main()
