#!/usr/bin/env python3
"""Every test of the suite runs in the sandbox: it requires the fixture byteps_sandbox, and its
ENVIRONMENT sets TMPDIR to the sandbox folder, Catch's discovered cases too. Reads the tests'
properties from `ctest --show-only=json-v1` in the build tree; the sandbox's own two tests
(setup and cleanup) are exempt. Fails naming up to 20 tests that would write outside it.

  environment_check.py CTEST BUILD_DIR SANDBOX

(Python, not CMake's string(JSON): that parses the whole document again for every property it
reads, 15 s for 512 tests against well under one here.)"""
import json
import subprocess
import sys


def as_list(value):
    """A property's value: a JSON array, or a string for one value."""
    return value if isinstance(value, list) else [value]


def main(argv):
    if len(argv) != 4:
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    ctest, build_dir, sandbox = argv[1:]
    shown = subprocess.run([ctest, "--show-only=json-v1"], cwd=build_dir, capture_output=True,
                           text=True, check=False)
    if shown.returncode != 0:
        print(f"ctest --show-only=json-v1 failed in {build_dir}: {shown.stderr}")
        return 1
    tests = json.loads(shown.stdout)["tests"]
    outside = 0
    for test in tests:
        name = test["name"]
        if name.startswith("sandbox: "):
            continue
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        lacks = []
        if "byteps_sandbox" not in as_list(props.get("FIXTURES_REQUIRED", [])):
            lacks.append("the fixture byteps_sandbox")
        if f"TMPDIR={sandbox}" not in as_list(props.get("ENVIRONMENT", [])):
            lacks.append(f"TMPDIR={sandbox}")
        if lacks:
            outside += 1
            if outside <= 20:
                print(f"  {name} (lacks {' and '.join(lacks)})")
    print(f"{len(tests)} tests, {outside} outside the sandbox")
    if outside > 0:
        print("tests outside the sandbox: give each the properties byteps_sandbox_tests() or "
              "byteps_discover_catch_tests() give (tests/CMakeLists.txt)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
