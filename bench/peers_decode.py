#!/usr/bin/env python3
"""Time the decode peers of flashattn on this GPU: PyTorch's scaled_dot_product_attention with its flash and
cuDNN backends on the shapes of `flashattn bench --gpu --decode` (bf16, 32 query heads over 8 KV heads,
head_dim 128, one query token, full caches of (batch, seqlen_k) = (1, 32k), (1, 128k), (16, 8k), (64, 4k)),
plus the device-to-device copy ceiling.

SDPA has no paged cache, so only contiguous caches are timed. GQA: enable_gqa=True where the backend takes it;
a backend that refuses it gets K and V expanded to 32 heads once, before timing (recorded as "gqa":
"expanded"). Either way the byte count is the one flashattn uses, K and V read once at 8 heads:
2 * b * seqlen_k * 8 * 128 * 2, so the TB/s columns compare directly.

Timing: calls queued back to back between two CUDA events (so the Python launch cost does not leave the
GPU idle), divided by the count; the median of the timed runs. Shapes smaller than 1 GiB rotate over
several disjoint K/V copies so that consecutive calls never find their keys in L2.

Exits 0 with a message when PyTorch or a CUDA device is missing: the peers are optional.
"""

import argparse
import statistics
import sys

from bench_common import (copy_ceiling_tbps, run_commit, sdpa_backend_kinds, start_peer_result, tbps,
                          torch_and_backends, write_json)

SHAPES = ((1, 32768), (1, 131072), (16, 8192), (64, 4096))
HEADS_Q = 32
HEADS_KV = 8
HEAD_DIM = 128
SEQLEN_Q = 1
ELEM_BYTES = 2  # bf16
ROTATION_BYTES = 1 << 30  # K + V bytes the rotated copies of one shape add up to (far larger than L2)
CALLS_PER_TIMING = 20
COPY_BYTES = 1 << 30


def kv_bytes_and_copies(b, n):
    """The bytes counted for one call at batch b and n keys (K and V read once at HEADS_KV heads) and how many
    disjoint copies of the caches the calls rotate over (ROTATION_BYTES in all, at least one)."""
    kv_bytes = 2 * b * n * HEADS_KV * HEAD_DIM * ELEM_BYTES
    return kv_bytes, max(1, ROTATION_BYTES // kv_bytes)


def expanded(caches):
    """(K, V) pairs of HEADS_KV heads in SDPA's [batch, heads, seqlen, head_dim], repeated to HEADS_Q heads for
    a backend that refuses enable_gqa."""
    group = HEADS_Q // HEADS_KV
    return [(k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)) for k, v in caches]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", metavar="FILE", help="write the results here (default: stdout only)")
    p.add_argument("--repeat", type=int, default=10, help="timed runs (median)")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs first")
    p.add_argument("--backends", default="flash,cudnn", help="comma list of: flash, cudnn")
    return p.parse_args(argv)


def median_ms(torch, fn, warmup, repeat, calls):
    """Median over `repeat` runs of `calls` back-to-back calls, per call."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def decode_rows(torch, args, backends, copy_tbps):
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    kinds = sdpa_backend_kinds()
    rows, skipped = [], []
    for b, n in SHAPES:
        kv_bytes, copies = kv_bytes_and_copies(b, n)
        # SDPA takes [batch, heads, seqlen, head_dim].
        q = torch.randn(b, HEADS_Q, SEQLEN_Q, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        caches = [(torch.randn(b, HEADS_KV, n, HEAD_DIM, device="cuda", dtype=torch.bfloat16),
                   torch.randn(b, HEADS_KV, n, HEAD_DIM, device="cuda", dtype=torch.bfloat16)) for _ in range(copies)]
        for name in backends:
            base = {"impl": name, "b": b, "seqlen_k": n, "layout": "contiguous", "bytes": kv_bytes,
                    "rotated_caches": copies}
            state = {"i": 0}
            timed = None
            for gqa in ("enable_gqa", "expanded"):
                if gqa == "enable_gqa":
                    inputs = caches
                    call_kwargs = {"enable_gqa": True}
                else:
                    inputs = expanded(caches)
                    call_kwargs = {}

                def call(inputs=inputs, call_kwargs=call_kwargs):
                    k, v = inputs[state["i"] % len(inputs)]
                    state["i"] += 1
                    return F.scaled_dot_product_attention(q, k, v, **call_kwargs)

                try:
                    with sdpa_kernel(kinds[name]), torch.no_grad():
                        ms = median_ms(torch, call, args.warmup, args.repeat, CALLS_PER_TIMING)
                    timed = (gqa, ms)
                    break
                except (RuntimeError, TypeError) as e:  # the backend refuses this form of the call
                    reason = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
                    if gqa == "expanded":
                        skipped.append(dict(base, reason=reason))
                finally:
                    if gqa == "expanded":
                        del inputs
                        torch.cuda.empty_cache()
            if timed is None:
                print(f"{name:6s} b {b:3d} seqlen_k {n:6d}  skipped", flush=True)
                continue
            gqa, ms = timed
            rate = tbps(kv_bytes, ms)
            rows.append(dict(base, gqa=gqa, ms=ms, TBps=rate,
                             fraction_of_copy=rate / copy_tbps if copy_tbps > 0 else 0.0))
            print(f"{name:6s} b {b:3d} seqlen_k {n:6d}  {ms * 1e3:9.1f} us {rate:6.2f} TB/s "
                  f"({100 * rate / copy_tbps:3.0f}% of copy, {gqa})", flush=True)
        del q, caches
        torch.cuda.empty_cache()
    return rows, skipped


def main(argv):
    args = parse_args(argv)
    torch, backends = torch_and_backends("peers_decode", args.backends)
    commit = run_commit() or "unknown"
    result = start_peer_result(torch, "peers_decode", args, commit=commit)
    result.update({
        "dtype": "bf16", "heads_q": HEADS_Q, "heads_kv": HEADS_KV, "head_dim": HEAD_DIM, "seqlen_q": SEQLEN_Q,
        "repeat": args.repeat, "warmup": args.warmup, "calls_per_timing": CALLS_PER_TIMING,
        "bytes": "K and V read once at heads_kv: 2 * b * seqlen_k * heads_kv * head_dim * 2",
    })
    copy_tbps = copy_ceiling_tbps(torch, COPY_BYTES,
                                  lambda fn: median_ms(torch, fn, args.warmup, args.repeat, calls=1))
    result["ceil"] = {"copy_TBps": copy_tbps, "copy_bytes": COPY_BYTES}
    print(f"device copy ceiling: {copy_tbps:.2f} TB/s", flush=True)
    result["rows"], result["skipped"] = decode_rows(torch, args, backends, copy_tbps)
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
