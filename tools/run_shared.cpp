// Timing summaries, row sampling, the sampled-row tolerance rule and the cache-length parser of
// `flashattn run`.
#include "run_shared.h"

#include <algorithm>
#include <limits>
#include <random>
#include <string>

#include "cli_common.h"
#include "reference/harness.h"

namespace flashattn::cli {
namespace {

constexpr uint64_t kSampleStream = 0x9e3779b97f4a7c15ull;  // rows are drawn from seed ^ this, not the inputs' rng
constexpr double kFlopsPerTera = 1e12;
constexpr double kMsPerSecond = 1e3;
// Sampled rows have no naive baseline of their own. Rounding P and out to the dtype costs the naive
// computation about one unit roundoff u of the output's magnitude each, so the rule assumes a naive
// error of 2 u max|out| and applies harness::judge: out passes below 4 u max|out| + floor.
constexpr double kAssumedNaiveUnits = 2.0;
// The LSE is float32, computed from float32 scores whatever the input dtype: allow 64 float32 units
// relative to max(1, |lse|), and 1024 for 16-bit inputs, whose kernels may use fast exp2 approximations.
constexpr double kLseUnitsFp32 = 64.0;
constexpr double kLseUnits16Bit = 1024.0;

}  // namespace

double Timing::tflops() const { return median_ms > 0 ? flops / (median_ms / kMsPerSecond) / kFlopsPerTera : 0; }

Timing summarize(const std::vector<double>& times_ms, double flops) {
  Timing t;
  t.flops = flops;
  t.runs = int(times_ms.size());
  t.median_ms = median(times_ms);
  t.min_ms = times_ms.empty() ? 0 : *std::min_element(times_ms.begin(), times_ms.end());
  return t;
}

std::string warmup_text(const RunOptions& o) {
  std::string text = std::to_string(o.warmup) + " warm-up";
  if (o.warmup_ms > 0) text += " (>= " + std::to_string(int64_t(o.warmup_ms + 0.5)) + " ms)";
  return text;
}

std::vector<reference::RowId> sample_rows(int64_t batch, int64_t heads_q, int64_t seqlen_q, int samples,
                                          uint64_t seed) {
  std::vector<reference::RowId> rows;
  rows.push_back({0, 0, 0});
  rows.push_back({batch - 1, heads_q - 1, seqlen_q - 1});
  std::mt19937_64 rng(seed ^ kSampleStream);
  for (int i = 0; i < samples; ++i) {
    reference::RowId id;
    id.batch = int64_t(rng() % uint64_t(batch));
    id.head = int64_t(rng() % uint64_t(heads_q));
    id.row = int64_t(rng() % uint64_t(seqlen_q));
    rows.push_back(id);
  }
  return rows;
}

double sampled_out_bound(DType dtype, double magnitude) {
  const double u = unit_roundoff(dtype);
  return harness::judge(0.0, kAssumedNaiveUnits * u * magnitude, dtype, magnitude).bound;
}

double sampled_lse_bound(DType dtype, double max_abs_lse) {
  const double units = dtype == DType::kFloat32 ? kLseUnitsFp32 : kLseUnits16Bit;
  return units * unit_roundoff(DType::kFloat32) * max_abs_lse;
}

bool parse_cache_lens(const std::string& text, std::vector<int32_t>* lens, std::string* error) {
  std::vector<int32_t> parsed;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    int64_t v = 0;
    if (!parse_int64(item, &v, error)) return false;
    if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
      *error = "expects lengths in [0, " + std::to_string(std::numeric_limits<int32_t>::max()) + "], got " + item;
      return false;
    }
    parsed.push_back(int32_t(v));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  *lens = std::move(parsed);
  return true;
}

}  // namespace flashattn::cli
