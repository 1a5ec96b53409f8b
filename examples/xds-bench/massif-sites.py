#!/usr/bin/env python3
"""What each allocation site added between two massif snapshots, per client.

usage: massif-sites.py <idle snapshot> <snapshot with clients> <clients> [min bytes per client]

Reads the detailed snapshots `massif.sh` writes and attributes every allocation to a site, the
first frame on its way from the allocator out that counts as this workspace's:
- a frame whose text names an `xds_` crate (its function, or a type parameter of it: a
  `Box<xds_core::stream::Slot<..>>::new` counts, and names the site by that frame);
- else a frame with a function name, in a file whose name is one of the workspace's and not one
  the standard library or a common dependency also uses (`SHARED_NAMES`).
Frames massif could only name by file (`UnknownInlinedFun`) never count. An allocation with no
such frame is put under the last frame massif kept for it (a dependency's, e.g. hyper's
connection buffers; with `--depth=40`, possibly a frame midway up a deeper stack). Prints each
site's growth divided by the number of clients, largest first. A heuristic: read the tree with
`ms_print` when a site looks odd.
"""
import collections
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
OURS = set()
for root, dirs, files in os.walk(ROOT):
    dirs[:] = [d for d in dirs if d not in ("target", ".git")]
    OURS.update(f for f in files if f.endswith(".rs"))
NODE = re.compile(r"^( *)n(\d+): (\d+) (?:0x[0-9A-F]+: )?(.*)$")
FRAME = re.compile(r"\(([^()]*\.rs):(\d+)\)\s*$")
# File names the workspace shares with the standard library or with its dependencies (hyper,
# h2, tokio, tonic, hashbrown): a frame in one of them is ours only when it names an `xds_` crate.
SHARED_NAMES = {
    "mod.rs", "lib.rs", "main.rs", "server.rs", "client.rs", "table.rs", "driver.rs",
    "stream.rs", "decode.rs", "encode.rs", "body.rs", "config.rs", "error.rs", "store.rs",
    "util.rs", "types.rs", "codec.rs", "message.rs", "time.rs", "io.rs", "runtime.rs",
    "alloc.rs", "string.rs", "boxed.rs", "sync.rs", "rc.rs", "map.rs", "set.rs", "node.rs",
    "watch.rs", "read.rs", "frame.rs", "signal.rs", "metrics.rs", "write.rs", "buffer.rs",
}


def ours(desc):
    if "xds_" in desc:
        return True
    m = FRAME.search(desc)
    if not m or "/" in m.group(1) or desc.startswith("UnknownInlinedFun"):
        return False
    name = os.path.basename(m.group(1))
    return name in OURS and name not in SHARED_NAMES


def sites(path):
    lines = open(path).read().split("\n")
    start = max(i for i, l in enumerate(lines) if l.startswith("heap_tree=detailed"))
    out = collections.Counter()
    stack = []  # (indent, site already found above)
    for line in lines[start + 1:]:
        m = NODE.match(line)
        if not m:
            continue
        indent, children, size, desc = len(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        found = stack[-1][1] if stack else None
        if found is None and ours(desc):
            found = desc
            out[desc] += size
        stack.append((indent, found))
        if children == 0 and found is None and indent > 0:
            out["(dependency) " + desc] += size
    return out


def main():
    idle, busy, clients = sites(sys.argv[1]), sites(sys.argv[2]), int(sys.argv[3])
    floor = float(sys.argv[4]) if len(sys.argv) > 4 else 16
    total = 0
    rows = []
    for site in set(idle) | set(busy):
        grown = busy.get(site, 0) - idle.get(site, 0)
        total += grown
        if abs(grown) / clients >= floor:
            rows.append((grown / clients, site))
    for per_client, site in sorted(rows, reverse=True):
        print(f"{per_client:>10,.0f}  {site[:160]}")
    print(f"{total / clients:>10,.0f}  in all, per client")


if __name__ == "__main__":
    main()
