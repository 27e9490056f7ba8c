#!/usr/bin/env python3
"""One table from the fa3 A/B of scripts/fa3_ab.sh: every forward shape with each tree's TFLOP/s (mean of
its passes, and each pass), cuDNN's where bench/peers_sdpa.py ran, and the geometric means of each tree
against the first tree and against cuDNN.

Usage: bench/ab_table.py DIR NAME [NAME ...]
  DIR holds NAME-PASS.json (`flashattn bench --gpu --algo fa3 --json`, PASS = 1, 2, ...) for every NAME
  and, optionally, peers.json; writes DIR/ab.json and prints the table.
"""

import glob
import json
import math
import os
import sys


def fa3_rows(path):
    """{(d, N, causal): TFLOP/s} of the fa3 forward rows of one bench file, and the file's contents."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}, {}
    got = {}
    for r in data.get("rows", []):
        if r.get("algo") == "fa3" and r.get("direction") == "fwd" and r.get("tflops"):
            got[(r["d"], r["N"], bool(r["causal"]))] = r["tflops"]
    return got, data


def cudnn_rows(path):
    """{(d, N, causal): TFLOP/s} of cuDNN's forward rows, and the file's contents (None if absent)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}, None
    return {(r["d"], r["N"], bool(r["causal"])): r["tflops"] for r in data.get("rows", [])
            if r.get("impl") == "cudnn" and r.get("direction") == "fwd" and r.get("tflops")}, data


def geomean(values):
    return math.exp(sum(map(math.log, values)) / len(values))


def build(directory, names):
    """The table as ab.json holds it, and the summary lines."""
    runs = {n: [fa3_rows(p)[0] for p in sorted(glob.glob(os.path.join(directory, n + "-*.json")))] for n in names}
    meta = fa3_rows(os.path.join(directory, names[0] + "-1.json"))[1]
    peers, peer_data = cudnn_rows(os.path.join(directory, "peers.json"))
    keys = sorted(set().union(*[set(r) for rs in runs.values() for r in rs]))
    table = []
    for k in keys:
        row = {"d": k[0], "N": k[1], "causal": k[2]}
        for n in names:
            vals = [r[k] for r in runs[n] if k in r]
            row[n] = {"mean": round(sum(vals) / len(vals), 1) if vals else None, "passes": vals}
        row["cudnn"] = peers.get(k)
        table.append(row)
    lines = []
    for n in names[1:]:
        ratios = [r[n]["mean"] / r[names[0]]["mean"] for r in table if r[n]["mean"] and r[names[0]]["mean"]]
        if ratios:
            lines.append("%s / %s: geometric mean %.3f, min %.3f, max %.3f" %
                         (n, names[0], geomean(ratios), min(ratios), max(ratios)))
    for n in names:
        ratios = [r[n]["mean"] / r["cudnn"] for r in table if r[n]["mean"] and r["cudnn"]]
        if ratios:
            lines.append("%s / cudnn: geometric mean %.3f, min %.3f, max %.3f" %
                         (n, geomean(ratios), min(ratios), max(ratios)))
    result = {"experiment": "fa3 A/B (scripts/fa3_ab.sh)", "trees": names, "gpu": meta.get("gpu"),
              "date": meta.get("date"), "passes": len(runs[names[0]]), "table": table,
              "peers": {"torch": peer_data.get("torch"), "cudnn": peer_data.get("cudnn")} if peer_data else None}
    return result, lines


def main(argv):
    if len(argv) < 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    directory, names = argv[0], argv[1:]
    result, lines = build(directory, names)
    print("%4s %6s %-6s " % ("d", "N", "causal") + " ".join("%16s" % n for n in names) + " %8s" % "cudnn")
    for row in result["table"]:
        cells = []
        for n in names:
            cell = row[n]
            cells.append("%7.1f (%5.1f)" % (cell["mean"], max(cell["passes"]) - min(cell["passes"]))
                         if cell["passes"] else "%16s" % "-")
        cudnn = "%.1f" % row["cudnn"] if row["cudnn"] else "-"
        print("%4d %6d %-6s " % (row["d"], row["N"], row["causal"]) + " ".join(cells) + " %8s" % cudnn)
    for line in lines:
        print(line)
    with open(os.path.join(directory, "ab.json"), "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
