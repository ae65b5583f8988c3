#!/usr/bin/env python3
"""Docs show code from compiled examples and outputs from running them, never pasted text.

Code. In docs/*.md and README.md, a line `<!-- snippet: path/to/file.cpp#tag -->` is followed
by a fenced block that must equal the lines between `// [tag]` markers in that file (`# [tag]`
in a .py file; the whole file without `#tag`). Every ```cpp block must be such a snippet.

Printed output. A line `<!-- output: <example>#<tag> -->` is followed by a fenced block that
must equal section <tag> of what the example program prints on stdout. <example> is an example
target of the build (`debugging`, `demo`, ...: the program <build>/examples/<example>, run with
the arguments in PROGRAMS below, in a fresh temporary directory). A program marks its sections:

    --- output: <tag> ---
    ...the lines the docs show...
    --- end output ---

Each referenced program runs once per invocation; it must exit with 0. A fenced block that
looks like printed output (a TorchScript traceback: `<--- HERE`, `Traceback of`) without an
output marker is an error too.

Normalisations, applied to the program's section before it is compared or written:
  - the build directory -> `<build>`, the source root -> `<root>`, the program's temporary
    directory -> `<tmp>` (longest first, also their resolved real paths);
  - trailing whitespace is removed from every line (LibTorch prints lines of spaces in its
    tracebacks), and blank lines at the end of the section are dropped.
and, only for the comparison (applied to both sides; `update` keeps the doc's block when they
are equal, so a re-run does not rewrite timings):
  - durations: a number followed by a unit ns, us, µs, ms or s -> `<t> <unit>`;
  - pointer addresses: 0x1234abcd -> `0x<addr>`.

  doc_snippets.py check <root> [--build <builddir>]    fail on any drift (a test)
  doc_snippets.py update <root> [--build <builddir>]   rewrite the blocks from the sources and programs
Without --build, output markers cannot be checked: each one is an error.
"""
import argparse
import difflib
import os
import pathlib
import re
import subprocess
import sys
import tempfile

MARKER = re.compile(r"^<!-- snippet: (?P<path>[^#\s]+)(#(?P<tag>[\w-]+))? -->$")
OUTPUT_MARKER = re.compile(r"^<!-- output: (?P<program>[\w-]+)#(?P<tag>[\w-]+) -->$")
COUNT = re.compile(r"(?P<n>\d+) <!-- count: (?P<path>[^#\s]+)(#(?P<tag>[\w-]+))? -->")
SECTION_BEGIN = re.compile(r"^--- output: (?P<tag>[\w-]+) ---$")
SECTION_END = "--- end output ---"
LOOKS_PRINTED = re.compile(r"<--- HERE|^Traceback of ", re.MULTILINE)
DURATION = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?=\s?(?:ns|us|µs|ms|s)\b)")
ADDRESS = re.compile(r"\b0x[0-9a-fA-F]+\b")

# How an example program runs: its path in the build directory, its arguments, and programs
# to run before it (each a list: program name, then arguments). `{tmp}` is the program's
# temporary directory, also its working directory. Not listed: examples/<name>, no arguments.
# A program with a "command" is not an example target: it runs that command line (`{root}`,
# `{build}` and `{tmp}` replaced) with "env" added to the environment.
PROGRAMS = {
    "demo": {"args": ["{tmp}/demo_lowered.pt"]},
    "python_feed_forward": {
        "command": ["/usr/bin/python3", "{root}/examples/python/feed_forward.py",
                    "{build}/backends/pointwise_fusion/libpointwise_fusion.so"],
        "env": {"PYTHONPATH": "{build}/python"}},
    "runtime_only": {"before": [["demo", "{tmp}/runtime_only_input.pt"]], "args": ["{tmp}/runtime_only_input.pt"]},
}


def code_lines(lines):
    return sum(1 for l in lines if l.strip() and not l.strip().startswith("//"))


def extract(root, path, tag):
    lines = (root / path).read_text().splitlines()
    if tag is None:
        return lines
    comment = "#" if path.endswith(".py") else "//"
    marker = f"{comment} [{tag}]"
    positions = [i for i, line in enumerate(lines) if line.strip() == marker]
    if len(positions) != 2:
        raise SystemExit(f"{path}: expected two '{marker}' lines, found {len(positions)}")
    body = lines[positions[0] + 1:positions[1]]
    indent = min((len(l) - len(l.lstrip()) for l in body if l.strip()), default=0)
    return [l[indent:] for l in body]


def tidy(lines):
    lines = [l.rstrip() for l in lines]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def volatile(lines):
    """What may differ between two runs of the same program: for comparison only."""
    return [ADDRESS.sub("0x<addr>", DURATION.sub("<t>", l)) for l in tidy(lines)]


class Programs:
    """Runs each example program once, on first use, and keeps its sections (or its error)."""

    def __init__(self, root, build):
        self.root, self.build, self.runs = root, build, {}

    def sections(self, name):
        if name not in self.runs:
            try:
                self.runs[name] = (self._run(name), None)
            except RuntimeError as error:
                self.runs[name] = ({}, str(error))
        return self.runs[name]

    def _exe(self, name):
        exe = self.build / "examples" / name
        if not exe.is_file():
            raise RuntimeError(f"{exe} does not exist (build it: ninja -C {self.build} examples/{name})")
        return exe

    def _run(self, name):
        spec = PROGRAMS.get(name, {})
        with tempfile.TemporaryDirectory(prefix=f"doc_output_{name}_") as tmp:
            def command(program, args):
                return [str(self._exe(program))] + [a.replace("{tmp}", tmp) for a in args]

            for before in spec.get("before", []):
                done = subprocess.run(command(before[0], before[1:]), cwd=tmp, capture_output=True, text=True,
                                      timeout=600)
                if done.returncode != 0:
                    raise RuntimeError(f"{before[0]} (run before {name}) exited {done.returncode}: "
                                       + done.stderr.strip()[-500:])
            def expand(text):
                return (text.replace("{root}", str(pathlib.Path(self.root).absolute()))
                        .replace("{build}", str(pathlib.Path(self.build).absolute())).replace("{tmp}", tmp))

            if "command" in spec:
                argv = [expand(a) for a in spec["command"]]
                env = dict(os.environ, **{k: expand(v) for k, v in spec.get("env", {}).items()})
            else:
                argv, env = command(name, spec.get("args", [])), None
            done = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, timeout=600, env=env)
            if done.returncode != 0:
                raise RuntimeError(f"examples/{name} exited {done.returncode}: " + done.stderr.strip()[-500:])
            return parse_sections(name, self._placeholders(done.stdout, tmp))

    def _placeholders(self, text, tmp):
        names = {}
        for path, placeholder in ((self.root, "<root>"), (self.build, "<build>"), (pathlib.Path(tmp), "<tmp>")):
            for spelling in {str(path.absolute()), os.path.realpath(path)}:
                names[spelling] = placeholder
        for spelling in sorted(names, key=len, reverse=True):
            text = text.replace(spelling, names[spelling])
        return text


def parse_sections(name, text):
    sections, current, lines = {}, None, []
    for line in text.splitlines():
        begin = SECTION_BEGIN.match(line)
        if begin:
            if current is not None:
                raise RuntimeError(f"examples/{name}: section '{begin['tag']}' begins inside section '{current}'")
            if begin["tag"] in sections:
                raise RuntimeError(f"examples/{name}: section '{begin['tag']}' printed twice")
            current, lines = begin["tag"], []
        elif line == SECTION_END:
            if current is None:
                raise RuntimeError(f"examples/{name}: '{SECTION_END}' without a section")
            sections[current], current = tidy(lines), None
        elif current is not None:
            lines.append(line)
    if current is not None:
        raise RuntimeError(f"examples/{name}: section '{current}' has no '{SECTION_END}' line")
    return sections


def fenced_block(lines, i):
    """The end index (the closing fence) of the block opening at lines[i]."""
    end = i + 1
    while end < len(lines) and lines[end] != "```":
        end += 1
    return end


def process(root, doc, update, programs):
    """Returns the problems: (fixed by update, message)."""
    name = doc.relative_to(root).as_posix()
    lines = doc.read_text().splitlines()
    out, problems, i = [], [], 0
    while i < len(lines):
        line = lines[i]

        def recount(m):
            n = code_lines(extract(root, m["path"], m["tag"]))
            if int(m["n"]) != n:
                problems.append((True, f"{name}:{i + 1}: says {m['n']} lines of {m['path']}#{m['tag']}, it has {n}"))
            return m.group(0).replace(m["n"], str(n), 1)

        line = COUNT.sub(recount, line)
        match = MARKER.match(line.strip())
        output = OUTPUT_MARKER.match(line.strip())
        if line.startswith("```"):  # a block not taken by a marker (a marker's block is read below)
            end = fenced_block(lines, i)
            if line.startswith("```cpp"):
                problems.append((False, f"{name}:{i + 1}: a cpp block without a snippet marker (paste-free docs)"))
            elif LOOKS_PRINTED.search("\n".join(lines[i + 1:end])):
                problems.append((False, f"{name}:{i + 1}: a block that looks like printed output (a TorchScript "
                                        "traceback) without an output marker"))
            out.extend(lines[i:end + 1])
            i = end + 1
            continue
        out.append(line)
        i += 1
        if not match and not output:
            continue
        if i >= len(lines) or not lines[i].startswith("```"):
            problems.append((False, f"{name}:{i}: {'snippet' if match else 'output'} marker not followed by a fenced block"))
            continue
        fence = lines[i]
        end = fenced_block(lines, i)
        current = lines[i + 1:end]
        wanted = current
        if match:
            wanted = extract(root, match["path"], match["tag"])
            if current != wanted:
                problems.append((True, f"{name}:{i + 1}: block differs from {match['path']}#{match['tag']}"))
        elif programs is None:
            problems.append((False, f"{name}:{i + 1}: the output of {output['program']}#{output['tag']} cannot be "
                                    "checked without --build <builddir>"))
        else:
            where = f"{output['program']}#{output['tag']}"
            sections, error = programs.sections(output["program"])
            if error:
                problems.append((False, f"{name}:{i + 1}: cannot run {where}: {error}"))
            elif output["tag"] not in sections:
                printed = ", ".join(sections) or "none"
                problems.append((False, f"{name}:{i + 1}: {output['program']} prints no section '{output['tag']}' "
                                        f"(its sections: {printed})"))
            elif volatile(current) != volatile(sections[output["tag"]]):
                wanted = sections[output["tag"]]
                diff = difflib.unified_diff(current, wanted, "docs", "program", lineterm="", n=1)
                shown = "\n".join("    " + l for l in list(diff)[2:22])
                problems.append((True, f"{name}:{i + 1}: block differs from the output of {where}\n{shown}"))
        out.append(fence)
        out.extend(wanted)
        out.append("```")
        i = end + 1
    if update:
        doc.write_text("\n".join(out) + "\n")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["check", "update"])
    parser.add_argument("root", type=pathlib.Path)
    parser.add_argument("--build", type=pathlib.Path, help="the build directory, to run the examples")
    arguments = parser.parse_args()
    root = arguments.root.absolute()
    programs = Programs(root, arguments.build.absolute()) if arguments.build else None
    docs = sorted((root / "docs").glob("*.md")) + [root / "README.md"]
    update = arguments.mode == "update"
    problems = [p for doc in docs for p in process(root, doc, update, programs)]
    if update:
        problems = [p for p in problems if not p[0]]  # the rest are fixed
    for _, message in problems:
        print("FAIL " + message)
    ran = ", ".join(sorted(n for n, (_, error) in programs.runs.items() if not error)) if programs else ""
    print(f"{len(docs)} documents {'updated' if update else 'checked'}; examples run: {ran or 'none'}")
    sys.exit(1 if problems else 0)


main()
