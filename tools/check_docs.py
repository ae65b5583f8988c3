"""Checks what a reader of the docs relies on, without a build:

- every relative link in README.md, CHANGELOG.md and docs/**/*.md reaches a file that exists,
  and its #anchor a heading of that file (GitHub's rule: lower case, punctuation dropped, spaces
  to hyphens, -1, -2 ... for repeated headings);
- every figure of the form 1.26x (or 1.26×) in README.md is in one of the tables the benchmarks
  generate in docs/performance.md (between a `<!-- name -->` and its `<!-- end name -->`), so
  the front page cannot keep a number the bench no longer gives;
- README.md stays a front page: at most 200 lines, and neither it nor a user doc outside
  docs/history/ speaks of issue numbers.

Usage: check_docs.py <source root>
"""
import os
import re
import sys
from pathlib import Path

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FIGURE = re.compile(r"(?<![\w.])(\d+\.\d+)\s?[x×](?!\w)")
GENERATED = re.compile(r"<!-- (?!end )([\w -]+?) -->(.*?)<!-- end \1 -->", re.S)
ISSUE = re.compile(r"\bissues? \d+\b|\(#\d+\)", re.I)


def slug(heading):
    text = "".join(ch for ch in heading.strip().lower() if ch.isalnum() or ch in "-_ ")
    return text.replace(" ", "-")


def anchors(path):
    found, seen, fence = set(), {}, False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        if fence:
            continue
        match = re.match(r"^#{1,6} (.*)$", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def main():
    root = Path(sys.argv[1]).resolve()
    pages = [root / "README.md", root / "CHANGELOG.md"] + sorted((root / "docs").rglob("*.md"))
    errors = []
    cache = {}
    for page in pages:
        if not page.exists():
            errors.append(f"{page.relative_to(root)}: missing")
            continue
        fence = False
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if line.startswith("```"):
                fence = not fence
            if fence:
                continue
            where = f"{page.relative_to(root)}:{number}"
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue
                file_part, _, anchor = target.partition("#")
                file = (page.parent / file_part).resolve() if file_part else page
                if not file.exists():
                    errors.append(f"{where}: link to {target}: no file {os.path.relpath(file, root)}")
                    continue
                if anchor and file.suffix == ".md":
                    if file not in cache:
                        cache[file] = anchors(file)
                    if anchor not in cache[file]:
                        errors.append(f"{where}: link to {target}: {os.path.relpath(file, root)} has no heading #{anchor}")
            in_history = "history" in page.relative_to(root).parts or page.name == "CHANGELOG.md"
            if not in_history and ISSUE.search(line):
                errors.append(f"{where}: speaks of an issue number ({ISSUE.search(line).group(0)!r}): "
                              "user docs describe features; history goes to CHANGELOG.md or docs/history/")

    readme = (root / "README.md").read_text()
    if readme.count("\n") > 200:
        errors.append(f"README.md: {readme.count(chr(10))} lines, the front page keeps to 200")
    performance = (root / "docs" / "performance.md").read_text()
    tables = " ".join(body for _, body in GENERATED.findall(performance))
    generated_figures = set(FIGURE.findall(tables))
    for number, line in enumerate(readme.splitlines(), 1):
        for figure in FIGURE.findall(line):
            if figure not in generated_figures:
                errors.append(f"README.md:{number}: the figure {figure}x is in no generated table of docs/performance.md")
    for error in errors:
        print(error)
    print(f"check_docs: {len(pages)} pages, {len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
