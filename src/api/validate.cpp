// Backend-independent validation of attention calls: shapes, strides, dtypes, devices, index ranges.
#include <sstream>
#include <string>

#include "api/backend.h"
#include "api/problem.h"
#include "api/validate_rules.h"

namespace flashattn::detail {
namespace {

Strided strided(const TensorView& t, bool varlen) {
  Strided s;
  s.ptr = t.data;
  if (varlen) {
    s.batch_stride = 0;
    s.row_stride = t.stride[0];
    s.head_stride = t.stride[1];
  } else {
    s.batch_stride = t.stride[0];
    s.row_stride = t.stride[1];
    s.head_stride = t.stride[2];
  }
  return s;
}

Status read_cu_seqlens(const char* name, const TensorView& cu, const TensorView& q, void* stream,
                       std::vector<int32_t>* out) {
  if (!cu.present()) return invalid(name, ": is required for varlen but absent");
  if (cu.ndim != 1) return invalid(name, ": expected 1 dimension [batch + 1], got ", cu.ndim);
  if (cu.dtype != DType::kInt32) return invalid(name, ": dtype must be int32, got ", to_string(cu.dtype));
  if (cu.shape[0] < 2) return invalid(name, ": needs at least 2 entries [batch + 1], got ", cu.shape[0]);
  if (cu.shape[0] > 1 && cu.stride[0] != 1) return invalid(name, ": must be contiguous");
  Status s = check_same_place(name, cu, q);
  if (!s.ok()) return s;
  if (cu.device == Device::kCPU) {
    const int32_t* p = static_cast<const int32_t*>(cu.data);
    out->assign(p, p + cu.shape[0]);
    return Status::Ok();
  }
  return cuda_copy_index_to_host(cu, stream, out);
}

Status check_cu_values(const char* name, const std::vector<int32_t>& cu, int64_t total, int64_t max_seqlen,
                       int64_t* max_len) {
  if (cu[0] != 0) return invalid(name, "[0] must be 0, got ", cu[0]);
  *max_len = 0;
  for (size_t i = 1; i < cu.size(); ++i) {
    if (cu[i] < cu[i - 1])
      return invalid(name, " must be non-decreasing: entry ", i, " (", cu[i], ") < entry ", i - 1, " (", cu[i - 1], ")");
    *max_len = std::max<int64_t>(*max_len, cu[i] - cu[i - 1]);
  }
  if (cu.back() > total)
    return invalid(name, ": last entry ", cu.back(), " exceeds the ", total, " packed rows of the tensor");
  if (max_seqlen > 0 && *max_len > max_seqlen)
    return invalid(name, ": a sequence has length ", *max_len, " > the given max_seqlen ", max_seqlen);
  return Status::Ok();
}

Status fill_common(const AttentionArgs& a, Problem* p) {
  const bool varlen = a.cu_seqlens_q.present() || a.cu_seqlens_k.present();
  const int nd = varlen ? 3 : 4;
  FA_RETURN_IF_ERROR(check_tensor("q", a.q, nd));
  FA_RETURN_IF_ERROR(check_tensor("k", a.k, nd));
  FA_RETURN_IF_ERROR(check_tensor("v", a.v, nd));
  FA_RETURN_IF_ERROR(check_tensor("out", a.out, nd));
  if (a.q.dtype == DType::kInt32) return invalid("q: dtype int32 is not a floating-point type");
  FA_RETURN_IF_ERROR(check_same_dtype("k", a.k, a.q));
  FA_RETURN_IF_ERROR(check_same_dtype("v", a.v, a.q));
  FA_RETURN_IF_ERROR(check_same_dtype("out", a.out, a.q));
  FA_RETURN_IF_ERROR(check_same_place("k", a.k, a.q));
  FA_RETURN_IF_ERROR(check_same_place("v", a.v, a.q));
  FA_RETURN_IF_ERROR(check_same_place("out", a.out, a.q));
  FA_RETURN_IF_ERROR(check_same_shape("v", a.v, "k", a.k));
  FA_RETURN_IF_ERROR(check_same_shape("out", a.out, "q", a.q));

  const int hd = nd - 1, hh = nd - 2;
  p->dtype = a.q.dtype;
  p->device = a.q.device;
  p->device_index = a.q.device_index;
  p->varlen = varlen;
  p->head_dim = a.q.shape[hd];
  p->heads_q = a.q.shape[hh];
  p->heads_kv = a.k.shape[hh];
  if (p->head_dim == 0) return invalid("q: head_dim must be positive, got 0");
  if (a.k.shape[hd] != p->head_dim)
    return invalid("k: head_dim ", a.k.shape[hd], " must equal the head_dim of q (", p->head_dim, ")");
  if (p->heads_q == 0) return invalid("q: number of heads must be positive, got 0");
  if (p->heads_kv == 0) return invalid("k: number of heads must be positive, got 0");
  if (p->heads_q % p->heads_kv != 0)
    return invalid("k: heads_q (", p->heads_q, ") must be a multiple of heads_kv (", p->heads_kv, ") for GQA/MQA");

  if (varlen) {
    FA_RETURN_IF_ERROR(read_cu_seqlens("cu_seqlens_q", a.cu_seqlens_q, a.q, a.stream, &p->cu_q));
    FA_RETURN_IF_ERROR(read_cu_seqlens("cu_seqlens_k", a.cu_seqlens_k, a.q, a.stream, &p->cu_k));
    if (p->cu_q.size() != p->cu_k.size())
      return invalid("cu_seqlens_k: has ", p->cu_k.size(), " entries but cu_seqlens_q has ", p->cu_q.size(),
                     "; both must be [batch + 1]");
    if (a.max_seqlen_q < 0) return invalid("max_seqlen_q: must be >= 0, got ", a.max_seqlen_q);
    if (a.max_seqlen_k < 0) return invalid("max_seqlen_k: must be >= 0, got ", a.max_seqlen_k);
    p->batch = int64_t(p->cu_q.size()) - 1;
    p->total_q = a.q.shape[0];
    p->total_k = a.k.shape[0];
    FA_RETURN_IF_ERROR(check_cu_values("cu_seqlens_q", p->cu_q, p->total_q, a.max_seqlen_q, &p->seqlen_q));
    FA_RETURN_IF_ERROR(check_cu_values("cu_seqlens_k", p->cu_k, p->total_k, a.max_seqlen_k, &p->seqlen_k));
    p->device_cu_q = static_cast<const int32_t*>(a.cu_seqlens_q.data);
    p->device_cu_k = static_cast<const int32_t*>(a.cu_seqlens_k.data);
  } else {
    p->batch = a.q.shape[0];
    if (a.k.shape[0] != p->batch)
      return invalid("k: batch ", a.k.shape[0], " must equal the batch of q (", p->batch, ")");
    p->seqlen_q = a.q.shape[1];
    p->seqlen_k = a.k.shape[1];
    p->total_q = p->batch * p->seqlen_q;
    p->total_k = p->batch * p->seqlen_k;
  }
  p->q = strided(a.q, varlen);
  p->k = strided(a.k, varlen);
  p->v = strided(a.v, varlen);
  p->out = strided(a.out, varlen);

  if (a.lse.present()) {
    const TensorView& l = a.lse;
    FA_RETURN_IF_ERROR(check_same_place("lse", l, a.q));
    if (l.dtype != DType::kFloat32) return invalid("lse: dtype must be float32, got ", to_string(l.dtype));
    TensorView want;
    want.ndim = varlen ? 2 : 3;
    if (varlen) {
      want.shape[0] = p->heads_q;
      want.shape[1] = p->total_q;
    } else {
      want.shape[0] = p->batch;
      want.shape[1] = p->heads_q;
      want.shape[2] = p->seqlen_q;
    }
    bool same = l.ndim == want.ndim;
    for (int i = 0; same && i < l.ndim; ++i) same = l.shape[i] == want.shape[i];
    if (!same)
      return invalid("lse: shape ", shape_str(l), " must be ", shape_str(want),
                     varlen ? " ([heads_q, total_q] for varlen)" : " ([batch, heads_q, seqlen_q])");
    if (!l.is_contiguous()) return invalid("lse: must be contiguous");
    if (reinterpret_cast<uintptr_t>(l.data) % 4 != 0) return invalid("lse: data pointer must be 4-byte aligned");
    p->lse.ptr = l.data;
    if (varlen) {
      p->lse.batch_stride = 0;
      p->lse.head_stride = p->total_q;
      p->lse.row_stride = 1;
    } else {
      p->lse.batch_stride = p->heads_q * p->seqlen_q;
      p->lse.head_stride = p->seqlen_q;
      p->lse.row_stride = 1;
    }
  }

  FA_RETURN_IF_ERROR(check_softmax_options(a, p->head_dim, &p->scale));
  p->softcap = a.softcap;
  p->causal = a.causal;
  p->window_left = a.window_left;
  p->window_right = a.window_right;
  FA_RETURN_IF_ERROR(check_execution_options(a));
  p->backend = a.backend;
  p->algorithm = a.algorithm;
  p->deterministic = a.deterministic;
  p->num_threads = a.num_threads;
  p->stream = a.stream;
  return Status::Ok();
}

}  // namespace

double Problem::forward_flops() const {
  double pairs = 0;
  for (int64_t b = 0; b < batch; ++b) {
    core::MaskSpec m = mask(b);
    int64_t lq = len_q(b);
    if (!m.is_masked()) {
      pairs += double(lq) * double(len_k(b));
      continue;
    }
    for (int64_t i = 0; i < lq; ++i) pairs += double(std::max<int64_t>(0, m.key_end(i) - m.key_begin(i)));
  }
  return 4.0 * pairs * double(heads_q) * double(head_dim);
}

Status make_problem(const AttentionArgs& a, Problem* p) {
  if (a.q.device == Device::kCUDA && !cuda_is_built())
    return Status::NotSupported("q: lives in CUDA memory but this build of flashattn has no CUDA backend");
  FA_RETURN_IF_ERROR(fill_common(a, p));
  FA_RETURN_IF_ERROR(check_locations({{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"out", &a.out}, {"lse", &a.lse},
                                      {"cu_seqlens_q", &a.cu_seqlens_q}, {"cu_seqlens_k", &a.cu_seqlens_k}}));
  p->backward = false;
  return Status::Ok();
}

Status make_problem(const BackwardArgs& b, Problem* p) {
  const AttentionArgs& a = b.fwd;
  if (a.q.device == Device::kCUDA && !cuda_is_built())
    return Status::NotSupported("q: lives in CUDA memory but this build of flashattn has no CUDA backend");
  FA_RETURN_IF_ERROR(fill_common(a, p));
  if (!a.lse.present()) return invalid("lse: the forward LSE is required by backward but absent");
  const int nd = p->varlen ? 3 : 4;
  struct Grad {
    const char* name;
    const TensorView& t;
    const char* ref_name;
    const TensorView& ref;
    Strided* dst;
  } grads[] = {{"dout", b.dout, "q", a.q, &p->dout},
               {"dq", b.dq, "q", a.q, &p->dq},
               {"dk", b.dk, "k", a.k, &p->dk},
               {"dv", b.dv, "v", a.v, &p->dv}};
  for (const Grad& g : grads) {
    FA_RETURN_IF_ERROR(check_tensor(g.name, g.t, nd));
    FA_RETURN_IF_ERROR(check_same_dtype(g.name, g.t, a.q));
    FA_RETURN_IF_ERROR(check_same_place(g.name, g.t, a.q));
    FA_RETURN_IF_ERROR(check_same_shape(g.name, g.t, g.ref_name, g.ref));
    *g.dst = strided(g.t, p->varlen);
  }
  FA_RETURN_IF_ERROR(check_locations({{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"out", &a.out}, {"lse", &a.lse},
                                      {"cu_seqlens_q", &a.cu_seqlens_q}, {"cu_seqlens_k", &a.cu_seqlens_k},
                                      {"dout", &b.dout}, {"dq", &b.dq}, {"dk", &b.dk}, {"dv", &b.dv}}));
  p->backward = true;
  return Status::Ok();
}

}  // namespace flashattn::detail
