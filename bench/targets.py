#!/usr/bin/env python3
"""The performance targets read off one results folder: each target, the figure that decides it, met or not.

Reads what scripts/gpu_check.sh writes there: bench.json (the forward and backward sweep with SDPA's flash and
cuDNN backends, fa2 against `standard`, the GEMM ceiling) and decode.json (the decode table with its peers, and
where present ours against cuDNN in one process, bench/decode_ab.py, read as a second line of that target).
Where the folder also holds bench/interleaved.py's separate-mode results (`*-separate.json`: each side warmed
up and timed alone, the figures the ratio targets are read against, docs/performance.md), those decide the
ratio targets they cover instead of the two-program sweep; the source column says which decided.

Usage: python3 bench/targets.py RESULTS_DIR [--json FILE]
Prints one line per target and the shapes that miss it; --json writes the same as JSON. Exits 0 whether
or not a target is met (a benchmark reports; it does not fail), 2 when the folder holds neither file.
"""

import argparse
import glob
import json
import os
import sys

# The targets (docs/performance.md, "Against the performance targets").
FA2_OVER_FLASH = 1.0      # fa2 forward and backward against SDPA flash, every shape of the sweep
FA2_OVER_STANDARD = 3.0   # fa2 against `standard` at seqlen 4096
FA3_OVER_CUDNN = 1.10     # fa3 forward against SDPA cuDNN, every shape from seqlen 1024 ...
FA3_FROM_SEQLEN = 1024
FA3_FLOOR_AT_512 = 0.95   # ... and never below this at seqlen 512
FA3_D128_N8192 = 720.0    # TFLOP/s, head dim 128, seqlen 8192, non-causal
DECODE_TBPS = 3.9         # decode, contiguous cache, each shape
DECODE_OVER_CUDNN = 1.0   # decode never below SDPA cuDNN
PAGED_OVER_CONTIGUOUS = 0.9  # paged (page size 16) within 10% of the contiguous cache

MAX_LISTED = 8  # misses listed per target


def shape_name(r):
    return f"d {r['d']} N {r['N']} {'causal' if r['causal'] else 'non-causal'}"


def load(path):
    with open(path) as f:
        return json.load(f)


def separate_rows(folder):
    """{(direction, algo, peer): rows} of the folder's separate-mode files."""
    found = {}
    for path in sorted(glob.glob(os.path.join(folder, "*-separate.json"))):
        j = load(path)
        if j.get("benchmark") == "interleaved" and j.get("mode") == "separate":
            label = f"{os.path.basename(path)}, commit {j.get('commit', '?')}"
            found[(j["direction"], j["algo"], j["peer"])] = (label, j["rows"])
    return found


def ratio_rows(bench, separate, direction, algo, peer):
    """(source, [(shape row, ratio)]): the separate-mode rows where the folder has them, else the sweep's."""
    key = (direction, algo, peer)
    if key in separate:
        name, rows = separate[key]
        return f"separate mode ({name})", [(r, r["ratio"]) for r in rows]
    field = f"{algo}_over_{peer}"
    rows = [r for r in (bench or {}).get("table", []) if r["direction"] == direction and r.get(field) is not None]
    return "two programs (bench.json)", [(r, r[field]) for r in rows]


def verdict(name, source, figure, misses, checked):
    return {"target": name, "source": source, "figure": figure, "met": checked and not misses, "checked": checked,
            "misses": misses}


def span(values):
    return f"{min(values):.3f}-{max(values):.3f}x" if values else "-"


def ratio_target(name, source, pairs, floor):
    misses = [f"{shape_name(r)} {x:.3f}" for r, x in pairs if x < floor]
    figure = f"{span([x for _, x in pairs])} over {len(pairs)} shapes, {len(pairs) - len(misses)} at or above"
    return verdict(name, source, figure, misses, bool(pairs))


def sweep_targets(bench, separate):
    out = []
    for direction in ("fwd", "bwd"):
        source, pairs = ratio_rows(bench, separate, direction, "fa2", "flash")
        out.append(ratio_target(f"fa2 {direction} >= {FA2_OVER_FLASH:.2f}x SDPA flash, every shape", source, pairs,
                                FA2_OVER_FLASH))
    rows = (bench or {}).get("fa2_vs_standard", [])
    misses = [f"{r['direction']} d {r['d']} {'causal' if r['causal'] else 'non-causal'} {r['speedup']:.2f}x"
              for r in rows if r["speedup"] < FA2_OVER_STANDARD]
    out.append(verdict(f"fa2 >= {FA2_OVER_STANDARD:.0f}x standard at N 4096", "two programs (bench.json)",
                       f"{min((r['speedup'] for r in rows), default=0):.2f}-"
                       f"{max((r['speedup'] for r in rows), default=0):.2f}x over {len(rows)} rows",
                       misses, bool(rows)))
    source, pairs = ratio_rows(bench, separate, "fwd", "fa3", "cudnn")
    long_pairs = [(r, x) for r, x in pairs if r["N"] >= FA3_FROM_SEQLEN]
    out.append(ratio_target(f"fa3 >= {FA3_OVER_CUDNN:.2f}x SDPA cuDNN from N {FA3_FROM_SEQLEN}", source, long_pairs,
                            FA3_OVER_CUDNN))
    out.append(ratio_target(f"fa3 >= {FA3_FLOOR_AT_512:.2f}x SDPA cuDNN at N 512", source,
                            [(r, x) for r, x in pairs if r["N"] == 512], FA3_FLOOR_AT_512))
    row = next((r for r in (bench or {}).get("table", []) if r["direction"] == "fwd" and r["d"] == 128
                and r["N"] == 8192 and not r["causal"] and r.get("fa3_tflops")), None)
    gemm = (bench or {}).get("ceil", {}).get("gemm_bf16_tflops")
    if row is None:
        out.append(verdict(f"fa3 >= {FA3_D128_N8192:.0f} TFLOP/s at d 128 N 8192 non-causal", "-", "-", [], False))
    else:
        tf = row["fa3_tflops"]
        figure = f"{tf:.1f} TFLOP/s" + (f" (bf16 GEMM ceiling in the run {gemm:.1f}, {tf / gemm:.3f} of it)"
                                        if gemm else "")
        out.append(verdict(f"fa3 >= {FA3_D128_N8192:.0f} TFLOP/s at d 128 N 8192 non-causal",
                           "two programs (bench.json)", figure,
                           [] if tf >= FA3_D128_N8192 else [f"{tf:.1f} TFLOP/s"], True))
    return out


def decode_targets(decode):
    rows = (decode or {}).get("table", [])
    contiguous = {(r["b"], r["seqlen_k"]): r for r in rows if r["layout"] == "contiguous"}
    paged = {(r["b"], r["seqlen_k"]): r for r in rows if r["layout"] == "paged"}

    def name(key):
        return f"{key[0]} x {key[1]}"

    out = []
    tb = [(k, r["ours_TBps"]) for k, r in contiguous.items()]
    out.append(verdict(f"decode >= {DECODE_TBPS} TB/s, every shape", "decode.json",
                       ", ".join(f"{name(k)} {x:.2f}" for k, x in tb),
                       [f"{name(k)} {x:.2f} TB/s" for k, x in tb if x < DECODE_TBPS], bool(tb)))
    vs = [(k, r["ratio_cudnn"]) for k, r in contiguous.items() if r.get("ratio_cudnn") is not None]
    out.append(verdict("decode never below SDPA cuDNN", "decode.json",
                       ", ".join(f"{name(k)} {x:.3f}x" for k, x in vs),
                       [f"{name(k)} {x:.3f}x" for k, x in vs if x < DECODE_OVER_CUDNN], bool(vs)))
    # The same target read in one process, the sides alternating (bench/decode_ab.py), where the run has it:
    # the per-round ratios' median of our heuristic side against the peer.
    one = (decode or {}).get("one_process") or {}
    if one.get("peer") == "cudnn":
        op = [((r["b"], r["seqlen_k"]), r["ours"]["ours"]["round_ratio_median"]) for r in one.get("rows", [])
              if "ours" in r.get("ours", {})]
        out.append(verdict("decode never below SDPA cuDNN (one process)", "decode.json (one_process)",
                           ", ".join(f"{name(k)} {x:.3f}x" for k, x in op),
                           [f"{name(k)} {x:.3f}x" for k, x in op if x < DECODE_OVER_CUDNN], bool(op)))
    pc = [(k, paged[k]["ours_TBps"] / contiguous[k]["ours_TBps"]) for k in contiguous if k in paged]
    out.append(verdict(f"decode paged within {1 - PAGED_OVER_CONTIGUOUS:.0%} of contiguous", "decode.json",
                       ", ".join(f"{name(k)} {x:.3f}" for k, x in pc),
                       [f"{name(k)} {x:.3f}" for k, x in pc if x < PAGED_OVER_CONTIGUOUS], bool(pc)))
    return out


def describe(bench, decode):
    for j in (bench, decode):
        if j:
            gpu = j.get("gpu")
            gpu = gpu.get("name", "") if isinstance(gpu, dict) else (gpu or "")
            return f"{gpu}; commit {j.get('commit', '?')}; {j.get('date', '?')}"
    return "?"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    bench_path, decode_path = (os.path.join(args.folder, f) for f in ("bench.json", "decode.json"))
    bench = load(bench_path) if os.path.exists(bench_path) else None
    decode = load(decode_path) if os.path.exists(decode_path) else None
    if bench is None and decode is None:
        print(f"targets: {args.folder} holds neither bench.json nor decode.json", file=sys.stderr)
        return 2
    results = sweep_targets(bench, separate_rows(args.folder)) + decode_targets(decode)
    run = describe(bench, decode)
    print(f"targets ({run})")
    if "H200" not in run:
        print("  (the targets were set on an H200: the TFLOP/s and TB/s ones do not carry over to other GPUs)")
    for t in results:
        met = "yes" if t["met"] else ("no" if t["checked"] else "not measured")
        print(f"  {t['target']:<52} {met:<12} {t['figure']}  [{t['source']}]")
        if t["misses"]:
            listed = ", ".join(t["misses"][:MAX_LISTED])
            more = f" and {len(t['misses']) - MAX_LISTED} more" if len(t["misses"]) > MAX_LISTED else ""
            print(f"      misses: {listed}{more}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"folder": args.folder, "run": run, "targets": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
