#!/usr/bin/env python3
"""Merge `flashattn bench --gpu --json` results with bench/peers_sdpa.py results into one file, and print
how our algorithms compare with PyTorch SDPA's flash and cuDNN backends on the same shapes.

The merged file records the commit ($FLASHATTN_COMMIT, else `git rev-parse HEAD`, else the commit our
JSON carries), the GPU name and driver, the date, the ceilings, every row of both inputs, and the
comparison table: per (direction, d, N, causal) our TFLOP/s per algorithm, the peers', and the ratios
best-of-ours / flash and best-of-ours / cuDNN, fa2 / flash and fa3 / cuDNN; plus fa2 against standard at
seqlen 4096.

Decode: given `flashattn bench --gpu --decode --json` and bench/peers_decode.py results instead, it prints TB/s
per (batch, seqlen_k, layout) for flashattn (kernel and single-call) and each peer, with the fractions of the
device copy ceiling and the ratios flashattn / peer, and writes the same kind of merged file.
"""

import argparse
import json
import os
import sys

from bench_common import run_commit, utc_date, write_json

OUR_ALGOS = ("fa3", "fa2", "fa1", "standard")
PEERS = ("flash", "cudnn")
HEADLINE_SEQLEN = 4096


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ours", required=True, help="JSON written by `flashattn bench --gpu --json`")
    p.add_argument("--peers", help="JSON written by bench/peers_sdpa.py (optional)")
    p.add_argument("--out", help="merged results file (default: print only)")
    return p.parse_args(argv)


def load(path):
    with open(path) as f:
        return json.load(f)


def commit(ours):
    return run_commit() or ours.get("commit") or "unknown"


def key(row):
    return (row["direction"], int(row["d"]), int(row["N"]), bool(row["causal"]))


def build_table(ours, peers):
    """One entry per shape: our TFLOP/s per algorithm, the peers', and the ratios of our best."""
    table = {}
    for r in ours.get("rows", []):
        table.setdefault(key(r), {})[r["algo"]] = r
    for r in (peers or {}).get("rows", []):
        table.setdefault(key(r), {})[r["impl"]] = r
    entries = []
    for k in sorted(table, key=lambda k: (k[0] != "fwd", k[1], k[3], k[2])):
        cell = table[k]
        e = {"direction": k[0], "d": k[1], "N": k[2], "causal": k[3]}
        for name in OUR_ALGOS + PEERS:
            if name in cell:
                e[name + "_tflops"] = cell[name]["tflops"]
                e[name + "_ms"] = cell[name]["ms"]
        ours_here = [a for a in OUR_ALGOS if a in cell]
        if ours_here:
            best = max(ours_here, key=lambda a: cell[a]["tflops"])
            e["best_ours"] = best
            for peer in PEERS:
                if peer in cell and cell[peer]["tflops"] > 0:
                    e["ratio_" + peer] = cell[best]["tflops"] / cell[peer]["tflops"]
        # The targets of each generation: fa2 against PyTorch's flash backend (FA2), fa3 against cuDNN.
        for ours_algo, peer in (("fa2", "flash"), ("fa3", "cudnn")):
            if ours_algo in cell and peer in cell and cell[peer]["tflops"] > 0:
                e[ours_algo + "_over_" + peer] = cell[ours_algo]["tflops"] / cell[peer]["tflops"]
        entries.append(e)
    return entries


def headline(entries):
    """fa2 against standard at seqlen 4096: speedup = standard ms / fa2 ms."""
    out = []
    for e in entries:
        if e["N"] == HEADLINE_SEQLEN and "fa2_ms" in e and "standard_ms" in e:
            out.append({"direction": e["direction"], "d": e["d"], "causal": e["causal"], "fa2_ms": e["fa2_ms"],
                        "standard_ms": e["standard_ms"], "speedup": e["standard_ms"] / e["fa2_ms"]})
    return out


def fmt(x, spec="7.1f"):
    return format(x, spec) if isinstance(x, (int, float)) else " " * (int(spec.split(".")[0]) - 1) + "-"


def print_report(merged):
    gpu = merged["gpu"]
    print(f"gpu {gpu.get('name', 'unknown')}, driver {gpu.get('driver', 'unknown')}; commit {merged['commit']}; "
          f"{merged['date']}")
    ceil = merged.get("ceil") or {}
    if ceil:
        print(f"ceilings: bf16 GEMM {ceil.get('gemm_bf16_tflops', 0):.1f} TFLOP/s, copy "
              f"{ceil.get('copy_TBps', 0):.2f} TB/s")
    present = [a for a in OUR_ALGOS if any(a + "_tflops" in e for e in merged["table"])]
    peers = [p for p in PEERS if any(p + "_tflops" in e for e in merged["table"])]
    head = f"{'dir':3s} {'d':>4s} {'N':>6s} {'causal':6s}" + "".join(f" {a:>8s}" for a in present + peers)
    head += "".join(f" {'/' + p:>8s}" for p in peers) + f" {'fa2/fl':>7s} {'fa3/cu':>7s}  best"
    print("TFLOP/s (ratios: our best / peer)")
    print(head)
    for e in merged["table"]:
        line = f"{e['direction']:3s} {e['d']:4d} {e['N']:6d} {'yes' if e['causal'] else 'no':6s}"
        line += "".join(" " + fmt(e.get(a + "_tflops"), "8.1f") for a in present + peers)
        line += "".join(" " + fmt(e.get("ratio_" + p), "8.2f") for p in peers)
        line += " " + fmt(e.get("fa2_over_flash"), "7.2f") + " " + fmt(e.get("fa3_over_cudnn"), "7.2f")
        line += "  " + e.get("best_ours", "-")
        print(line)
    if merged["fa2_vs_standard"]:
        print(f"fa2 vs standard at seqlen {HEADLINE_SEQLEN}:")
        for h in merged["fa2_vs_standard"]:
            print(f"  {h['direction']} d {h['d']:3d} causal {'yes' if h['causal'] else 'no ':3s}  fa2 "
                  f"{h['fa2_ms']:8.3f} ms  standard {h['standard_ms']:8.3f} ms  speedup {h['speedup']:5.2f}x")


def decode_table(ours, peers):
    """One entry per (b, seqlen_k, layout): our kernel and api TB/s, each peer's, and the ratios."""
    entries = []
    peer_rows = {(int(r["b"]), int(r["seqlen_k"]), r["layout"], r["impl"]): r for r in (peers or {}).get("rows", [])}
    for r in ours.get("rows", []):
        if "TBps" not in r:
            continue
        e = {"b": int(r["b"]), "seqlen_k": int(r["seqlen_k"]), "layout": r["layout"], "ours_TBps": r["TBps"],
             "ours_api_TBps": r.get("api_TBps"), "ours_trusted_TBps": r.get("trusted_TBps"),
             "ours_fraction_of_copy": r.get("fraction_of_copy")}
        for peer in PEERS:
            p = peer_rows.get((e["b"], e["seqlen_k"], e["layout"], peer))
            if p:
                e[peer + "_TBps"] = p["TBps"]
                e["ratio_" + peer] = r["TBps"] / p["TBps"] if p["TBps"] > 0 else None
        entries.append(e)
    return entries


def decode_main(args, ours, peers):
    table = decode_table(ours, peers)
    gpu = dict(ours.get("gpu") or {})
    ceil = {"flashattn_copy_TBps": (ours.get("ceil") or {}).get("copy_TBps"),
            "peers_copy_TBps": ((peers or {}).get("ceil") or {}).get("copy_TBps")}
    print(f"gpu {gpu.get('name', 'unknown')}, driver {gpu.get('driver', 'unknown')}; commit {commit(ours)}")
    print(f"device copy ceiling: {fmt(ceil['flashattn_copy_TBps'], '5.2f')} TB/s (flashattn run), "
          f"{fmt(ceil['peers_copy_TBps'], '5.2f')} TB/s (peers run)")
    print("decode TB/s (K and V read once); ratios: flashattn kernel / peer")
    print(f"{'b':>3s} {'seqlen_k':>8s} {'layout':10s} {'kernel':>7s} {'of copy':>7s} {'api':>7s} {'trusted':>7s}"
          + "".join(f" {p:>7s}" for p in PEERS) + "".join(f" {'/' + p:>7s}" for p in PEERS))
    for e in table:
        frac = e.get("ours_fraction_of_copy")
        line = f"{e['b']:3d} {e['seqlen_k']:8d} {e['layout']:10s} {fmt(e['ours_TBps'], '7.2f')} "
        line += f"{fmt(100 * frac if frac is not None else None, '6.0f')}% {fmt(e.get('ours_api_TBps'), '7.2f')}"
        line += f" {fmt(e.get('ours_trusted_TBps'), '7.2f')}"
        line += "".join(" " + fmt(e.get(p + "_TBps"), "7.2f") for p in PEERS)
        line += "".join(" " + fmt(e.get("ratio_" + p), "7.2f") for p in PEERS)
        print(line)
    if args.out:
        merged = {"benchmark": "gpu_decode_compare", "commit": commit(ours), "gpu": gpu, "date": utc_date(),
                  "ceil": ceil, "table": table, "ours": ours, "peers": peers}
        write_json(args.out, merged)
    return 0


def main(argv):
    args = parse_args(argv)
    ours = load(args.ours)
    peers = load(args.peers) if args.peers and os.path.exists(args.peers) else None
    if ours.get("benchmark") == "gpu_decode":
        return decode_main(args, ours, peers)
    gpu = dict(ours.get("gpu") or (peers or {}).get("gpu") or {})
    if peers and gpu.get("driver", "unknown") == "unknown":
        gpu["driver"] = peers.get("gpu", {}).get("driver", "unknown")
    table = build_table(ours, peers)
    merged = {
        "benchmark": "gpu_compare",
        "commit": commit(ours),
        "gpu": gpu,
        "date": utc_date(),
        "ceil": (peers or {}).get("ceil"),
        "table": table,
        "fa2_vs_standard": headline(table),
        "ours": ours,
        "peers": peers,
    }
    print_report(merged)
    if args.out:
        write_json(args.out, merged)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
