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
//  - but at least two waves of the grid's tiles (rounded up to a power of two), meant to keep the work
//    queue balanced where a causal section ends with its shortest tiles and the next starts with its
//    longest. A simulation of the queue over the benchmark's causal sweep puts the slowest SM 0-3% above
//    the mean with this floor and about the same without it, while at short sequences the floor makes a
//    section hold more K/V than kL2SectionBytes (head dim 256, N 512: 128 pairs, 64 MB): dropping it is
//    the next experiment;
//  - at most all pairs (one section: the order is Q-tile index descending, pairs innermost).
// Always >= 1.
int l2_section_heads(int64_t batch, int64_t heads_q, int64_t heads_kv, int64_t seqlen_k, int64_t head_dim,
                     int elem_bytes, int num_m_blocks, int grid);

}  // namespace flashattn::cuda::fa3
