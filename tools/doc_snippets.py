#!/usr/bin/env python3
"""Docs include code from compiled examples, never pasted code.

In docs/*.md and README.md, a line `<!-- snippet: path/to/file.cpp#tag -->` is followed by a
fenced block that must equal the lines between `// [tag]` markers in that file (the whole file
without `#tag`). Every ```cpp block must be such a snippet.
  doc_snippets.py check <root>    fail on any drift (a test)
  doc_snippets.py update <root>   rewrite the blocks from the sources
"""
import pathlib
import re
import sys

MARKER = re.compile(r"^<!-- snippet: (?P<path>[^#\s]+)(#(?P<tag>[\w-]+))? -->$")
COUNT = re.compile(r"(?P<n>\d+) <!-- count: (?P<path>[^#\s]+)(#(?P<tag>[\w-]+))? -->")


def code_lines(lines):
    return sum(1 for l in lines if l.strip() and not l.strip().startswith("//"))


def extract(root, path, tag):
    lines = (root / path).read_text().splitlines()
    if tag is None:
        return lines
    marker = f"// [{tag}]"
    positions = [i for i, line in enumerate(lines) if line.strip() == marker]
    if len(positions) != 2:
        raise SystemExit(f"{path}: expected two '{marker}' lines, found {len(positions)}")
    body = lines[positions[0] + 1:positions[1]]
    indent = min((len(l) - len(l.lstrip()) for l in body if l.strip()), default=0)
    return [l[indent:] for l in body]


def process(root, doc, update):
    lines = doc.read_text().splitlines()
    out, problems, i = [], [], 0
    while i < len(lines):
        line = lines[i]

        def recount(m):
            n = code_lines(extract(root, m["path"], m["tag"]))
            if int(m["n"]) != n:
                problems.append(f"{doc.name}:{i + 1}: says {m['n']} lines of {m['path']}#{m['tag']}, it has {n}")
            return m.group(0).replace(m["n"], str(n), 1)

        line = COUNT.sub(recount, line)
        match = MARKER.match(line.strip())
        if line.startswith("```cpp") and not (out and MARKER.match(out[-1].strip())):
            problems.append(f"{doc.name}:{i + 1}: a cpp block without a snippet marker (paste-free docs)")
        out.append(line)
        i += 1
        if not match:
            continue
        if i >= len(lines) or not lines[i].startswith("```"):
            problems.append(f"{doc.name}:{i}: snippet marker not followed by a fenced block")
            continue
        fence = lines[i]
        end = i + 1
        while end < len(lines) and lines[end] != "```":
            end += 1
        current = lines[i + 1:end]
        wanted = extract(root, match["path"], match["tag"])
        if current != wanted:
            problems.append(f"{doc.name}:{i + 1}: block differs from {match['path']}#{match['tag']}")
        out.append(fence)
        out.extend(wanted)
        out.append("```")
        i = end + 1
    if update:
        doc.write_text("\n".join(out) + "\n")
    return problems


def main():
    mode, root = sys.argv[1], pathlib.Path(sys.argv[2])
    docs = sorted((root / "docs").glob("*.md")) + [root / "README.md"]
    problems = [p for doc in docs for p in process(root, doc, mode == "update")]
    if mode == "check":
        for p in problems:
            print("FAIL " + p)
        print(f"{len(docs)} documents checked")
        sys.exit(1 if problems else 0)


main()
