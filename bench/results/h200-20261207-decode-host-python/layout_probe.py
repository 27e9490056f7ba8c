"""Kernel times (torch.profiler, CUDA activity) of our decode kernel and SDPA cuDNN's on the decode shapes, each with
the KV cache stored token-major ([b, n, h, d], our layout) and head-major ([b, h, n, d], SDPA's), the other
layout reached through a transposed view. Usage: python3 layout_probe.py (flashattn importable)."""
import torch, flashattn, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
from torch.profiler import profile, ProfilerActivity
def run(name, fn, copies):
    for i in range(30): fn(i % copies)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(40): fn(i % copies)
        torch.cuda.synchronize()
    return " + ".join(f"{e.device_time_total/e.count:.2f}" for e in prof.key_averages() if e.device_time_total > 0)
for b, n in ((1,32768),(1,131072),(16,8192),(64,4096)):
    nb = 4*b*n*8*128
    c = max(1, (1<<30)//nb)
    q=torch.rand(b,1,32,128,device="cuda",dtype=torch.bfloat16); qt=q.transpose(1,2).contiguous()
    tok=[(torch.rand(b,n,8,128,device="cuda",dtype=torch.bfloat16),torch.rand(b,n,8,128,device="cuda",dtype=torch.bfloat16)) for _ in range(c)]
    head=[(k.transpose(1,2).contiguous(),v.transpose(1,2).contiguous()) for k,v in tok]
    s=torch.full((b,),n,dtype=torch.int32,device="cuda")
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION), torch.no_grad():
        for r in range(2):
            row = {}
            row["ours token-major"] = run("t", lambda i: flashattn.flash_attn_with_kvcache(q,*tok[i],cache_seqlens=s,check_indices=False), c)
            row["ours head-major"] = run("h", lambda i: flashattn.flash_attn_with_kvcache(q,head[i][0].transpose(1,2),head[i][1].transpose(1,2),cache_seqlens=s,check_indices=False), c)
            row["cudnn head-major"] = run("c", lambda i: F.scaled_dot_product_attention(qt,*head[i],enable_gqa=True), c)
            row["cudnn token-major"] = run("c2", lambda i: F.scaled_dot_product_attention(qt,tok[i][0].transpose(1,2),tok[i][1].transpose(1,2),enable_gqa=True), c)
            print(f"b {b} n {n} round {r} ({nb/1e6:.0f} MB): " + " | ".join(f"{k} {v} us" for k, v in row.items()), flush=True)
