"""Counts the test cases of one `bazel test` run from the JUnit XML Bazel keeps per test.

Usage: junit_counts.py BEP_JSON (the file of --build_event_json_file). Prints
"<kind> <passed> <failed> <skipped>" per kind (python: //tests/python:python_tests; simde:
targets named *simde*; cc: the others), counting the GoogleTest / pytest cases of every test
target's test.xml (every shard's), found through the build event protocol, not Bazel's text
output. A test target without XML counts as one case of its status; one that did not build
counts as one failed case, one skipped as incompatible as one skipped case.
"""

import collections
import json
import os
import sys
import urllib.parse
import urllib.request
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


def kind_of(label):
    if label.endswith(":python_tests"):
        return "python"
    return "simde" if "simde" in label else "cc"


def results(bep_path):
    """[(label, status, [test.xml paths])] of every test target the run configured."""
    tests, status, xmls = [], {}, {}
    with open(bep_path) as f:
        for line in f:
            try:
                event = json.loads(line)
            except ValueError:  # the last line of a run that was killed
                continue
            eid = event.get("id", {})
            if "targetConfigured" in eid and "testSize" in event.get("configured", {}):
                tests.append(eid["targetConfigured"]["label"])
            elif "testSummary" in eid and "testSummary" in event:
                label, summary = eid["testSummary"]["label"], event["testSummary"]
                status[label] = summary.get("overallStatus", "NO_STATUS")
                logs = summary.get("passed", []) + summary.get("failed", [])
                paths = (urllib.request.url2pathname(urllib.parse.urlparse(log["uri"]).path) for log in logs)
                xmls[label] = [os.path.join(os.path.dirname(p), "test.xml") for p in paths]
            elif "targetCompleted" in eid:
                label = eid["targetCompleted"]["label"]
                if "aborted" in event:
                    skipped = event["aborted"].get("reason") == "SKIPPED"
                    status.setdefault(label, "SKIPPED" if skipped else "FAILED_TO_BUILD")
                elif not event.get("completed", {}).get("success", False):
                    status.setdefault(label, "FAILED_TO_BUILD")
    return [(label, status.get(label, "NO_STATUS"), xmls.get(label, [])) for label in dict.fromkeys(tests)]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    totals = collections.defaultdict(lambda: [0, 0, 0])
    for label, status, xmls in results(sys.argv[1]):
        t = totals[kind_of(label)]
        found = [p for p in xmls if os.path.exists(p)]
        if status in ("PASSED", "FAILED", "FLAKY") and found:
            for path in found:
                for i, n in enumerate(cases(path)):
                    t[i] += n
            if status == "FAILED" and not any(cases(p)[1] for p in found):
                t[1] += 1  # a failure the XML does not show (a crash, an exit status)
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
