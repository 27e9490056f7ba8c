// The CPU backend's entry points: which problems it runs, with which kernel, and what it supports.
#include <cstring>
#include <exception>
#include <limits>
#include <new>
#include <sstream>
#include <string>

#include "api/backend.h"
#include "cpu/cpu_kernels.h"
#include "cpu/thread_pool.h"
#include "cpu/tile_gemm.h"

namespace flashattn::detail {
namespace {

// Largest head dim of the CPU kernels: bounds the per-worker tile scratch (a few hundred KiB).
constexpr int64_t kCpuMaxHeadDim = 256;

bool dtype_supported(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat16 || dtype == DType::kBFloat16;
}

// The products name the kernel: the fp32 micro-kernel, or "amx" for bf16 and fp16 inputs on AMX.
std::string kernel_name(const Problem& p) {
  const cpu::Bf16Products products = cpu::tile_products(p);
  const char* impl = products != cpu::Bf16Products::kFp32 ? cpu::bf16_products_name(products) : cpu::tile_gemm_impl();
  return std::string("cpu_fa2_") + (p.backward ? "bwd_" : "fwd_") + impl;
}

// Packed (varlen) rows after the last sequence belong to no sequence, yet every element of an output is
// written, as the CUDA algorithms do: out = 0 and lse = -inf on the query rows after cu_seqlens_q's last
// entry, zero gradients on those rows of dq and on the key rows after cu_seqlens_k's last entry of dk and dv.
void zero_rows(const Strided& t, int64_t row_begin, int64_t row_end, int64_t heads, const Problem& p) {
  const int64_t bytes = dtype_size(p.dtype);
  for (int64_t r = row_begin; r < row_end; ++r)
    for (int64_t h = 0; h < heads; ++h)
      std::memset(static_cast<char*>(t.ptr) + (r * t.row_stride + h * t.head_stride) * bytes, 0,
                  size_t(p.head_dim * bytes));  // 0.0 in fp32, fp16 and bf16 alike
}

void write_unowned_rows(const Problem& p) {
  if (!p.varlen) return;
  const int64_t q_end = p.cu_q.back(), k_end = p.cu_k.back();
  if (!p.backward) {
    zero_rows(p.out, q_end, p.total_q, p.heads_q, p);
    if (p.lse.present())
      for (int64_t r = q_end; r < p.total_q; ++r)
        for (int64_t h = 0; h < p.heads_q; ++h)
          static_cast<float*>(p.lse.ptr)[h * p.lse.head_stride + r * p.lse.row_stride] =
              -std::numeric_limits<float>::infinity();
    return;
  }
  zero_rows(p.dq, q_end, p.total_q, p.heads_q, p);
  zero_rows(p.dk, k_end, p.total_k, p.heads_kv, p);
  zero_rows(p.dv, k_end, p.total_k, p.heads_kv, p);
}

// Turns anything thrown outside the worker pool (task lists, row statistics) into a Status.
template <typename Body>
Status guarded(Body body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "backend cpu: out of host memory");
  } catch (const std::exception& e) {
    return Status::Runtime(std::string("backend cpu: ") + e.what());
  }
}

}  // namespace

namespace cpu {
namespace {

// Small problems get smaller tiles until they have this many tasks, so that several workers share them.
// A constant, not a multiple of the worker count: the tile shape sets the summation order, and results
// must be bitwise the same for any thread count.
constexpr int64_t kMinTasks = 32;
constexpr int64_t kMinStackedRows = 32;
constexpr int64_t kMinBlockKeys = 32;
// The bf16 tiles take blocks of a multiple of 32 keys: every shape below has them, and halving a block stops
// at kMinBlockKeys.
static_assert(kMinBlockKeys % kBf16TileAlign == 0, "blocks halved down to kMinBlockKeys stay multiples of 32");

int64_t kv_block_count(const Problem& p, const TileShape& shape) {
  int64_t blocks = 0;
  for (int64_t b = 0; b < p.batch; ++b) blocks += (p.len_k(b) + shape.block_keys - 1) / shape.block_keys;
  return blocks * p.heads_kv;
}

}  // namespace

Bf16Products tile_products(const Problem& p) {
  const bool half = p.dtype == DType::kBFloat16 || p.dtype == DType::kFloat16;
  if (!half || p.head_dim % kBf16TileAlign != 0) return Bf16Products::kFp32;
  return bf16_products();
}

// Br x Bc measured on the 2-core development machine (AMD EPYC, 512 KiB L2 per core; fp32, seqlen
// 2048): a taller query tile halves how often K and V stream in from L3, which mattered most; keys per
// block keep the score tile (Br x Bc floats) and the packed K and V blocks within L2.
TileShape forward_tile_shape(const Problem& p) {
  TileShape shape = p.head_dim <= 128 ? TileShape{/*stacked_rows=*/256, /*block_keys=*/128}
                                      : TileShape{/*stacked_rows=*/128, /*block_keys=*/64};
  // On the bf16 tiles the products cost little and each query tile packs every K/V block it visits, so a
  // taller tile pays, at every head dim (Intel Xeon, bf16: 512 x 128 over 256 x 128 +4..11% at d 64, +7..13%
  // at d 128, over 128 x 64 +21..24% at d 256; 1024 rows at d 64 no better).
  constexpr TileShape kBf16Tiles{/*stacked_rows=*/512, /*block_keys=*/128};
  static_assert(kBf16Tiles.block_keys % kBf16TileAlign == 0, "bf16 tiles take blocks of a multiple of 32 keys");
  if (tile_products(p) != Bf16Products::kFp32) shape = kBf16Tiles;
  while (shape.stacked_rows > kMinStackedRows && count_query_tiles(p, shape) < kMinTasks) shape.stacked_rows /= 2;
  return shape;
}

// The backward runs a KV-parallel pass (tasks: KV blocks) and a query-parallel pass (tasks: query tiles).
TileShape backward_tile_shape(const Problem& p) {
  TileShape shape = p.head_dim <= 128 ? TileShape{/*stacked_rows=*/128, /*block_keys=*/128}
                                      : TileShape{/*stacked_rows=*/64, /*block_keys=*/64};
  // On the bf16 tiles each KV block of the KV pass copies and packs the Q and dO rows of every query tile it
  // visits, so longer blocks pay, at every head dim (Intel Xeon, bf16: 128 x 256 over 128 x 128 +6..7% at
  // d 64, +2..3% at d 128, over 64 x 64 +20..25% at d 256; 256 rows as well gained no more).
  constexpr TileShape kBf16Tiles{/*stacked_rows=*/128, /*block_keys=*/256};
  static_assert(kBf16Tiles.block_keys % kBf16TileAlign == 0, "bf16 tiles take blocks of a multiple of 32 keys");
  if (tile_products(p) != Bf16Products::kFp32) shape = kBf16Tiles;
  while (shape.block_keys > kMinBlockKeys && kv_block_count(p, shape) < kMinTasks) shape.block_keys /= 2;
  while (shape.stacked_rows > kMinStackedRows && count_query_tiles(p, shape) < kMinTasks) shape.stacked_rows /= 2;
  return shape;
}

}  // namespace cpu

Status cpu_check(const Problem& p, RunInfo* info) {
  if (p.device != Device::kCPU)
    return Status::Invalid(std::string("q: lives in ") + to_string(p.device) +
                           " memory; backend cpu reads host memory only");
  if (!dtype_supported(p.dtype))
    return Status::NotSupported(std::string("dtype ") + to_string(p.dtype) + " is not supported by backend cpu");
  if (p.head_dim > kCpuMaxHeadDim) {
    std::ostringstream s;
    s << "q: head_dim " << p.head_dim << " > " << kCpuMaxHeadDim << " is not supported by backend cpu";
    return Status::NotSupported(s.str());
  }
  if (p.algorithm != Algorithm::kAuto && p.algorithm != Algorithm::kFA2)
    return Status::NotSupported(std::string("algorithm ") + to_string(p.algorithm) +
                                " is not supported by backend cpu (it runs fa2; use auto or fa2)");
  if (info) {
    info->backend = Backend::kCPU;
    info->algorithm = Algorithm::kFA2;
    info->kernel = kernel_name(p);
  }
  return Status::Ok();
}

Status cpu_forward(const Problem& p, RunInfo* info) {
  Status s = cpu_check(p, info);
  if (!s.ok()) return s;
  return guarded([&] {
    const int workers = cpu::resolve_worker_count(p.num_threads, std::numeric_limits<int64_t>::max());
    write_unowned_rows(p);
    return cpu::run_forward(p, cpu::forward_tile_shape(p), workers);
  });
}

Status cpu_backward(const Problem& p, RunInfo* info) {
  Status s = cpu_check(p, info);
  if (!s.ok()) return s;
  return guarded([&] {
    const int workers = cpu::resolve_worker_count(p.num_threads, std::numeric_limits<int64_t>::max());
    write_unowned_rows(p);
    return cpu::run_backward(p, cpu::backward_tile_shape(p), workers);
  });
}

Capabilities cpu_capabilities() {
  Capabilities c;
  c.backend = Backend::kCPU;
  c.algorithm = Algorithm::kFA2;
  c.available = true;
  c.note = std::string("tiled FA2 on host threads; tile products: ") + cpu::tile_gemm_impl() + " micro-kernel";
  if (cpu::bf16_products() == cpu::Bf16Products::kAmx) c.note += "; bf16 and fp16 products on AMX";
  c.dtypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  c.max_head_dim = int(kCpuMaxHeadDim);
  c.backward = c.causal = c.window = c.softcap = c.gqa = c.varlen = true;
  return c;
}

}  // namespace flashattn::detail
