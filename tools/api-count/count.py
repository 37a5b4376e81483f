#!/usr/bin/env python3
"""Counts the public API of seglog's library crates and the cycles between their modules.

For each crate it builds rustdoc's JSON (stable toolchain, `RUSTC_BOOTSTRAP=1`, without the
`internals` feature where a crate has one) and walks the public items reachable from the crate
root: through public modules and `pub use` re-exports, plus the public methods and associated
items of the reachable types' inherent impls. It prints, per crate, the distinct items, the
paths they are reachable under (an item re-exported is reachable twice), and the items reachable
under more than one path. Module cycles: the edges `use crate::a::...` / `crate::a::` between a
crate's top-level modules in its code (comments and doc links left out), and every strongly connected group of two or more.

Usage: tools/api-count/count.py [--json]   (from the repository root; ~3 minutes cold)
"""
import json
import os
import re
import subprocess
import sys
from collections import defaultdict

CRATES = [
    ("record-format", "crates/record-format", "record_format"),
    ("segment-store", "crates/segment-store", "segment_store"),
    ("recovery", "crates/recovery", "recovery"),
    ("testkit", "crates/testkit", "testkit"),
    ("seglog", ".", "seglog"),
]
TARGET = os.environ.get("API_COUNT_TARGET_DIR", "target/api-count")


def rustdoc_json(manifest_dir, lib):
    env = dict(os.environ, RUSTC_BOOTSTRAP="1", CARGO_TARGET_DIR=TARGET)
    subprocess.run(
        ["cargo", "rustdoc", "--quiet", "--lib", "--manifest-path",
         os.path.join(manifest_dir, "Cargo.toml"), "--",
         "-Z", "unstable-options", "--output-format", "json"],
        check=True, env=env)
    with open(os.path.join(TARGET, "doc", lib + ".json")) as f:
        return json.load(f)


def public_api(doc):
    idx = doc["index"]
    root = str(doc["root"])
    paths = defaultdict(set)   # item id -> paths it is reachable under
    seen_modules = set()

    def item(i):
        return idx.get(str(i))

    def kind(it):
        inner = it.get("inner")
        return next(iter(inner)) if isinstance(inner, dict) else inner

    def visit(i, prefix):
        it = item(i)
        if it is None:
            return
        k = kind(it)
        if k == "use":
            u = it["inner"]["use"]
            target = u.get("id")
            if target is None:
                return
            if u.get("is_glob"):
                t = item(target)
                if t is not None and kind(t) == "module":
                    for c in t["inner"]["module"]["items"]:
                        c_it = item(c)
                        if c_it is not None and c_it.get("visibility") == "public":
                            visit(c, prefix)
                return
            name = u.get("name")
            t = item(target)
            if t is None:
                return
            add(target, prefix + [name], t)
            return
        if it.get("visibility") != "public" and str(i) != root:
            return
        add(i, prefix + ([it["name"]] if it.get("name") and str(i) != root else []), it)

    def add(i, path, it):
        k = kind(it)
        paths[str(i)].add("::".join(path))
        if k == "module":
            if str(i) in seen_modules:
                return
            seen_modules.add(str(i))
            for c in it["inner"]["module"]["items"]:
                visit(c, path)
        elif k in ("struct", "enum", "union", "trait"):
            inner = it["inner"][k]
            for impl_id in inner.get("impls", []):
                impl = item(impl_id)
                if impl is None or kind(impl) != "impl":
                    continue
                im = impl["inner"]["impl"]
                if im.get("trait") is not None or im.get("is_synthetic") or im.get("blanket_impl"):
                    continue
                for m in im.get("items", []):
                    mi = item(m)
                    if mi is not None and mi.get("visibility") == "public":
                        paths[str(m)].add("::".join(path + [mi.get("name") or "?"]))
            if k == "trait":
                for m in inner.get("items", []):
                    mi = item(m)
                    if mi is not None:
                        paths[str(m)].add("::".join(path + [mi.get("name") or "?"]))

    add(root, [], item(root))
    paths.pop(root, None)
    return paths


def module_cycles(src_dir, lib):
    src = os.path.join(src_dir, "src")
    mods = {}
    for f in sorted(os.listdir(src)):
        p = os.path.join(src, f)
        if f.endswith(".rs") and f not in ("lib.rs", "main.rs"):
            mods[f[:-3]] = p
        elif os.path.isdir(p):
            mods[f] = p
    edges = defaultdict(set)
    pat = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
    for m, p in mods.items():
        files = [p] if p.endswith(".rs") else [
            os.path.join(dp, f) for dp, _, fs in os.walk(p) for f in fs if f.endswith(".rs")]
        if p.endswith(".rs") and os.path.isdir(p[:-3]):
            files += [os.path.join(dp, f) for dp, _, fs in os.walk(p[:-3]) for f in fs if f.endswith(".rs")]
        for f in files:
            # Code only: a doc link or comment naming a module is not a dependency.
            text = "\n".join(
                line for line in open(f, encoding="utf-8").read().split("\n")
                if not line.lstrip().startswith("//"))
            for t in pat.findall(text):
                if t in mods and t != m:
                    edges[m].add(t)
    # Tarjan's strongly connected components.
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
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
                out.append(sorted(comp))

    for v in sorted(mods):
        if v not in index:
            strong(v)
    return out


def main():
    as_json = "--json" in sys.argv
    report = {}
    for name, d, lib in CRATES:
        paths = public_api(rustdoc_json(d, lib))
        report[name] = {
            "items": len(paths),
            "paths": sum(len(p) for p in paths.values()),
            "items_under_several_paths": sum(1 for p in paths.values() if len(p) > 1),
            "module_cycles": module_cycles(d, lib),
        }
    if as_json:
        print(json.dumps(report, indent=2))
        return
    print(f"{'crate':<15} {'items':>6} {'paths':>6} {'twice+':>7}  module cycles")
    for name, r in report.items():
        cycles = "; ".join(" <-> ".join(c) for c in r["module_cycles"]) or "none"
        print(f"{name:<15} {r['items']:>6} {r['paths']:>6} {r['items_under_several_paths']:>7}  {cycles}")
    lib3 = ["record-format", "segment-store", "recovery"]
    print(f"three library crates: {sum(report[c]['items'] for c in lib3)} items, "
          f"{sum(report[c]['paths'] for c in lib3)} paths")


if __name__ == "__main__":
    main()
