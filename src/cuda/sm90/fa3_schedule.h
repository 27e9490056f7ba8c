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
//  - with equal tiles (no mask): one, so the order runs pair by pair, each pair's Q tiles back to back.
//    The CTAs at work at one time then hold a few pairs' K/V between them, each pair read from device
//    memory once and then from L2 by all of its tiles together. Measured on an H200 against sections of
//    16 MB of K/V: +3-7% at head dims 128 and 256 up to N 2048 (and d 128, N 4096), 0-2% beyond, head dim
//    64 0-1%;
//  - under a mask with unequal tiles (`unequal_tiles`: causal, a window), where the longest tiles must go
//    first across many pairs: as many KV heads as fit kL2SectionBytes (a power of two, so power-of-two
//    head counts split into equal sections), times the query heads per KV head (the query heads of one KV
//    head are adjacent pairs), and at least two waves of the grid's tiles (rounded up to a power of two),
//    so that a section's work is long next to its longest tile: measured on an H200, sections of one wave
//    or less ran the causal head-dim-256 sweep 5-8% slower at N >= 2048 (8% faster at N 512), and one pair
//    per section ran causal problems up to 11% slower;
//  - at most all pairs (one section: the order is Q-tile index descending, pairs innermost).
// Always >= 1.
int l2_section_heads(int64_t batch, int64_t heads_q, int64_t heads_kv, int64_t seqlen_k, int64_t head_dim,
                     int elem_bytes, int num_m_blocks, int grid, bool unequal_tiles);

}  // namespace flashattn::cuda::fa3
