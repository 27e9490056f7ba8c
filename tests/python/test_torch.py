"""The torch integration on the CPU: autograd against a float64 torch reference, the custom ops
(opcheck), torch.compile(fullgraph=True) against eager. Skipped as a whole where torch is absent."""

import pytest

torch = pytest.importorskip("torch")

import flashattn  # noqa: E402
import torch_reference as tref  # noqa: E402

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, causal, window, softcap)
CASES = {
    "gqa": (2, 19, 19, 4, 2, 32, False, (-1, -1), 0.0),
    "causal_q_shorter_than_k": (1, 17, 41, 2, 2, 64, True, (-1, -1), 0.0),
    "causal_q_longer_than_k": (1, 29, 13, 2, 1, 64, True, (-1, -1), 0.0),
    "window_softcap": (2, 33, 33, 2, 2, 48, False, (6, 3), 4.0),
}
DTYPES = [torch.float32, torch.bfloat16]


def randn(gen, shape, dtype, requires_grad=True):
    return torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype).requires_grad_(requires_grad)


@pytest.fixture
def gen(seed):
    return torch.Generator().manual_seed(seed)


def reference_grads(q, k, v, dout, dtype, **opts):
    """(out, lse, dq, dk, dv) of the reference on copies of q, k, v cast to `dtype`."""
    leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    out, lse = tref.attention(*leaves, **opts)
    out.backward(dout.to(dtype))
    return (out, lse) + tuple(t.grad for t in leaves)


def check_against_reference(q, k, v, dout, got, dtype, **opts):
    oracle = reference_grads(q, k, v, dout, torch.float64, **opts)
    naive = reference_grads(q, k, v, dout, dtype, **opts)
    for name, g, o, n in zip(("out", "lse", "dq", "dk", "dv"), got, oracle, naive):
        tref.assert_close(name, g, o, n, dtype if name != "lse" else torch.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_autograd_matches_float64_reference(gen, dtype, case):
    batch, sq, sk, hq, hkv, d, causal, window, softcap = case
    q = randn(gen, (batch, sq, hq, d), dtype)
    k, v = randn(gen, (batch, sk, hkv, d), dtype), randn(gen, (batch, sk, hkv, d), dtype)
    dout = randn(gen, q.shape, dtype, requires_grad=False)
    out, lse = flashattn.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap,
                                         return_lse=True)
    assert out.dtype == dtype and lse.dtype == torch.float32 and not lse.requires_grad
    out.backward(dout)
    check_against_reference(q, k, v, dout, (out, lse, q.grad, k.grad, v.grad), dtype,
                            causal=causal, window=window, softcap=softcap)


def test_autograd_function_matches_custom_op(gen):
    q = randn(gen, (2, 23, 4, 64), torch.float32)
    k, v = randn(gen, (2, 31, 2, 64), torch.float32), randn(gen, (2, 31, 2, 64), torch.float32)
    dout = randn(gen, q.shape, torch.float32, requires_grad=False)
    args = (None, None, 0, 0, 0.0, True, -1, -1, 0.0, "auto", "auto", True)
    out, _ = flashattn.FlashAttnFunc.apply(q, k, v, *args)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    out_op = flashattn.flash_attn_func(q, k, v, causal=True, deterministic=True)
    grads_op = torch.autograd.grad(out_op, (q, k, v), dout)
    assert torch.equal(out, out_op)
    for a, b in zip(grads, grads_op):
        assert torch.equal(a, b)
    check_against_reference(q, k, v, dout, (out, _, *grads), torch.float32, causal=True)


def test_varlen_autograd_with_empty_sequences(gen):
    cu_q = torch.tensor([0, 6, 6, 20, 31], dtype=torch.int32)
    cu_k = torch.tensor([0, 9, 12, 12, 40], dtype=torch.int32)
    q = randn(gen, (31, 4, 32), torch.float32)
    k, v = randn(gen, (40, 2, 32), torch.float32), randn(gen, (40, 2, 32), torch.float32)
    dout = randn(gen, q.shape, torch.float32, requires_grad=False)
    out, lse = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 14, 28, causal=True, return_lse=True)
    assert lse.shape == (4, 31)
    out.backward(dout)
    got = (out, lse, q.grad, k.grad, v.grad)

    def run(dtype):
        leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
        o, l = tref.varlen_reference(*leaves, cu_q, cu_k, causal=True)
        o.backward(dout.to(dtype))
        return (o, l) + tuple(t.grad for t in leaves)

    for name, g, o, n in zip(("out", "lse", "dq", "dk", "dv"), got, run(torch.float64), run(torch.float32)):
        tref.assert_close(name, g, o, n, torch.float32)


def test_strided_inputs(gen):
    base = randn(gen, (2, 13, 32, 4), torch.float32, requires_grad=False)
    q = base.transpose(-1, -2).requires_grad_()  # last dim strided: copied inside the op
    kv = randn(gen, (2, 17, 4, 2, 32), torch.float32, requires_grad=False)
    k, v = kv[:, :, 0].requires_grad_(), kv[:, :, 1].requires_grad_()  # strided heads: used in place
    k.retain_grad()
    v.retain_grad()
    dout = randn(gen, (2, 13, 4, 32), torch.float32, requires_grad=False)
    out, lse = flashattn.flash_attn_func(q, k, v, return_lse=True)
    out.backward(dout)
    check_against_reference(q, k, v, dout, (out, lse, q.grad, k.grad, v.grad), torch.float32)


def test_low_level_api_takes_tensors_that_require_grad(gen):
    q = randn(gen, (1, 9, 2, 32), torch.float32)
    out = torch.full_like(q, float("nan"), requires_grad=False)
    lse = torch.full((1, 2, 9), float("nan"))
    info = flashattn.forward(q, q, q, out, lse)
    assert info.backend == "cpu" and not out.isnan().any() and not lse.isnan().any()


def test_inference_calls_skip_the_op_and_match_it(gen, monkeypatch):
    q, k, v = (randn(gen, (1, 17, 2, 32), torch.float32) for _ in range(3))
    out_op = flashattn.flash_attn_func(q, k, v, causal=True)  # inputs require grad: through the op
    assert out_op.requires_grad

    def refuse(*args):
        raise AssertionError("the custom op ran for a call with nothing to differentiate")

    monkeypatch.setattr(flashattn._torch, "_fwd_op", refuse)
    monkeypatch.setattr(flashattn._torch.FlashAttnFunc, "apply", refuse)
    with torch.no_grad():
        out_direct = flashattn.flash_attn_func(q, k, v, causal=True)
    out_plain = flashattn.flash_attn_func(q.detach(), k.detach(), v.detach(), causal=True)
    assert not out_direct.requires_grad and not out_plain.requires_grad
    assert torch.equal(out_direct, out_op.detach()) and torch.equal(out_plain, out_op.detach())
    with pytest.raises(AssertionError, match="the custom op ran"):
        flashattn.flash_attn_func(q, k, v, causal=True)


def test_errors_keep_their_types_through_the_op(gen):
    q = randn(gen, (1, 8, 2, 32), torch.float32)
    with pytest.raises(ValueError, match=r"k: head_dim 16 must equal the head_dim of q \(32\)"):
        flashattn.flash_attn_func(q, q[..., :16], q[..., :16])
    with pytest.raises(TypeError, match=r"q: dtype float64 is not supported"):
        flashattn.flash_attn_func(q.double(), q.double(), q.double())
    with pytest.raises(ValueError, match=r"dropout_p"):
        flashattn.flash_attn_func(q, q, q, dropout_p=0.5)
    with pytest.raises(ValueError, match=r"stream: torch tensors run on torch.cuda.current_stream"):
        flashattn.flash_attn_func(q, q, q, stream=0)


@pytest.mark.skipif(not flashattn._torch.HAS_CUSTOM_OP, reason="torch < 2.4 has no torch.library.custom_op")
def test_opcheck_custom_ops(gen):
    q = randn(gen, (2, 11, 4, 32), torch.float32)
    k, v = randn(gen, (2, 15, 2, 32), torch.float32), randn(gen, (2, 15, 2, 32), torch.float32)
    options = (0, 0, 0.0, True, -1, -1, 0.0, "auto", "auto", False)
    torch.library.opcheck(torch.ops.flashattn.fwd.default, (q, k, v, None, None) + options)
    out, lse = torch.ops.flashattn.fwd(q, k, v, None, None, *options)
    dout = randn(gen, q.shape, torch.float32, requires_grad=False)
    plain = [t.detach() for t in (q, k, v, out, lse)]
    torch.library.opcheck(torch.ops.flashattn.bwd.default, (dout, *plain, None, None) + options)


class TinyAttention(torch.nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = torch.nn.Linear(dim, dim)
        self.kv = torch.nn.Linear(dim, 2 * kv_heads * self.head_dim)
        self.o = torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim)
        k, v = self.kv(x).view(b, s, 2, self.kv_heads, self.head_dim).unbind(dim=2)
        y = flashattn.flash_attn_func(q, k, v, causal=True, window_size=(24, -1))
        return self.o(y.reshape(b, s, -1))


@pytest.mark.skipif(not flashattn._torch.HAS_CUSTOM_OP, reason="torch < 2.4 has no torch.library.custom_op")
def test_compile_fullgraph_matches_eager(gen):
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
    model = TinyAttention(dim=128, heads=4, kv_heads=2)
    x = randn(gen, (2, 37, 128), torch.float32)
    y_eager = model(x)
    grads_eager = torch.autograd.grad(y_eager.sum(), [x, *model.parameters()])

    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)  # fullgraph: any graph break raises
    y = compiled(x)
    grads = torch.autograd.grad(y.sum(), [x, *model.parameters()])
    torch.testing.assert_close(y, y_eager, rtol=1e-5, atol=1e-5)
    for g, ge in zip(grads, grads_eager):
        torch.testing.assert_close(g, ge, rtol=1e-4, atol=1e-4)
