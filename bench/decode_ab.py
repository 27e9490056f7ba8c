#!/usr/bin/env python3
"""flashattn's KV-cache decode against one PyTorch SDPA backend in one process, the sides' calls alternating.

`flashattn bench --gpu --decode` and bench/peers_decode.py time the two sides in two programs, each after its
own short warm-up, so each meets the GPU's clock and its buffers' placement as it finds them; where the sides
are within 1-2% of each other (batch 16 x 8192 and 64 x 4096 keys on an H200) that alone can decide which is
ahead. Here, per shape, every side warms up together with the others (interleaved.warm), then --rounds rounds
each time --calls queued calls of every side in turn (the order rotated every round), and each of our sides is
compared with the peer round by round as bench/candidate_ab.py compares its two forms.

Sides: the peer, and ours once per --splits entry (0: the library's split rule, as the benchmarks run it; N:
N splits forced). Ours is called through flash_attn_with_kvcache with check_indices=False (no copy of the
index arrays to the host, as `flashattn bench --decode` times its "trusted" column), so the calls queue as
the peer's do; at batch 1 x 32768 (a call of ~40 us) the Python path of either side may not keep up.

Shapes, inputs and bytes as in bench/peers_decode.py: bf16, 32 query heads over 8 KV heads, head_dim 128, one
query token, full caches; K and V read once at 8 heads count as the bytes. Each side has its own caches in
its own layout ([batch, seqlen, heads, head_dim] ours, [batch, heads, seqlen, head_dim] SDPA's) holding the
same values, rotated over disjoint copies (about 1 GiB of K and V per side) so that consecutive calls never
find their keys in L2. The peer takes GQA with enable_gqa=True, or K and V expanded to 32 heads where it
refuses that (recorded as "gqa": "expanded"; the byte count stays the one at 8 heads).

Reported per shape and side: the median call (us) and TB/s; per side of ours the speed ratio of the medians
(peer time over ours: above 1, ours is faster), the per-round ratios' median and quartiles, and the largest
difference of its output from the peer's.

Usage: python3 bench/decode_ab.py [--shapes b:seqlen_k,...] [--splits 0,...] [--peer cudnn|flash]
       [--rounds R] [--calls C] [--warmup-ms MS] [--json FILE]
Needs torch with CUDA and the flashattn package built with CUDA (exits 0 with a message otherwise).
"""

import argparse
import sys

from bench_common import (median_of_rounds, per_round_ratios, run_commit, sdpa_backend_kinds, tbps,
                          torch_and_flashattn, uniform, utc_date, write_json)
from interleaved import timed_rounds, warm
from peers_decode import HEAD_DIM, HEADS_KV, HEADS_Q, SEQLEN_Q, SHAPES, expanded, kv_bytes_and_copies

PEER = "peer"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_shapes = ",".join(f"{b}:{n}" for b, n in SHAPES)
    p.add_argument("--shapes", default=default_shapes, help=f"comma list of batch:seqlen_k (default {default_shapes})")
    p.add_argument("--splits", default="0", help="comma list of our split counts, 0 = the library's rule (default 0)")
    p.add_argument("--peer", choices=("cudnn", "flash"), default="cudnn")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--calls", type=int, default=10, help="timed calls per side and round")
    p.add_argument("--warmup-ms", type=float, default=1000.0)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    try:
        args.shape_list = parse_decode_shapes(args.shapes)
        args.split_list = [int(s) for s in args.splits.split(",") if s != ""]
    except ValueError as err:
        p.error(str(err))
    if not args.split_list or any(s < 0 for s in args.split_list) or len(set(args.split_list)) != len(args.split_list):
        p.error("--splits: distinct counts of 0 or more")
    if args.rounds < 2 or args.calls < 1:
        p.error("--rounds must be at least 2 and --calls at least 1")
    return args


def parse_decode_shapes(text):
    """A comma list of batch:seqlen_k as (batch, seqlen_k) pairs, both positive."""
    shapes = []
    for item in text.split(","):
        parts = item.split(":")
        if len(parts) != 2:
            raise ValueError(f"shape {item!r}: expected batch:seqlen_k")
        b, n = int(parts[0]), int(parts[1])
        if b < 1 or n < 1:
            raise ValueError(f"shape {item!r}: batch and seqlen_k must be positive")
        shapes.append((b, n))
    return shapes


def side_name(splits):
    """Our side's name: "ours" with the library's split rule, "ours_s<N>" with N splits forced."""
    return "ours" if splits == 0 else f"ours_s{splits}"


def compare_rounds(peer_rounds, our_rounds):
    """Each side's rounds as lists of call times (ms). The medians over all calls, their speed ratio (peer time
    over ours) and the per-round speed ratios' median and quartiles."""
    q1, q2, q3 = per_round_ratios(peer_rounds, our_rounds)
    peer_ms, ours_ms = median_of_rounds(peer_rounds), median_of_rounds(our_rounds)
    return {"ms": ours_ms, "peer_ms": peer_ms, "ratio": peer_ms / ours_ms, "round_ratio_median": q2,
            "round_ratio_q1": q1, "round_ratio_q3": q3}


def shape_calls(torch, flashattn, F, sdpa_kernel, b, n, split_list, kind):
    """Inputs of one shape and each side's call: ({side: call}, {side: first output}, gqa form of the peer,
    rotated copies). The peer's form (enable_gqa, else K and V expanded) is settled here, before any timing."""
    kv_bytes, copies = kv_bytes_and_copies(b, n)
    q = uniform(torch, (b, SEQLEN_Q, HEADS_Q, HEAD_DIM))
    ours_kv = [(uniform(torch, (b, n, HEADS_KV, HEAD_DIM)), uniform(torch, (b, n, HEADS_KV, HEAD_DIM)))
               for _ in range(copies)]
    peer_kv = [(k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()) for k, v in ours_kv]
    qt = q.transpose(1, 2).contiguous()
    seqlens = torch.full((b,), n, dtype=torch.int32, device="cuda")
    state = {"i": 0}
    first = {}

    def next_copy(kv):
        pair = kv[state["i"] % len(kv)]
        state["i"] += 1
        return pair

    def ours(splits):
        def call():
            k, v = next_copy(ours_kv)
            return flashattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, num_splits=splits,
                                                     check_indices=False)
        return call

    calls = {side_name(s): ours(s) for s in split_list}
    gqa = "enable_gqa"
    with sdpa_kernel(kind), torch.no_grad():
        try:
            first[PEER] = F.scaled_dot_product_attention(qt, *peer_kv[0], enable_gqa=True)
        except (RuntimeError, TypeError):
            peer_kv = expanded(peer_kv)
            gqa = "expanded"
            first[PEER] = F.scaled_dot_product_attention(qt, *peer_kv[0])
    peer_kwargs = {"enable_gqa": True} if gqa == "enable_gqa" else {}

    def peer():
        k, v = next_copy(peer_kv)
        return F.scaled_dot_product_attention(qt, k, v, **peer_kwargs)

    calls[PEER] = peer
    for s in split_list:
        state["i"] = 0
        first[side_name(s)] = calls[side_name(s)]().transpose(1, 2)  # as the peer's [b, heads, 1, d]
    return calls, first, gqa, copies, kv_bytes


def main(argv):
    args = parse_args(argv)
    torch, flashattn = torch_and_flashattn("decode_ab")
    if torch is None:
        return 0
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    kind = sdpa_backend_kinds()[args.peer]
    ours_sides = [side_name(s) for s in args.split_list]
    sides = [PEER] + ours_sides
    print(f"decode_ab: flashattn decode ({', '.join(ours_sides)}) against SDPA {args.peer} in one process; warm-up "
          f"{args.warmup_ms:.0f} ms, {args.rounds} rounds of {args.calls} calls per side; "
          f"{torch.cuda.get_device_name()}", flush=True)
    rows = []
    for b, n in args.shape_list:
        try:
            calls, first, gqa, copies, kv_bytes = shape_calls(torch, flashattn, F, sdpa_kernel, b, n,
                                                              args.split_list, kind)
            torch.cuda.synchronize()
        except (RuntimeError, ValueError) as err:
            print(f"b {b:3d} seqlen_k {n:6d}: skipped ({str(err).splitlines()[0][:160]})", flush=True)
            continue
        with sdpa_kernel(kind), torch.no_grad():
            warm(torch, [calls[s] for s in sides], args.warmup_ms)
            rounds = timed_rounds(torch, {s: calls[s] for s in sides}, args.rounds, args.calls)
        peer_ms = median_of_rounds(rounds[PEER])
        row = {"b": b, "seqlen_k": n, "bytes": kv_bytes, "rotated_caches": copies, "gqa": gqa,
               "peer_ms": peer_ms, "peer_TBps": tbps(kv_bytes, peer_ms), "ours": {}}
        line = f"b {b:3d} seqlen_k {n:6d}: {args.peer} {peer_ms * 1e3:8.1f} us {row['peer_TBps']:5.2f} TB/s"
        for s, side in zip(args.split_list, ours_sides):
            c = compare_rounds(rounds[PEER], rounds[side])
            c["TBps"] = tbps(kv_bytes, c["ms"])
            c["splits"] = "heuristic" if s == 0 else s
            c["max_abs_diff"] = (first[side].float() - first[PEER].float()).abs().max().item()
            del c["peer_ms"]
            row["ours"][side] = c
            line += (f" | {side} {c['ms'] * 1e3:8.1f} us {c['TBps']:5.2f} TB/s ratio {c['ratio']:.3f} per round "
                     f"{c['round_ratio_median']:.3f} [{c['round_ratio_q1']:.3f}, {c['round_ratio_q3']:.3f}]"
                     f" max |diff| {c['max_abs_diff']:.1e}")
        rows.append(row)
        print(line, flush=True)
        del calls, first
        torch.cuda.empty_cache()
    if args.json:
        write_json(args.json, {"benchmark": "decode_ab", "commit": run_commit(), "date": utc_date(),
                               "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "peer": args.peer,
                               "dtype": "bf16", "heads_q": HEADS_Q, "heads_kv": HEADS_KV, "head_dim": HEAD_DIM,
                               "seqlen_q": SEQLEN_Q, "warmup_ms": args.warmup_ms, "rounds": args.rounds,
                               "calls": args.calls, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
