#!/usr/bin/env python3
"""Checks the links between the project's Markdown files: every relative link in a tracked *.md
file must name a tracked file or directory, and every #anchor must be a heading of its target
(GitHub's anchors: lower case, punctuation but `-` and `_` dropped, spaces as `-`, a repeated
heading gets -1, -2, ...). With --toc FILE it also checks that FILE's table of contents (the
list under its "## Contents" heading) links every ## and ### heading of FILE, in order.
Usage: python3 scripts/check-links.py [--toc README.md]   (run by `make lint`)"""
import os
import re
import subprocess
import sys

LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def tracked():
    out = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True).stdout
    files = set(out.split())
    dirs = {os.path.dirname(f) for f in files}
    while True:
        more = {os.path.dirname(d) for d in dirs} - dirs
        if not more:
            break
        dirs |= more
    return files, dirs


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def headings(text):
    """(level, text, anchor) of every heading outside code, anchors numbered as GitHub does."""
    seen = {}
    out = []
    for _, line in lines_outside_code_raw(text):
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.append((len(m.group(1)), m.group(2), base if n == 0 else "%s-%d" % (base, n)))
    return out


def lines_outside_code_raw(text):
    fenced = False
    for n, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, line


def main():
    files, dirs = tracked()
    anchors = {}

    def anchors_of(path):
        if path not in anchors:
            with open(path, encoding="utf-8") as f:
                anchors[path] = {a for _, _, a in headings(f.read())}
        return anchors[path]

    errors = []
    checked = 0
    for md in sorted(f for f in files if f.endswith(".md")):
        with open(md, encoding="utf-8") as f:
            text = f.read()
        for n, line in lines_outside_code_raw(text):
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue  # http:, https:, mailto:
                checked += 1
                path, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
                if path and dest not in files and dest not in dirs:
                    errors.append("%s:%d: %s: no such file in the repository" % (md, n, target))
                    continue
                if anchor and dest.endswith(".md") and anchor not in anchors_of(dest):
                    errors.append("%s:%d: %s: no heading with anchor #%s in %s" % (md, n, target, anchor, dest))
    if "--toc" in sys.argv:
        toc_file = sys.argv[sys.argv.index("--toc") + 1]
        with open(toc_file, encoding="utf-8") as f:
            text = f.read()
        hs = headings(text)
        want = [a for level, _, a in hs if level in (2, 3) and a != "contents"]
        m = re.search(r"(?ms)^## Contents\n(.*?)(?=^## )", text)
        if not m:
            errors.append("%s: no '## Contents' section" % toc_file)
        else:
            have = re.findall(r"\]\(#([^)]+)\)", m.group(1))
            if have != want:
                missing = [a for a in want if a not in have]
                extra = [a for a in have if a not in want]
                errors.append("%s: the contents do not list the ## and ### headings in order; missing: %s; "
                              "not a heading: %s" % (toc_file, missing or "none", extra or "none"))
    if "--files" in sys.argv:
        doc, _, top = sys.argv[sys.argv.index("--files") + 1].partition(":")
        with open(doc, encoding="utf-8") as f:
            rows = set(re.findall(r"(?m)^\| `([^`]+)` \|", f.read()))
        under = {f[len(top) + 1:] for f in files if f.startswith(top + "/")}
        for path in sorted(under - rows):
            errors.append("%s: no row for %s/%s (one line on what it is)" % (doc, top, path))
        for path in sorted(rows - under):
            errors.append("%s: a row for %s/%s, which is not a tracked file" % (doc, top, path))
    for e in errors:
        print(e)
    print("check-links: %d links checked, %d broken" % (checked, len(errors)))
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
