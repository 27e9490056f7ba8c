#!/usr/bin/env python3
"""flashattn against one PyTorch SDPA backend in one process, on the same inputs, with the GPU's clock in the
same state for both: the two sides' calls alternate in short rounds after a common warm-up.

Why: the H200 runs attention at its power limit, and its clock falls over the first second or so of load,
not in one step. Two programs that each warm up for 200 ms and then time ten calls (`flashattn bench --gpu`
and bench/peers_sdpa.py) can catch the clock at different points of that fall, and at short sequences (a call
of ~0.15 ms) that alone moved a ratio by 20%. Here, per shape: both sides warm up together (batches of
calls alternating until --warmup-ms have passed), then --rounds rounds, each timing --calls queued calls of
one side and then of the other (the order swapped every round), each call between its own pair of CUDA
events as the benchmarks time. The median of each side's timed calls is reported with their ratio.
`--mode separate` times each side alone instead (its own warm-up, then all its rounds), as the two
benchmark programs do, for comparison.

Inputs: bf16 uniform in [-1, 1] drawn in fp32 (as the benchmarks fill them), ours in [batch, seqlen, heads,
head_dim], the peer's the same values in [batch, heads, seqlen, head_dim]. Shapes: the FlashAttention papers'
sweep (16384 tokens, hidden 2048). FLOPs as in the benchmarks (forward 4*b*h*N*N*d, half for causal; backward
2.5x forward).

Usage: python3 bench/interleaved.py [--dir fwd|bwd] [--algo fa3] [--peer cudnn] [--quick]
       [--shapes d:N:causal,...] [--mode interleaved|separate] [--json FILE]
Needs torch with CUDA and the flashattn package built with CUDA (exits 0 with a message otherwise).
"""

import argparse
import contextlib
import statistics
import sys
import time

from bench_common import (HEAD_DIMS, HIDDEN, SEQLENS, TOKENS, attention_flops, parse_shapes, queued_event_times,
                          run_commit, sdpa_backend_kinds, torch_and_flashattn, uniform, utc_date, write_json)

QUICK_SHAPES = "64:512:0,64:512:1,128:512:0,128:512:1,256:512:0,128:2048:0,128:8192:0,64:8192:1"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", choices=("fwd", "bwd"), default="fwd")
    p.add_argument("--algo", default=None, help="our algorithm (default: fa3 forward, fa2 backward)")
    p.add_argument("--peer", choices=("cudnn", "flash"), default=None,
                   help="SDPA backend (default: cudnn forward, flash backward)")
    p.add_argument("--shapes", default=None, help="comma list of d:N:causal (default: the whole sweep)")
    p.add_argument("--quick", action="store_true", help=f"eight shapes: {QUICK_SHAPES}")
    p.add_argument("--mode", choices=("interleaved", "separate"), default="interleaved")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--calls", type=int, default=10, help="timed calls per side and round")
    p.add_argument("--warmup-ms", type=float, default=1000.0)
    p.add_argument("--json", metavar="FILE")
    return p.parse_args(argv)


def sweep(args):
    text = QUICK_SHAPES if args.quick and not args.shapes else args.shapes
    if text:
        return parse_shapes(text)
    return [(d, n, c) for d in HEAD_DIMS for n in SEQLENS for c in (False, True)]


def warm(torch, fns, warmup_ms):
    """Batches of calls of every fn in turn until warmup_ms have passed (each batch ~20 ms of GPU time)."""
    begin = time.perf_counter()
    per_call = [None] * len(fns)
    while (time.perf_counter() - begin) * 1e3 < warmup_ms:
        for i, fn in enumerate(fns):
            n = 1 if per_call[i] is None else max(1, int(20.0 / per_call[i]))
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
            per_call[i] = max(1e-3, (time.perf_counter() - t0) * 1e3 / n)


def round_order(sides, r):
    """The order the sides are timed in round r: rotated by one every round, so that over len(sides) rounds
    each side is timed once in each place (two sides: swapped every round)."""
    k = r % len(sides)
    return list(sides[k:]) + list(sides[:k])


def timed_rounds(torch, calls, rounds, calls_per_round):
    """`rounds` rounds of `calls_per_round` queued calls of every side of `calls` ({side: fn}) in turn, in
    round_order: {side: [each round's call times (ms)]}."""
    times = {side: [] for side in calls}
    for r in range(rounds):
        for side in round_order(list(calls), r):
            times[side].append(queued_event_times(torch, calls[side], calls_per_round))
    return times


def main(argv):
    args = parse_args(argv)
    torch, flashattn = torch_and_flashattn("interleaved")
    if torch is None:
        return 0
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    backward = args.dir == "bwd"
    algo = args.algo or ("fa2" if backward else "fa3")
    peer = args.peer or ("flash" if backward else "cudnn")
    kind = sdpa_backend_kinds()[peer]
    print(f"interleaved: {args.dir}, flashattn {algo} against SDPA {peer}, {args.mode}; warm-up {args.warmup_ms:.0f} ms,"
          f" {args.rounds} rounds of {args.calls} calls per side; {torch.cuda.get_device_name()}", flush=True)
    rows = []
    for d, n, causal in sweep(args):
        b, h = TOKENS // n, HIDDEN // d
        q, k, v, dout = (uniform(torch, (b, n, h, d)) for _ in range(4))
        out, dq, dk, dv = (torch.empty_like(q) for _ in range(4))
        lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
        qt, kt, vt, doutt = (t.transpose(1, 2).contiguous() for t in (q, k, v, dout))
        info = {}
        # The peer's backend (and, forward, no autograd) is chosen once per shape, not inside the timed calls;
        # neither affects ours.
        with sdpa_kernel(kind), (contextlib.nullcontext() if backward else torch.no_grad()):
            if backward:
                flashattn.forward(q, k, v, out, lse, causal=causal, algo="auto")
                qt.requires_grad_()
                kt.requires_grad_()
                vt.requires_grad_()
                peer_out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

                def ours():
                    info["kernel"] = flashattn.backward(dout, q, k, v, out, lse, dq, dk, dv, causal=causal,
                                                        algo=algo).kernel

                def theirs():
                    torch.autograd.grad(peer_out, (qt, kt, vt), doutt, retain_graph=True)
            else:
                def ours():
                    info["kernel"] = flashattn.forward(q, k, v, out, lse, causal=causal, algo=algo).kernel

                def theirs():
                    F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

            try:
                theirs()
                ours()
                torch.cuda.synchronize()
            except (RuntimeError, ValueError) as err:
                print(f"d {d:3d} N {n:5d} causal {int(causal)}: skipped ({str(err).splitlines()[0][:120]})",
                      flush=True)
                continue
            times = {"ours": [], "peer": []}
            sides = (("ours", ours), ("peer", theirs))
            if args.mode == "interleaved":
                warm(torch, [ours, theirs], args.warmup_ms)
                rounds = timed_rounds(torch, dict(sides), args.rounds, args.calls)
                times = {name: [t for r in rounds[name] for t in r] for name in rounds}
            else:
                for name, fn in sides:
                    warm(torch, [fn], args.warmup_ms)
                    for _ in range(args.rounds):
                        times[name] += queued_event_times(torch, fn, args.calls)
        flops = attention_flops(b, h, n, d, causal, backward)
        ms = {name: statistics.median(t) for name, t in times.items()}
        row = {"d": d, "N": n, "b": b, "h": h, "causal": causal, "ours_ms": ms["ours"], "peer_ms": ms["peer"],
               "ours_tflops": flops / (ms["ours"] * 1e-3) / 1e12, "peer_tflops": flops / (ms["peer"] * 1e-3) / 1e12,
               "ratio": ms["peer"] / ms["ours"], "kernel": info.get("kernel", "")}
        rows.append(row)
        print(f"d {d:3d} N {n:5d} causal {int(causal)}: {algo} {row['ours_tflops']:6.1f}  {peer} {row['peer_tflops']:6.1f}"
              f"  ratio {row['ratio']:.3f}", flush=True)
        del q, k, v, dout, out, dq, dk, dv, lse, qt, kt, vt, doutt
        if backward:
            del peer_out
        torch.cuda.empty_cache()
    if rows:
        gm = statistics.geometric_mean(r["ratio"] for r in rows)
        print(f"geometric mean of {algo} / {peer}: {gm:.3f} over {len(rows)} shapes", flush=True)
    if args.json:
        write_json(args.json, {"benchmark": "interleaved", "commit": run_commit(), "date": utc_date(),
                               "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                               "cudnn": torch.backends.cudnn.version(), "direction": args.dir, "algo": algo,
                               "peer": peer, "mode": args.mode, "warmup_ms": args.warmup_ms, "rounds": args.rounds,
                               "calls": args.calls, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
