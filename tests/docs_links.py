#!/usr/bin/env python3
"""No link of the manual is dead, and none leaves the repository. Starting from README.md and
docs/*.md, and following every Markdown file they link to, each link [text](target) or reference
definition [label]: target must name a file or folder inside the repository that exists, and its
#anchor, if any, a heading of the Markdown file it names (GitHub's anchors), and README.md must
link to every page of docs/. Links out of the
repository (http:, https:, mailto:, absolute paths, ../ past the root) are errors, except the
sites listed in EXTERNAL. Code spans and fenced code blocks are not links.

usage: docs_links.py SOURCE_ROOT    checks the tree, after the self-test
       docs_links.py --self-test    shows on a made-up tree that each rule fails when broken
"""
import os
import re
import sys
import tempfile
import urllib.parse

# Outside sites a page may link to: tools a reader opens, not documents that can drift.
EXTERNAL = {"https://ui.perfetto.dev"}

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
AUTOLINK = re.compile(r"<((?:https?|mailto):[^>\s]+)>")
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")


def prose_lines(text, spans=False):
    """(line number, line) of the text outside fenced code blocks, code spans blanked unless
    spans."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if m and (fence is None or m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence)):
            fence = None if fence else m.group(1)
            continue
        if fence is None:
            yield n, line if spans else CODE_SPAN.sub(lambda c: " " * len(c.group(0)), line)


def links(text):
    """(line number, target) of every link in a Markdown text."""
    for n, line in prose_lines(text):
        for m in INLINE.finditer(line):
            yield n, m.group(1)
        for m in AUTOLINK.finditer(line):
            yield n, m.group(1)
        m = REFERENCE.match(line)
        if m:
            yield n, m.group(1)


def slug(heading):
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
    text = re.sub(r"<[^>]+>", "", text.lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text):
    """The anchors of a Markdown text's headings, duplicates numbered as GitHub does."""
    seen, out = {}, set()
    for _, line in prose_lines(text, spans=True):
        m = HEADING.match(line)
        if m:
            s = slug(m.group(1))
            out.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return out


def start_pages(root):
    pages = [os.path.join(root, "README.md")]
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        pages += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    return [p for p in pages if os.path.isfile(p)]


def check(root):
    """Returns the problems found in the pages reachable from root's README.md and docs/."""
    root = os.path.realpath(root)
    problems, todo, done, texts = [], start_pages(root), set(), {}
    if not todo:
        return [f"{root}: no README.md and no docs/*.md"]

    def text_of(path):
        if path not in texts:
            with open(path, encoding="utf-8") as f:
                texts[path] = f.read()
        return texts[path]

    readme = os.path.join(root, "README.md")
    if os.path.isfile(readme):
        linked = set()
        for _, target in links(text_of(readme)):
            path = urllib.parse.unquote(target.partition("#")[0])
            if path and not urllib.parse.urlsplit(target).scheme:
                linked.add(os.path.realpath(os.path.join(root, path)))
        for page in todo:
            if page != readme and page not in linked:
                problems.append(f"README.md: no link to {os.path.relpath(page, root)}")

    while todo:
        page = todo.pop()
        if page in done:
            continue
        done.add(page)
        rel = os.path.relpath(page, root)
        for n, target in links(text_of(page)):
            where = f"{rel}:{n}: {target}"
            url = urllib.parse.urlsplit(target)
            if url.scheme or target.startswith("//"):
                if target.rstrip("/") not in EXTERNAL:
                    problems.append(f"{where}: links outside the repository")
                continue
            path, _, anchor = target.partition("#")
            path = urllib.parse.unquote(path)
            if path.startswith("/"):
                problems.append(f"{where}: an absolute path (links must be relative)")
                continue
            dest = os.path.realpath(os.path.join(os.path.dirname(page), path)) if path else page
            if dest != root and not dest.startswith(root + os.sep):
                problems.append(f"{where}: leaves the repository")
                continue
            if not os.path.exists(dest):
                problems.append(f"{where}: no such file")
                continue
            if dest.endswith(".md") and os.path.isfile(dest):
                todo.append(dest)
                if anchor and anchor.lower() not in anchors(text_of(dest)):
                    problems.append(f"{where}: no heading #{anchor} in "
                                    f"{os.path.relpath(dest, root)}")
            elif anchor and not re.fullmatch(r"L\d+(-L\d+)?", anchor):
                problems.append(f"{where}: an anchor into a file that is not Markdown")
    return problems


def self_test():
    """Each rule, broken once on a made-up tree, must be reported; a sound tree must pass."""
    pages = {
        "README.md": "# Top\n\n## Two words\n\n[ok](docs/a.md) [ok](docs/a.md#a-b--c) "
                     "[ok](#two-words) [ok](src/) `[not a link](nowhere.md)`\n\n"
                     "```\n[not a link](nowhere.md)\n```\n[ref]: docs/a.md\n",
        "docs/a.md": "# A, b & `c`\n\n[up](../README.md#top) [perfetto](https://ui.perfetto.dev)\n",
        "src/x.c": "",
    }
    broken = {
        "dead file": ("[x](docs/gone.md)", "no such file"),
        "dead anchor": ("[x](docs/a.md#nothing)", "no heading"),
        "dead anchor here": ("[x](#nothing)", "no heading"),
        "escapes the root": ("[x](../outside.md)", "leaves the repository"),
        "outside site": ("[x](https://example.com/)", "outside the repository"),
        "absolute path": ("[x](/etc/passwd)", "absolute path"),
        "dead reference": ("[x]: docs/gone.md", "no such file"),
        "dead link in a linked page": (None, "no such file"),
        "a page of docs/ the README misses": ("", "no link to docs/b.md"),
    }
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "repo")

        def write(files):
            for rel, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
                with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                    f.write(text)

        write(pages)
        with open(os.path.join(tmp, "outside.md"), "w", encoding="utf-8") as f:
            f.write("# outside\n")
        if check(root):
            failures.append(f"a sound tree fails: {check(root)}")
        for rule, (line, expect) in broken.items():
            if line is None:  # a page outside docs/, reached only through a link
                write({"README.md": pages["README.md"] + "[k](deploy/k.md)\n",
                       "deploy/k.md": "[x](gone.md)\n"})
            elif not line:
                write({"docs/b.md": "# B\n"})
            else:
                write({"README.md": pages["README.md"] + line + "\n"})
            found = check(root)
            if len(found) != 1 or expect not in found[0]:
                failures.append(f"{rule}: expected one '{expect}', got {found}")
            write(pages)
            if os.path.exists(os.path.join(root, "docs/b.md")):
                os.remove(os.path.join(root, "docs/b.md"))
    for f in failures:
        print(f"self-test: {f}", file=sys.stderr)
    return 1 if failures else 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    if self_test() != 0:
        return 1
    problems = check(argv[1])
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
