#!/usr/bin/env python3
"""Checks what a device-check run left in $OUT against the device tool's
rules for the files it brings back (scripts/device-rehearsal.sh runs it):

  - at most 8 files (here at most 4: the three, and one being renamed in),
    each at most 16 MiB, 64 MiB together;
  - none more than two folders down ($OUT/a/b/file comes back, $OUT/a/b/c/file not);
  - every file and folder named in letters, digits, '.', '_' and '-' alone;
  - only plain files and folders (no links);
  - results.tar.xz opens and holds at least one file;
  - summary.md has a row in its table for every step 1-9.

Usage: device_rules.py OUT [--final STEPS] [--ok STEPS] [--running STEP]

--final STEPS (a comma list, or "all"): these steps' rows have a verdict
(passed, failed, skipped, timed out), not "running" or "not reached";
--ok STEPS: these passed or were skipped (with a reason); --running STEP:
this step's row says "running" (a run killed during it). Exits 1 with the
broken rules listed.
"""
import argparse
import os
import re
import sys
import tarfile

NAME = re.compile(r"^[A-Za-z0-9._-]+$")
MIB = 1 << 20


def steps(arg):
    if not arg:
        return []
    return list(range(1, 10)) if arg == "all" else [int(x) for x in arg.split(",") if x]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--final", default="")
    ap.add_argument("--ok", default="")
    ap.add_argument("--running", type=int)
    a = ap.parse_args()
    bad = []
    files = []
    for d, dirs, names in os.walk(a.out):
        rel_d = os.path.relpath(d, a.out)
        for n in dirs + names:
            p = os.path.join(d, n)
            rel = os.path.normpath(os.path.join(rel_d, n))
            if not NAME.match(n):
                bad.append(f"{rel}: name outside [A-Za-z0-9._-]")
            if os.path.islink(p):
                bad.append(f"{rel}: a link")
            elif n in names and not os.path.isfile(p):
                bad.append(f"{rel}: not a plain file")
        for n in names:
            rel = os.path.normpath(os.path.join(rel_d, n))
            size = os.path.getsize(os.path.join(d, n))
            files.append((rel, size))
            if rel.count(os.sep) > 2:
                bad.append(f"{rel}: more than two folders down")
            if size > 16 * MIB:
                bad.append(f"{rel}: {size} bytes, over 16 MiB")
    if len(files) > 8:
        bad.append(f"{len(files)} files, over the 8 that come back")
    if len(files) > 4:
        bad.append(f"{len(files)} files: more than the three and one being renamed in")
    if sum(s for _, s in files) > 64 * MIB:
        bad.append("over 64 MiB together")

    tar = os.path.join(a.out, "results.tar.xz")
    try:
        with tarfile.open(tar) as t:
            members = [m for m in t.getmembers() if m.isfile()]
        if not members:
            bad.append("results.tar.xz holds no file")
    except (OSError, tarfile.TarError) as e:
        bad.append(f"results.tar.xz does not open: {e}")
        members = []

    status = {}
    try:
        for line in open(os.path.join(a.out, "summary.md")):
            m = re.match(r"^\| (\d)\. [^|]*\| ([^|]*?) \|", line)
            if m:
                status[int(m.group(1))] = m.group(2)
    except OSError as e:
        bad.append(f"no summary.md: {e}")
    for n in range(1, 10):
        if n not in status:
            bad.append(f"summary.md has no row for step {n}")
    for n in steps(a.final):
        if status.get(n) in (None, "running", "not reached"):
            bad.append(f"step {n}: '{status.get(n)}', not a verdict")
    for n in steps(a.ok):
        if status.get(n) not in ("passed", "skipped"):
            bad.append(f"step {n}: '{status.get(n)}', not passed or skipped")
    if a.running and status.get(a.running) != "running":
        bad.append(f"step {a.running}: '{status.get(a.running)}', not running")

    print("device-rules: %d files (%s), results.tar.xz with %d files; steps: %s" % (
        len(files), ", ".join(f"{r} {s}" for r, s in sorted(files)), len(members),
        ", ".join(f"{n} {status.get(n)}" for n in range(1, 10))))
    for b in bad:
        print("device-rules: FAIL " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
