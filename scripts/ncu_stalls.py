#!/usr/bin/env python3
"""Where the warps of one kernel stall, from the per-instruction CSV that scripts/ncu_profile.sh writes
(<profile>_sass.csv.gz: `ncu --page source --print-source sass --csv`).

Prints the stall samples by reason and by opcode, the executed instructions by opcode (the instruction mix:
compare two kernels that run the same mma count), then the instructions with the most samples (index in
the listing, share of all samples, executions, SASS, the top three reasons). With --range A B it prints
the listing of instructions A..B instead, with each one's share. With --phases it prints the listing cut
into the stretches between barriers, cp.async commits and branches (a kernel's phases: a tile's products,
its element math, its stores), each with its share of the samples, its executed instructions and the
opcodes that hold its samples. With --memory it prints, per memory opcode, the L2 sectors its instructions
ask for against the ideal count for their addresses ("L2 Theoretical Sectors Global" and "... Ideal") and the
shared-memory wavefronts beyond the ideal ("L1 Wavefronts Shared Excessive"), per executed instruction, then
the instructions with the most excess sectors: a cp.async whose shared destination splits its 32-byte
sectors shows here (docs/kvcache.md).

Usage: scripts/ncu_stalls.py FILE.csv.gz [--top N] [--range A B | --phases | --memory]
"""

import argparse
import collections
import csv
import gzip
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
L2_SECTORS = "L2 Theoretical Sectors Global"
L2_IDEAL = "L2 Theoretical Sectors Global Ideal"
SHARED_EXCESS = "L1 Wavefronts Shared Excessive"


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    # Row 0 names the kernel; row 1 is the header. A report of several launches repeats both for each one:
    # only the first launch is read.
    header, data = rows[1], rows[2:]
    for i, row in enumerate(data):
        if row[:1] == ["Kernel Name"] or row == header:
            data = data[:i]
            break
    return {h: i for i, h in enumerate(header)}, header, data


def count(r, ix, col):
    """The integer in column `col` of row `r` (thousands separators allowed; 0 if empty or absent)."""
    return int((r[ix[col]] if col in ix else "").replace(",", "") or 0)


def opcode_of(source):
    words = [w for w in source.split() if not w.startswith("@")]
    return words[0].split(".")[0] if words else "?"


# Instructions that end a phase: barriers, cp.async commits and branches.
PHASE_ENDS = ("BAR", "LDGDEPBAR", "BRA")


def phases(data, ix, samples, total):
    """(first, last, share of samples, executed, Counter of samples by opcode) per stretch with samples."""
    out = []
    first, acc, executed, ops = 0, 0, 0, collections.Counter()
    for i, r in enumerate(data):
        op = opcode_of(r[ix["Source"]])
        acc += samples(r)
        executed += count(r, ix, "Instructions Executed")
        ops[op] += samples(r)
        if op in PHASE_ENDS or i == len(data) - 1:
            if acc:
                out.append((first, i, acc / total, executed, ops))
            first, acc, executed, ops = i + 1, 0, 0, collections.Counter()
    return out


def memory(data, ix, top):
    """Per memory opcode: executions, L2 sectors and their ideal, excess shared wavefronts (per instruction);
    then the `top` instructions with the most excess sectors. Returns the printed lines."""
    totals = collections.defaultdict(lambda: [0, 0, 0, 0])  # executed, sectors, ideal, shared excess
    for r in data:
        t = totals[opcode_of(r[ix["Source"]])]
        for k, col in enumerate(("Instructions Executed", L2_SECTORS, L2_IDEAL, SHARED_EXCESS)):
            t[k] += count(r, ix, col)
    lines = []
    for op, (executed, sectors, ideal, shared) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        if not (sectors or shared) or not executed:
            continue
        lines.append(f"{op:8s} {executed:>12d} executed  L2 sectors {sectors / executed:6.2f} per instruction "
                     f"(ideal {ideal / executed:6.2f})  shared wavefronts beyond ideal {shared / executed:6.2f}")
    excess = [(count(r, ix, L2_SECTORS) - count(r, ix, L2_IDEAL), i) for i, r in enumerate(data)]
    for n, i in sorted(excess, key=lambda e: -e[0])[:top]:
        if n <= 0:
            break
        r = data[i]
        lines.append(f"{i:6d} {n:>12d} excess sectors {r[ix['Instructions Executed']]:>9} "
                     f"{r[ix['Source']].strip()[:70]}")
    return lines


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=30)
    group = p.add_mutually_exclusive_group()
    group.add_argument("--range", type=int, nargs=2, metavar=("A", "B"))
    group.add_argument("--phases", action="store_true")
    group.add_argument("--memory", action="store_true")
    args = p.parse_args(argv)
    ix, header, data = load(args.csv)
    if args.memory:
        if L2_SECTORS not in ix:
            print(f"ncu_stalls: {args.csv} has no '{L2_SECTORS}' column (the SourceCounters section)",
                  file=sys.stderr)
            return 1
        print("\n".join(memory(data, ix, args.top)))
        return 0
    samples = lambda r: count(r, ix, SAMPLES)
    total = sum(samples(r) for r in data) or 1
    if args.range:
        for i in range(*args.range):
            r = data[i]
            print(f"{i:6d} {100 * samples(r) / total:5.2f}% {r[ix['Instructions Executed']]:>9} {r[ix['Source']].strip()}")
        return 0
    if args.phases:
        for first, last, share, executed, ops in phases(data, ix, samples, total):
            top = ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in ops.most_common(4) if v)
            print(f"{first:6d}-{last:<6d} {100 * share:5.1f}% {executed / 1e6:9.1f} M executed  "
                  f"{data[last][ix['Source']].strip()[:32]:32s} {top}")
        return 0
    reasons = [h for h in header if h.startswith("stall_") and "(Not Issued)" not in h]
    by_reason = collections.Counter()
    by_opcode = collections.Counter()
    executed = collections.Counter()
    for r in data:
        for s in reasons:
            by_reason[s[6:]] += count(r, ix, s)
        opcode = opcode_of(r[ix["Source"]])
        by_opcode[opcode] += samples(r)
        executed[opcode] += count(r, ix, "Instructions Executed")
    n_exec = sum(executed.values()) or 1
    print(f"{len(data)} instructions, {total} samples, {n_exec} warp instructions executed")
    print("by reason:", ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in by_reason.most_common(10)))
    print("by opcode:", ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in by_opcode.most_common(12)))
    print("executed: ", ", ".join(f"{k} {100 * v / n_exec:.1f}%" for k, v in executed.most_common(12)))
    for i in sorted(range(len(data)), key=lambda i: -samples(data[i]))[:args.top]:
        r = data[i]
        top = sorted(((count(r, ix, s), s[6:]) for s in reasons), reverse=True)[:3]
        why = " ".join(f"{name}:{n}" for n, name in top if n)
        print(f"{i:6d} {100 * samples(r) / total:5.2f}% {r[ix['Instructions Executed']]:>9} "
              f"{r[ix['Source']].strip()[:70]:70s} {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
