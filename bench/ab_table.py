#!/usr/bin/env python3
"""One table from an A/B of scripts/fa3_ab.sh: every shape with each tree's rate (mean of its passes, and
each pass), cuDNN's where the peer script ran, the geometric means of each tree against the first tree
and against the peer, and the rows where every pass of a tree lies above (or below) every pass of the
first tree. Three kinds: the fa3 forward sweep (TFLOP/s against cuDNN, of bench/peers_sdpa.py),
with --fa2 the fa2 sweep (TFLOP/s per direction against SDPA's flash backend, which is FA2) and, with
--decode, the KV-cache benchmark (TB/s per batch, seqlen_k and layout; cuDNN of bench/peers_decode.py,
contiguous caches only).

Usage: bench/ab_table.py [--fa2 | --decode] DIR NAME [NAME ...]
  DIR holds NAME-PASS.json (`flashattn bench --gpu --algo fa3 --json`, `--algo fa2`, or `--gpu --decode
  --json`; PASS = 1, 2, ...) for every NAME and, optionally, peers.json and sources.txt (lines "NAME
  DIGEST", the trees' scripts/source_digest.sh); writes DIR/ab.json and prints the table. $FA3_AB_COMMIT,
  when set, is recorded as the result's "commit".
"""

import glob
import json
import math
import os
import sys


def load(path):
    """A JSON file's contents, or None where it is missing or unreadable."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def rows_of(path, keep, key, value):
    """{key(row): row[value]} of the rows of one file that `keep` accepts and that have a value, and the
    file's contents (None if absent)."""
    data = load(path)
    if data is None:
        return {}, None
    return {key(r): r[value] for r in data.get("rows", []) if keep(r) and r.get(value)}, data


def fa3_rows(path):
    """{(d, N, causal): TFLOP/s} of the fa3 forward rows of one `flashattn bench --gpu` file."""
    return rows_of(path, lambda r: r.get("algo") == "fa3" and r.get("direction") == "fwd",
                   lambda r: (r["d"], r["N"], bool(r["causal"])), "tflops")


def fa2_rows(path):
    """{(direction, d, N, causal): TFLOP/s} of the fa2 rows of one `flashattn bench --gpu` file."""
    return rows_of(path, lambda r: r.get("algo") == "fa2",
                   lambda r: (r["direction"], r["d"], r["N"], bool(r["causal"])), "tflops")


def flash_rows(path):
    """{(direction, d, N, causal): TFLOP/s} of SDPA flash's rows of bench/peers_sdpa.py."""
    return rows_of(path, lambda r: r.get("impl") == "flash",
                   lambda r: (r["direction"], r["d"], r["N"], bool(r["causal"])), "tflops")


def cudnn_rows(path):
    """{(d, N, causal): TFLOP/s} of cuDNN's forward rows of bench/peers_sdpa.py."""
    return rows_of(path, lambda r: r.get("impl") == "cudnn" and r.get("direction") == "fwd",
                   lambda r: (r["d"], r["N"], bool(r["causal"])), "tflops")


def decode_rows(path):
    """{(b, seqlen_k, layout): TB/s} of one `flashattn bench --gpu --decode` file."""
    return rows_of(path, lambda r: True, lambda r: (r["b"], r["seqlen_k"], r["layout"]), "TBps")


def cudnn_decode_rows(path):
    """{(b, seqlen_k, layout): TB/s} of cuDNN's rows of bench/peers_decode.py."""
    return rows_of(path, lambda r: r.get("impl") == "cudnn", lambda r: (r["b"], r["seqlen_k"], r["layout"]),
                   "TBps")


# What each kind reads: the rows of our files, the peer's rows and its name, the names of the key's fields,
# the unit.
KINDS = {
    "fa3": (fa3_rows, cudnn_rows, "cudnn", ("d", "N", "causal"), "TFLOP/s"),
    "fa2": (fa2_rows, flash_rows, "flash", ("dir", "d", "N", "causal"), "TFLOP/s"),
    "decode": (decode_rows, cudnn_decode_rows, "cudnn", ("b", "seqlen_k", "layout"), "TB/s"),
}


def geomean(values):
    return math.exp(sum(map(math.log, values)) / len(values))


def separated_rows(table, fields, base, name):
    """The rows (as "field field ...") where every pass of `name` lies above every pass of `base`, and those
    where every one lies below: with two or three passes a tree, a difference the passes' spread cannot
    explain. Rows with fewer than two passes on either side are left out."""
    above, below = [], []
    for r in table:
        ours, theirs = r[name]["passes"], r[base]["passes"]
        if len(ours) < 2 or len(theirs) < 2:
            continue
        label = " ".join(str(r[f]) for f in fields)
        if min(ours) > max(theirs):
            above.append(label)
        elif max(ours) < min(theirs):
            below.append(label)
    return above, below


def source_digests(path):
    """{tree name: source digest} from sources.txt's "NAME DIGEST" lines; {} where it is missing."""
    try:
        with open(path) as f:
            return dict(line.split(None, 1) for line in f.read().splitlines() if len(line.split()) == 2)
    except OSError:
        return {}


def build(directory, names, kind="fa3"):
    """The table as ab.json holds it, and the summary lines."""
    ours, peer, peer_name, fields, unit = KINDS[kind]
    runs = {n: [ours(p)[0] for p in sorted(glob.glob(os.path.join(directory, n + "-*.json")))] for n in names}
    meta = ours(os.path.join(directory, names[0] + "-1.json"))[1] or {}
    peers, peer_data = peer(os.path.join(directory, "peers.json"))
    keys = sorted(set().union(*[set(r) for rs in runs.values() for r in rs]))
    table = []
    for k in keys:
        row = dict(zip(fields, k))
        for n in names:
            vals = [r[k] for r in runs[n] if k in r]
            mean = round(sum(vals) / len(vals), 4 if kind == "decode" else 1) if vals else None
            row[n] = {"mean": mean, "passes": vals}
        row[peer_name] = peers.get(k)
        table.append(row)
    lines = []
    for n in names[1:]:
        ratios = [r[n]["mean"] / r[names[0]]["mean"] for r in table if r[n]["mean"] and r[names[0]]["mean"]]
        if ratios:
            lines.append("%s / %s: geometric mean %.3f, min %.3f, max %.3f" %
                         (n, names[0], geomean(ratios), min(ratios), max(ratios)))
    separated = {}
    for n in names[1:]:
        above, below = separated_rows(table, fields, names[0], n)
        separated[n] = {"above": above, "below": below}
        lines.append("%s / %s: every pass above every pass on %d rows (%s), below on %d (%s)" %
                     (n, names[0], len(above), ", ".join(above) or "none", len(below), ", ".join(below) or "none"))
    for n in names:
        ratios = [r[n]["mean"] / r[peer_name] for r in table if r[n]["mean"] and r[peer_name]]
        if ratios:
            lines.append("%s / %s: geometric mean %.3f, min %.3f, max %.3f" %
                         (n, peer_name, geomean(ratios), min(ratios), max(ratios)))
    result = {"experiment": "%s A/B (scripts/fa3_ab.sh)" % kind, "unit": unit, "trees": names,
              "gpu": meta.get("gpu"), "date": meta.get("date"), "passes": len(runs[names[0]]), "table": table,
              "peers": {"torch": peer_data.get("torch"), "cudnn": peer_data.get("cudnn")} if peer_data else None,
              "peer": peer_name}
    if separated:
        result["separated"] = separated
    if os.environ.get("FA3_AB_COMMIT"):
        result["commit"] = os.environ["FA3_AB_COMMIT"]
    sources = source_digests(os.path.join(directory, "sources.txt"))
    if sources:
        result["sources"] = sources
    return result, lines


def main(argv):
    kind = "fa3"
    if argv and argv[0] in ("--decode", "--fa2"):
        kind, argv = argv[0][2:], argv[1:]
    if len(argv) < 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    directory, names = argv[0], argv[1:]
    result, lines = build(directory, names, kind)
    peer_name, fields = KINDS[kind][2], KINDS[kind][3]
    key_format = ("%4s " if len(fields) > 3 else "") + "%4s %6s %-10s "
    print(key_format % fields + " ".join("%16s" % n for n in names) + " %8s" % peer_name)
    for row in result["table"]:
        cells = []
        for n in names:
            cell = row[n]
            cells.append(("%7.3f (%5.3f)" if kind == "decode" else "%7.1f (%5.1f)") %
                         (cell["mean"], max(cell["passes"]) - min(cell["passes"]))
                         if cell["passes"] else "%16s" % "-")
        peer = ("%.2f" if kind == "decode" else "%.1f") % row[peer_name] if row[peer_name] else "-"
        print(key_format % tuple(str(row[f]) for f in fields) + " ".join(cells) + " %8s" % peer)
    for line in lines:
        print(line)
    with open(os.path.join(directory, "ab.json"), "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
