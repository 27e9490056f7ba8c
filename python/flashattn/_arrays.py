"""Array plumbing shared by every entry point: framework detection, streams, argument checks.

Nothing here imports torch, CuPy or JAX: a framework is recognized by the module its array type comes
from, and imported only when an array of it is seen.
"""

import numbers
from typing import Any, Optional, Tuple


def framework(x: Any) -> str:
    """'torch', 'numpy', 'cupy', or 'dlpack' (any other DLPack producer, e.g. JAX)."""
    module = type(x).__module__.split(".", 1)[0]
    if module == "torch":
        return "torch"
    if module == "numpy":
        return "numpy"
    if module == "cupy":
        return "cupy"
    if hasattr(x, "__dlpack__"):
        return "dlpack"
    raise TypeError(
        f"q: expected a torch tensor, a numpy or CuPy array, or another DLPack array; got {type(x).__name__}"
    )


_torch_export = None  # (torch.strided, torch.utils.dlpack.to_dlpack), looked up at the first torch tensor


def for_extension(x: Any) -> Any:
    """What the extension receives for `x`. A torch tensor goes as a DLPack capsule from torch's C exporter:
    passing the tensor itself would go through its Python `__dlpack__` method, whose checks cost a few
    microseconds a tensor (a short decode call passes six); one that requires grad is detached first (a view,
    no copy). Everything else goes through as it is."""
    global _torch_export
    if x is None or type(x).__module__.split(".", 1)[0] != "torch":
        return x
    if _torch_export is None:
        import torch  # already loaded: x is one of its tensors
        from torch.utils.dlpack import to_dlpack

        _torch_export = (torch.strided, to_dlpack)
    strided, to_dlpack = _torch_export
    if x.layout != strided:
        raise TypeError(f"flashattn takes dense (strided) tensors, got one of layout {x.layout}")
    return to_dlpack(x.detach() if x.requires_grad else x)


def resolve_stream(stream: Any, q: Any) -> int:
    """The CUDA stream (as an integer handle) the call runs on.

    An explicit `stream` may be an integer handle, an object with `.cuda_stream` (torch.cuda.Stream) or
    `.ptr` (cupy.cuda.Stream). Without one, torch and CuPy arrays run on their framework's current stream,
    anything else on the legacy default stream (0).
    """
    if stream is not None:
        for attribute in ("cuda_stream", "ptr"):
            if hasattr(stream, attribute):
                return int(getattr(stream, attribute))
        if isinstance(stream, int):
            return stream
        raise TypeError(f"stream: expected an integer handle, a torch.cuda.Stream or a cupy Stream, got {stream!r}")
    kind = type(q).__module__.split(".", 1)[0]
    if kind == "torch" and q.is_cuda:
        import torch

        return int(torch.cuda.current_stream(q.device).cuda_stream)
    if kind == "cupy":
        import cupy

        return int(cupy.cuda.get_current_stream().ptr)
    return 0


def window(window_size: Any) -> Tuple[int, int]:
    """flash-attn's (left, right) window, -1 meaning unbounded on that side."""
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise ValueError(f"window_size: expected a pair (left, right), got {window_size!r}") from None
    return int(left), int(right)


def softmax_scale(scale: Optional[float]) -> float:
    """The library reads a scale of 0 as 'default' (1/sqrt(head_dim)); an explicit 0 would silently turn
    into that, so it is refused."""
    if scale is None:
        return 0.0
    if scale == 0:
        raise ValueError("softmax_scale: must be nonzero; pass None for the default 1/sqrt(head_dim)")
    return float(scale)


def check_flash_attn_only_options(dropout_p: float, alibi_slopes: Any, return_attn_probs: bool) -> None:
    """Arguments flash-attn has and this library does not support: refuse them loudly."""
    if dropout_p != 0.0:
        raise ValueError(
            f"dropout_p: attention dropout is not supported by flashattn (got {dropout_p}); pass 0.0"
        )
    if alibi_slopes is not None:
        raise NotImplementedError("alibi_slopes: ALiBi biases are not supported by flashattn")
    if return_attn_probs:
        raise NotImplementedError(
            "return_attn_probs: the attention probabilities are never materialized; "
            "use return_lse=True for the log-sum-exp"
        )


def lse_shape(q_shape: Tuple[int, ...], varlen: bool) -> Tuple[int, ...]:
    """[batch, heads_q, seqlen_q], or [heads_q, total_q] for varlen (as flash-attn returns it)."""
    if varlen:
        return (q_shape[1], q_shape[0])
    return (q_shape[0], q_shape[2], q_shape[1])


def is_python_int(x: Any) -> bool:
    """A Python (or numpy scalar) integer, not a bool: cache_seqlens given as one length for every sequence."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


# flash-attn's flash_attn_with_kvcache arguments that this library does not support, and what to do instead.
_KVCACHE_UNSUPPORTED = {
    "rotary_cos": "rotary embedding is not supported; rotate q and k before the call",
    "rotary_sin": "rotary embedding is not supported; rotate q and k before the call",
    "cache_batch_idx": "cache batch indices are not supported; index the caches before the call",
    "cache_leftpad": "left-padded caches are not supported",
    "alibi_slopes": "ALiBi biases are not supported by flashattn",
}


def check_kvcache_only_options(**options: Any) -> None:
    """Refuses, loudly, each of flash-attn's unsupported kvcache arguments that was passed (not None)."""
    for name, value in options.items():
        if value is not None:
            raise NotImplementedError(f"{name}: {_KVCACHE_UNSUPPORTED[name]}")
