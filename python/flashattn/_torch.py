"""PyTorch integration: the custom ops `flashattn::fwd` / `flashattn::bwd`, their fake (meta) kernels and
autograd formula, and `FlashAttnFunc`, a torch.autograd.Function over the same kernels.

`flash_attn_func` on torch tensors calls `torch.ops.flashattn.fwd`, which torch.compile sees as one opaque
node (shapes from the fake kernel) and autograd differentiates through `register_autograd`. Where torch is
older than 2.4 (no torch.library.custom_op) the same call goes through `FlashAttnFunc` in eager mode. An
eager call that autograd, a trace or a dispatch mode would not see anyway (no input requires grad, or grad
mode is off) runs the kernels directly, without the op's dispatch.

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


# Every tensor the kernels get goes through this (a DLPack capsule from torch's C exporter, or None).
_dl = _arrays.for_extension


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
    _ext.forward(
        _dl(q), _dl(k), _dl(v), _dl(out), _dl(lse),
        cu_seqlens_q=_dl(cu_seqlens_q), cu_seqlens_k=_dl(cu_seqlens_k),
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
    algo = _backward_algo(backend, algo)
    _ext.backward(
        _dl(dout), _dl(q), _dl(k), _dl(v), _dl(out), _dl(lse), _dl(dq), _dl(dk), _dl(dv),
        cu_seqlens_q=_dl(cu_seqlens_q), cu_seqlens_k=_dl(cu_seqlens_k),
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


_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
try:
    from torch.utils._python_dispatch import _get_current_dispatch_mode
except ImportError:
    _get_current_dispatch_mode = None
# Older torch, without either query: every call is taken as possibly traced and goes through the op.
_CAN_SKIP_OP = _is_compiling is not None and _get_current_dispatch_mode is not None


def _plain_eager(tensors) -> bool:
    """True where the custom op has nothing to add: no torch.compile trace and no dispatch mode (tracing,
    fake tensors, FLOP counters) to record it, plain tensors only, and no autograd graph to build. The op's
    dispatch costs tens of microseconds a call, most of a short (decode-shaped) inference call."""
    if not _CAN_SKIP_OP or _is_compiling() or _get_current_dispatch_mode() is not None:
        return False
    present = [t for t in tensors if t is not None]
    if any(type(t) is not torch.Tensor for t in present):
        return False
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in present))


def attention(
    q: Tensor, k: Tensor, v: Tensor,
    cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
    max_seqlen_q: int, max_seqlen_k: int,
    softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float,
    backend: str, algo: str, deterministic: bool,
) -> List[Tensor]:
    """(out, lse), differentiable in q, k and v. Traceable by torch.compile (which sees the op call); an eager
    call with nothing to differentiate or record runs the kernels directly (_plain_eager)."""
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
            window_left, window_right, softcap, backend, algo, deterministic)
    if _plain_eager((q, k, v, cu_seqlens_q, cu_seqlens_k)):
        return _fwd_impl(*args)
    if HAS_CUSTOM_OP:
        return _fwd_op(*args)
    return FlashAttnFunc.apply(*args)


def forward_kvcache(
    q: Tensor, k_cache: Tensor, v_cache: Tensor, k_new: Optional[Tensor], v_new: Optional[Tensor],
    cache_seqlens: Tensor, block_table: Optional[Tensor], want_lse: bool,
    softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float, num_splits: int,
    check_indices: bool, backend: str,
) -> Tuple[Tensor, Optional[Tensor]]:
    """(out, lse) of decode attention, lse None unless want_lse; appends k_new/v_new to the caches in place
    first. No autograd (the caches are mutated, and decode needs no gradients): an eager call, not a custom
    op, and nothing here is recorded by autograd (the extension's writes are invisible to it), so no
    no_grad context is needed either."""
    q, k_new, v_new = _unit_last(q), _unit_last(k_new), _unit_last(v_new)
    cache_seqlens, block_table = _unit_last(cache_seqlens), _unit_last(block_table)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = None
    if want_lse:
        lse = torch.empty(_arrays.lse_shape(tuple(q.shape), False), dtype=torch.float32, device=q.device)
    # The caches go through as they are (a capsule shares their storage): the append lands in the caller's.
    _ext.forward_kvcache(
        _dl(q), _dl(k_cache), _dl(v_cache), _dl(cache_seqlens), _dl(out), _dl(lse),
        k_new=_dl(k_new), v_new=_dl(v_new), block_table=_dl(block_table),
        softmax_scale=softmax_scale, causal=causal, window_left=window_left, window_right=window_right,
        softcap=softcap, num_splits=num_splits, check_indices=check_indices, backend=backend, stream=_stream(q),
    )
    return out, lse
