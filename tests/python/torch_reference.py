"""Naive attention in torch for the torch tests: differentiable, in whatever dtype its inputs have (float64
for the oracle, the inputs' own dtype for the naive baseline of the tolerance rule).

Padded layout [batch, seqlen, heads, head_dim]; varlen packs are handled by `varlen_reference`, which runs
this per sequence. The visibility rule comes from attention_reference.visible (no library code).
"""

import torch

import attention_reference as ref


def attention(q, k, v, scale=None, causal=False, window=(-1, -1), softcap=0.0):
    """(out [b, sq, hq, d], lse [b, hq, sq]); rows that see no key give out 0 and lse -inf, with finite
    gradients (no NaN from -inf - -inf)."""
    _, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    scale = d ** -0.5 if scale is None else scale
    kk = k.repeat_interleave(hq // hkv, dim=2)
    vv = v.repeat_interleave(hq // hkv, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    mask = torch.from_numpy(ref.visible(sq, sk, causal, window[0], window[1])).to(q.device)
    s = s.masked_fill(~mask, float("-inf"))
    row_max = s.detach().amax(dim=-1, keepdim=True) if sk > 0 else s.new_full(s.shape[:-1] + (1,), float("-inf"))
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    e = torch.exp(s - row_max)
    denom = e.sum(dim=-1, keepdim=True)
    p = e / denom.clamp_min(torch.finfo(denom.dtype).tiny)
    out = torch.einsum("bhqk,bkhd->bqhd", p, vv)
    lse = (row_max + torch.log(denom)).squeeze(-1)
    return out, lse


def varlen_reference(q, k, v, cu_q, cu_k, **opts):
    """Packed q [total_q, hq, d], k/v [total_k, hkv, d] -> (out like q, lse [hq, total_q])."""
    outs, lses = [], []
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        o, l = attention(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], **opts)
        outs.append(o[0])
        lses.append(l[0])
    return torch.cat(outs, dim=0), torch.cat(lses, dim=1)


DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def assert_close(name, got, oracle, naive, dtype):
    """The tolerance rule (see attention_reference.assert_close) on torch tensors."""
    as_np = lambda t: t.detach().double().cpu().numpy()  # noqa: E731
    return ref.assert_close(name, as_np(got), as_np(oracle), as_np(naive), DTYPE_NAMES[dtype])
