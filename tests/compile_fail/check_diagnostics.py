#!/usr/bin/env python3
"""Compile-fail tests, one translation unit per case.

A *.fail.cpp is a prelude (everything before its first '// case: <Name>' line) followed by
cases; a case is the block from its '// case:' line to the next one. Each case is compiled on
its own, as prelude + that block, and must fail to compile with every one of its own
'// expect: <text>' lines somewhere in the compiler's stderr. A case without an expect line,
or an expect line outside a case, is an error in the test file.

The must-compile twins live in the *.pass.cpp of the same stem, with the same '// case:'
markers: every fail case needs a twin of the same name, and each twin (prelude of the .pass.cpp
+ its block) must compile. A *.pass.cpp without '// case:' markers is compiled whole. The twins
of a file are compiled together first, as the prelude + every block (one translation unit instead
of one each: a twin cannot hide another's failure, since every error fails the whole unit); only
if that unit fails is each twin compiled on its own, to say which ones do not compile.

The fail cases of a file are first compiled together, as one translation unit (the compiler goes
on after each case's error, and the cases are independent). A case is settled there when its
expect lines are all in that unit's diagnostics and one of them names something of its own: a
word its block spells and no other case's does (its backend's type), so that only its own failure
can print it. Every other case, and a case whose diagnostics the shared unit lacks, is compiled
on its own as above.

The library header is precompiled once per run into a temporary directory; if that fails
(a compiler that cannot), the cases are compiled without it.

Usage: check_diagnostics.py <case dir> <include dir> <compiler command...>"""
import concurrent.futures
import dataclasses
import pathlib
import re
import subprocess
import sys
import tempfile
import time

CASE = "// case:"
SHARED = "every case"  # the unit of a .fail.cpp's cases together
EXPECT = "// expect:"
TIMEOUT = 900  # seconds per compiler run
WORKERS = 2


@dataclasses.dataclass
class Unit:
    path: pathlib.Path  # the .fail.cpp / .pass.cpp it comes from
    case: str | None  # None: the whole file
    source: str  # the translation unit, with #line directives pointing into path
    expects: list[str]
    own_words: set[str] = dataclasses.field(default_factory=set)  # words only this case's block spells

    @property
    def label(self):
        return f"{self.path.name} [{self.case}]" if self.case else self.path.name


def split_cases(path, problems):
    """Returns (prelude line count, {case name: (first line index, lines, expects)})."""
    lines = path.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(CASE)]
    prelude_end = starts[0] if starts else len(lines)
    for i in range(prelude_end):
        if lines[i].startswith(EXPECT):
            problems.append(f"{path.name}:{i + 1}: '{EXPECT}' line outside any '{CASE}' block")
    cases = {}
    for start, end in zip(starts, starts[1:] + [len(lines)]):
        name = lines[start][len(CASE):].strip()
        if not name:
            problems.append(f"{path.name}:{start + 1}: '{CASE}' without a name")
            continue
        if name in cases:
            problems.append(f"{path.name}:{start + 1}: case {name} defined twice")
            continue
        expects = [line[len(EXPECT):].strip() for line in lines[start:end] if line.startswith(EXPECT)]
        cases[name] = (start, lines[start:end], expects)
    return lines[:prelude_end], cases


def translation_unit(path, prelude, start, block):
    quoted = str(path.resolve()).replace("\\", "\\\\").replace('"', '\\"')
    return "\n".join([f'#line 1 "{quoted}"', *prelude, f'#line {start + 1} "{quoted}"', *block, ""])


def collect_units(case_dir, problems):
    units = []
    fail_files = sorted(case_dir.glob("*.fail.cpp"))
    pass_files = sorted(case_dir.glob("*.pass.cpp"))
    for path in fail_files:
        prelude, cases = split_cases(path, problems)
        if not cases:
            problems.append(f"{path.name}: no '{CASE} <Name>' blocks")
        # The identifiers of each case's code (comments and expect lines out; three letters or more).
        code_words = {name: {word for word in re.findall(r"[A-Za-z_]\w{2,}", "\n".join(line.split("//")[0] for line in block))}
                      for name, (_, block, _) in cases.items()}
        for name, (start, block, expects) in cases.items():
            if not expects:
                problems.append(f"{path.name} [{name}]: case has no '{EXPECT}' line")
                continue
            others = set().union(*(words for other, words in code_words.items() if other != name))
            own = {word for expect in expects for word in re.findall(r"\w+", expect)
                   if word in code_words[name] and word not in others}
            units.append(Unit(path, name, translation_unit(path, prelude, start, block), expects, own))
        if cases:
            together = [f'#line 1 "{path.resolve()}"', *prelude]
            for name, (start, block, _) in cases.items():
                together += [f'#line {start + 1} "{path.resolve()}"', *block]
            units.append(Unit(path, SHARED, "\n".join(together + [""]), []))
        twin = path.with_name(path.name.replace(".fail.cpp", ".pass.cpp"))
        if not twin.exists():
            problems.append(f"{path.name}: has no must-compile twin {twin.name}")
            continue
        _, twin_cases = split_cases(twin, [])
        for name in cases:
            if name not in twin_cases:
                problems.append(f"{path.name} [{name}]: no twin '{CASE} {name}' in {twin.name}")
        for name in twin_cases:
            if name not in cases:
                problems.append(f"{twin.name} [{name}]: twin of no case in {path.name}")
    for path in pass_files:
        prelude, cases = split_cases(path, problems)
        for name, (start, block, expects) in cases.items():
            if expects:
                problems.append(f"{path.name} [{name}]: '{EXPECT}' line in a must-compile twin")
        units.append(Unit(path, None, path.read_text(), []))  # all twins of the file together
    return units


def twin_units(path):
    """Each twin of a .pass.cpp on its own (used when the file's twins fail together)."""
    prelude, cases = split_cases(path, [])
    return [Unit(path, name, translation_unit(path, prelude, start, block), [])
            for name, (start, block, _) in cases.items()]


def compile_source(command, source_path):
    begin = time.monotonic()
    try:
        result = subprocess.run(command + [str(source_path)], capture_output=True, text=True, timeout=TIMEOUT)
        code, stderr = result.returncode, result.stderr
    except subprocess.TimeoutExpired:
        code, stderr = None, f"timed out after {TIMEOUT} s"
    return code, stderr, time.monotonic() - begin


def build_pch(compiler, flags, tmp, case_dir):
    """Precompiles the library header (and any <...> include of a prelude); returns the extra
    flags to use it, or [] if the compiler cannot."""
    includes = ["#include <torch_delegate/torch_delegate.hpp>"]
    for path in sorted(case_dir.glob("*.fail.cpp")) + sorted(case_dir.glob("*.pass.cpp")):
        prelude, _ = split_cases(path, [])
        includes += [line.strip() for line in prelude if line.strip().startswith("#include <")]
    header = tmp / "pch.hpp"
    header.write_text("\n".join(dict.fromkeys(includes)) + "\n")
    pch_flags = [flag for flag in flags if flag != "-fsyntax-only"]
    begin = time.monotonic()
    try:
        result = subprocess.run(compiler + pch_flags + ["-x", "c++-header", str(header), "-o", str(tmp / "pch.hpp.gch")],
                                capture_output=True, text=True, timeout=TIMEOUT)
        ok, stderr = result.returncode == 0, result.stderr
    except (subprocess.TimeoutExpired, OSError) as error:
        ok, stderr = False, str(error)
    elapsed = time.monotonic() - begin
    if not ok:
        print(f"note: could not precompile the header ({elapsed:.1f} s), compiling without it:\n{stderr[:2000]}")
        return []
    print(f"note: precompiled header built in {elapsed:.1f} s")
    return ["-include", str(header)]


def main():
    case_dir, include_dir, compiler = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    # Declarations only (the separately compiled mode): the diagnostics come from templates, the
    # same in either mode, and the non-template definitions are not parsed again for each case.
    flags = ["-std=c++20", "-fsyntax-only", "-DTORCH_DELEGATE_SEPARATE_COMPILATION", "-fdiagnostics-color=never", "-ftemplate-backtrace-limit=0",
             "-I", include_dir, "-isystem", "/usr/include/torch/csrc/api/include"]
    begin = time.monotonic()
    failures = []
    units = collect_units(case_dir, failures)
    with tempfile.TemporaryDirectory(prefix="compile_fail.") as tmp_name:
        tmp = pathlib.Path(tmp_name)
        command = compiler + flags + build_pch(compiler, flags, tmp, case_dir)
        sources = []
        for index, unit in enumerate(units):
            source = tmp / f"{index:03}.{unit.path.name.split('.')[0]}.{unit.case or 'all'}.cpp"
            source.write_text(unit.source)
            sources.append(source)
        def compile_units(units, sources):
            with concurrent.futures.ThreadPoolExecutor(max_workers=WORKERS) as pool:
                return list(pool.map(lambda source: compile_source(command, source), sources))

        # First the twins, each file's cases together, and the cases that cannot be settled there.
        first = [i for i, unit in enumerate(units) if not (unit.path.name.endswith(".fail.cpp") and unit.case != SHARED
                                                            and unit.own_words)]
        first_results = dict(zip(first, compile_units([units[i] for i in first], [sources[i] for i in first])))
        shared_stderr = {units[i].path: first_results[i][1] for i in first if units[i].case == SHARED}
        settled, alone = {}, []
        for i, unit in enumerate(units):
            if i in first_results:
                continue
            stderr = shared_stderr.get(unit.path, "")
            if all(expected in stderr for expected in unit.expects):
                settled[i] = (1, stderr, 0.0)
            else:
                alone.append(i)  # not all in the shared unit's diagnostics: compiled on its own
        alone_results = dict(zip(alone, compile_units([units[i] for i in alone], [sources[i] for i in alone])))
        results = [first_results.get(i) or settled.get(i) or alone_results[i] for i in range(len(units))]
        for i, unit in enumerate(units):
            if i in settled:
                print(f"note: {unit.label} settled in the unit of every case ({', '.join(sorted(unit.own_words))} is its own)")
        shared = [i for i, unit in enumerate(units) if unit.case == SHARED]
        units = [unit for i, unit in enumerate(units) if i not in shared]
        results = [result for i, result in enumerate(results) if i not in shared]
        retried = []
        for unit, (code, _, _) in zip(units, results):
            if unit.path.name.endswith(".pass.cpp") and code != 0 and twin_units(unit.path):
                print(f"note: the twins of {unit.path.name} fail together; compiling each on its own")
                retried += twin_units(unit.path)
        if retried:
            retried_sources = []
            for index, unit in enumerate(retried):
                source = tmp / f"twin{index:03}.{unit.path.name.split('.')[0]}.{unit.case}.cpp"
                source.write_text(unit.source)
                retried_sources.append(source)
            retried_paths = {unit.path for unit in retried}
            kept = [(u, r) for u, r in zip(units, results) if u.path not in retried_paths]
            units = [u for u, _ in kept] + retried
            results = [r for _, r in kept] + compile_units(retried, retried_sources)
        for unit, (code, stderr, elapsed) in zip(units, results):
            must_fail = unit.path.name.endswith(".fail.cpp")
            if code is None:
                failures.append(f"{unit.label}: {stderr}")
            elif not must_fail:
                if code != 0:
                    failures.append(f"{unit.label}: the twin must compile, but:\n{stderr[:4000]}")
                else:
                    print(f"ok   {unit.label} compiles ({elapsed:.1f} s)")
            elif code == 0:
                failures.append(f"{unit.label}: compiled, but must not ({elapsed:.1f} s)")
            else:
                print(f"ok   {unit.label} fails to compile ({elapsed:.1f} s)")
                missing = False
                for expected in unit.expects:
                    if expected in stderr:
                        print(f"ok   {unit.label}: {expected}")
                    else:
                        failures.append(f"{unit.label}: diagnostic missing: {expected}")
                        missing = True
                if missing:
                    failures.append(f"{unit.label}: its diagnostics were:\n{stderr[:4000]}")
    for failure in failures:
        print("FAIL " + failure)
    print(f"{len(units)} translation units, {len(failures)} failures, {time.monotonic() - begin:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
