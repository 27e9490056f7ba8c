// Progress lines, statistics, run metadata and file output shared by the subcommands.
#include "cli_common.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>

namespace flashattn::cli {
namespace {

constexpr size_t kCommitHashLength = 40;
constexpr double kRoundoffFp32 = 5.9604644775390625e-8;  // 2^-24
constexpr double kRoundoffFp16 = 4.8828125e-4;           // 2^-11
constexpr double kRoundoffBf16 = 3.90625e-3;             // 2^-8

std::string trim(std::string s) {
  const char* space = " \t\r\n";
  s.erase(0, s.find_first_not_of(space));
  const size_t end = s.find_last_not_of(space);
  s.erase(end == std::string::npos ? 0 : end + 1);
  return s;
}

}  // namespace

Progress::Progress(std::string command) : command_(std::move(command)) {
  watcher_ = std::thread([this] { watch(); });
}

Progress::~Progress() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finish_locked();
    stopping_ = true;
  }
  wake_.notify_all();
  watcher_.join();
}

void Progress::phase(const std::string& what) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finish_locked();
    what_ = what;
    started_ = Clock::now();
    active_ = true;
    announced_ = false;
    ++generation_;
  }
  wake_.notify_all();
}

void Progress::done() {
  std::lock_guard<std::mutex> lock(mutex_);
  finish_locked();
}

void Progress::finish_locked() {
  if (active_ && announced_) {
    const double seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    std::fprintf(stderr, "flashattn %s: %s: done in %.1f s\n", command_.c_str(), what_.c_str(), seconds);
  }
  active_ = false;
}

void Progress::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (!active_ || announced_) {
      wake_.wait(lock);
      continue;
    }
    const uint64_t generation = generation_;
    const Clock::time_point deadline = started_ + kAnnounceAfter;
    wake_.wait_until(lock, deadline, [&] { return stopping_ || generation_ != generation || !active_; });
    if (!stopping_ && active_ && generation_ == generation && Clock::now() >= deadline) {
      std::fprintf(stderr, "flashattn %s: %s ...\n", command_.c_str(), what_.c_str());
      announced_ = true;
    }
  }
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + long(mid), values.end());
  if (values.size() % 2 == 1) return values[mid];
  const double upper = values[mid];
  const double lower = *std::max_element(values.begin(), values.begin() + long(mid));
  return 0.5 * (lower + upper);
}

std::string commit_id() {
  if (const char* env = std::getenv("FLASHATTN_COMMIT"); env != nullptr && *env != '\0') return env;
  FILE* pipe = popen("git rev-parse HEAD 2>/dev/null", "r");
  if (pipe == nullptr) return "unknown";
  std::array<char, 128> buf{};
  std::string text;
  while (std::fgets(buf.data(), int(buf.size()), pipe) != nullptr) text += buf.data();
  const int rc = pclose(pipe);
  text = trim(text);
  return rc == 0 && text.size() == kCommitHashLength ? text : "unknown";
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.compare(0, 10, "model name") != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) return trim(line.substr(colon + 1));
  }
  return "unknown";
}

std::string utc_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? int(n) : 1;
}

bool write_output(const std::string& path, const std::string& text, std::string* error) {
  if (path == "-") {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
    return true;
  }
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) {
    *error = "cannot open '" + path + "' for writing";
    return false;
  }
  f << text;
  f.close();
  if (!f) {
    *error = "error while writing '" + path + "'";
    return false;
  }
  return true;
}

std::string sci(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", value);
  return buf;
}

double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return kRoundoffFp16;
    case DType::kBFloat16: return kRoundoffBf16;
    default: return kRoundoffFp32;
  }
}

}  // namespace flashattn::cli
