// Dense shared-memory rows of 16-bit elements with their 16-byte chunks XOR-swizzled, the layout the decode
// kernels keep K/V in and the FA2 forward kernels at head dims 192 and 256 (fa2::SmemRows).
//
// Chunk c of row r is stored at chunk (c & ~7) | ((c ^ r) & 7) of its row: the eight rows one ldmatrix
// phase reads at one logical chunk fall in eight different 16-byte bank groups, as padding by 16 bytes
// would arrange, but the rows stay dense. On a 32-byte aligned base every 32-byte piece of a row then lands
// on a 32-byte boundary, where every other padded row starts 16 bytes off one: a cp.async copy whose
// shared destination straddles 32-byte units asks L2 for more sectors (measured on an H200: 24 instead of
// 16 per 512-byte copy instruction, 4% of the decode kernels' read bandwidth; docs/kvcache.md).
#pragma once

namespace flashattn::cuda {

constexpr int kSwizzleChunks = 8;      // chunks are permuted within groups of 8 (row % 8)
constexpr int kSwizzleChunkElems = 8;  // 16-bit elements per 16-byte chunk

// Element offset in rows of kCols elements of the chunk in group `chunk_group` whose permuted low bits are
// `chunk_lo` (the caller's (c ^ r) & 7). Kernels that keep those low bits per lane and XOR them with
// compile-time constants address through this form.
template <int kCols>
__device__ __forceinline__ int swizzled_offset(int row, int chunk_group, int chunk_lo) {
  return row * kCols + chunk_group * (kSwizzleChunks * kSwizzleChunkElems) + chunk_lo * kSwizzleChunkElems;
}

// Element offset of logical chunk `chunk` of row `row`.
template <int kCols>
__device__ __forceinline__ int swizzled_chunk_offset(int row, int chunk) {
  return row * kCols +
         ((chunk & ~(kSwizzleChunks - 1)) | ((chunk ^ row) & (kSwizzleChunks - 1))) * kSwizzleChunkElems;
}

}  // namespace flashattn::cuda
