# Per-phase medians of the fa3 timeline probe (timeline.patch) from a file of "== TREE d D" sections
# followed by the launch's "tl wg ..." lines: python3 timeline_summary.py timeline.txt
import re, statistics, sys
runs, cur = {}, None
for line in open(sys.argv[1]):
    m = re.match(r"== (\S+) d (\d+)", line)
    if m:
        cur = runs.setdefault((m[1], int(m[2])), {}); continue
    m = re.match(r"tl wg (\d) blk +(\d+) at +(-?\d+) wait_kv_turn +(-?\d+) issue +(-?\d+) wait_qk +(-?\d+) "
                 r"softmax +(-?\d+) wait_pv +(-?\d+) pack +(-?\d+)", line)
    if m and cur is not None:
        cur.setdefault(int(m[1]), []).append([int(x) for x in m.groups()[1:]])
names = ["wait_kv_turn", "issue", "wait_qk", "softmax", "wait_pv", "pack"]
for (tree, d), wgs in runs.items():
    print(f"{tree} d {d}: medians over blocks 8..55 (cycles)")
    for g, rows in sorted(wgs.items()):
        steady = [r for r in rows if 8 <= r[0] <= 55]
        if len(steady) < 2: continue
        period = statistics.median(b[1] - a[1] for a, b in zip(steady, steady[1:]))
        cells = "  ".join(f"{n} {statistics.median(r[2 + i] for r in steady):6.0f}" for i, n in enumerate(names))
        print(f"  wg {g}: period {period:6.0f}  {cells}")
    if 0 in wgs and 1 in wgs:
        a = {r[0]: r for r in wgs[0]}; b = {r[0]: r for r in wgs[1]}
        # when wg 1 holds the turn (its issue starts) relative to wg 0's, same block
        lag = [b[k][1] + b[k][2] - (a[k][1] + a[k][2]) for k in range(8, 56) if k in a and k in b]
        if lag: print(f"  wg 1 issues {statistics.median(lag):.0f} cycles after wg 0 (median, same block)")
