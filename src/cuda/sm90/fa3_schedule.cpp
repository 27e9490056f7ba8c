#include "cuda/sm90/fa3_schedule.h"

#include <algorithm>
#include <cstdint>

namespace flashattn::cuda::fa3 {
namespace {

int64_t floor_pow2(int64_t x) {
  int64_t p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}

int64_t ceil_pow2(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int l2_section_heads(int64_t batch, int64_t heads_q, int64_t heads_kv, int64_t seqlen_k, int64_t head_dim,
                     int elem_bytes, int num_m_blocks, int grid, bool unequal_tiles) {
  if (!unequal_tiles) return 1;
  const int64_t pairs = std::max<int64_t>(1, batch * heads_q);
  const int64_t group = std::max<int64_t>(1, heads_kv > 0 ? heads_q / heads_kv : 1);
  const int64_t kv_head_bytes = std::max<int64_t>(1, seqlen_k) * head_dim * 2 * elem_bytes;  // K and V
  const int64_t fit = floor_pow2(std::max<int64_t>(1, kL2SectionBytes / std::max<int64_t>(1, kv_head_bytes)));
  const int64_t two_waves = ceil_div(2 * int64_t(std::max(grid, 1)), std::max(num_m_blocks, 1));
  const int64_t wanted = std::max(fit, ceil_pow2(ceil_div(two_waves, group)));
  const int64_t cap = std::max<int64_t>(1, floor_pow2(std::max(grid, 1) / kGridCtasPerSectionPair) / group);
  return int(std::min(pairs, std::min(wanted, cap) * group));
}

int gqa_pack_group(int64_t heads_q, int64_t heads_kv, int64_t seqlen_q, int block_m) {
  if (heads_kv <= 0 || heads_q <= heads_kv || heads_q % heads_kv != 0 || block_m <= 0) return 1;
  const int64_t g = heads_q / heads_kv;
  if (g > block_m || block_m % g != 0 || seqlen_q > (int64_t(1) << 30) / g) return 1;
  const int64_t unpacked = heads_q * ceil_div(seqlen_q, block_m);
  const int64_t packed = heads_kv * ceil_div(seqlen_q * g, block_m);
  return packed < unpacked ? int(g) : 1;
}

}  // namespace flashattn::cuda::fa3
