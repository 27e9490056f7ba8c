#!/usr/bin/env python3
"""List the kernels PyTorch's scaled_dot_product_attention launches (flash and cuDNN backends) on shapes of
the FlashAttention sweep, with their launch configuration (grid, block, registers, shared memory) and GPU
time, as PyTorch's profiler reports them. It answers what the peers do on a shape (tile sizes in the kernel
names, persistent grid or not, CTAs per SM) before any kernel of ours is changed to match.

Usage: python3 bench/peer_kernels.py [--json FILE] [--backends flash,cudnn] [--dir fwd|bwd|both]
       [--shapes d:N:causal,...]     (default 64:512:0,128:512:0,128:512:1,256:512:0,128:8192:0)

Exits 0 with a message when PyTorch or a CUDA device is missing.
"""

import argparse
import json
import sys

from bench_common import (HIDDEN, TOKENS, parse_shapes, run_commit, sdpa_backend_kinds, torch_and_backends, utc_date,
                          write_json)

DEFAULT_SHAPES = "64:512:0,128:512:0,128:512:1,256:512:0,128:8192:0"
LAUNCH_KEYS = ("grid", "block", "registers per thread", "shared memory", "blocks per SM", "warps per SM",
               "est. achieved occupancy %")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", metavar="FILE", help="write the rows here as well")
    p.add_argument("--backends", default="flash,cudnn", help="comma list of: flash, cudnn")
    p.add_argument("--dir", choices=("fwd", "bwd", "both"), default="fwd")
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help="comma list of d:N:causal (batch x N = 16384 tokens)")
    p.add_argument("--calls", type=int, default=5, help="profiled calls per shape, after warm-up")
    return p.parse_args(argv)


def kernel_rows(trace_path):
    """Per kernel name: calls, mean GPU time (us) and the launch configuration of its first call."""
    with open(trace_path) as f:
        events = json.load(f).get("traceEvents", [])
    rows = {}
    for e in events:
        if e.get("cat") != "kernel":
            continue
        name = e.get("name", "?")
        row = rows.setdefault(name, {"kernel": name, "calls": 0, "total_us": 0.0})
        row["calls"] += 1
        row["total_us"] += float(e.get("dur", 0.0))
        args = e.get("args", {})
        for key in LAUNCH_KEYS:
            if key in args and key not in row:
                row[key] = args[key]
    for row in rows.values():
        row["mean_us"] = round(row.pop("total_us") / row["calls"], 2)
    return sorted(rows.values(), key=lambda r: -r["mean_us"] * r["calls"])


def main(argv):
    args = parse_args(argv)
    torch, names = torch_and_backends("peer_kernels", args.backends)
    import tempfile

    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    from torch.profiler import ProfilerActivity, profile
    kinds = sdpa_backend_kinds()
    results = []
    for d, n, causal in parse_shapes(args.shapes):
        b, h = TOKENS // n, HIDDEN // d
        gen = torch.Generator(device="cuda").manual_seed(1)
        q, k, v = (torch.rand(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=gen) * 2 - 1
                   for _ in range(3))
        for name in names:
            need_grad = args.dir != "fwd"
            qq, kk, vv = (t.detach().requires_grad_(need_grad) for t in (q, k, v))

            def call():
                with sdpa_kernel(kinds[name]):
                    out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal)
                    if need_grad:
                        out.backward(torch.ones_like(out))

            try:
                for _ in range(3):
                    call()
                torch.cuda.synchronize()
            except RuntimeError as err:
                print(f"peer_kernels: {name} d {d} N {n} causal {causal}: {err}".splitlines()[0])
                continue
            with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(args.calls):
                        call()
                    torch.cuda.synchronize()
                prof.export_chrome_trace(tmp.name)
                rows = kernel_rows(tmp.name)
            for row in rows:
                row.update({"backend": name, "d": d, "N": n, "batch": b, "heads": h, "causal": causal})
                results.append(row)
                launch = " ".join(f"{key}={row[key]}" for key in LAUNCH_KEYS[:5] if key in row)
                print(f"{name:6s} d {d:3d} N {n:5d} causal {int(causal)}  {row['mean_us']:9.2f} us x{row['calls']:<3d}"
                      f" {launch}\n        {row['kernel'][:200]}")
    if args.json:
        write_json(args.json, {"benchmark": "peer_kernels", "commit": run_commit(), "date": utc_date(),
                               "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                               "cudnn": torch.backends.cudnn.version(), "rows": results})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
