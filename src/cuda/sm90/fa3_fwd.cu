// Host side of the fa3 forward: which problems the sm90a kernel accepts, its tensor maps, and the launch.
//
// Kernel set: fp16 and bf16 x head dims {64, 128, 256}; the multiples of 8 between run on the next larger
// kernel with zero-filled columns (Fa3Config::kPartialCols); other head dims run on fa2 (`auto` falls through).
// TMA needs 16-byte aligned base pointers and strides that are multiples of 16 bytes; problems that break
// that are refused here and run on fa2 too.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <array>
#include <climits>
#include <cstdint>
#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/common/problem_params.cuh"
#include "cuda/common/unowned_rows.h"
#include "cuda/launch.h"
#include "cuda/sm90/fa3_launch.cuh"

namespace flashattn::cuda {
namespace {

constexpr int kRequiredMajor = 9;  // sm_90a: wgmma, setmaxnreg and TMA as compiled here
constexpr int kRequiredMinor = 0;
constexpr int64_t kTmaAlign = 16;             // bytes: base address and every stride
constexpr int64_t kTmaMaxStride = int64_t(1) << 40;  // bytes
constexpr int kElemBytes = 2;

const char* dtype_tag(DType dtype) { return dtype == DType::kFloat16 ? "fp16" : "bf16"; }

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult result{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &result) !=
            cudaSuccess ||
        result != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      ptr = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

// TMA's rules for one operand: 16-byte aligned base, strides of dimensions with more than one index a
// multiple of 16 bytes and below 2^40.
Status check_tma_operand(const char* name, const detail::Strided& s, int64_t rows, int64_t heads, int64_t batch,
                         bool varlen) {
  if (reinterpret_cast<uintptr_t>(s.ptr) % kTmaAlign != 0)
    return Status::NotSupported(std::string("algorithm fa3: ") + name +
                                " data pointer is not 16-byte aligned (TMA needs it)");
  struct Dim {
    const char* what;
    int64_t stride, extent;
  };
  const Dim dims[] = {{"row", s.row_stride, rows}, {"head", s.head_stride, heads}, {"batch", s.batch_stride, varlen ? 1 : batch}};
  for (const Dim& d : dims) {
    if (d.extent <= 1) continue;
    const int64_t bytes = d.stride * kElemBytes;
    if (bytes % kTmaAlign != 0 || bytes <= 0 || bytes >= kTmaMaxStride)
      return Status::NotSupported(std::string("algorithm fa3: ") + name + " " + d.what + " stride " +
                                  std::to_string(d.stride) + " elements is not a positive multiple of 16 bytes " +
                                  "below 2^40 (TMA needs it)");
  }
  return Status::Ok();
}

// One tiled map with 128-byte swizzle, zero fill out of bounds (rank 4 or 5; unit element strides).
Status encode_tiled(PFN_cuTensorMapEncodeTiled_v12000 fn, CUtensorMap* map, void* ptr, DType dtype, int rank,
                    const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box) {
  const cuuint32_t elem_strides[5] = {1, 1, 1, 1, 1};
  const CUresult r = fn(map, dtype == DType::kFloat16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                        cuuint32_t(rank), ptr, dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return Status::Runtime("algorithm fa3: cuTensorMapEncodeTiled failed with error " + std::to_string(int(r)));
  return Status::Ok();
}

Status encode(CUtensorMap* map, const detail::Strided& s, DType dtype, int64_t head_dim, int64_t rows, int64_t heads,
              int64_t batch, int box_rows) {
  PFN_cuTensorMapEncodeTiled_v12000 fn = encode_fn();
  if (fn == nullptr) return Status::NotSupported("algorithm fa3: the driver offers no cuTensorMapEncodeTiled");
  // A dimension of extent 1 is never stepped, but its stride must still be valid: use a packed one.
  auto stride_or = [](int64_t stride, int64_t extent, int64_t packed) {
    return uint64_t(extent > 1 ? stride * kElemBytes : packed);
  };
  const uint64_t row_b = stride_or(s.row_stride, rows, head_dim * kElemBytes);
  const uint64_t head_b = stride_or(s.head_stride, heads, uint64_t(rows) * row_b);
  const uint64_t batch_b = stride_or(s.batch_stride, batch, uint64_t(heads) * head_b);
  const cuuint64_t dims[4] = {cuuint64_t(head_dim), cuuint64_t(rows), cuuint64_t(heads), cuuint64_t(batch)};
  const cuuint64_t strides[3] = {row_b, head_b, batch_b};
  const cuuint32_t box[4] = {cuuint32_t(sm90::kSwizzleElems), cuuint32_t(box_rows), 1, 1};
  return encode_tiled(fn, map, s.ptr, dtype, 4, dims, strides, box);
}

// Q of a GQA-packed tile (Fa3Config::kPackGqa) as a 5-d tensor (head dim, head in group, KV head, token,
// batch): a box of G heads x box_rows / G tokens lands in shared memory as box_rows rows, token-major.
Status encode_packed_q(CUtensorMap* map, const detail::Strided& s, DType dtype, int64_t head_dim, int64_t rows,
                       int64_t heads_kv, int64_t group, int64_t batch, int box_rows) {
  PFN_cuTensorMapEncodeTiled_v12000 fn = encode_fn();
  if (fn == nullptr) return Status::NotSupported("algorithm fa3: the driver offers no cuTensorMapEncodeTiled");
  auto stride_or = [](int64_t stride, int64_t extent, int64_t packed) {
    return uint64_t(extent > 1 ? stride * kElemBytes : packed);
  };
  const uint64_t group_b = uint64_t(s.head_stride * kElemBytes);  // group > 1: stepped
  const uint64_t kv_b = stride_or(group * s.head_stride, heads_kv, int64_t(group) * int64_t(group_b));
  const uint64_t row_b = stride_or(s.row_stride, rows, int64_t(heads_kv) * int64_t(kv_b));
  const uint64_t batch_b = stride_or(s.batch_stride, batch, int64_t(rows) * int64_t(row_b));
  const cuuint64_t dims[5] = {cuuint64_t(head_dim), cuuint64_t(group), cuuint64_t(heads_kv), cuuint64_t(rows),
                              cuuint64_t(batch)};
  const cuuint64_t strides[4] = {group_b, kv_b, row_b, batch_b};
  const cuuint32_t box[5] = {cuuint32_t(sm90::kSwizzleElems), cuuint32_t(group), 1, cuuint32_t(box_rows / group), 1};
  return encode_tiled(fn, map, s.ptr, dtype, 5, dims, strides, box);
}

}  // namespace

namespace fa3 {

Status make_tensor_maps(const detail::Problem& p, int block_m, int block_n, int pack_group, Fa3Params* params) {
  const int64_t batch = p.varlen ? 1 : p.batch;
  const std::array<ForwardOperand, 4> ops = forward_operands(p);  // q, k, v, out
  CUtensorMap* maps[] = {&params->tm_q, &params->tm_k, &params->tm_v};
  const int box_rows[] = {block_m, block_n, block_n};
  for (int i = 0; i < 3; ++i) {
    if (i == 0 && pack_group > 1) {
      Status s = encode_packed_q(maps[0], *ops[0].s, p.dtype, p.head_dim, ops[0].rows, p.heads_kv, pack_group, batch,
                                 block_m);
      if (!s.ok()) return s;
      continue;
    }
    Status s = encode(maps[i], *ops[i].s, p.dtype, p.head_dim, ops[i].rows, ops[i].heads, batch, box_rows[i]);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace fa3

bool fa3_runs_on(int cc_major, int cc_minor, std::string* why) {
#if defined(FLASHATTN_WITH_SM90A)
  if (cc_major == kRequiredMajor && cc_minor == kRequiredMinor) {
    why->clear();
    return true;
  }
  *why = "needs compute capability 9.0 (sm_90a: TMA, wgmma), the device is " + std::to_string(cc_major) + "." +
         std::to_string(cc_minor);
#else
  (void)cc_major;
  (void)cc_minor;
  *why = "this build has no sm_90a code (configure with FLASHATTN_CUDA_ARCHITECTURES including 90a)";
#endif
  return false;
}

Status fa3_supports(const detail::Problem& p, const Context& ctx, std::string* kernel, Fa3Variant variant) {
  if (p.backward)
    return Status::NotSupported("algorithm fa3: the Hopper kernel is forward only; the backward runs on fa2");
  std::string why;
  if (!fa3_runs_on(ctx.cc_major, ctx.cc_minor, &why)) return Status::NotSupported("algorithm fa3: " + why);
  if (p.dtype != DType::kFloat16 && p.dtype != DType::kBFloat16)
    return Status::NotSupported(std::string("dtype ") + to_string(p.dtype) +
                                " is not supported by algorithm fa3 (fp16, bf16)");
  if (p.head_dim < 8 || p.head_dim > 256 || p.head_dim % 8 != 0)
    return Status::NotSupported("algorithm fa3: head_dim " + std::to_string(p.head_dim) +
                                " is not a multiple of 8 up to 256 (kernels 64, 128, 256; the head dims between "
                                "run on the next larger one)");
  if (!(p.scale > 0.0f))
    return Status::NotSupported("algorithm fa3: the softmax scale must be positive (the scale is folded into the "
                                "exponent after the row max); fa2 runs other scales");
  if (p.total_q > INT_MAX || p.total_k > INT_MAX || p.batch * p.heads_q > INT_MAX / 256)
    return Status::NotSupported("algorithm fa3: more than 2^31 - 1 rows or tiles are not supported");
  // The consumers form the mask's key bounds in 32-bit arithmetic (core::MaskSpec32).
  if (!core::MaskSpec32::holds(p.seqlen_q, p.seqlen_k))
    return Status::NotSupported("algorithm fa3: seqlen_q + seqlen_k must stay below 2^31 - 256");
  // out too: the epilogue writes it with 16-byte stores.
  for (const ForwardOperand& o : forward_operands(p)) {
    if (o.rows == 0) continue;  // never loaded or stored (a problem without keys writes its rows apart)
    Status st = check_tma_operand(o.name, *o.s, o.rows, o.heads, p.batch, p.varlen);
    if (!st.ok()) return st;
  }
  if (encode_fn() == nullptr)
    return Status::NotSupported("algorithm fa3: the driver offers no cuTensorMapEncodeTiled");
  if (kernel != nullptr) {
    const int d = fa3::fa3_kernel_head_dim(p.head_dim);
    const int consumers = fa3::fa3_consumers(p);
    const int block_n = variant == Fa3Variant::kFull ? fa3::fa3_run_block_n(d, consumers) : fa3::fa3_block_n(d);
    *kernel = std::string("fa3_fwd_sm90_") + dtype_tag(p.dtype) + "_hd" + std::to_string(d) + "_m" +
              std::to_string(64 * consumers) + "n" + std::to_string(block_n);
    if (p.head_dim != d) *kernel += "_d" + std::to_string(p.head_dim);  // its partial-column form
    const int group = variant == Fa3Variant::kFull ? fa3::fa3_pack_group(p, 64 * consumers) : 1;
    if (group > 1) *kernel += "_gqa" + std::to_string(group);  // GQA-packed tiles
    if (variant == Fa3Variant::kFull && fa3::fa3_softcap_kernel(p)) *kernel += "_softcap";  // with its code
    if (variant == Fa3Variant::kFull && fa3_candidate_requested()) *kernel += kCandidateSuffix;
  }
  return Status::Ok();
}

Status fa3_supports(const detail::Problem& p, const Context& ctx, std::string* kernel) {
  return fa3_supports(p, ctx, kernel, Fa3Variant::kFull);
}

Status fa3_forward(const detail::Problem& p, const Context& ctx, Fa3Variant variant) {
  Status s = fa3_supports(p, ctx, nullptr);
  if (!s.ok()) return s;
  if (p.batch == 0 || p.seqlen_q == 0) return Status::Ok();  // nothing to write
  // The ablation variants exist for the benchmark's head dim only: one check for every kernel head dim.
  if (variant != Fa3Variant::kFull && p.head_dim != 128)
    return Status::NotSupported("algorithm fa3: the ablation variants are built for head_dim 128 only");
  // No key at all: a tensor map cannot describe K and V without rows, and every row's result is known
  // (out 0, lse -inf, as for any row that sees no key).
  if (p.total_k == 0) return write_forward_without_keys(p, ctx);
  switch (fa3::fa3_kernel_head_dim(p.head_dim)) {
    case 64: return fa3::launch_hd64(p, ctx);
    case 128: return fa3::launch_hd128(p, ctx, variant);
    default: return fa3::launch_hd256(p, ctx);
  }
}

}  // namespace flashattn::cuda
