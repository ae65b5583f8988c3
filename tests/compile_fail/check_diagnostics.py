#!/usr/bin/env python3
"""Compile-fail tests: every *.fail.cpp must fail to compile and its diagnostics must contain
each of its '// expect: <text>' lines; every *.pass.cpp (the twins) must compile.
Usage: check_diagnostics.py <case dir> <include dir> <compiler command...>"""
import concurrent.futures
import pathlib
import subprocess
import sys

case_dir, include_dir, compiler = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
flags = ["-std=c++20", "-fsyntax-only", "-fdiagnostics-color=never", "-ftemplate-backtrace-limit=0",
         "-I", include_dir, "-isystem", "/usr/include/torch/csrc/api/include"]


def run(path):
    result = subprocess.run(compiler + flags + [str(path)], capture_output=True, text=True)
    return path, result.returncode, result.stderr


cases = sorted(case_dir.glob("*.fail.cpp")) + sorted(case_dir.glob("*.pass.cpp"))
failures = []
with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    for path, code, stderr in pool.map(run, cases):
        if path.name.endswith(".pass.cpp"):
            if code != 0:
                failures.append(f"{path.name}: the twin must compile, but:\n{stderr[:4000]}")
            else:
                print(f"ok   {path.name} compiles")
            continue
        if code == 0:
            failures.append(f"{path.name}: compiled, but must not")
            continue
        for line in path.read_text().splitlines():
            if line.startswith("// expect: "):
                expected = line[len("// expect: "):]
                if expected in stderr:
                    print(f"ok   {path.name}: {expected}")
                else:
                    failures.append(f"{path.name}: diagnostic missing: {expected}")
        twin = path.with_name(path.name.replace(".fail.cpp", ".pass.cpp"))
        if not twin.exists():
            failures.append(f"{path.name}: has no must-compile twin {twin.name}")

for failure in failures:
    print("FAIL " + failure)
sys.exit(1 if failures else 0)
