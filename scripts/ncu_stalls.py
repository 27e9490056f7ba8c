#!/usr/bin/env python3
"""Where the warps of one kernel stall, from the per-instruction CSV that scripts/ncu_profile.sh writes
(<profile>_sass.csv.gz: `ncu --page source --print-source sass --csv`).

Prints the stall samples by reason and by opcode, the executed instructions by opcode (the instruction mix:
compare two kernels that run the same mma count), then the instructions with the most samples (index in
the listing, share of all samples, executions, SASS, the top three reasons). With --range A B it prints
the listing of instructions A..B instead, with each one's share.

Usage: scripts/ncu_stalls.py FILE.csv.gz [--top N] [--range A B]
"""

import argparse
import collections
import csv
import gzip
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    # Row 0 names the kernel; row 1 is the header.
    header, data = rows[1], rows[2:]
    return {h: i for i, h in enumerate(header)}, header, data


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--range", type=int, nargs=2, metavar=("A", "B"))
    args = p.parse_args(argv)
    ix, header, data = load(args.csv)
    samples = lambda r: int(r[ix[SAMPLES]] or 0)
    total = sum(samples(r) for r in data) or 1
    if args.range:
        for i in range(*args.range):
            r = data[i]
            print(f"{i:6d} {100 * samples(r) / total:5.2f}% {r[ix['Instructions Executed']]:>9} {r[ix['Source']].strip()}")
        return 0
    reasons = [h for h in header if h.startswith("stall_") and "(Not Issued)" not in h]
    by_reason = collections.Counter()
    by_opcode = collections.Counter()
    executed = collections.Counter()
    for r in data:
        for s in reasons:
            by_reason[s[6:]] += int(r[ix[s]] or 0)
        words = [w for w in r[ix["Source"]].split() if not w.startswith("@")]
        opcode = words[0].split(".")[0] if words else "?"
        by_opcode[opcode] += samples(r)
        executed[opcode] += int(r[ix["Instructions Executed"]] or 0)
    n_exec = sum(executed.values()) or 1
    print(f"{len(data)} instructions, {total} samples, {n_exec} warp instructions executed")
    print("by reason:", ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in by_reason.most_common(10)))
    print("by opcode:", ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in by_opcode.most_common(12)))
    print("executed: ", ", ".join(f"{k} {100 * v / n_exec:.1f}%" for k, v in executed.most_common(12)))
    for i in sorted(range(len(data)), key=lambda i: -samples(data[i]))[:args.top]:
        r = data[i]
        top = sorted(((int(r[ix[s]] or 0), s[6:]) for s in reasons), reverse=True)[:3]
        why = " ".join(f"{name}:{n}" for n, name in top if n)
        print(f"{i:6d} {100 * samples(r) / total:5.2f}% {r[ix['Instructions Executed']]:>9} "
              f"{r[ix['Source']].strip()[:70]:70s} {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
