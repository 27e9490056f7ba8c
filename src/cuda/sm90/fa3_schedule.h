// The fa3 forward's tile order on the host side: how many (batch, query head) pairs one L2 section of the
// order holds (fa3_fwd_kernel.cuh, make_tile). CUDA-free, so the rule can be read and tested on its own.
#pragma once

#include <cstdint>

namespace flashattn::cuda::fa3 {

// K and V bytes one section may hold: a third of an H100's or H200's 50 MB L2, which leaves room for the
// Q tiles and output rows streaming past and for the L2's two halves (data in the far half counts twice).
constexpr int64_t kL2SectionBytes = int64_t(16) << 20;

// Pairs per section for a problem whose K/V heads hold seqlen_k keys of head_dim elements (elem_bytes
// each), with num_m_blocks Q tiles per pair, on a persistent grid of `grid` CTAs:
//  - as many KV heads as fit kL2SectionBytes (a power of two, so power-of-two head counts split into equal
//    sections), times the query heads per KV head (the query heads of one KV head are adjacent pairs);
//  - under a mask with unequal tiles (`unequal_tiles`: causal, a window), at least two waves of the grid's
//    tiles (rounded up to a power of two), so that a section's work is long next to its longest tile:
//    measured on an H200, sections of one wave or less ran the causal head-dim-256 sweep 5-8% slower at
//    N >= 2048 (8% faster at N 512). With equal tiles the floor only made short-sequence sections hold
//    more K/V than kL2SectionBytes (head dim 256, N 512: 128 pairs, 64 MB) and cost up to 17% there;
//  - at most all pairs (one section: the order is Q-tile index descending, pairs innermost).
// Always >= 1.
int l2_section_heads(int64_t batch, int64_t heads_q, int64_t heads_kv, int64_t seqlen_k, int64_t head_dim,
                     int elem_bytes, int num_m_blocks, int grid, bool unequal_tiles);

}  // namespace flashattn::cuda::fa3
