"""Rules the sources keep, checked as text (run by `meson test`, suite unit):

- No `namespace {` in a header or an .ipp: in header-only mode an .ipp is part of every user's
  translation unit, and an inline function with external linkage that calls a function with
  internal linkage has a different definition in each (a one-definition-rule violation).
- The names torch-delegate gives things in LibTorch (TorchBind classes, operators, the classes,
  attributes and methods of lowered modules) are spelled only in include/torch_delegate/detail/names.hpp:
  no string literal elsewhere in include/, src/ or python/src/ contains one.
- A function declared in a header is documented there only: its definition in an .ipp carries
  no `///` doc comment (two copies drift apart; an implementation note is a `//` comment).

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

# Each owned spelling, as a pattern over a string literal's text. (_region_: a region's method,
# "forward_region_0", or the "_region_" it is built from; not the field name "min_region_size".)
OWNED = [r"__torch__\.torch\.classes", r"__backends__", r"__torch_delegate__", r"_execute_", r"torch\.jit\.Lowered",
         r"__processed_module", r"__method_compile_spec", r"__handles", r"__backend\b", r"__backend_debug_info",
         r"__loweredModule__", r"td_is_available", r"td_check_saveable", r"__delegate\b", r"torch_delegate\.Regions",
         r"_region_(\d|$)", r"ops\.torch_delegate", r"^torch_delegate$", r"^torch_delegate::_"]
OWNER = root / "include" / "torch_delegate" / "detail" / "names.hpp"


def string_literals(line):
    """The string literals of a line of C++ code, comments excepted (a // outside a literal ends it)."""
    literals, i, current = [], 0, None
    while i < len(line):
        c = line[i]
        if current is None:
            if line.startswith("//", i):
                break
            if c == '"' and (i == 0 or line[i - 1] != "'"):
                current = ""
        elif c == "\\":
            current += line[i:i + 2]
            i += 1
        elif c == '"':
            literals.append(current)
            current = None
        else:
            current += c
        i += 1
    return literals


sources = [p for folder in ("include", "src", "python/src") for p in sorted((root / folder).rglob("*"))
           if p.suffix in (".hpp", ".ipp", ".cpp", ".h") and p != OWNER]
for path in sources:
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith(("//", "#include", "*")):
            continue
        for literal in string_literals(line):
            for pattern in OWNED:
                if re.search(pattern, literal):
                    problems.append(f"{path.relative_to(root)}:{number}: \"{literal}\" spells a name that "
                                    f"detail/names.hpp owns ({pattern}): use names::")

# Doc comments: the header's, not the .ipp's.
DEFINED = re.compile(r"TORCH_DELEGATE_(?:DECL|INTERNAL)[^(;]*?([A-Za-z_~]\w*)\(")
declared = set()
for path in sorted((root / "include").rglob("*.hpp")):
    for match in DEFINED.finditer(path.read_text()):
        declared.add(match.group(1))
for path in sorted((root / "include").rglob("*.ipp")):
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        match = DEFINED.search(line)
        if match and match.group(1) in declared and number > 1 and lines[number - 2].lstrip().startswith("///"):
            problems.append(f"{path.relative_to(root)}:{number}: {match.group(1)} is documented in its header: "
                            "drop the /// comment here (or make it a // implementation note)")

for problem in problems:
    print(problem)
print(f"{len(problems)} problem(s)")
sys.exit(1 if problems else 0)
