// The `standard` algorithm: attention as it was computed before FlashAttention, the baseline of the
// FlashAttention papers. The full score matrix S = Q K^T (fp32) and the probabilities P (input dtype) are
// materialized in device memory for every (batch, head), with cuBLAS for the products and small kernels
// (standard_kernels.cuh) for the softmax and the elementwise backward steps.
//
// Forward:  S = Q K^T;  P = softmax(mask(softcap(scale * S)));  O = P V.
// Backward: S recomputed, P from the saved LSE;  dV = P^T dO;  dP = dO V^T;  dS = P * (dP - D) with
//           D = rowsum(dO * O) (times the softcap derivative);  dQ = scale * dS K;  dK = scale * dS^T Q.
//
// cuBLAS is column-major and our matrices are row-major, so every product is written for the transposes:
// a row-major [rows, cols] matrix with row stride ld is the column-major [cols, rows] matrix with ld.
// Products run as pointer-array batched GEMMs over the (batch, query head) pairs of a segment, which
// covers GQA (several entries point at one KV head) and any strides in one call.
#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/common/cuda_check.h"
#include "cuda/common/problem_params.cuh"
#include "cuda/common/stream_buffer.h"
#include "cuda/launch.h"
#include "cuda/standard/cublas_context.h"
#include "cuda/standard/standard_kernels.cuh"

namespace flashattn::cuda {
namespace {

using namespace standard_detail;

constexpr int64_t kMaxHeadDim = 256;
constexpr int kMaxGemmBatch = 65535;         // cuBLAS batched kernels index the batch with gridDim.z
constexpr size_t kWorkspaceAlign = 256;      // bytes; keeps every workspace region aligned for cuBLAS
constexpr size_t kCublasReserve = 256u << 20;  // headroom for cuBLAS's own workspace when checking fit
constexpr double kBytesPerGB = 1e9;
constexpr int kMaxStoreBlocks = 4096;

struct Segment {
  int64_t batch0 = 0, batches = 0, len_q = 0, len_k = 0, q_row0 = 0, k_row0 = 0;
  // Packed rows after the last sequence: they belong to no sequence and get out = 0, LSE = -inf and zero
  // gradients, like the rows of a query that sees no key.
  bool outside = false;
  int64_t matrices(int64_t heads) const { return batches * heads; }
};

// Padded inputs are one segment; varlen inputs loop over their sequences on the host, plus the tail.
std::vector<Segment> make_segments(const detail::Problem& p) {
  if (!p.varlen) return {Segment{0, p.batch, p.seqlen_q, p.seqlen_k, 0, 0, false}};
  std::vector<Segment> segs;
  for (int64_t b = 0; b < p.batch; ++b)
    segs.push_back(Segment{b, 1, p.len_q(b), p.len_k(b), p.q_row_offset(b), p.k_row_offset(b), false});
  const int64_t tail_q = p.total_q - p.cu_q.back(), tail_k = p.total_k - p.cu_k.back();
  if (tail_q > 0 || tail_k > 0) segs.push_back(Segment{0, 1, tail_q, tail_k, p.cu_q.back(), p.cu_k.back(), true});
  return segs;
}

size_t align_up(size_t bytes) { return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }

// Byte offsets of the workspace regions, each sized for the largest segment.
struct Workspace {
  size_t scores = 0, dprobs = 0, probs = 0, row_dot = 0, dk = 0, dv = 0, pointers = 0, total = 0;
  size_t score_bytes = 0;  // S alone, for the message when it does not fit
};

// Pointers per (batch, head) matrix: forward 2 GEMMs x 3 operands; backward 5 GEMMs x 3 operands.
constexpr int kForwardPointers = 6;
constexpr int kBackwardPointers = 15;

Workspace plan_workspace(const detail::Problem& p, const std::vector<Segment>& segs) {
  const size_t elem = size_t(dtype_size(p.dtype));
  size_t scores = 0, rows = 0, kv_rows = 0, matrices = 0;
  for (const Segment& s : segs) {
    if (s.outside) continue;
    scores = std::max(scores, size_t(s.matrices(p.heads_q) * s.len_q * s.len_k));
    rows = std::max(rows, size_t(s.matrices(p.heads_q) * s.len_q));
    kv_rows = std::max(kv_rows, size_t(s.matrices(p.heads_kv) * s.len_k));
    matrices = std::max(matrices, size_t(s.matrices(p.heads_q)));
  }
  Workspace w;
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    size_t offset = at;
    at += align_up(bytes);
    return offset;
  };
  w.score_bytes = scores * sizeof(float);
  w.scores = take(scores * sizeof(float));
  w.probs = take(scores * elem);
  if (p.backward) {
    w.dprobs = take(scores * sizeof(float));
    w.row_dot = take(rows * sizeof(float));
    w.dk = take(kv_rows * size_t(p.head_dim) * sizeof(float));
    w.dv = take(kv_rows * size_t(p.head_dim) * sizeof(float));
  }
  w.pointers = take(matrices * (p.backward ? kBackwardPointers : kForwardPointers) * sizeof(void*));
  w.total = at;
  return w;
}

std::string gigabytes(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB", double(bytes) / kBytesPerGB);
  return buf;
}

// cuBLAS needs a leading dimension of at least the row length; a matrix of one row has no real one.
int leading_dim(int64_t row_stride, int64_t rows, int64_t head_dim) {
  return int(rows <= 1 ? std::max(row_stride, head_dim) : row_stride);
}

Status check_row_stride(const char* name, const detail::Strided& t, int64_t rows, int64_t head_dim) {
  if (!t.present() || rows <= 1) return Status::Ok();
  if (t.row_stride < head_dim || t.row_stride > INT_MAX)
    return Status::NotSupported(std::string("algorithm standard: ") + name + " has row stride " +
                                std::to_string(t.row_stride) + "; cuBLAS needs a leading dimension in [head_dim, 2^31)");
  return Status::Ok();
}

cudaDataType cuda_type(DType t) { return t == DType::kFloat16 ? CUDA_R_16F : CUDA_R_16BF; }

// A matrix operand of a batched GEMM: the device array of per-matrix pointers, its type and leading dim.
struct Operand {
  void* const* ptrs;
  cudaDataType type;
  int ld;
};

// C = alpha * op(A) op(B) + beta * C over `count` matrices, split into batches cuBLAS accepts.
Status gemm(cublasHandle_t h, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, float alpha,
            Operand a, Operand b, float beta, Operand c, int64_t count) {
  for (int64_t first = 0; first < count; first += kMaxGemmBatch) {
    const int batch = int(std::min<int64_t>(kMaxGemmBatch, count - first));
    FA_CUBLAS_RETURN_IF_ERROR(cublasGemmBatchedEx(h, op_a, op_b, m, n, k, &alpha, a.ptrs + first, a.type, a.ld,
                                                  b.ptrs + first, b.type, b.ld, &beta, c.ptrs + first, c.type, c.ld,
                                                  batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  return Status::Ok();
}

// Host-built arrays of matrix pointers, copied to the workspace in one transfer per segment.
class PointerTable {
 public:
  explicit PointerTable(void** device) : device_(device) {}
  // Reserves `count` entries; returns their index and fills them from fn(i).
  template <typename Fn>
  size_t add(int64_t count, Fn fn) {
    const size_t first = host_.size();
    for (int64_t i = 0; i < count; ++i) host_.push_back(fn(i));
    return first;
  }
  void* const* at(size_t index) const { return device_ + index; }
  // Pageable source: the call returns once the bytes are staged, so host_ may be freed afterwards; the
  // copy is ordered on `stream` after the previous segment's GEMMs, which read the same device array.
  Status upload(cudaStream_t stream) {
    FA_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(device_, host_.data(), host_.size() * sizeof(void*), cudaMemcpyHostToDevice, stream));
    return Status::Ok();
  }

 private:
  void** device_;
  std::vector<void*> host_;
};

// Addresses of (batch, head, first row) of the strided tensors for one segment.
struct Addressing {
  const detail::Problem& p;
  const Segment& seg;
  size_t elem;
  void* q_like(const detail::Strided& t, int64_t bi, int64_t head) const {
    return static_cast<char*>(t.ptr) +
           (t.batch_stride * (seg.batch0 + bi) + t.row_stride * seg.q_row0 + t.head_stride * head) * elem;
  }
  void* k_like(const detail::Strided& t, int64_t bi, int64_t kv_head) const {
    return static_cast<char*>(t.ptr) +
           (t.batch_stride * (seg.batch0 + bi) + t.row_stride * seg.k_row0 + t.head_stride * kv_head) * elem;
  }
};

SegmentShape shape_of(const detail::Problem& p, const Segment& s) {
  SegmentShape sh;
  sh.batch0 = int(s.batch0);
  sh.batches = int(s.batches);
  sh.heads_q = int(p.heads_q);
  sh.len_q = int(s.len_q);
  sh.len_k = int(s.len_k);
  sh.q_row0 = s.q_row0;
  sh.mask = core::MaskSpec::make(s.len_q, s.len_k, p.causal, p.window_left, p.window_right);
  sh.scale = p.scale;
  sh.softcap = p.softcap;
  return sh;
}

unsigned row_blocks(int64_t rows) { return unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

template <typename T>
Status store_rows(const float* src, float alpha, const StoreRows& st, cudaStream_t stream) {
  const int64_t n = st.elements();
  if (n == 0) return Status::Ok();
  const unsigned blocks = unsigned(std::min<int64_t>((n + kStoreThreads - 1) / kStoreThreads, kMaxStoreBlocks));
  store_rows_kernel<T><<<blocks, kStoreThreads, 0, stream>>>(src, alpha, st);
  FA_CUDA_RETURN_IF_LAUNCH_ERROR("store_rows_kernel");
  return Status::Ok();
}

template <typename T>
Status forward_segment(const detail::Problem& p, const Segment& seg, const Workspace& w, const StreamBuffer& buf,
                       cublasHandle_t handle, cudaStream_t stream) {
  const SegmentShape sh = shape_of(p, seg);
  const int64_t mats = seg.matrices(p.heads_q);
  if (mats == 0 || seg.len_q == 0) return Status::Ok();
  float* scores = reinterpret_cast<float*>(buf.at(w.scores));
  T* probs = reinterpret_cast<T*>(buf.at(w.probs));
  const int64_t lq = seg.len_q, lk = seg.outside ? 0 : seg.len_k, d = p.head_dim, group = p.group();

  if (lk > 0) {
    const size_t elem = sizeof(T);
    Addressing addr{p, seg, elem};
    PointerTable table(reinterpret_cast<void**>(buf.at(w.pointers)));
    auto head_of = [&](int64_t i) { return i % p.heads_q; };
    auto batch_of = [&](int64_t i) { return i / p.heads_q; };
    const size_t k_ptrs = table.add(mats, [&](int64_t i) { return addr.k_like(p.k, batch_of(i), head_of(i) / group); });
    const size_t q_ptrs = table.add(mats, [&](int64_t i) { return addr.q_like(p.q, batch_of(i), head_of(i)); });
    const size_t s_ptrs = table.add(mats, [&](int64_t i) { return static_cast<void*>(scores + i * lq * lk); });
    const size_t v_ptrs = table.add(mats, [&](int64_t i) { return addr.k_like(p.v, batch_of(i), head_of(i) / group); });
    const size_t p_ptrs = table.add(mats, [&](int64_t i) { return static_cast<void*>(probs + i * lq * lk); });
    const size_t o_ptrs = table.add(mats, [&](int64_t i) { return addr.q_like(p.out, batch_of(i), head_of(i)); });
    Status s = table.upload(stream);
    if (!s.ok()) return s;

    const cudaDataType t16 = cuda_type(p.dtype);
    const int ld_q = leading_dim(p.q.row_stride, lq, d), ld_k = leading_dim(p.k.row_stride, lk, d);
    const int ld_v = leading_dim(p.v.row_stride, lk, d), ld_o = leading_dim(p.out.row_stride, lq, d);
    // S^T [lk, lq] (column-major) = K Q^T: A = K^T stored as [d, lk] col-major, transposed.
    s = gemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(lk), int(lq), int(d), 1.0f, {table.at(k_ptrs), t16, ld_k},
             {table.at(q_ptrs), t16, ld_q}, 0.0f, {table.at(s_ptrs), CUDA_R_32F, int(lk)}, mats);
    if (!s.ok()) return s;
    softmax_forward_kernel<T><<<row_blocks(sh.rows()), kRowThreads, 0, stream>>>(scores, probs, sh, to_params(p.lse));
    FA_CUDA_RETURN_IF_LAUNCH_ERROR("softmax_forward_kernel");
    // O^T [d, lq] = V^T P^T: A = V stored as [d, lk] col-major, B = P stored as [lk, lq] col-major.
    return gemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, int(d), int(lq), int(lk), 1.0f, {table.at(v_ptrs), t16, ld_v},
                {table.at(p_ptrs), t16, int(lk)}, 0.0f, {table.at(o_ptrs), t16, ld_o}, mats);
  }
  // No keys (or rows outside every sequence): O = 0 and LSE = -inf; with len_k = 0 the softmax kernel
  // reads no score and writes no probability.
  SegmentShape no_keys = sh;
  no_keys.len_k = 0;
  no_keys.mask = core::MaskSpec::make(lq, 0, p.causal, p.window_left, p.window_right);
  softmax_forward_kernel<T><<<row_blocks(sh.rows()), kRowThreads, 0, stream>>>(scores, probs, no_keys,
                                                                                to_params(p.lse));
  FA_CUDA_RETURN_IF_LAUNCH_ERROR("softmax_forward_kernel");
  return store_rows<T>(nullptr, 0.0f,
                       StoreRows{to_params(p.out), int(seg.batch0), int(seg.batches), int(p.heads_q), int(lq), int(d),
                                 seg.q_row0},
                       stream);
}

template <typename T>
Status backward_segment(const detail::Problem& p, const Segment& seg, const Workspace& w, const StreamBuffer& buf,
                        cublasHandle_t handle, cudaStream_t stream) {
  const SegmentShape sh = shape_of(p, seg);
  const int64_t lq = seg.len_q, lk = seg.len_k, d = p.head_dim, group = p.group();
  const int64_t mats = seg.matrices(p.heads_q), kv_mats = seg.matrices(p.heads_kv);
  const StoreRows dk_rows{to_params(p.dk), int(seg.batch0), int(seg.batches), int(p.heads_kv), int(lk), int(d), seg.k_row0};
  const StoreRows dv_rows{to_params(p.dv), int(seg.batch0), int(seg.batches), int(p.heads_kv), int(lk), int(d), seg.k_row0};
  const StoreRows dq_rows{to_params(p.dq), int(seg.batch0), int(seg.batches), int(p.heads_q), int(lq), int(d), seg.q_row0};
  if (mats == 0) return Status::Ok();
  if (lq == 0 || lk == 0 || seg.outside) {
    // Nothing attends: every gradient of the segment is zero.
    Status s = store_rows<T>(nullptr, 0.0f, dq_rows, stream);
    if (s.ok()) s = store_rows<T>(nullptr, 0.0f, dk_rows, stream);
    if (s.ok()) s = store_rows<T>(nullptr, 0.0f, dv_rows, stream);
    return s;
  }
  float* scores = reinterpret_cast<float*>(buf.at(w.scores));
  float* dprobs = reinterpret_cast<float*>(buf.at(w.dprobs));
  T* probs = reinterpret_cast<T*>(buf.at(w.probs));  // P, then dS in place once dV has consumed P
  float* row_dot = reinterpret_cast<float*>(buf.at(w.row_dot));
  float* dk32 = reinterpret_cast<float*>(buf.at(w.dk));
  float* dv32 = reinterpret_cast<float*>(buf.at(w.dv));

  Addressing addr{p, seg, sizeof(T)};
  PointerTable table(reinterpret_cast<void**>(buf.at(w.pointers)));
  auto head_of = [&](int64_t i) { return i % p.heads_q; };
  auto batch_of = [&](int64_t i) { return i / p.heads_q; };
  auto score_at = [&](auto* base, int64_t i) { return static_cast<void*>(base + i * lq * lk); };
  const size_t k_ptrs = table.add(mats, [&](int64_t i) { return addr.k_like(p.k, batch_of(i), head_of(i) / group); });
  const size_t v_ptrs = table.add(mats, [&](int64_t i) { return addr.k_like(p.v, batch_of(i), head_of(i) / group); });
  const size_t q_ptrs = table.add(mats, [&](int64_t i) { return addr.q_like(p.q, batch_of(i), head_of(i)); });
  const size_t do_ptrs = table.add(mats, [&](int64_t i) { return addr.q_like(p.dout, batch_of(i), head_of(i)); });
  const size_t dq_ptrs = table.add(mats, [&](int64_t i) { return addr.q_like(p.dq, batch_of(i), head_of(i)); });
  const size_t s_ptrs = table.add(mats, [&](int64_t i) { return score_at(scores, i); });
  const size_t dp_ptrs = table.add(mats, [&](int64_t i) { return score_at(dprobs, i); });
  const size_t p_ptrs = table.add(mats, [&](int64_t i) { return score_at(probs, i); });
  // dK and dV sum over the query heads of a GQA group: one GEMM per member j of the group, batched over the
  // (batch, KV head) pairs, accumulating into fp32 (beta = 1 after the first) so no two matrices of one call
  // write the same dK. Entry j * kv_mats + i is KV matrix i paired with its query head kv_head * group + j.
  auto q_head = [&](int64_t e) { return ((e % kv_mats) % p.heads_kv) * group + e / kv_mats; };
  auto kv_batch = [&](int64_t e) { return (e % kv_mats) / p.heads_kv; };
  auto q_matrix = [&](int64_t e) { return kv_batch(e) * p.heads_q + q_head(e); };
  const size_t gq_ptrs = table.add(mats, [&](int64_t e) { return addr.q_like(p.q, kv_batch(e), q_head(e)); });
  const size_t gdo_ptrs = table.add(mats, [&](int64_t e) { return addr.q_like(p.dout, kv_batch(e), q_head(e)); });
  const size_t gp_ptrs = table.add(mats, [&](int64_t e) { return score_at(probs, q_matrix(e)); });
  const size_t gdk_ptrs = table.add(mats, [&](int64_t e) { return static_cast<void*>(dk32 + (e % kv_mats) * lk * d); });
  const size_t gdv_ptrs = table.add(mats, [&](int64_t e) { return static_cast<void*>(dv32 + (e % kv_mats) * lk * d); });
  Status s = table.upload(stream);
  if (!s.ok()) return s;

  const cudaDataType t16 = cuda_type(p.dtype);
  const int ld_q = leading_dim(p.q.row_stride, lq, d), ld_k = leading_dim(p.k.row_stride, lk, d);
  const int ld_v = leading_dim(p.v.row_stride, lk, d), ld_do = leading_dim(p.dout.row_stride, lq, d);
  const int ld_dq = leading_dim(p.dq.row_stride, lq, d);
  const int ld_s = int(lk), ld_kv32 = int(d);

  row_dot_kernel<T><<<row_blocks(sh.rows()), kRowThreads, 0, stream>>>(to_params(p.out), to_params(p.dout),
                                                                        int(d), row_dot, sh);
  FA_CUDA_RETURN_IF_LAUNCH_ERROR("row_dot_kernel");
  // S^T = K Q^T, as in the forward pass.
  s = gemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(lk), int(lq), int(d), 1.0f, {table.at(k_ptrs), t16, ld_k},
           {table.at(q_ptrs), t16, ld_q}, 0.0f, {table.at(s_ptrs), CUDA_R_32F, ld_s}, mats);
  if (!s.ok()) return s;
  probs_from_lse_kernel<T><<<row_blocks(sh.rows()), kRowThreads, 0, stream>>>(scores, probs, sh, to_params(p.lse));
  FA_CUDA_RETURN_IF_LAUNCH_ERROR("probs_from_lse_kernel");
  // dV^T [d, lk] += dO^T P: A = dO stored as [d, lq] col-major, B = P stored as [lk, lq] col-major, transposed.
  for (int64_t j = 0; j < group && s.ok(); ++j)
    s = gemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, int(d), int(lk), int(lq), 1.0f,
             {table.at(gdo_ptrs + size_t(j * kv_mats)), t16, ld_do}, {table.at(gp_ptrs + size_t(j * kv_mats)), t16, ld_s},
             j == 0 ? 0.0f : 1.0f, {table.at(gdv_ptrs + size_t(j * kv_mats)), CUDA_R_32F, ld_kv32}, kv_mats);
  if (!s.ok()) return s;
  // dP^T [lk, lq] = V dO^T: A = V^T stored as [d, lk] col-major, transposed.
  s = gemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(lk), int(lq), int(d), 1.0f, {table.at(v_ptrs), t16, ld_v},
           {table.at(do_ptrs), t16, ld_do}, 0.0f, {table.at(dp_ptrs), CUDA_R_32F, ld_s}, mats);
  if (!s.ok()) return s;
  // dS overwrites P: stream order puts it after the dV GEMMs that read P.
  dscores_kernel<T><<<row_blocks(sh.rows()), kRowThreads, 0, stream>>>(scores, dprobs, row_dot, probs, sh,
                                                                       to_params(p.lse));
  FA_CUDA_RETURN_IF_LAUNCH_ERROR("dscores_kernel");
  // dQ^T [d, lq] = scale * K^T dS^T: A = K stored as [d, lk] col-major, B = dS stored as [lk, lq] col-major.
  s = gemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, int(d), int(lq), int(lk), p.scale, {table.at(k_ptrs), t16, ld_k},
           {table.at(p_ptrs), t16, ld_s}, 0.0f, {table.at(dq_ptrs), t16, ld_dq}, mats);
  if (!s.ok()) return s;
  // dK^T [d, lk] += scale * Q^T dS: B = dS stored as [lk, lq] col-major, transposed.
  for (int64_t j = 0; j < group && s.ok(); ++j)
    s = gemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, int(d), int(lk), int(lq), p.scale,
             {table.at(gq_ptrs + size_t(j * kv_mats)), t16, ld_q}, {table.at(gp_ptrs + size_t(j * kv_mats)), t16, ld_s},
             j == 0 ? 0.0f : 1.0f, {table.at(gdk_ptrs + size_t(j * kv_mats)), CUDA_R_32F, ld_kv32}, kv_mats);
  if (!s.ok()) return s;
  s = store_rows<T>(dk32, 1.0f, dk_rows, stream);
  if (s.ok()) s = store_rows<T>(dv32, 1.0f, dv_rows, stream);
  return s;
}

template <typename T>
Status run(const detail::Problem& p, const Context& ctx) {
  const std::vector<Segment> segs = make_segments(p);
  const Workspace w = plan_workspace(p, segs);
  CublasLease lease(ctx.device, ctx.stream);
  if (!lease.status().ok()) return lease.status();
  StreamBuffer buf(ctx.stream);
  Status s = buf.allocate(w.total);
  for (const Segment& seg : segs) {
    if (!s.ok()) break;
    s = p.backward ? backward_segment<T>(p, seg, w, buf, lease.handle(), ctx.stream)
                   : forward_segment<T>(p, seg, w, buf, lease.handle(), ctx.stream);
  }
  return s;
}

// The dispatcher has called standard_supports on this problem before it runs it.
Status run_dtype(const detail::Problem& p, const Context& ctx) {
  if (p.dtype != DType::kFloat16 && p.dtype != DType::kBFloat16)
    return Status::NotSupported("algorithm standard: fp16 and bf16 only");
  return p.dtype == DType::kFloat16 ? run<__half>(p, ctx) : run<__nv_bfloat16>(p, ctx);
}

}  // namespace

Status standard_supports(const detail::Problem& p, const Context& ctx, std::string* kernel) {
  (void)ctx;
  if (p.dtype != DType::kFloat16 && p.dtype != DType::kBFloat16)
    return Status::NotSupported(std::string("algorithm standard: dtype ") + to_string(p.dtype) +
                                " is not built (fp16 and bf16 only)");
  if (p.head_dim > kMaxHeadDim)
    return Status::NotSupported("algorithm standard: head_dim " + std::to_string(p.head_dim) + " > " +
                                std::to_string(kMaxHeadDim));
  if (p.seqlen_q > INT_MAX || p.seqlen_k > INT_MAX)
    return Status::NotSupported("algorithm standard: sequence lengths must fit cuBLAS's int sizes");
  const struct {
    const char* name;
    const detail::Strided& t;
    int64_t rows;
  } operands[] = {{"q", p.q, p.seqlen_q},       {"k", p.k, p.seqlen_k},   {"v", p.v, p.seqlen_k},
                  {"out", p.out, p.seqlen_q},   {"dout", p.dout, p.seqlen_q}, {"dq", p.dq, p.seqlen_q}};
  for (const auto& o : operands) {
    Status s = check_row_stride(o.name, o.t, o.rows, p.head_dim);
    if (!s.ok()) return s;
  }
  const Workspace w = plan_workspace(p, make_segments(p));
  size_t free_bytes = 0, total_bytes = 0;
  FA_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (w.total + kCublasReserve > free_bytes)
    return Status::NotSupported("algorithm standard: S needs " + gigabytes(w.score_bytes) +
                                " of device memory (" + gigabytes(w.total) + " with P" +
                                (p.backward ? ", dP" : "") + " and the workspace), " + gigabytes(free_bytes) +
                                " free; the [batch, heads, seqlen_q, seqlen_k] scores are materialized, fa1 and fa2 need no such memory");
  if (kernel)
    *kernel = std::string("standard_") + (p.backward ? "bwd" : "fwd") + "_cublas_" +
              (p.dtype == DType::kFloat16 ? "fp16" : "bf16");
  return Status::Ok();
}

Status standard_forward(const detail::Problem& p, const Context& ctx) { return run_dtype(p, ctx); }
Status standard_backward(const detail::Problem& p, const Context& ctx) { return run_dtype(p, ctx); }

}  // namespace flashattn::cuda
