#!/usr/bin/env python3
"""Per-call host time of flashattn.forward from Python against the GPU time per call of the same calls.

For each shape (d:N:causal of the 16k-token sweep): warm up for 500 ms, then
- gpu_ms: the median of 6 x 10 calls queued between CUDA event pairs (bench/interleaved.py's separate mode),
- host_us: host time per call over 200 calls issued without synchronizing (the launch queue does not fill),
- batch_ms: one event pair around 100 queued calls, divided by 100,
- the same for SDPA cuDNN (host time of F.scaled_dot_product_attention).
A call is host-bound when host_us is about gpu_ms: its events then time the host's path, not the kernel.
Usage: PYTHONPATH=<package dir> python3 probe.py d:N:causal[,...] > out.txt
"""
import statistics
import sys
import time

sys.path.insert(0, sys.argv[2] if len(sys.argv) > 2 else "bench")
from bench_common import HIDDEN, TOKENS, parse_shapes, queued_event_times, uniform  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
import flashattn  # noqa: E402


def warm(fn, ms):
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < ms:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()


def host_us(fn, calls=200):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def batch_ms(fn, calls=100):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    a.record()
    for _ in range(calls):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / calls


print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
for d, n, causal in parse_shapes(sys.argv[1]):
    bsz, h = TOKENS // n, HIDDEN // d
    q, k, v = (uniform(torch, (bsz, n, h, d)) for _ in range(3))
    out = torch.empty_like(q)
    lse = torch.empty(bsz, h, n, device="cuda", dtype=torch.float32)
    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    sides = {
        "fa3 (flashattn.forward)": lambda: flashattn.forward(q, k, v, out, lse, causal=causal, algo="fa3"),
        "fa3, stream given": lambda: flashattn.forward(q, k, v, out, lse, causal=causal, algo="fa3", stream=0),
        "cudnn (SDPA)": lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal),
    }
    flops = 4.0 * bsz * h * n * n * d * (0.5 if causal else 1.0)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION), torch.no_grad():
        for name, fn in sides.items():
            warm(fn, 500)
            g = []
            for _ in range(6):
                g += queued_event_times(torch, fn, 10)
            gm = statistics.median(g)
            hu = host_us(fn)
            bm = batch_ms(fn)
            print(f"d {d:3d} N {n:5d} causal {int(causal)} {name:24s} gpu {gm * 1e3:7.1f} us ({flops / gm / 1e9:6.1f} TFLOP/s)"
                  f"  host {hu:6.1f} us/call  batch of 100 {bm * 1e3:7.1f} us/call", flush=True)
    del q, k, v, out, lse, qt, kt, vt
    torch.cuda.empty_cache()
