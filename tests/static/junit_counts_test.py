"""junit_counts.py on a made-up build event file: cases from every shard's XML, a failure the
XML does not show, a target that did not build, one skipped as incompatible."""
import json
import os
import subprocess
import sys
import tempfile

script = sys.argv[1]
tmp = tempfile.mkdtemp()


def xml(path, passed, failed, skipped):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    cases = (["<testcase name='p'/>"] * passed + ["<testcase name='f'><failure/></testcase>"] * failed
             + ["<testcase name='s'><skipped/></testcase>"] * skipped)
    with open(path, "w") as f:
        f.write("<testsuites><testsuite>" + "".join(cases) + "</testsuite></testsuites>")


def log(rel):
    return {"uri": "file://" + os.path.join(tmp, rel, "test.log")}


events = []
for label, size in [("//t:sharded_test", "LARGE"), ("//t:crash_test", "SMALL"),
                    ("//t:broken_test", "SMALL"), ("//t:x_simde_test", "SMALL"),
                    ("//tests/python:python_tests", "LARGE")]:
    events.append({"id": {"targetConfigured": {"label": label}},
                   "configured": {"targetKind": "cc_test rule", "testSize": size}})
events.append({"id": {"targetConfigured": {"label": "//t:lib"}}, "configured": {"targetKind": "cc_library rule"}})
xml(os.path.join(tmp, "s1", "test.xml"), 3, 0, 1)
xml(os.path.join(tmp, "s2", "test.xml"), 2, 1, 0)
events.append({"id": {"testSummary": {"label": "//t:sharded_test"}},
               "testSummary": {"overallStatus": "FAILED", "passed": [log("s1")], "failed": [log("s2")]}})
xml(os.path.join(tmp, "c", "test.xml"), 4, 0, 0)  # the binary crashed after its cases passed
events.append({"id": {"testSummary": {"label": "//t:crash_test"}},
               "testSummary": {"overallStatus": "FAILED", "failed": [log("c")]}})
events.append({"id": {"targetCompleted": {"label": "//t:broken_test"}}, "completed": {"success": False}})
events.append({"id": {"targetCompleted": {"label": "//t:x_simde_test"}}, "aborted": {"reason": "SKIPPED"}})
xml(os.path.join(tmp, "py", "test.xml"), 7, 0, 2)
events.append({"id": {"testSummary": {"label": "//tests/python:python_tests"}},
               "testSummary": {"overallStatus": "PASSED", "passed": [log("py")]}})
bep = os.path.join(tmp, "bep.json")
with open(bep, "w") as f:
    f.write("\n".join(json.dumps(e) for e in events) + "\n")

out = subprocess.run([sys.executable, script, bep], capture_output=True, text=True, check=True).stdout
want = "cc 9 3 1\npython 7 0 2\nsimde 0 0 1\n"
assert out == want, f"got {out!r}, want {want!r}"
print("junit_counts OK")
