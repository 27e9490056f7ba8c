// The light passes around the FA2 backward kernels:
//   pre-pass:  D = rowsum(dO * O) in fp32 and LSE in log2 units, per (batch, head, row), into padded
//              workspaces the main kernels load with whole 16-byte copies;
//   post-pass: dq = scale * dQ accumulator (fp32) in the input dtype;
//   zero rows: packed varlen rows past the last sequence get zero gradients (no sequence reads them).
#pragma once

#include "cuda/sm80/fa2_bwd_tile.cuh"

namespace flashattn::cuda::fa2_bwd {

constexpr int kPrepassWarps = 8;
constexpr int kPrepassThreads = kPrepassWarps * kWarpSize;
constexpr int kPrepassRows = kRowAlign;  // rows per CTA: the grid covers rows_pad exactly
constexpr int kElementwiseThreads = 256;

template <typename T>
__device__ __forceinline__ float2 unpack2(uint32_t v);
template <>
__device__ __forceinline__ float2 unpack2<__half>(uint32_t v) {
  return __half22float2(*reinterpret_cast<const __half2*>(&v));
}
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t v) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
}

// Sum of the 8 products of two 16-byte chunks of 16-bit values, in fp32.
template <typename T>
__device__ __forceinline__ float dot8(const uint4& x, const uint4& y) {
  const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = unpack2<T>(xs[i]), b = unpack2<T>(ys[i]);
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
  }
  return acc;
}

// Grid (rows_pad / kPrepassRows, heads_q, batch); one warp per row, one 16-byte chunk per lane.
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kPrepassThreads) prepass_kernel(const AttnParams a, const Workspace ws) {
  constexpr int kChunks = kHeadDim / kChunkElems;
  static_assert(kChunks <= kWarpSize, "one chunk per lane");
  const int h = blockIdx.y, b = blockIdx.z;
  const int len_q = a.len_q(b);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int64_t vec = row_vec_base(a, ws, b, h);
  for (int rr = warp; rr < kPrepassRows; rr += kPrepassWarps) {
    const int row = blockIdx.x * kPrepassRows + rr;
    // Padding rows: P = exp2(s - inf) = 0 and D = 0, so they contribute nothing downstream.
    float lse_log2 = __int_as_float(0x7f800000), delta = 0.0f;
    if (row < len_q) {
      const int64_t prow = int64_t(a.q_offset(b)) + row;
      float acc = 0.0f;
      if (lane < kChunks) {
        const T* o = row_ptr<const T>(a.out, b, prow, h) + lane * kChunkElems;
        const T* d = row_ptr<const T>(a.dout, b, prow, h) + lane * kChunkElems;
        acc = dot8<T>(*reinterpret_cast<const uint4*>(o), *reinterpret_cast<const uint4*>(d));
      }
#pragma unroll
      for (int off = kWarpSize / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
      delta = acc;
      const float lse = static_cast<const float*>(a.lse.ptr)[b * a.lse.batch_stride + h * a.lse.head_stride +
                                                             prow * a.lse.row_stride];
      // A row that sees no key has LSE = -inf; +inf in log2 units makes its P exactly 0 instead of NaN.
      if (lse != core::kNegInf) lse_log2 = lse * core::kLog2e;
    }
    if (lane == 0) {
      ws.lse_log2[vec + row] = lse_log2;
      ws.delta[vec + row] = delta;
    }
  }
}

// dq = scale * accumulator, per sequence: grid (ceil(seqlen_q / 16), batch), one 16-row block of the
// accumulator (every head) per CTA. One thread per (head, column tile, fragment row g): four float4 reads
// (the 64 bytes of lanes (g, 0..3), consecutive threads on consecutive bytes), rows g and g + 8 of the
// tile's 8 columns out as one 16-byte store each (accum_row0).
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kElementwiseThreads) postpass_kernel(const AttnParams a, const Workspace ws) {
  constexpr int kColTiles = kHeadDim / kAccumTileCols;
  constexpr int kHalf = kAccumTileRows / 2;
  const int b = blockIdx.y;
  const int row0 = blockIdx.x * kAccumTileRows;
  const int len_q = a.len_q(b);
  if (row0 >= len_q) return;
  const float* const block =
      ws.dq_accum + accum_tile((accum_row0(packed_q_row(a, b, 0), b) + row0) / kAccumTileRows, 0, 0, a.heads_q,
                               kColTiles);
  const int items = a.heads_q * kColTiles * kHalf;  // [head][column tile][g]
  for (int i = threadIdx.x; i < items; i += blockDim.x) {
    const int g = i % kHalf;
    const int ct = (i / kHalf) % kColTiles;
    const int h = i / (kHalf * kColTiles);
    const float4* src = reinterpret_cast<const float4*>(block + int64_t(i) * 16);
    const float4 q0 = src[0], q1 = src[1], q2 = src[2], q3 = src[3];  // lanes t4 = 0..3: (g, 2 t4 + e), (g + 8, ..)
    const float s = a.scale;
    T* const base = row_ptr<T>(a.dq, b, a.q_offset(b) + row0 + g, h) + ct * kAccumTileCols;
    if (row0 + g < len_q)
      *reinterpret_cast<uint4*>(base) = make_uint4(pack2<T>(q0.x * s, q0.y * s), pack2<T>(q1.x * s, q1.y * s),
                                                   pack2<T>(q2.x * s, q2.y * s), pack2<T>(q3.x * s, q3.y * s));
    if (row0 + g + kHalf < len_q)
      *reinterpret_cast<uint4*>(base + kHalf * a.dq.row_stride) =
          make_uint4(pack2<T>(q0.z * s, q0.w * s), pack2<T>(q1.z * s, q1.w * s), pack2<T>(q2.z * s, q2.w * s),
                     pack2<T>(q3.z * s, q3.w * s));
  }
}

}  // namespace flashattn::cuda::fa2_bwd
