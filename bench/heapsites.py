#!/usr/bin/env python3
"""Heap still allocated, per connection, by allocation site (used by `bench/idle.sh --heaptrack`).

Input: a heaptrack "leaked" flame-graph stack file (`heaptrack_print -F FILE --flamegraph-cost-type leaked`) of a
server killed while CONNS connections were idle, so "leaked" = live at that moment. Each stack is keyed by its
allocator frames and the three callers above them; prints the sites holding at least 1 byte per connection,
largest first, with names demangled by swift-demangle when it is found.

    python3 bench/heapsites.py STACKS CONNS [--top N]
"""
import argparse
import collections
import re
import shutil
import subprocess

ALLOCATORS = re.compile(r"(swift_slowAlloc|swift_allocObject|_os_object_alloc|_dispatch_calloc|_Block_copy|"
                        r"malloc|calloc|realloc|0x[0-9a-f]+$|_dispatch_continuation_alloc)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("stacks")
    ap.add_argument("conns", type=int)
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    sites = collections.Counter()
    total = 0
    for line in open(a.stacks):
        stack, _, n = line.rstrip("\n").rpartition(" ")
        if not n.isdigit():
            continue
        n = int(n)
        total += n
        frames = [re.sub(r" \(.*\)$", "", f) for f in stack.split(";") if f][::-1]  # innermost first
        i = 0
        while i < len(frames) and ALLOCATORS.match(frames[i]):
            i += 1
        sites[" <- ".join(frames[: i + 3])] += n
    demangle = shutil.which("swift-demangle") or (
        "/opt/swift/usr/bin/swift-demangle" if shutil.which("/opt/swift/usr/bin/swift-demangle") else None)
    rows = [(k, v) for k, v in sites.most_common(a.top) if v >= a.conns]
    names = [k for k, _ in rows]
    if demangle and names:
        out = subprocess.run([demangle, "--simplified", "--compact"], input="\n".join(names) + "\n",
                             capture_output=True, text=True).stdout.splitlines()
        if len(out) == len(names):
            names = out
    print(f"heap live at idle: {total:,} bytes = {total / a.conns:,.1f} bytes per connection "
          "(requested sizes; malloc adds 8 bytes and rounds each block up to 16)")
    print()
    print("| bytes/conn | allocation site (innermost first) |")
    print("|---:|---|")
    for (k, v), name in zip(rows, names):
        print(f"| {v / a.conns:,.1f} | `{name[:300]}` |")


if __name__ == "__main__":
    main()
