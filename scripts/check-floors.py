#!/usr/bin/env python3
"""The server crate's floors hold: no module names one on a floor above its own.

`mission-server/src` is built in floors, top to bottom: `http` (the edge), `domain` (what the
service does), `services` (what it holds and runs), `config` (a leaf). The crate root builds
them and defines `App`, the handle the edge and the domain are given; nothing under `services`
or `config` may name the root. A room is a module of a floor (`http::routes`, `domain::jobs`);
an arrow is one room naming another (`crate::…`, `super::…` paths, `use crate::{…}` groups),
tests left out. Prints the rooms and arrows and each arrow that runs back up; exits 1 if any.

Usage: scripts/check-floors.py [SRC_DIR]
"""
import os
import re
import sys

FLOORS = ["http", "domain", "services", "config"]  # top to bottom
ROOT_ITEMS = re.compile(r"\bcrate::(App|AppState|Server|StartError|[A-Z][A-Z_]+)\b")
PATH = re.compile(r"\b(crate|super)::((?:[a-z_][a-z0-9_]*::)*[A-Za-z_][A-Za-z0-9_]*)")
GROUP = re.compile(r"\buse\s+(crate|super)::\{([^;]*)\}\s*;", re.S)


def modules(src):
    for folder, _, names in os.walk(src):
        for name in sorted(names):
            if name.endswith(".rs"):
                path = os.path.join(folder, name)
                parts = os.path.relpath(path, src)[:-3].split(os.sep)
                is_mod = parts[-1] in ("mod", "lib")
                yield path, parts[:-1] if is_mod else parts, is_mod


def code_of(path):
    text = re.sub(r"//[^\n]*", "", open(path, encoding="utf-8").read())
    tests = re.search(r"#\[cfg\(test\)\]\s*mod\s+tests", text)
    return text[: tests.start()] if tests else text


def room(module):
    if not module or module[0] not in FLOORS:
        return None
    return "::".join(module[:2])


def floor(name):
    return len(FLOORS) - FLOORS.index(name.split("::")[0])


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../crates/mission-server/src")
    arrows, rooms, up = set(), set(), []
    for path, module, is_mod in modules(src):
        here = room(module)
        if here is None:
            continue
        rooms.add(here)
        code = code_of(path)
        named = [(kind, rest.split("::")) for kind, rest in PATH.findall(code)]
        for kind, group in GROUP.findall(code):
            named += [(kind, [item.strip().split("::")[0]]) for item in re.split(r",(?![^{]*\})", group) if item.strip()]
        parent = module if is_mod else module[:-1]
        for kind, target in named:
            target = target if kind == "crate" else parent[:-1] + target if is_mod else parent + target
            there = room(target)
            if there and there != here:
                arrows.add((here, there))
        if floor(here) <= floor("services") and ROOT_ITEMS.search(code):
            up.append((here, "the crate root (" + ROOT_ITEMS.search(code).group(0) + ")"))
    up += sorted((a, b) for a, b in arrows if floor(b) > floor(a))
    print(f"{len(rooms)} rooms on {len(FLOORS)} floors, {len(arrows)} arrows, {len(up)} running back up")
    for a, b in up:
        print(f"  {a} -> {b}")
    return 1 if up else 0


if __name__ == "__main__":
    sys.exit(main())
