#!/usr/bin/env python3
"""Checks that every Rust example a library user copies compiles with `xds-server` (and `tokio`)
as its only dependencies.

Doctests cannot check that: they see every dependency of the crate they document, so an example
that says `tonic::` or `xds_cache::` passes `cargo test` and fails with E0433 in the user's crate.
This reads the code blocks of the README files, of docs/*.md and of the doc comments in
xds-server's sources, and the sources of examples/library, and reports every path that starts
at a crate a user of `xds-server` does not depend on (`xds_server::tonic::`, `xds_server::cache::`
... are the ways to reach them).

    python3 .ci/one-crate-docs.py   # exit 1, with file:line, when an example reaches past xds-server
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Crates xds-server re-exports (as `tonic`, `axum`, `proto`, `cache`, `protocol`) or that a user
# would have to add: an example must not name them at the start of a path.
FOREIGN = ["tonic", "tower", "axum", "prost", "xds_proto", "xds_cache", "xds_core", "xds_etcd", "http"]
PATH = re.compile(r"(?<![\w:])(" + "|".join(FOREIGN) + r")::")
# Blocks that are not Rust a user compiles.
NOT_RUST = {"toml", "sh", "bash", "yaml", "json", "text", "console", "proto", "python", "ignore-text"}


def rust_blocks(lines, strip):
    """Yields (line number, code) for the lines of Rust code blocks in `lines`; `strip` removes a
    line's comment prefix (for doc comments) or returns None when the line is not part of the doc."""
    in_block = False
    rust = False
    for number, raw in enumerate(lines, 1):
        line = strip(raw)
        if line is None:
            in_block = False
            continue
        fence = line.strip()
        if fence.startswith("```"):
            if in_block:
                in_block = False
            else:
                in_block = True
                info = fence[3:].strip().split(",")[0]
                rust = info not in NOT_RUST
            continue
        if in_block and rust:
            yield number, line


def doc_line(raw):
    m = re.match(r"\s*//[/!] ?(.*)", raw)
    return m.group(1) if m else None


def findings():
    sources = []
    for md in [ROOT / "README.md", *sorted(ROOT.glob("*/README.md")), *sorted((ROOT / "docs").glob("*.md"))]:
        sources.append((md, rust_blocks(md.read_text().splitlines(), lambda l: l)))
    for rs in sorted((ROOT / "xds-server" / "src").rglob("*.rs")):
        sources.append((rs, rust_blocks(rs.read_text().splitlines(), doc_line)))
    for rs in sorted((ROOT / "examples" / "library").rglob("*.rs")):
        sources.append((rs, enumerate(rs.read_text().splitlines(), 1)))
    for path, lines in sources:
        for number, code in lines:
            code = code.split("//")[0] if not code.lstrip().startswith("#") else code.lstrip("# ")
            for m in PATH.finditer(code):
                yield f"{path.relative_to(ROOT)}:{number}: `{m.group(1)}::` (reach it through xds_server)"


def main():
    found = list(findings())
    for f in found:
        print(f)
    if found:
        print(f"{len(found)} example line(s) need a crate other than xds-server", file=sys.stderr)
        return 1
    print("every example reaches its crates through xds-server")
    return 0


if __name__ == "__main__":
    sys.exit(main())
