"""Rules the sources keep, checked as text (run by `meson test`, suite unit):

- No `namespace {` in a header or an .ipp: in header-only mode an .ipp is part of every user's
  translation unit, and an inline function with external linkage that calls a function with
  internal linkage has a different definition in each (a one-definition-rule violation).

Usage: check_sources.py <source root>
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
problems = []
for path in sorted((root / "include").rglob("*")):
    if path.suffix not in (".hpp", ".ipp", ".h"):
        continue
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if re.match(r"\s*namespace\s*\{", line):
            problems.append(f"{path.relative_to(root)}:{number}: 'namespace {{' in a header: use namespace detail and inline")

for problem in problems:
    print(problem)
print(f"{len(problems)} problem(s)")
sys.exit(1 if problems else 0)
