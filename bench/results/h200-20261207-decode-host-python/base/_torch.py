"""PyTorch integration: the custom ops `flashattn::fwd` / `flashattn::bwd`, their fake (meta) kernels and
autograd formula, and `FlashAttnFunc`, a torch.autograd.Function over the same kernels.

`flash_attn_func` on torch tensors calls `torch.ops.flashattn.fwd`, which torch.compile sees as one opaque
node (shapes from the fake kernel) and autograd differentiates through `register_autograd`. Where torch is
older than 2.4 (no torch.library.custom_op) the same call goes through `FlashAttnFunc` in eager mode.

Streams: every kernel runs on `torch.cuda.current_stream()` of the tensors' device, so `with
torch.cuda.stream(s):` moves it like any torch operation.
"""

import functools
from typing import List, Optional, Tuple

import torch

from . import _arrays, _ext

Tensor = torch.Tensor


def _unit_last(t: Optional[Tensor]) -> Optional[Tensor]:
    """The kernels need a unit stride along head_dim; any other stride layout is taken as it is, so this
    copies only when the last dimension is strided."""
    if t is None or t.dim() == 0 or t.shape[-1] <= 1 or t.stride(-1) == 1:
        return t
    return t.contiguous()


@functools.lru_cache(maxsize=None)
def _backward_algo(backend: str, algo: str) -> str:
    """The algorithm the backward of a graph runs: the forward's, unless capabilities() lists it as
    forward only (fa3), in which case `auto` picks one (it needs only q, k, v, out and lse)."""
    for c in _ext.capabilities():
        if c["algo"] == algo and (backend == "auto" or c["backend"] == backend) and not c["backward"]:
            return "auto"
    return algo


def _stream(t: Tensor) -> int:
    return int(torch.cuda.current_stream(t.device).cuda_stream) if t.is_cuda else 0


def _fwd_impl(
    q: Tensor, k: Tensor, v: Tensor,
    cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
    max_seqlen_q: int, max_seqlen_k: int,
    softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float,
    backend: str, algo: str, deterministic: bool,
) -> Tuple[Tensor, Tensor]:
    del deterministic  # used by the backward pass only; an argument here so that autograd can see it
    q, k, v = _unit_last(q), _unit_last(k), _unit_last(v)
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(_arrays.lse_shape(tuple(q.shape), varlen), dtype=torch.float32, device=q.device)
    ext = _arrays.for_extension
    _ext.forward(
        ext(q), ext(k), ext(v), out, lse,
        cu_seqlens_q=ext(cu_seqlens_q), cu_seqlens_k=ext(cu_seqlens_k),
        max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
        softmax_scale=softmax_scale, causal=causal, window_left=window_left, window_right=window_right,
        softcap=softcap, backend=backend, algo=algo, stream=_stream(q),
    )
    return out, lse


def _bwd_impl(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
    cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
    max_seqlen_q: int, max_seqlen_k: int,
    softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float,
    backend: str, algo: str, deterministic: bool,
) -> Tuple[Tensor, Tensor, Tensor]:
    dout, q, k, v, out = (_unit_last(t) for t in (dout, q, k, v, out))
    # The incoming gradient may be an expanded or otherwise odd view; lse is read with its own
    # contiguous layout by the library.
    lse = lse.contiguous()
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    ext = _arrays.for_extension
    algo = _backward_algo(backend, algo)
    _ext.backward(
        ext(dout), ext(q), ext(k), ext(v), ext(out), ext(lse), dq, dk, dv,
        cu_seqlens_q=ext(cu_seqlens_q), cu_seqlens_k=ext(cu_seqlens_k),
        max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
        softmax_scale=softmax_scale, causal=causal, window_left=window_left, window_right=window_right,
        softcap=softcap, backend=backend, algo=algo, deterministic=deterministic, stream=_stream(q),
    )
    return dq, dk, dv


HAS_CUSTOM_OP = hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_autograd")

if HAS_CUSTOM_OP:
    _fwd_op = torch.library.custom_op("flashattn::fwd", mutates_args=())(_fwd_impl)
    _bwd_op = torch.library.custom_op("flashattn::bwd", mutates_args=())(_bwd_impl)

    @_fwd_op.register_fake
    def _fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                  window_left, window_right, softcap, backend, algo, deterministic):
        varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        lse = torch.empty(_arrays.lse_shape(tuple(q.shape), varlen), dtype=torch.float32, device=q.device)
        return out, lse

    @_bwd_op.register_fake
    def _bwd_fake(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                  softmax_scale, causal, window_left, window_right, softcap, backend, algo, deterministic):
        return (torch.empty(q.shape, dtype=q.dtype, device=q.device),
                torch.empty(k.shape, dtype=k.dtype, device=k.device),
                torch.empty(v.shape, dtype=v.dtype, device=v.device))

    def _setup_context(ctx, inputs, output):
        (q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, wl, wr, softcap, backend, algo, det) = inputs
        out, lse = output
        ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k)
        ctx.options = (max_q, max_k, scale, causal, wl, wr, softcap, backend, algo, det)
        ctx.mark_non_differentiable(lse)

    def _op_backward(ctx, dout, dlse):
        del dlse  # the LSE is marked non-differentiable: this gradient is always zero
        q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
        dq, dk, dv = _bwd_op(dout, q, k, v, out, lse, cu_q, cu_k, *ctx.options)
        return (dq, dk, dv) + (None,) * 12

    _fwd_op.register_autograd(_op_backward, setup_context=_setup_context)
    _run_fwd = _fwd_op
    _run_bwd = _bwd_op
else:
    _run_fwd = _fwd_impl
    _run_bwd = _bwd_impl


class FlashAttnFunc(torch.autograd.Function):
    """Attention with the flashattn kernels as a torch.autograd.Function.

    apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
    window_left, window_right, softcap, backend, algo, deterministic) -> (out, lse); lse is not
    differentiable. `flash_attn_func` uses the custom op instead where torch has torch.library.custom_op.
    """

    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                window_left, window_right, softcap, backend, algo, deterministic):
        out, lse = _run_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                            causal, window_left, window_right, softcap, backend, algo, deterministic)
        ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k)
        ctx.options = (max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right, softcap,
                       backend, algo, deterministic)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        del dlse
        q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
        dq, dk, dv = _run_bwd(dout, q, k, v, out, lse, cu_q, cu_k, *ctx.options)
        return (dq, dk, dv) + (None,) * 12


def attention(
    q: Tensor, k: Tensor, v: Tensor,
    cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
    max_seqlen_q: int, max_seqlen_k: int,
    softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float,
    backend: str, algo: str, deterministic: bool,
) -> List[Tensor]:
    """(out, lse), differentiable in q, k and v. Traceable by torch.compile: nothing here but the op call."""
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
            window_left, window_right, softcap, backend, algo, deterministic)
    if HAS_CUSTOM_OP:
        return _fwd_op(*args)
    return FlashAttnFunc.apply(*args)


@torch.no_grad()
def forward_kvcache(
    q: Tensor, k_cache: Tensor, v_cache: Tensor, k_new: Optional[Tensor], v_new: Optional[Tensor],
    cache_seqlens: Tensor, block_table: Optional[Tensor],
    softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float, num_splits: int,
    check_indices: bool, backend: str,
) -> Tuple[Tensor, Tensor]:
    """(out, lse) of decode attention; appends k_new/v_new to the caches in place first. No autograd (the
    caches are mutated, and decode needs no gradients): an eager call, not a custom op."""
    q, k_new, v_new = _unit_last(q), _unit_last(k_new), _unit_last(v_new)
    cache_seqlens, block_table = _unit_last(cache_seqlens), _unit_last(block_table)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(_arrays.lse_shape(tuple(q.shape), False), dtype=torch.float32, device=q.device)
    ext = _arrays.for_extension
    # The caches go through as they are (detach is a view): the append must land in the caller's storage.
    _ext.forward_kvcache(
        ext(q), ext(k_cache), ext(v_cache), ext(cache_seqlens), out, lse,
        k_new=ext(k_new), v_new=ext(v_new), block_table=ext(block_table),
        softmax_scale=softmax_scale, causal=causal, window_left=window_left, window_right=window_right,
        softcap=softcap, num_splits=num_splits, check_indices=check_indices, backend=backend, stream=_stream(q),
    )
    return out, lse
