// Attention and KV-cache cases drawn at random from the whole option space of a call: lengths, batch or varlen
// (empty sequences and unowned tail rows included), GQA/MQA, head dim, dtype, causal mask, sliding window,
// softcap, softmax scale, memory layout, LSE and deterministic mode, all in one draw. The curated suites list each
// feature on its own or in a few pairs; these cases put any of them together (varlen with GQA, a window, a softcap
// and head-major tensors in one call), so that an interaction no one listed still meets the float64 reference. A
// draw depends only on the generator's state: a suite seeds it with one printed seed (FLASHATTN_SEED repeats it)
// and names each case by CaseSpec::name().
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/attention_case.h"
#include "common/kvcache_case.h"

namespace flashattn::testing {

// What a backend under test builds: the draw keeps within it.
struct RandomCaseRules {
  std::vector<DType> dtypes{DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  std::vector<int64_t> head_dims;  // drawn from these (equally likely)
  int64_t max_len = 300;           // the longest sequence on either side
  // batch x heads_q x seqlen_q x seqlen_k x head_dim at most (the reference's time): longer draws are halved.
  int64_t max_work = int64_t(12) << 20;
  int64_t max_heads_q = 8;
  bool negative_scale = true;  // the backend runs a negative softmax scale
  // Cases for the backward: lse always, deterministic mode drawn. Their sequences are not as short. Where
  // every row sees a single key, the gradients are exactly 0 (dS = P (dP - D) with P = 1 and dP = D) and so is
  // the naive computation's (its D is formed from the same dP), while a kernel's D, formed from dO and O as
  // FlashAttention forms it, leaves rounding noise above a bound of 2 x 0 plus the floor. And with a few rows
  // and keys the maximum error is one over a few elements: D's rounding through the 16-bit O then exceeds
  // twice the naive error by chance (sq 8, sk 2 and sq 1, sk 8 did, in one draw of a few hundred). So the
  // backward's sequences have at least kBackwardMinLen rows and keys (or none, in varlen), and its windows
  // reach at least one key to each side.
  bool backward = false;
  Algorithm algorithm = Algorithm::kAuto;
};
constexpr int64_t kBackwardMinLen = 16;

// The head dims 1..256 (any) or the multiples of 8 up to 256, for RandomCaseRules::head_dims.
inline std::vector<int64_t> head_dims_up_to_256(int64_t step) {
  std::vector<int64_t> v;
  for (int64_t d = step; d <= 256; d += step) v.push_back(d);
  return v;
}

namespace random_case_detail {

inline int64_t uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {  // [lo, hi]
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}
inline bool chance(std::mt19937_64& rng, double p) { return std::bernoulli_distribution(p)(rng); }
template <typename T>
const T& pick(std::mt19937_64& rng, const std::vector<T>& v) {
  return v[size_t(uniform(rng, 0, int64_t(v.size()) - 1))];
}

// A sequence length: min_len or a short one often (a tile's edge cases), else anything up to max_len; 0 only
// where the caller allows it (varlen sequences).
inline int64_t length(std::mt19937_64& rng, int64_t min_len, int64_t max_len, bool allow_zero) {
  if (allow_zero && chance(rng, 0.12)) return 0;
  if (chance(rng, 0.12)) return min_len;
  if (chance(rng, 0.3)) return uniform(rng, min_len, std::max(min_len, std::min<int64_t>(16, max_len)));
  return uniform(rng, min_len, std::max(min_len, max_len));
}

inline int64_t work(const CaseSpec& c) {
  int64_t pairs = 0;
  if (c.varlen())
    for (size_t i = 0; i < c.lens_q.size(); ++i)
      pairs += std::max<int64_t>(c.lens_q[i], 1) * std::max<int64_t>(c.lens_k[i], 1);
  else
    pairs = c.batch * c.seqlen_q * c.seqlen_k;
  return pairs * c.heads_q * c.head_dim;
}

}  // namespace random_case_detail

// The index-th case of a run (index only names it).
inline CaseSpec random_case(const RandomCaseRules& r, std::mt19937_64& rng, int index) {
  namespace d = random_case_detail;
  CaseSpec c;
  c.label = "random" + std::to_string(index);
  c.algorithm = r.algorithm;
  c.dtype = d::pick(rng, r.dtypes);
  c.head_dim = d::pick(rng, r.head_dims);
  c.heads_kv = d::uniform(rng, 1, 3);
  int64_t group = d::pick(rng, std::vector<int64_t>{1, 1, 2, 4});
  while (group > 1 && c.heads_kv * group > r.max_heads_q) group /= 2;
  c.heads_q = c.heads_kv * group;

  const int64_t min_q = r.backward ? kBackwardMinLen : 1, min_k = min_q;
  if (d::chance(rng, 0.35)) {  // varlen: packed sequences, empty ones allowed, rows no sequence owns
    const int64_t n = d::uniform(rng, 1, 4);
    for (int64_t i = 0; i < n; ++i) {
      c.lens_q.push_back(d::length(rng, min_q, r.max_len, true));
      c.lens_k.push_back(d::length(rng, min_k, r.max_len, true));
    }
    c.batch = n;
    c.varlen_tail_rows = d::chance(rng, 0.3) ? d::uniform(rng, 1, 3) : 0;
  } else {
    c.batch = d::uniform(rng, 1, 3);
    c.seqlen_q = d::length(rng, min_q, r.max_len, false);
    c.seqlen_k = d::chance(rng, 0.25) ? std::max(c.seqlen_q, min_k) : d::length(rng, min_k, r.max_len, false);
  }
  // Halve the longest lengths until the reference's share fits (not below the minimum lengths).
  auto halve = [](int64_t len, int64_t min_len) { return len == 0 ? 0 : std::max((len + 1) / 2, min_len); };
  for (int64_t before = 0; d::work(c) > r.max_work && d::work(c) != before;) {
    before = d::work(c);
    if (c.varlen()) {
      for (int64_t& l : c.lens_q) l = halve(l, min_q);
      for (int64_t& l : c.lens_k) l = halve(l, min_k);
    } else if (c.batch > 1) {
      --c.batch;
    } else {
      c.seqlen_q = halve(c.seqlen_q, min_q);
      c.seqlen_k = halve(c.seqlen_k, min_k);
    }
  }

  c.causal = d::chance(rng, 0.4);
  if (d::chance(rng, 0.3)) {
    const int64_t reach = r.backward ? 1 : 0;
    c.window_left = d::chance(rng, 0.7) ? d::uniform(rng, reach, 64) : -1;
    c.window_right = c.window_left < 0 || d::chance(rng, 0.6) ? d::uniform(rng, reach, 64) : -1;
  }
  if (d::chance(rng, 0.25)) c.softcap = float(std::uniform_real_distribution<double>(0.5, 30.0)(rng));
  if (d::chance(rng, 0.3)) {
    c.scale = float(std::uniform_real_distribution<double>(0.05, 1.0)(rng));
    if (r.negative_scale && d::chance(rng, 0.3)) c.scale = -c.scale;
  }
  c.layout = d::pick(rng, std::vector<Layout>{Layout::kContiguous, Layout::kPadded, Layout::kHeadMajor,
                                              Layout::kBatchHeadMajor});
  c.with_backward = r.backward;
  c.with_lse = r.backward || d::chance(rng, 0.8);
  c.deterministic = r.backward && d::chance(rng, 0.5);
  return c;
}

// What a KV-cache (decode) backend under test builds, for random_kv_case.
struct RandomKVRules {
  std::vector<DType> dtypes{DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  std::vector<int64_t> head_dims;
  int64_t max_len = 600;               // the longest cache on its own
  int64_t max_work = int64_t(12) << 20;  // batch x heads_q x seqlen_q x keys x head_dim at most
  bool threads = false;                // draw the CPU backend's worker count too
};

// A KV-cache case: a batch of caches of unrelated lengths (empty ones, one token, long ones), contiguous or
// paged with any page size (1, odd, larger than a sequence), 1..16 new query tokens, appended tokens (as many
// as the query's or not), GQA/MQA, causal, windows, softcap, forced or heuristic split counts, padded q.
inline KVCaseSpec random_kv_case(const RandomKVRules& r, std::mt19937_64& rng) {
  namespace d = random_case_detail;
  KVCaseSpec c;
  c.dtype = d::pick(rng, r.dtypes);
  c.head_dim = d::pick(rng, r.head_dims);
  c.heads_kv = d::uniform(rng, 1, 3);
  int64_t group = d::pick(rng, std::vector<int64_t>{1, 2, 4, 8});
  while (group > 1 && c.heads_kv * group > 16) group /= 2;
  c.heads_q = c.heads_kv * group;
  c.seqlen_q = d::chance(rng, 0.4) ? 1 : d::uniform(rng, 2, 16);
  c.seqlen_new = d::chance(rng, 0.5) ? 0 : d::uniform(rng, 1, c.seqlen_q + 3);
  c.cache_lens.clear();
  const int64_t batch = d::uniform(rng, 1, 4);
  for (int64_t b = 0; b < batch; ++b) c.cache_lens.push_back(d::length(rng, 1, r.max_len, true));
  auto work = [&] {
    int64_t keys = 0;
    for (size_t b = 0; b < c.cache_lens.size(); ++b) keys += c.len_k(b) + 1;
    return keys * c.heads_q * c.seqlen_q * c.head_dim;
  };
  for (int64_t before = 0; work() > r.max_work && work() != before;) {  // halve the caches until it fits
    before = work();
    for (int64_t& l : c.cache_lens) l /= 2;
  }
  if (d::chance(rng, 0.6)) {
    const std::vector<int64_t> sizes{1, 16, 64, 256};
    c.page_size = d::chance(rng, 0.5) ? d::pick(rng, sizes) : d::uniform(rng, 2, 300);
  }
  c.causal = d::chance(rng, 0.4);
  if (d::chance(rng, 0.3)) {
    c.window_left = d::chance(rng, 0.7) ? d::uniform(rng, 0, 200) : -1;
    c.window_right = c.window_left < 0 || d::chance(rng, 0.5) ? d::uniform(rng, 0, 16) : -1;
  }
  if (d::chance(rng, 0.25)) c.softcap = float(std::uniform_real_distribution<double>(0.5, 30.0)(rng));
  c.num_splits = d::chance(rng, 0.5) ? 0 : int(d::uniform(rng, 1, kMaxKVSplits));
  if (r.threads && d::chance(rng, 0.5)) c.num_threads = int(d::uniform(rng, 1, 8));
  c.padded_q = d::chance(rng, 0.3);
  return c;
}

}  // namespace flashattn::testing
