#!/usr/bin/env python3
"""What travels to the device machine, measured against a limit.

The device tool copies the working tree: tracked files (as they are in the
working tree), untracked files that git does not ignore, a shared/ folder
inside the checkout, and the carried paths (device-inputs/). All of it
together must stay under 64 MiB; this checks it against 60 MiB by default
to leave a margin.

Usage: device_size.py [--root DIR] [--limit-mib 60] [--carry PATH]...

Prints the total and each part's; when over the limit, names the ten
largest items and exits 1. A carried path may lie outside the checkout (the
rehearsal's temporary device-inputs): it counts as carried all the same.
"""
import argparse
import os
import subprocess
import sys


def git_files(root, *extra):
    out = subprocess.run(["git", "-C", root, "ls-files", "-z", *extra],
                         check=True, capture_output=True).stdout
    return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]


def file_size(path):
    try:
        st = os.lstat(path)
    except OSError:  # tracked but deleted in the working tree
        return None
    return st.st_size


def tree_files(top):
    """Every file under top (links as links, as the tool sends them)."""
    if os.path.isfile(top) or os.path.islink(top):
        yield top
        return
    for d, dirs, files in os.walk(top):
        for name in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
            yield os.path.join(d, name)


def mib(n):
    return n / (1024.0 * 1024.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--limit-mib", type=float, default=60.0)
    ap.add_argument("--carry", action="append", default=[],
                    help="a carried path (relative to the root, or absolute)")
    a = ap.parse_args()
    root = os.path.realpath(a.root)

    seen = {}  # real path -> (part, shown name, size)

    def add(part, path, shown):
        real = os.path.realpath(path) if not os.path.islink(path) else os.path.abspath(path)
        if real in seen:
            return
        size = file_size(path)
        if size is not None:
            seen[real] = (part, shown, size)

    for rel in git_files(root):
        add("tracked", os.path.join(root, rel), rel)
    for rel in git_files(root, "-o", "--exclude-standard"):
        add("untracked, not ignored", os.path.join(root, rel), rel)
    shared = os.path.join(root, "shared")
    if os.path.isdir(shared):
        for f in tree_files(shared):
            add("shared/", f, os.path.relpath(f, root))
    for c in a.carry:
        top = c if os.path.isabs(c) else os.path.join(root, c)
        if not os.path.exists(top):
            print(f"device-size: carried path {c} does not exist (nothing of it travels)")
            continue
        name = os.path.basename(os.path.normpath(c))
        for f in tree_files(top):
            add(f"carried {name}/", f, os.path.join(name, os.path.relpath(f, top)))

    parts = {}
    for part, _, size in seen.values():
        parts[part] = parts.get(part, 0) + size
    total = sum(parts.values())
    detail = ", ".join(f"{p} {mib(s):.1f}" for p, s in sorted(parts.items()))
    print(f"device-size: {mib(total):.1f} MiB travel ({detail}); "
          f"the limit checked is {a.limit_mib:g} MiB (the tool's is 64)")
    if mib(total) <= a.limit_mib:
        return 0
    print(f"device-size: over the limit by {mib(total) - a.limit_mib:.1f} MiB; the ten largest items:")
    items = {}
    # Files, a carried path's files and folders one level down taken whole
    # (device-inputs/cases/, device-inputs/nvrtc12.tar.xz).
    for part, shown, size in seen.values():
        parts_of = shown.split(os.sep)
        if part.startswith("carried") and len(parts_of) > 2:
            shown = os.path.join(*parts_of[:2]) + "/"
        items[shown] = items.get(shown, 0) + size
    for shown, size in sorted(items.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {mib(size):7.2f} MiB  {shown}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
