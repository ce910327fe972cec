#!/usr/bin/env python3
"""The numbers the house keeps to, measured on the working tree.

Lines of code are a source file's lines before its first `#[cfg(test)]`; files named
`tests.rs`, `*_tests.rs`, `testing.rs` or `testdata.rs` count as tests, as does all of `tests/`.
Usage: python3 scripts/house_numbers.py [-v]
"""
import os
import re
import sys

TEST_FILES = ("tests.rs", "testing.rs", "testdata.rs")
CODE_LIMIT, FILE_LIMIT, COMMON_LIMIT = 23_500, 650, 2_600


def lines(path):
    text = open(path, encoding="utf-8").read()
    return text.rstrip("\n").split("\n") if text else []


def rust_files(top):
    for d, _, files in os.walk(top):
        for f in sorted(files):
            if f.endswith(".rs"):
                yield os.path.join(d, f)


def split(path):
    body = lines(path)
    name = os.path.basename(path)
    if name in TEST_FILES or name.endswith("_tests.rs"):
        return 0, len(body)
    for i, line in enumerate(body):
        if line.strip() == "#[cfg(test)]":
            return i, len(body) - i
    return len(body), 0


def main():
    verbose = "-v" in sys.argv
    code = inline = 0
    big, per_dir = [], {}
    for path in rust_files("src"):
        c, t = split(path)
        code += c
        inline += t
        if c > FILE_LIMIT:
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
    print(f"src code           {code:7}  (limit {CODE_LIMIT})")
    print(f"inline tests       {inline:7}")
    print(f"tests/             {tests:7}")
    print(f"tests/common       {common:7}  (limit {COMMON_LIMIT})")
    print(f"tests : code       {ratio:7.2f}  (limit 1.00)")
    print(f"outside references {refs:7}  (§, step N, quirk N, issue N in src/)")
    for c, path in sorted(big, reverse=True):
        print(f"over {FILE_LIMIT} lines: {path} ({c})")
    if verbose:
        for key, c in sorted(per_dir.items(), key=lambda kv: -kv[1]):
            print(f"  {c:6} {key}")


if __name__ == "__main__":
    main()
