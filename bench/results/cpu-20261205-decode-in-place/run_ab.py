#!/usr/bin/env python3
"""A/B of two `flashattn` CLI builds on the CPU decode shapes, alternating per shape, three rounds.

usage: run_ab.py BEFORE_BIN AFTER_BIN OUT.json "before label" "after label"
"""
import json
import subprocess
import sys

SHAPES = [
    "--batch 4 --cache-len 32768 --heads 32 --heads-kv 8 --head-dim 128",
    "--batch 4 --cache-len 32768 --heads 32 --heads-kv 8 --head-dim 128 --page-size 16",
    "--batch 1 --cache-len 32768 --heads 32 --heads-kv 8 --head-dim 128",
    "--batch 4 --cache-len 8192 --heads 32 --heads-kv 32 --head-dim 128",
    "--batch 4 --cache-len 16384 --heads 32 --heads-kv 1 --head-dim 128",
    "--batch 8 --cache-len 4096 --heads 16 --heads-kv 4 --seqlen-q 4 --causal --head-dim 128",
    "--batch 2 --cache-len 16384 --heads 8 --heads-kv 8 --head-dim 256",
    "--batch 4 --cache-len 32768 --heads 32 --heads-kv 8 --head-dim 64",
    "--batch 4 --cache-len 32768 --heads 32 --heads-kv 8 --head-dim 128 --dtype fp16",
    "--batch 4 --cache-len 8192 --heads 32 --heads-kv 8 --head-dim 128 --seqlen-q 8",
]


def run(binary, args):
    dtype = [] if "--dtype" in args else ["--dtype", "bf16"]
    cmd = [binary, "run", "--kv-cache", "--backend", "cpu", "--json"] + dtype + args.split()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    try:
        return json.loads(out.stdout)
    except json.JSONDecodeError:
        return {"error": out.stdout[-2000:] + out.stderr[-2000:], "rc": out.returncode}


def main():
    before, after, path, before_label, after_label = sys.argv[1:6]
    result = {"benchmark": "cpu_decode_ab", "trees": {"before": before_label, "after": after_label},
              "order": "three rounds; per shape before then after", "shapes": []}
    for args in SHAPES:
        result["shapes"].append({"args": args, "runs": {"before": [], "after": []}})
    for _ in range(3):
        for shape in result["shapes"]:
            for side, binary in (("before", before), ("after", after)):
                shape["runs"][side].append(run(binary, shape["args"]))
    for shape in result["shapes"]:
        ms = {side: [r.get("forward", {}).get("ms") for r in shape["runs"][side]] for side in ("before", "after")}
        ok = all(r.get("pass") for side in ("before", "after") for r in shape["runs"][side])
        kern = shape["runs"]["after"][0].get("kernel")
        shape["ms"] = ms
        best = {side: min(v for v in ms[side] if v is not None) for side in ms}
        shape["speedup_of_best"] = best["before"] / best["after"]
        print(f"{shape['args']:<90} before {ms['before']} after {ms['after']} x{shape['speedup_of_best']:.2f} "
              f"pass {ok} {kern}", flush=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
