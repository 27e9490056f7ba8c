// What the two modes of `flashattn run` share: the parsed options, timing summaries, the sampling of
// query rows and the tolerance rule for sampled rows (checked against reference::forward_row).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli_args.h"
#include "flashattn/attention.h"
#include "reference/reference.h"

namespace flashattn::cli {

constexpr int64_t kRunDefaultBatch = 2;
constexpr int64_t kRunDefaultSeqlen = 1024;
constexpr int64_t kRunDefaultHeads = 16;
constexpr int64_t kRunDefaultHeadDim = 64;
constexpr int kRunDefaultSampledRows = 16;  // random rows; the first and the last row are added
constexpr int kKvDefaultSeqlenQ = 1;        // --kv-cache without --seqlen-q: one decode step

struct RunOptions {
  int64_t batch = kRunDefaultBatch;
  int64_t seqlen_q = kRunDefaultSeqlen, seqlen_k = kRunDefaultSeqlen;
  int64_t heads = kRunDefaultHeads, heads_kv = kRunDefaultHeads;
  int64_t head_dim = kRunDefaultHeadDim;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  double softcap = 0, scale = 0;
  DType dtype = DType::kFloat32;
  Backend backend = Backend::kAuto;
  Algorithm algorithm = Algorithm::kAuto;
  bool backward = false, deterministic = false, json = false;
  int threads = 0, repeat = 0, warmup = -1, samples = kRunDefaultSampledRows;
  double warmup_ms = 0;  // the untimed runs go on until they have also taken this long
  uint64_t seed = 0;

  // KV-cache mode (--kv-cache): forward_kvcache on a cache filled with random tokens.
  bool kv_cache = false;
  std::vector<int32_t> cache_lens = {0};  // one length for every sequence, or one per sequence
  int64_t new_tokens = 0;                 // k/v tokens appended by the call
  int64_t page_size = 0;                  // 0: contiguous cache
  int64_t cache_capacity = 0;             // tokens per sequence; 0: just enough for cache + new tokens
  int splits = 0;                         // KV splits per sequence; 0: the library's heuristic
  bool no_check_indices = false;          // KVCacheArgs::check_indices = false
};

struct Timing {
  double median_ms = 0, min_ms = 0;
  int runs = 0;
  double alone_ms = 0;  // GPU (flashattn run): median of calls each timed alone, launch path included; else 0
  double flops = 0;
  double tflops() const;
};

// Median and min of the timed calls, and the FLOPs they count.
Timing summarize(const std::vector<double>& times_ms, double flops);

// "3 warm-up" or, with --warmup-ms, "3 warm-up (>= 200 ms)": the progress line's account of the warm-up.
std::string warmup_text(const RunOptions& o);

struct RowCheck {
  int rows = 0;
  double out_error = 0, out_bound = 0;
  double lse_error = 0, lse_bound = 0;
  int64_t unwritten = 0;
  bool pass() const { return unwritten == 0 && out_error <= out_bound && lse_error <= lse_bound; }
};

// The rows a run checks: the first and the last (batch, head, row), then `samples` random ones drawn
// from a stream of `seed` that is independent of the inputs' stream.
std::vector<reference::RowId> sample_rows(int64_t batch, int64_t heads_q, int64_t seqlen_q, int samples,
                                          uint64_t seed);

// Bounds for sampled rows, which have no naive baseline of their own (docs/cli.md, "The check").
// `magnitude` is max |out| over the reference rows, `max_abs_lse` max(1, max |lse|) over their finite LSEs.
double sampled_out_bound(DType dtype, double magnitude);
double sampled_lse_bound(DType dtype, double max_abs_lse);

// `flashattn run --kv-cache`: options already parsed and placement resolved by cmd_run.
int run_kvcache(const ArgParser& parser, const RunOptions& o);

// "512" or "512,0,4097": cache lengths, each in [0, 2^31).
bool parse_cache_lens(const std::string& text, std::vector<int32_t>* lens, std::string* error);

}  // namespace flashattn::cli
