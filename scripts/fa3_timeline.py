#!/usr/bin/env python3
"""Per-phase medians of the fa3 per-block timeline probe.

The probe (bench/results/h200-20261206-fa3-ceiling/timeline.patch) makes one launch print, on stderr, a
line per main-loop block and consumer warpgroup of CTA 0:
  tl wg G blk B at CYCLE wait_kv_turn C issue C wait_qk C softmax C wait_pv C pack C [idx I]
Where the lines end with the block's index in its tile (idx; a later form of the probe), this also prints
the tile transitions: from the end of a tile's last main-loop block to the start of the next tile's first
(the last block's P V, the next tile's first Q K^T, its softmax and the deferred epilogue), against the period
of the blocks inside a tile. Lines
  tt wg G tile K first CYCLE issue C epilogue C wait_qk C softmax C pack C drain_at CYCLE drain C
(the same later form) time each tile's first block (its Q K^T issue, the previous tile's deferred epilogue,
the Q K^T wait, its softmax, the pack) and its drain (the last P V, waited for); this prints their medians over
tiles 1.. (tile 0 has no epilogue before it) and the median time from a drain's end to the next first block.
scripts/fa3_timeline.sh writes those lines of several trees into one file, each run after a header line
"== TREE d HEAD_DIM". This prints, per tree and head dim, each warpgroup's period (cycles between the starts
of consecutive blocks) and the median of each phase over blocks FIRST..LAST, and how long after warpgroup 0
warpgroup 1 starts issuing the same block.

Usage: python3 scripts/fa3_timeline.py TIMELINE_TXT
"""
import re
import statistics
import sys

PHASES = ["wait_kv_turn", "issue", "wait_qk", "softmax", "wait_pv", "pack"]
FIRST, LAST = 8, 55  # steady blocks: past the first tiles' start, inside the 64 recorded
TILE_PHASES = ["issue", "epilogue", "wait_qk", "softmax", "pack"]
_TILE = re.compile(r"tt wg (\d) tile +(\d+) first +(-?\d+) " + " ".join(rf"{p} +(-?\d+)" for p in TILE_PHASES) +
                   r" drain_at +(-?\d+) drain +(-?\d+)")
_HEADER = re.compile(r"== (\S+) d (\d+)")
_LINE = re.compile(r"tl wg (\d) blk +(\d+) at +(-?\d+) " + " ".join(rf"{p} +(-?\d+)" for p in PHASES) +
                   r"(?: idx +(-?\d+))?")


def parse(lines):
    """{(tree, head_dim): {wg: [[blk, at, phase...], ...]}} in file order."""
    runs, cur = {}, None
    for line in lines:
        m = _HEADER.match(line)
        if m:
            cur = runs.setdefault((m[1], int(m[2])), {})
            continue
        m = _TILE.match(line)
        if m and cur is not None:
            cur.setdefault("tiles", {}).setdefault(int(m[1]), []).append([int(x) for x in m.groups()[1:]])
            continue
        m = _LINE.match(line)
        if m and cur is not None:
            cur.setdefault(int(m[1]), []).append([int(x) if x is not None else None for x in m.groups()[1:]])
    return runs


def median_cells(rows, names, first):
    """'name median' for each of names, the columns first.. of rows."""
    return "  ".join(f"{n} {statistics.median(r[first + i] for r in rows):6.0f}" for i, n in enumerate(names))


def transitions(rows):
    """Tile transitions of one warpgroup's rows (with idx), or None: the median gap from the end of a tile's
    last recorded block to the start of the next tile's first, the median period inside a tile, their ratio."""
    if not rows or rows[0][-1] is None:
        return None
    end = lambda r: r[1] + sum(r[2:2 + len(PHASES)])
    gaps, periods = [], []
    for a, b in zip(rows, rows[1:]):
        if a[0] + 1 != b[0] or b[1] <= a[1]:
            continue  # not consecutive records (the 64 recorded slots ran out), or unset
        if b[-1] > a[-1]:
            periods.append(b[1] - a[1])
        else:
            gaps.append(b[1] - end(a))
    if not gaps or not periods:
        return None
    gap, period = statistics.median(gaps), statistics.median(periods)
    return (f"{len(gaps)} tile transitions, median {gap:.0f} cycles from a tile's last main-loop block to the "
            f"next tile's first; period inside a tile {period:.0f}; ratio {gap / period:.2f}")


def tile_phases(rows):
    """One warpgroup's tile lines: the medians of the first block's phases and the drain over tiles 1.. whose
    records are set, and the median from a drain's end to the next tile's first block; None without them."""
    rows = [r for r in rows if r[0] >= 1 and r[1] > 0 and r[-2] > 0]
    if not rows:
        return None
    drain = statistics.median(r[-1] for r in rows)
    line = f"first blocks of {len(rows)} tiles: {median_cells(rows, TILE_PHASES, 2)}  drain {drain:6.0f}"
    by_tile = {r[0]: r for r in rows}
    handover = [by_tile[k + 1][1] - (r[-2] + r[-1]) for k, r in by_tile.items() if k + 1 in by_tile]
    if handover:
        line += f"; drain end to the next first block {statistics.median(handover):.0f}"
    return line


def summarize(runs):
    out = []
    for (tree, d), wgs in runs.items():
        tiles = wgs.get("tiles", {})
        wgs = {g: rows for g, rows in wgs.items() if g != "tiles"}
        out.append(f"{tree} d {d}: medians over blocks {FIRST}..{LAST} (cycles)")
        for g, rows in sorted(wgs.items()):
            steady = [r for r in rows if FIRST <= r[0] <= LAST]
            if len(steady) < 2:
                continue
            period = statistics.median(b[1] - a[1] for a, b in zip(steady, steady[1:]))
            out.append(f"  wg {g}: period {period:6.0f}  {median_cells(steady, PHASES, 2)}")
        for g, rows in sorted(wgs.items()):
            line = transitions(rows)
            if line:
                out.append(f"  wg {g}: {line}")
        for g, rows in sorted(tiles.items()):
            line = tile_phases(rows)
            if line:
                out.append(f"  wg {g}: {line}")
        if 0 in wgs and 1 in wgs:
            a = {r[0]: r for r in wgs[0]}
            b = {r[0]: r for r in wgs[1]}
            # when wg 1 holds the turn (its issue starts) relative to wg 0's, same block
            lag = [b[k][1] + b[k][2] - (a[k][1] + a[k][2]) for k in range(FIRST, LAST + 1) if k in a and k in b]
            if lag:
                out.append(f"  wg 1 issues {statistics.median(lag):.0f} cycles after wg 0 (median, same block)")
    return out


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        print("\n".join(summarize(parse(f))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
