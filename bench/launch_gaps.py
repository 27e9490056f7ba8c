#!/usr/bin/env python3
"""Where the time of queued forward calls goes: kernel time against the gaps between kernels, for flashattn
(through its Python package) and PyTorch SDPA's cuDNN backend on the same shapes.

Each side is warmed up (--warmup-ms of calls, as the benchmarks do, so both run at the clock their kernels
settle at), then --calls calls are queued back to back under PyTorch's profiler. From the CUDA kernel events
it reports per call: the wall time between the first kernel's start and the last kernel's end divided by the
calls, the mean kernel time, the mean gap between one kernel's end and the next one's start, the number of
kernels per call, and the host time to enqueue one call; then, outside the profiler, the median of CUDA-event
pairs around queued calls (the benchmarks' method), and the SM clock and power nvidia-smi reads during about a
second of calls. A queued call is GPU-bound when its host time is below its kernel time; then the gaps are the
device's own launch latency. `--data bf16` fills the inputs by bf16 arithmetic (few mantissa bits set) instead
of rounding fp32 draws, to see whether the values' bits move the clock.

Usage: python3 bench/launch_gaps.py [--json FILE] [--shapes d:N:causal,...] [--algo fa3] [--data fp32,bf16]
Needs torch with CUDA and the flashattn package built with CUDA (exits 0 with a message otherwise).
"""

import argparse
import json
import statistics
import sys
import tempfile
import time

from bench_common import (HIDDEN, TOKENS, parse_shapes, queued_event_times, run_commit, torch_and_flashattn, utc_date,
                          write_json)



def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--shapes", default="128:512:0,64:512:0,256:512:0,128:512:1,128:8192:0",
                   help="comma list of d:N:causal (batch x N = 16384 tokens, heads = 2048 / d)")
    p.add_argument("--algo", default="fa3")
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--warmup-ms", type=float, default=200.0)
    p.add_argument("--data", default="fp32",
                   help="comma list of input kinds: fp32 (uniform drawn in fp32, rounded to bf16, as the benchmarks"
                        " fill) and bf16 (torch.rand in bf16, then 2x - 1 in bf16: values on a 2^-7 grid, few"
                        " mantissa bits set)")
    return p.parse_args(argv)


def kernel_events(trace_path):
    with open(trace_path) as f:
        events = json.load(f).get("traceEvents", [])
    ks = [e for e in events if e.get("cat") == "kernel"]
    return sorted(((float(e["ts"]), float(e["dur"]), e.get("name", "?")) for e in ks), key=lambda t: t[0])


def sm_clock_under_load(torch, call, per_call_us):
    """The SM clock and power nvidia-smi reads while calls run back to back for about a second (None if it
    cannot)."""
    import subprocess
    try:
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw.instant",
                                "--format=csv,noheader,nounits", "-lms", "50"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    except OSError:
        return None
    n = max(1, int(1e6 / max(per_call_us, 1.0)))
    time.sleep(0.1)
    for _ in range(n):
        call()
    torch.cuda.synchronize()
    smi.terminate()
    out, _ = smi.communicate()
    samples = []
    for line in out.splitlines():
        try:
            clock, power = (float(x) for x in line.split(","))
            samples.append((clock, power))
        except ValueError:
            continue
    busy = samples[len(samples) // 4:-2] or samples  # skip the start and the idle end
    if not busy:
        return None
    return {"sm_mhz": round(statistics.median(c for c, _ in busy)), "power_w": round(statistics.median(p for _, p in busy))}


def measure(torch, call, calls, warmup_ms):
    from torch.profiler import ProfilerActivity, profile
    call()
    torch.cuda.synchronize()
    wall_start = time.time()
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < warmup_ms:
        for _ in range(5):
            call()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            torch.cuda.synchronize()
            h0 = time.perf_counter()
            for _ in range(calls):
                call()
            host_us = (time.perf_counter() - h0) * 1e6 / calls
            torch.cuda.synchronize()
        prof.export_chrome_trace(tmp.name)
        ks = kernel_events(tmp.name)
    if not ks:
        return None
    events_us = statistics.median(queued_event_times(torch, call, calls)) * 1e3
    gaps = [b[0] - (a[0] + a[1]) for a, b in zip(ks, ks[1:])]
    span = ks[-1][0] + ks[-1][1] - ks[0][0]
    names = sorted({k[2] for k in ks})
    return {"per_call_us": round(span / calls, 2), "kernel_us": round(statistics.mean(k[1] for k in ks), 2),
            "kernels_per_call": round(len(ks) / calls, 2), "gap_us": round(statistics.mean(gaps), 2) if gaps else 0.0,
            "gap_max_us": round(max(gaps), 2) if gaps else 0.0, "host_us_per_call": round(host_us, 2),
            "kernels": [n[:120] for n in names], "unix_time": round(wall_start, 3), "events_us": round(events_us, 2)}


def main(argv):
    args = parse_args(argv)
    torch, flashattn = torch_and_flashattn("launch_gaps")
    if torch is None:
        return 0
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    for (d, n, causal), kind in ((shape, kind) for shape in parse_shapes(args.shapes) for kind in args.data.split(",")):
        b, h = TOKENS // n, HIDDEN // d
        gen = torch.Generator(device="cuda").manual_seed(1)

        def rand(*shape):
            if kind == "bf16":
                return torch.rand(*shape, device="cuda", dtype=torch.bfloat16, generator=gen) * 2 - 1
            return (torch.rand(*shape, device="cuda", dtype=torch.float32, generator=gen) * 2 - 1).to(torch.bfloat16)

        q, k, v = rand(b, n, h, d), rand(b, n, h, d), rand(b, n, h, d)
        out = torch.empty_like(q)
        lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)

        def ours():
            flashattn.forward(q, k, v, out, lse, causal=causal, algo=args.algo)

        qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

        for name, fn in ((args.algo, ours), ("cudnn", cudnn)):
            r = measure(torch, fn, args.calls, args.warmup_ms)
            if r is None:
                continue
            clock = sm_clock_under_load(torch, fn, r["per_call_us"])
            r.update({"impl": name, "data": kind, "d": d, "N": n, "b": b, "h": h, "causal": causal,
                      "under_load": clock})
            rows.append(r)
            print(f"{name:6s} {kind} d {d:3d} N {n:5d} causal {int(causal)}: {r['per_call_us']:8.2f} us per call, events "
                  f"{r['events_us']:8.2f} us, {clock}, kernel "
                  f"{r['kernel_us']:8.2f} us x{r['kernels_per_call']}, gap {r['gap_us']:.2f} (max {r['gap_max_us']:.2f}),"
                  f" host {r['host_us_per_call']:.2f} us per call", flush=True)
    if args.json:
        write_json(args.json, {"benchmark": "launch_gaps", "commit": run_commit(), "date": utc_date(),
                               "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
