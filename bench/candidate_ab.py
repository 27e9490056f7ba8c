#!/usr/bin/env python3
"""The shipped and the candidate form of the fa3 or fa2 kernels, timed in one process in alternation.

A change to the kernels under test is written as code that only the candidate form takes
(`if constexpr (Cfg::kCandidate)`; src/cuda/common/candidate.h) and built beside the shipped form (cmake
-DFLASHATTN_FA3_CANDIDATE=ON for the fa3 forward, -DFLASHATTN_FA2_CANDIDATE=ON for the fa2 forward and the
fa2 backward's dK/dV kernel); the library runs the candidate form in the calls made while the environment
holds FLASHATTN_FA3_CANDIDATE=1 (FLASHATTN_FA2_CANDIDATE=1). Here, per shape, both forms warm up together,
then --rounds rounds each time --calls queued calls of one form and then of the other (the order swapped
every round), on the same inputs and output buffers. Programs started one per tree and shape
(scripts/fa3_probe.sh) each see the GPU's clock and their buffers' placement as they find them, which moved
single runs by several percent; here both forms share both.

Reported per shape: each form's median call, the speed ratio of the medians (shipped time over candidate
time: above 1, the candidate is faster) and the median and quartiles of the per-round ratios (each round's
two medians), which a drift of the clock across rounds leaves alone. A build without the candidate form
(both forms report the same kernel name) stops the script with status 2; the largest absolute difference
between the two forms' outputs (backward: dQ, dK and dV) is reported (the GPU tests check the candidate's
values).

Inputs: bf16 uniform in [-1, 1] in [batch, seqlen, heads, head_dim] (bench_common.uniform); shapes as in the
sweep (16384 tokens, hidden 2048); FLOPs 4*b*h*N*N*d, half for causal, 2.5x that for the backward.

Usage: python3 bench/candidate_ab.py [--algo fa3|fa2] [--backward] --shapes d:N:causal,... [--rounds R]
       [--calls C] [--warmup-ms MS] [--json FILE]
Needs torch with CUDA and the flashattn package built with CUDA (exits 0 with a message otherwise).
"""

import argparse
import os
import sys

from bench_common import (HIDDEN, TOKENS, attention_flops, median_of_rounds, parse_shapes, per_round_ratios,
                          run_commit, torch_and_flashattn, uniform, utc_date, write_json)
from interleaved import timed_rounds, warm

ALGOS = ("fa3", "fa2")
DEFAULT_SHAPES = "128:512:0,128:1024:0,64:1024:1"
SIDES = ("shipped", "candidate")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--algo", choices=ALGOS, default="fa3", help="the kernel family under test (default fa3)")
    p.add_argument("--backward", action="store_true", help="time the backward (fa2 only)")
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help=f"comma list of d:N:causal (default {DEFAULT_SHAPES})")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--calls", type=int, default=10, help="timed calls per form and round")
    p.add_argument("--warmup-ms", type=float, default=1000.0)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    if args.rounds < 2 or args.calls < 1:
        p.error("--rounds must be at least 2 and --calls at least 1")
    if args.backward and args.algo != "fa2":
        p.error("--backward: only fa2 has a backward with a candidate form")
    return args


def candidate_env(algo):
    """The environment variable that selects the candidate form of algo's kernels."""
    return f"FLASHATTN_{algo.upper()}_CANDIDATE"


def summarize(rounds):
    """rounds: {"shipped": [[ms, ...] per round], "candidate": [...]}, both with the same number of rounds.
    Each form's median over all its calls, their speed ratio (shipped / candidate) and the per-round speed
    ratios' median and quartiles."""
    med = {side: median_of_rounds(rounds[side]) for side in SIDES}
    q1, q2, q3 = per_round_ratios(rounds["shipped"], rounds["candidate"])
    return {"shipped_ms": med["shipped"], "candidate_ms": med["candidate"],
            "ratio": med["shipped"] / med["candidate"], "round_ratio_median": q2, "round_ratio_q1": q1,
            "round_ratio_q3": q3, "rounds": len(rounds["shipped"])}


def problem(torch, flashattn, args, d, n, causal, env, kernels):
    """Inputs and per-form outputs of one shape, and each form's call: {side: call}, {side: [outputs]}."""
    b, h = TOKENS // n, HIDDEN // d
    q, k, v = (uniform(torch, (b, n, h, d)) for _ in range(3))
    lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
    if args.backward:
        dout, out = uniform(torch, (b, n, h, d)), torch.empty_like(q)
        flashattn.forward(q, k, v, out, lse, causal=causal, algo="auto")
        grads = {side: [torch.empty_like(q) for _ in range(3)] for side in SIDES}
    else:
        grads = {side: [torch.empty_like(q)] for side in SIDES}

    def form(side):
        flag = "1" if side == "candidate" else "0"

        def call():
            os.environ[env] = flag  # read by the library at every call
            if args.backward:
                dq, dk, dv = grads[side]
                info = flashattn.backward(dout, q, k, v, out, lse, dq, dk, dv, causal=causal, algo=args.algo)
            else:
                info = flashattn.forward(q, k, v, grads[side][0], lse, causal=causal, algo=args.algo)
            kernels[side] = info.kernel
        return call

    return {side: form(side) for side in SIDES}, grads


def main(argv):
    args = parse_args(argv)
    torch, flashattn = torch_and_flashattn("candidate_ab")
    if torch is None:
        return 0
    env = candidate_env(args.algo)
    direction = "backward" if args.backward else "forward"
    before = os.environ.get(env)
    print(f"candidate_ab: {args.algo} {direction}, shipped against candidate form; warm-up {args.warmup_ms:.0f} ms,"
          f" {args.rounds} rounds of {args.calls} calls per form; {torch.cuda.get_device_name()}", flush=True)
    rows = []
    try:
        for d, n, causal in parse_shapes(args.shapes):
            b, h = TOKENS // n, HIDDEN // d
            kernels = {}
            calls, outs = problem(torch, flashattn, args, d, n, causal, env, kernels)
            for side in SIDES:
                calls[side]()
            torch.cuda.synchronize()
            if kernels["shipped"] == kernels["candidate"]:
                print(f"candidate_ab: both forms ran {kernels['shipped']}: this build has no candidate form "
                      f"(configure with -D{env}=ON)", flush=True)
                return 2
            diff = max((s - c).float().abs().max().item() for s, c in zip(outs["shipped"], outs["candidate"]))
            warm(torch, [calls[side] for side in SIDES], args.warmup_ms)
            rounds = timed_rounds(torch, {side: calls[side] for side in SIDES}, args.rounds, args.calls)
            flops = attention_flops(b, h, n, d, causal, args.backward)
            row = {"d": d, "N": n, "b": b, "h": h, "causal": causal, **summarize(rounds), "max_abs_diff": diff,
                   "kernels": kernels}
            row["shipped_tflops"] = flops / (row["shipped_ms"] * 1e-3) / 1e12
            row["candidate_tflops"] = flops / (row["candidate_ms"] * 1e-3) / 1e12
            rows.append(row)
            print(f"d {d:3d} N {n:5d} causal {int(causal)}: shipped {row['shipped_tflops']:6.1f}  candidate "
                  f"{row['candidate_tflops']:6.1f}  ratio {row['ratio']:.3f}  per round {row['round_ratio_median']:.3f}"
                  f" [{row['round_ratio_q1']:.3f}, {row['round_ratio_q3']:.3f}]  max |diff| {diff:.2e}", flush=True)
            del calls, outs
            torch.cuda.empty_cache()
    finally:
        if before is None:
            os.environ.pop(env, None)
        else:
            os.environ[env] = before
    if args.json:
        write_json(args.json, {"benchmark": "candidate_ab", "algo": args.algo, "direction": direction,
                               "commit": run_commit(), "date": utc_date(), "gpu": torch.cuda.get_device_name(),
                               "warmup_ms": args.warmup_ms, "rounds": args.rounds, "calls": args.calls,
                               "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
