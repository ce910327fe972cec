#!/usr/bin/env python3
"""The numbers the house watches, measured on the working tree. Sizes are watched, not
enforced (a file grows when its one purpose needs it); file cycles and references to documents
outside the repository are kept at zero.

Lines of code are a source file's lines before its first `#[cfg(test)]`; files named
`tests.rs`, `*_tests.rs`, `testing.rs` or `testdata.rs` count as tests, as do the files of a
module declared `#[cfg(test)] mod name;` and all of `tests/`.
A file cycle is a group of files whose code (tests aside) names each other through `use` or
`crate::`/`super::` paths, directly or round a loop.
Usage: python3 scripts/house_numbers.py [-v]
"""
import os
import re
import sys

TEST_FILES = ("tests.rs", "testing.rs", "testdata.rs")
LARGEST = 8  # the files listed as the largest


def lines(path):
    text = open(path, encoding="utf-8").read()
    return text.rstrip("\n").split("\n") if text else []


def rust_files(top):
    for d, _, files in os.walk(top):
        for f in sorted(files):
            if f.endswith(".rs"):
                yield os.path.join(d, f)


# `#[cfg(test)]` on a module declared in its own file (`mod fuzz;`): that file, or directory, is
# all tests, and the declaring file's tests do not start there.
TEST_MOD = re.compile(r"^\s*(?:pub(?:\([\w:]+\))?\s+)?mod (\w+);")


def test_module_decl(body, i):
    """The module name if line `i` is `#[cfg(test)]` on an out-of-line `mod name;`."""
    if body[i].strip() != "#[cfg(test)]":
        return None
    for line in body[i + 1 :]:
        if not line.strip().startswith("#["):
            m = TEST_MOD.match(line)
            return m.group(1) if m else None
    return None


def test_module_dirs(top="src"):
    """Files and directories of modules declared `#[cfg(test)] mod name;`."""
    out = []
    for path in rust_files(top):
        body = lines(path)
        base = os.path.dirname(path)
        if os.path.basename(path) not in ("mod.rs", "lib.rs", "main.rs"):
            base = path[:-3]
        for i in range(len(body)):
            name = test_module_decl(body, i)
            if name:
                out += [os.path.join(base, name + ".rs"), os.path.join(base, name) + "/"]
    return out


def split(path, test_modules=()):
    body = lines(path)
    name = os.path.basename(path)
    if name in TEST_FILES or name.endswith("_tests.rs"):
        return 0, len(body)
    if any(path == t or path.startswith(t) for t in test_modules if t):
        return 0, len(body)
    for i, line in enumerate(body):
        if line.strip() == "#[cfg(test)]" and not test_module_decl(body, i):
            return i, len(body) - i
    return len(body), 0


def module_files(top="src"):
    """Each source file under its module path: src/disk/device.rs is ("disk", "device")."""
    files = {}
    for path in rust_files(top):
        parts = path[len(top) + 1 : -3].split("/")
        if parts[-1] in ("mod", "lib", "main"):
            parts = parts[:-1]
        files[tuple(parts)] = path
    return files


USE = re.compile(r"\buse\s+(crate|super|self)::([^;]*);", re.S)
PATH = re.compile(r"\b(crate|super|self)((?:::\w+)+)")


def split_items(inner):
    depth, cur, items = 0, "", []
    for ch in inner:
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    return items + [cur]


def file_edges(files):
    """The files each file's code (not its tests) names through `crate::`, `super::` or `self::`."""
    edges = {}
    for module, path in files.items():
        code, _ = split(path)
        text = re.sub(r"//[^\n]*", "", "\n".join(lines(path)[:code]))
        targets = set()

        def resolve(segments):
            best = None
            for i in range(1, len(segments) + 1):
                if tuple(segments[:i]) in files:
                    best = tuple(segments[:i])
            if best:
                targets.add(best)

        def expand(prefix, body):
            body = body.strip()
            braces = re.match(r"^([\w:]*?)(::)?\{(.*)\}$", body, re.S)
            if braces:
                head = [s for s in braces.group(1).split("::") if s]
                for item in split_items(braces.group(3)):
                    if item.strip():
                        expand(prefix + head, item)
                return
            segments = [s.strip() for s in body.split(" as ")[0].split("::")]
            segments = [s for s in segments if re.match(r"^\w+$", s)]
            base = list(prefix)
            while segments and segments[0] == "super":
                base, segments = base[:-1], segments[1:]
            resolve(base + segments)

        def root(kind):
            return {"crate": [], "self": list(module), "super": list(module[:-1])}[kind]

        for m in USE.finditer(text):
            expand(root(m.group(1)), m.group(2))
        for m in PATH.finditer(text):
            expand(root(m.group(1)), m.group(2).strip(":"))
        targets.discard(module)
        edges[module] = targets
    return edges


def file_cycles(top="src"):
    """Strongly connected groups of more than one file in the `use` graph (Tarjan)."""
    files = module_files(top)
    edges = file_edges(files)
    index, low, stack, on, groups = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(files[w])
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for v in edges:
        if v not in index:
            visit(v)
    return groups


def main():
    verbose = "-v" in sys.argv
    code = inline = 0
    big, per_dir = [], {}
    test_modules = test_module_dirs()
    for path in rust_files("src"):
        c, t = split(path, test_modules)
        code += c
        inline += t
        big.append((c, path))
        key = "/".join(path.split("/")[:3])
        per_dir[key] = per_dir.get(key, 0) + c
    tests = sum(len(lines(p)) for p in rust_files("tests"))
    common = sum(len(lines(p)) for p in rust_files("tests/common"))
    refs = 0
    pattern = re.compile(r"§|\b[Qq]uirk \d|\b[Ii]ssue \d|\b[Ss]tep \d")
    for path in rust_files("src"):
        refs += sum(1 for line in lines(path) if pattern.search(line))
    ratio = (inline + tests) / code
    print(f"src code           {code:7}")
    print(f"inline tests       {inline:7}")
    print(f"tests/             {tests:7}")
    print(f"tests/common       {common:7}")
    print(f"tests : code       {ratio:7.2f}")
    print(f"outside references {refs:7}  (kept at 0: §, step N, quirk N, issue N in src/)")
    cycles = file_cycles()
    print(f"file cycles        {len(cycles):7}  (kept at 0)")
    for group in cycles:
        print("  cycle: " + " <-> ".join(group))
    for doc in ["README.md", "ARCHITECTURE.md"]:
        print(f"{doc:18} {len(lines(doc)):7} lines")
    book = [os.path.join("docs/src", f) for f in sorted(os.listdir("docs/src")) if f.endswith(".md")]
    print(f"the book (docs/src) {sum(len(lines(p)) for p in book):6} lines in {len(book)} pages")
    print("largest files (lines of code):")
    for c, path in sorted(big, reverse=True)[:LARGEST]:
        print(f"  {c:6} {path}")
    if verbose:
        for key, c in sorted(per_dir.items(), key=lambda kv: -kv[1]):
            print(f"  {c:6} {key}")


if __name__ == "__main__":
    main()
