#!/usr/bin/env python3
"""The manual pages the build writes (`ringd --man`, `ringctl --man`) are valid roff and name
every option `--help` lists (and, for ringd, every RINGD_* variable; for ringctl, every command).
groff checks the roff and renders the text searched, with every warning an error; without groff
the roff source itself is searched.

usage: man_pages.py RINGD RINGCTL RINGD_8 RINGCTL_1
"""
import re
import shutil
import subprocess
import sys


def help_text(exe):
    return subprocess.run([exe, "--help"], check=True, capture_output=True, text=True).stdout


def wanted(exe):
    """The words the page of exe must contain: its options, variables and commands."""
    text = help_text(exe)
    words = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))
    words |= set(re.findall(r"\bRINGD_[A-Z0-9_]+\b", text))
    commands = text.split("commands:\n", 1)
    if len(commands) == 2:  # ringctl: a command begins each of its rows
        for line in commands[1].split("\n"):
            m = re.match(r"  ([a-z]+)\b", line)
            if m:
                words.add(m.group(1))
            elif line and not line.startswith(" "):
                break
    return words


def rendered(page):
    """The page as plain text, or its roff source without groff; problems found in the roff."""
    source = open(page, encoding="utf-8").read()
    if shutil.which("groff") is None:
        print(f"{page}: no groff here; searching the roff source", file=sys.stderr)
        return source.replace("\\-", "-"), []
    problems = []
    check = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", page],
                           capture_output=True, text=True)
    if check.returncode != 0 or check.stderr.strip():
        problems.append(f"{page}: groff: {check.stderr.strip() or 'exit %d' % check.returncode}")
    # One long line per paragraph, no hyphenation: a word is never split when searched.
    out = subprocess.run(["groff", "-man", "-Tascii", "-P-cbou", "-rLL=2000n", "-rHY=0", page],
                         check=True, capture_output=True, text=True).stdout
    return out, problems


def main(argv):
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    _, ringd, ringctl, ringd_8, ringctl_1 = argv
    problems = []
    for exe, page, th in ((ringd, ringd_8, ".TH RINGD 8 "), (ringctl, ringctl_1, ".TH RINGCTL 1 ")):
        if not open(page, encoding="utf-8").read().startswith(th):
            problems.append(f"{page}: does not start with '{th}'")
        text, bad = rendered(page)
        problems += bad
        want = wanted(exe)
        if len(want) < 5:
            problems.append(f"{exe} --help: only {sorted(want)} found; has its format changed?")
        for w in sorted(want):
            if not re.search(r"(?<![\w-])" + re.escape(w) + r"(?![\w-])", text):
                problems.append(f"{page}: {w} (in {exe} --help) is missing")
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
