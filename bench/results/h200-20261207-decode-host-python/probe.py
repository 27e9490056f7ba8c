"""Where a Python decode call's host time goes (KV-cache, d 128, 32/8 heads, one query token, bf16, trusted
indices), against SDPA cuDNN on the same inputs.

Per shape and form: the host's time per call (perf_counter over calls queued without synchronizing; the queue
never fills, so the host is never blocked by the GPU) and the queued event time per call (as bench/decode_ab.py
times it). Forms: `wrapper` (flashattn.flash_attn_with_kvcache), `wrapper_base` (the same from be5716c's
Python files, package flashattn_base, on the same extension), `func` and `func_base` (flash_attn_func on the
same q, k, v: the forward routed to the decode kernels, through the torch custom op), `ext`
(flashattn._ext.forward_kvcache with out, lse, detached inputs and the stream made once), `ext_alloc` (the
same, out and lse allocated per call), `peer` (SDPA cuDNN). Then the cost of DLPack export of one tensor,
and a torch.profiler table of 20 calls of `wrapper` at the long shape (every CUDA runtime call and kernel,
with CPU and GPU times).

Usage: python3 probe.py OUT_DIR   (flashattn importable, torch with CUDA)
"""

import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn
import flashattn_base
from flashattn import _ext

HQ, HKV, D = 32, 8, 128


def uniform(shape):
    return torch.rand(shape, device="cuda", dtype=torch.bfloat16) * 2 - 1


def forms(b, n):
    q = uniform((b, 1, HQ, D))
    k, v = uniform((b, n, HKV, D)), uniform((b, n, HKV, D))
    seqlens = torch.full((b,), n, dtype=torch.int32, device="cuda")
    qt, kt, vt = q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
    out = torch.empty_like(q)
    lse = torch.empty((b, HQ, 1), dtype=torch.float32, device="cuda")
    stream = int(torch.cuda.current_stream().cuda_stream)
    opts = dict(softmax_scale=D ** -0.5, num_splits=0, check_indices=False, stream=stream)

    def wrapper():
        return flashattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, check_indices=False)

    def wrapper_base():
        return flashattn_base.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, check_indices=False)

    def func():
        return flashattn.flash_attn_func(q, k, v)

    def func_base():
        return flashattn_base.flash_attn_func(q, k, v)

    def ext():
        _ext.forward_kvcache(q, k, v, seqlens, out, lse, **opts)

    def ext_alloc():
        o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        l_ = torch.empty((b, HQ, 1), dtype=torch.float32, device=q.device)
        _ext.forward_kvcache(q, k, v, seqlens, o, l_, **opts)

    def peer():
        return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)

    fns = {"wrapper": wrapper, "wrapper_base": wrapper_base, "func": func, "func_base": func_base, "ext": ext,
           "ext_alloc": ext_alloc, "peer": peer}
    return fns, (q, k, v)


def host_us(fn, calls):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) * 1e6 / calls


def event_us(fn, calls):
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
    fn()
    for a, z in pairs:
        a.record()
        fn()
        z.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(z) * 1e3 for a, z in pairs)


def main(out_dir):
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "shapes": []}
    lines = [f"decode host probe on {result['gpu']}, torch {torch.__version__}"]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION), torch.no_grad():
        for b, n in ((1, 256), (1, 32768)):
            fns, tensors = forms(b, n)
            for fn in fns.values():  # warm-up
                for _ in range(50):
                    fn()
            torch.cuda.synchronize()
            row = {"b": b, "seqlen_k": n}
            for name, fn in fns.items():
                hosts = [host_us(fn, 30) for _ in range(15)]
                events = [event_us(fn, 10) for _ in range(15)]
                row[name] = {"host_us": statistics.median(hosts), "event_us": statistics.median(events)}
                lines.append(f"b {b} n {n:6d} {name:9s} host {row[name]['host_us']:7.1f} us per call  "
                             f"queued events {row[name]['event_us']:7.1f} us")
            result["shapes"].append(row)
        q = tensors[0]
        t0 = time.perf_counter()
        for _ in range(1000):
            q.__dlpack__()
        dl = (time.perf_counter() - t0) * 1e3
        result["dlpack_export_us"] = dl
        lines.append(f"one tensor's __dlpack__(): {dl:.2f} us")
        fns, _ = forms(1, 32768)
        for _ in range(20):
            fns["wrapper"]()
        torch.cuda.synchronize()
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                fns["wrapper"]()
            torch.cuda.synchronize()
        table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=40)
        prof.export_chrome_trace(f"{out_dir}/trace_wrapper_1x32768.json")
    lines.append(table)
    with open(f"{out_dir}/probe.txt", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(f"{out_dir}/probe.json", "w") as f:
        json.dump(result, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1])
