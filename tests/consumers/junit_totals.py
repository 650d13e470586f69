"""Read a JUnit XML file with junitparser (as CI reporters do) and print its totals as JSON."""
import json
import sys

from junitparser import Error, Failure, JUnitXml, Skipped

xml = JUnitXml.fromfile(sys.argv[1])
totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "passed": 0}
names = set()
for suite in xml:
    for case in suite:
        totals["tests"] += 1
        names.add((case.classname, case.name))
        kinds = {type(r) for r in case.result}
        if Failure in kinds:
            totals["failures"] += 1
        elif Error in kinds:
            totals["errors"] += 1
        elif Skipped in kinds:
            totals["skipped"] += 1
        else:
            totals["passed"] += 1
totals["unique_cases"] = len(names)
print(json.dumps(totals))
