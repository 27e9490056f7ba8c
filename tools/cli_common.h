// Small shared pieces of the subcommands: progress lines, statistics, run metadata, file output.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "flashattn/attention.h"

namespace flashattn::cli {

// Announces slow phases on stderr. A phase that is still running after kAnnounceAfter prints
// "flashattn <command>: <what> ..." and, when it ends, "... done in 2.3 s"; quick phases print nothing,
// so small runs stay quiet while long ones never look hung.
class Progress {
 public:
  static constexpr std::chrono::milliseconds kAnnounceAfter{1000};

  explicit Progress(std::string command);
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress();

  // Ends the current phase (if any) and starts a new one.
  void phase(const std::string& what);
  // Ends the current phase.
  void done();

 private:
  using Clock = std::chrono::steady_clock;
  void watch();
  void finish_locked();

  std::string command_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::string what_;
  Clock::time_point started_;
  bool active_ = false;
  bool announced_ = false;
  bool stopping_ = false;
  uint64_t generation_ = 0;
  std::thread watcher_;
};

// Median of `values` (empty: 0).
double median(std::vector<double> values);

// Run metadata for benchmark JSON.
std::string commit_id();      // $FLASHATTN_COMMIT, else `git rev-parse HEAD`, else "unknown"
std::string cpu_model();      // "model name" from /proc/cpuinfo, else "unknown"
std::string utc_timestamp();  // "2025-01-31T12:34:56Z"
int hardware_threads();

// Writes `text` to `path` ("-" = stdout). Returns false and sets *error on failure.
bool write_output(const std::string& path, const std::string& text, std::string* error);

// "1.2e-03"-style scientific text for errors and bounds.
std::string sci(double value);

// Unit roundoff of a storage type (2^-24, 2^-11, 2^-8 for fp32, fp16, bf16).
double unit_roundoff(DType dtype);

}  // namespace flashattn::cli
