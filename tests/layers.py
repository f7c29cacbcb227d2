#!/usr/bin/env python3
"""The daemon's layers call downward only: front -> engine -> net -> core -> gpu -> proto. This
check reads every quoted #include of daemon/, gpu/ and proto/ and fails when a file includes a
header of a layer above its own, or when modules (a .c and its .h) include each
other in a cycle, within a layer or across. It also keeps each library behind its one module:
hiredis in daemon/net/rendezvous (and its parts, rendezvous_*) only, CUDA and NCCL in gpu/ only.
A split module's private header (PRIVATE) stays within the module and its parts.

usage: layers.py SOURCE_ROOT      checks the tree
       layers.py --self-test      shows on a made-up tree that each rule fails when broken
"""
import os
import re
import sys
import tempfile

# Rank of each folder: a file may include headers of its own rank or below.
LAYERS = [
    ("proto", 0), ("client/include", 0), ("gpu", 1),  # the backends speak the wire's dtypes
    ("daemon/core", 2), ("daemon/net", 3), ("daemon/engine", 4), ("daemon/front", 5),
    ("daemon", 6),  # main.c: wires the layers
]
CHECKED = ("daemon", "gpu", "proto")
GENERATED = {"ringd_build.h", "ringd.pb-c.h"}  # made by the build, in the lowest layer
# Library headers and the only modules that may include them (a module's parts, named
# <module>_<part>, too).
LIBRARIES = [
    (re.compile(r"^hiredis/"), {"daemon/net/rendezvous"}),
    (re.compile(r"^(cuda|cuda_runtime|nccl)[^/]*\.h$"), None),  # None: anything under gpu/
]
# Private headers of a module split over several files (<module>_<part>.c): each counts as part
# of its module, so the module's header it includes makes no cycle, and only the module and its
# parts may include it.
PRIVATE = {"daemon/net/world_int.h": "daemon/net/world"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]', re.M)


def layer_of(rel):
    """The folder of LAYERS a path belongs to (the longest match) and its rank."""
    best = None
    for folder, rank in LAYERS:
        if os.path.dirname(rel) == folder or rel.startswith(folder + "/"):
            if best is None or len(folder) > len(best[0]):
                best = (folder, rank)
    return best


def sources(root):
    for top in CHECKED:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if f.endswith((".c", ".h", ".cu", ".cuh")):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def check(root):
    """Returns the list of violations found under root."""
    files = list(sources(root))
    by_name = {}
    for rel in files:
        by_name.setdefault(os.path.basename(rel), []).append(rel)
    problems = []
    edges = {}  # module -> modules it includes
    for rel in files:
        here = layer_of(rel)
        if here is None:
            continue
        module = PRIVATE.get(rel, os.path.splitext(rel)[0])
        edges.setdefault(module, set())
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for kind, name in INCLUDE.findall(text):
            if kind == "<":
                for pattern, allowed in LIBRARIES:
                    if pattern.search(name):
                        ok = rel.startswith("gpu/") if allowed is None else any(
                            module == m or module.startswith(m + "_") for m in allowed)
                        if not ok:
                            problems.append(f"{rel} includes <{name}>: only "
                                            f"{'gpu/' if allowed is None else ', '.join(sorted(allowed))} "
                                            f"may use that library")
                continue
            if name in GENERATED:
                continue
            same_dir = os.path.normpath(os.path.join(os.path.dirname(rel), name))
            targets = [same_dir] if same_dir in files else by_name.get(os.path.basename(name), [])
            if not targets:
                if not os.path.exists(os.path.join(root, "client/include", name)):
                    problems.append(f"{rel} includes \"{name}\", which is in no layer")
                continue
            if len(targets) > 1:
                problems.append(f"{rel} includes \"{name}\", which names several files: "
                                f"{', '.join(targets)}")
                continue
            target = targets[0]
            there = layer_of(target)
            if there is not None and there[1] > here[1]:
                problems.append(f"{rel} includes {target}: {here[0]} may not include {there[0]} "
                                f"(calls go down the layers; news goes up through callbacks "
                                f"given at construction)")
            tmod = PRIVATE.get(target, os.path.splitext(target)[0])
            if target in PRIVATE and module != tmod and not module.startswith(tmod + "_"):
                problems.append(f"{rel} includes {target}: it is private to {tmod} and its parts")
            if tmod != module:
                edges[module].add(tmod)
    problems += [f"modules include each other in a cycle: {' -> '.join(c + [c[0]])}"
                 for c in cycles(edges)]
    return problems


def cycles(edges):
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(path_in(edges, set(comp)))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def path_in(edges, comp):
    """A cycle through the component, for the message."""
    start = min(comp)
    path, seen, v = [start], {start}, start
    while True:
        nxt = sorted(w for w in edges.get(v, ()) if w in comp)
        back = [w for w in nxt if w == start]
        if back and len(path) > 1:
            return path
        fresh = [w for w in nxt if w not in seen]
        if not fresh:
            return path
        v = fresh[0]
        path.append(v)
        seen.add(v)


def self_test():
    """Each rule, broken on purpose in a small tree, must be reported."""
    cases = {
        "upward include": {"daemon/net/a.c": '#include "b.h"\n', "daemon/engine/b.h": ""},
        "cycle": {"daemon/front/a.c": '#include "b.h"\n', "daemon/front/a.h": "",
                  "daemon/front/b.c": '#include "a.h"\n', "daemon/front/b.h": ""},
        "library outside its module": {"daemon/engine/a.c": "#include <hiredis/hiredis.h>\n"},
        "cuda outside gpu": {"daemon/core/a.c": "#include <cuda.h>\n"},
        "proto above gpu": {"proto/a.c": '#include "b.h"\n', "gpu/b.h": ""},
        "private header outside its module": {"daemon/net/world_int.h": "",
                                              "daemon/net/peer.c": '#include "world_int.h"\n'},
    }
    clean = {"daemon/front/a.c": '#include "b.h"\n#include "c.h"\n', "daemon/engine/b.h": "",
             "daemon/core/c.h": "", "daemon/net/rendezvous.c": "#include <hiredis/hiredis.h>\n",
             "daemon/net/rendezvous_conn.c": "#include <hiredis/async.h>\n",
             "daemon/net/world.h": "", "daemon/net/world_int.h": '#include "world.h"\n',
             "daemon/net/world.c": '#include "world_int.h"\n',
             "daemon/net/world_ctrl.c": '#include "world_int.h"\n#include "world.h"\n',
             "gpu/cuda.c": "#include <cuda.h>\n"}
    failed = 0
    for name, tree in list(cases.items()) + [("a clean tree", clean)]:
        with tempfile.TemporaryDirectory() as root:
            for rel, text in tree.items():
                os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
                with open(os.path.join(root, rel), "w") as fh:
                    fh.write(text)
            got = check(root)
        want_fail = tree is not clean
        if bool(got) != want_fail:
            print(f"self-test '{name}': expected {'a violation' if want_fail else 'none'}, "
                  f"got {got or 'none'}")
            failed = 1
    print("self-test: every rule reports its violation" if not failed else "self-test failed")
    return failed


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) != 2:
        print(__doc__)
        return 2
    problems = check(argv[1])
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} layering problem(s)")
        return 1
    print("layers: every include goes down (front > engine > net > core), no module cycles")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
