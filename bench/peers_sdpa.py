#!/usr/bin/env python3
"""Time the peers of flashattn on this GPU: PyTorch's scaled_dot_product_attention with its flash and
cuDNN backends, on the sweep of the FlashAttention papers (16384 tokens, hidden 2048, bf16), forward and
backward, plus the machine's ceilings: a large bf16 GEMM and a large device-to-device copy.

Timing: CUDA events around each call, the timed calls queued back to back and synchronized once (as
`flashattn bench --gpu` does), warm-up calls first (at least --warmup of them and --warmup-ms of
GPU time, as `flashattn bench --gpu` does: at its power limit the GPU settles at a lower clock after about
a tenth of a second of load, so both sides are timed at the clock their kernel settles at), the median of
the timed calls. Inputs are uniform in [-1, 1], as in `flashattn bench --gpu`. FLOPs are
counted as in the papers (forward 4*b*h*N*N*d, half for causal; backward 2.5x forward), the same rule
`flashattn bench --gpu` uses, so the two JSON files compare row by row (bench/compare.py merges them).

Exits 0 with a message when PyTorch or a CUDA device is missing: the peers are optional.
"""

import argparse
import json
import statistics
import sys
import time

from bench_common import (HEAD_DIMS, HIDDEN, MS_PER_S, SEQLENS, TOKENS, attention_flops, copy_ceiling_tbps,
                          sdpa_backend_kinds, start_peer_result, torch_and_backends, uniform, write_json)

QUICK_HEAD_DIMS = (64, 128)  # the trimmed sweep of `flashattn bench --gpu --quick`
QUICK_SEQLENS = (1024, 4096, 16384)
GEMM_SIZE = 8192
COPY_BYTES = 2 << 30  # 2 GiB source: far larger than L2


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", metavar="FILE", help="write the results here (default: stdout only)")
    p.add_argument("--quick", action="store_true", help="head_dim 64/128, seqlen 1k/4k/16k")
    p.add_argument("--shapes-from", metavar="FILE",
                   help="time exactly the (d, N, causal) shapes of this `flashattn bench --gpu --json` file")
    p.add_argument("--repeat", type=int, default=10, help="timed calls per measurement (median)")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls first")
    p.add_argument("--warmup-ms", type=float, default=200.0,
                   help="keep warming up until the untimed calls have taken this long (default: 200, as ours)")
    p.add_argument("--backends", default="flash,cudnn", help="comma list of: flash, cudnn")
    return p.parse_args(argv)


def sweep_shapes(args):
    """(d, N, causal) triples to time, in sweep order."""
    if args.shapes_from:
        with open(args.shapes_from) as f:
            ours = json.load(f)
        seen = []
        for r in ours.get("rows", []):
            key = (int(r["d"]), int(r["N"]), bool(r["causal"]))
            if key not in seen:
                seen.append(key)
        return seen
    dims, lens = (QUICK_HEAD_DIMS, QUICK_SEQLENS) if args.quick else (HEAD_DIMS, SEQLENS)
    return [(d, n, causal) for d in dims for n in lens for causal in (False, True)]


class Timer:
    def __init__(self, torch, warmup, repeat, warmup_ms=0.0):
        self.torch, self.warmup, self.repeat, self.warmup_ms = torch, warmup, repeat, warmup_ms

    def median_ms(self, fn):
        torch = self.torch
        begin = time.perf_counter()
        calls = 0
        for _ in range(self.warmup):
            fn()
            calls += 1
        # The sustained part: batches sized from the calls so far, so the GPU stays busy between syncs.
        while True:
            torch.cuda.synchronize()
            elapsed = (time.perf_counter() - begin) * MS_PER_S
            if elapsed >= self.warmup_ms:
                break
            per_call = elapsed / calls if calls else 0.0
            batch = min(1 << 16, int((self.warmup_ms - elapsed) / per_call) + 1) if per_call > 0 else 1
            for _ in range(batch):
                fn()
            calls += batch
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                 for _ in range(self.repeat)]
        for start, end in pairs:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return statistics.median(start.elapsed_time(end) for start, end in pairs)


def ceilings(torch, timer):
    """Large bf16 GEMM (TFLOP/s) and device-to-device copy (bytes read + written, TB/s)."""
    a = torch.randn(GEMM_SIZE, GEMM_SIZE, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(GEMM_SIZE, GEMM_SIZE, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    ms = timer.median_ms(lambda: torch.matmul(a, b, out=c))
    gemm = 2.0 * GEMM_SIZE ** 3 / (ms / MS_PER_S) / 1e12
    del a, b, c
    copy = copy_ceiling_tbps(torch, COPY_BYTES, timer.median_ms)
    return {"gemm_bf16_tflops": gemm, "gemm_shape": [GEMM_SIZE] * 3, "copy_TBps": copy, "copy_bytes": COPY_BYTES}


def sdpa_rows(torch, timer, shapes, backends):
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    kinds = sdpa_backend_kinds()
    rows, skipped = [], []
    for d, n, causal in shapes:
        b, h = TOKENS // n, HIDDEN // d
        # SDPA takes [batch, heads, seqlen, head_dim]; each tensor is 64 MiB, larger than L2.
        q, k, v = (uniform(torch, (b, h, n, d)).requires_grad_() for _ in range(3))
        grad = uniform(torch, (b, h, n, d))
        for name in backends:
            for direction in ("fwd", "bwd"):
                base = {"impl": name, "direction": direction, "d": d, "N": n, "b": b, "h": h, "causal": causal}
                try:
                    with sdpa_kernel(kinds[name]):
                        if direction == "fwd":
                            with torch.no_grad():
                                ms = timer.median_ms(
                                    lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                        else:
                            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                            # autograd.grad does not accumulate into .grad, so every call does the same work.
                            ms = timer.median_ms(
                                lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True))
                            del out
                except RuntimeError as e:  # the backend refuses the shape (e.g. a head dim it lacks)
                    skipped.append(dict(base, reason=str(e).splitlines()[0][:200]))
                    print(f"{name:6s} {direction} d {d:3d} N {n:5d} causal {int(causal)}  skipped", flush=True)
                    continue
                tflops = attention_flops(b, h, n, d, causal, direction == "bwd") / (ms / MS_PER_S) / 1e12
                rows.append(dict(base, ms=ms, tflops=tflops))
                print(f"{name:6s} {direction} d {d:3d} N {n:5d} causal {int(causal)}  {ms:9.3f} ms "
                      f"{tflops:7.1f} TFLOP/s", flush=True)
        del q, k, v, grad
        torch.cuda.empty_cache()
    return rows, skipped


def main(argv):
    args = parse_args(argv)
    torch, backends = torch_and_backends("peers_sdpa", args.backends)
    timer = Timer(torch, args.warmup, args.repeat, args.warmup_ms)
    result = start_peer_result(torch, "peers_sdpa", args)
    result.update({
        "dtype": "bf16", "tokens": TOKENS, "hidden": HIDDEN,
        "repeat": args.repeat, "warmup": args.warmup, "warmup_ms": args.warmup_ms,
        "flops": "forward 4*b*h*N*N*d (x0.5 causal); backward 2.5x forward",
    })
    result["ceil"] = ceilings(torch, timer)
    print(f"ceilings: bf16 GEMM {result['ceil']['gemm_bf16_tflops']:.1f} TFLOP/s, "
          f"copy {result['ceil']['copy_TBps']:.2f} TB/s", flush=True)
    result["rows"], result["skipped"] = sdpa_rows(torch, timer, sweep_shapes(args), backends)
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
