#!/usr/bin/env python3
"""The documentation's links resolve: doc_links.py SOURCE_DIR

For README.md and docs/*.md: every relative link [text](path#anchor) names a
file or folder that exists, every #anchor names a heading of its page (GitHub's
rule: lower case, punctuation dropped, spaces to hyphens, -1, -2 for repeats),
and every page of docs/ is linked from the README. Links inside code blocks
and to http(s)/mailto are not checked (nothing here may reach the network).
"""

import os
import re
import sys

LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def strip_code(text):
    """The page without fenced blocks and inline code (links there are examples)."""
    out, in_block = [], False
    for line in text.split("\n"):
        if re.match(r"^\s*```", line):
            in_block = not in_block
            out.append("")
            continue
        out.append("" if in_block else re.sub(r"`[^`]*`", "", line))
    return out


def anchors(path):
    """The heading anchors of a markdown page, as GitHub makes them."""
    seen, result = {}, set()
    in_block = False
    for line in open(path, encoding="utf-8"):
        if line.lstrip().startswith("```"):
            in_block = not in_block
            continue
        m = None if in_block else re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = m.group(2).strip().lower()
        slug = re.sub(r"[^\w\- ]", "", slug)
        slug = slug.replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        result.add(slug if n == 0 else f"{slug}-{n}")
    for m in re.finditer(r'<a (?:name|id)="([^"]+)"', open(path, encoding="utf-8").read()):
        result.add(m.group(1))
    return result


def main():
    src = os.path.abspath(sys.argv[1])
    docs = os.path.join(src, "docs")
    pages = [os.path.join(src, "README.md")] + sorted(
        os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    errors, checked = [], 0
    linked_from_readme = set()
    for page in pages:
        rel = os.path.relpath(page, src)
        for n, line in enumerate(strip_code(open(page, encoding="utf-8").read()), 1):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z]+:", target):
                    continue
                checked += 1
                path, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
                if not os.path.exists(dest):
                    errors.append(f"{rel}:{n}: {target}: no such file {os.path.relpath(dest, src)}")
                    continue
                if page.endswith("README.md"):
                    linked_from_readme.add(dest)
                if anchor and dest.endswith(".md") and anchor not in anchors(dest):
                    errors.append(f"{rel}:{n}: {target}: {os.path.relpath(dest, src)} has no heading "
                                  f"whose anchor is #{anchor}")
    for page in pages[1:]:
        if page not in linked_from_readme:
            errors.append(f"{os.path.relpath(page, src)} is not linked from README.md")
    for e in errors:
        print("FAIL:", e)
    print(f"{len(pages)} pages, {checked} relative links, {len(errors)} broken")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
