#!/usr/bin/env python3
"""Prints the module graph of a Rust crate's top-level modules and its import cycles.

    compat/tools/modgraph.py broker/src [--dot] [--stats] [--check [ALLOWED]]

A module's edges are the `crate::X` paths its non-test code names (in `use` items and
in expressions, `crate::{a, b}` groups included). Test code (files named tests.rs or
*_tests.rs, and everything after a `#[cfg(test)]` line) is left out: tests may reach
across layers. `--check N` exits 1 when the largest cycle (strongly connected
component) has more than N modules (0 by default: no cycle at all). `--stats` adds
lines per top-level module, the largest file and function, and how many function
signatures take the whole `Shard`.
"""
import re
import sys
from pathlib import Path

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def top_module(src: Path, path: Path) -> str:
    rel = path.relative_to(src).parts
    name = rel[0][:-3] if rel[0].endswith(".rs") else rel[0]
    return "(root)" if name in ("lib", "main") else name


def strip_tests_and_comments(text: str) -> str:
    keep = []
    for line in text.splitlines():
        if line.strip().startswith("#[cfg(test)]"):
            break
        keep.append(line.split("//", 1)[0])
    return "\n".join(keep)


def crate_refs(code: str):
    for m in re.finditer(r"\bcrate::", code):
        rest = code[m.end():]
        if rest.startswith("{"):
            depth, group = 0, ""
            for ch in rest:
                depth += ch == "{"
                depth -= ch == "}"
                group += ch
                if depth == 0:
                    break
            inner, depth, part = group[1:-1], 0, ""
            for ch in inner + ",":
                if ch == "," and depth == 0:
                    ident = IDENT.match(part.strip())
                    if ident:
                        yield ident.group(0)
                    part = ""
                    continue
                depth += ch == "{"
                depth -= ch == "}"
                part += ch
        else:
            ident = IDENT.match(rest)
            if ident:
                yield ident.group(0)


def graph(src: Path):
    modules = {top_module(src, p) for p in src.iterdir() if p.suffix == ".rs" or p.is_dir()}
    edges = {m: set() for m in modules}
    for path in src.rglob("*.rs"):
        if path.name == "tests.rs" or path.name.endswith("_tests.rs"):
            continue
        here = top_module(src, path)
        for target in crate_refs(strip_tests_and_comments(path.read_text())):
            if target in modules and target != here and target != "(root)":
                edges[here].add(target)
    return edges


FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(async\s+)?fn\s+(\w+)")
WHOLE_SHARD = re.compile(r"\bShard\b")


def stats(src: Path):
    lines, files, functions, whole_shard = {}, [], [], 0
    for path in sorted(src.rglob("*.rs")):
        text = path.read_text().splitlines()
        module = top_module(src, path)
        lines[module] = lines.get(module, 0) + len(text)
        files.append((len(text), str(path)))
        i = 0
        while i < len(text):
            m = FN.match(text[i])
            if not m:
                i += 1
                continue
            # The signature runs to the line opening the body (or ending a declaration).
            j = i
            while j < len(text) and "{" not in text[j] and not text[j].rstrip().endswith(";"):
                j += 1
            signature = " ".join(text[i:j + 1]).split("{", 1)[0]
            whole_shard += bool(WHOLE_SHARD.search(signature))
            depth, k = 0, j
            while k < len(text):
                depth += text[k].count("{") - text[k].count("}")
                if depth <= 0:
                    break
                k += 1
            functions.append((k - i + 1, f"{path}:{i + 1} {m.group(4)}"))
            i = j + 1
    return lines, max(files), max(functions), whole_shard


def components(edges):
    """Tarjan's strongly connected components."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    src = Path(args[0])
    edges = graph(src)
    if "--dot" in args:
        print("digraph modules {")
        for m in sorted(edges):
            for t in sorted(edges[m]):
                print(f'  "{m}" -> "{t}";')
        print("}")
        return 0
    comps = components(edges)
    largest = max(comps, key=len)
    both = sorted({tuple(sorted((a, b))) for a in edges for b in edges[a] if a in edges[b]})
    n_edges = sum(len(t) for t in edges.values())
    print(f"{src}: {len(edges)} modules, {n_edges} edges, {len(both)} pairs importing each other, "
          f"largest cycle {len(largest) if len(largest) > 1 else 0}")
    for comp in comps:
        if len(comp) > 1:
            print("  cycle: " + ", ".join(comp))
    for a, b in both:
        print(f"  both ways: {a} <-> {b}")
    if "--layers" in args or "--check" not in args:
        # Modules in dependency order: each line only imports lines above it.
        order = [c for c in comps]  # Tarjan emits sinks first
        for depth, comp in enumerate(order):
            deps = sorted({t for m in comp for t in edges[m]} - set(comp))
            print(f"  {' + '.join(comp)} -> {', '.join(deps) or '-'}")
    if "--stats" in args:
        lines, largest_file, largest_fn, whole_shard = stats(src)
        print("  lines per module: " + ", ".join(f"{m} {n}" for m, n in sorted(lines.items(), key=lambda x: -x[1])))
        print(f"  largest file: {largest_file[1]} ({largest_file[0]} lines)")
        print(f"  largest function: {largest_fn[1]} ({largest_fn[0]} lines)")
        print(f"  signatures naming the whole Shard: {whole_shard}")
    if "--check" in args:
        i = args.index("--check")
        allowed = int(args[i + 1]) if i + 1 < len(args) and args[i + 1].isdigit() else 0
        size = len(largest) if len(largest) > 1 else 0
        if size > allowed:
            print(f"modgraph: {src} has a cycle of {size} modules (allowed {allowed})", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
