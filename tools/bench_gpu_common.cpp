// The refusal and the JSON result framing shared by the GPU benchmarks.
#include "bench_gpu_common.h"

#include <cstdio>

#include "cli_common.h"
#include "flashattn/attention.h"

namespace flashattn::cli {

bool refuse_without_gpu(const std::string& option) {
  if (gpu_present()) return false;
  std::fprintf(stderr, "flashattn bench: %s: %s\n", option.c_str(),
               cuda_built() ? "no CUDA device is present" : "this build of flashattn has no CUDA kernels");
  return true;
}

void begin_gpu_result(JsonWriter& j, const std::string& benchmark, const GpuInfo& gpu) {
  j.begin_object().field("benchmark", benchmark).field("commit", commit_id()).field("date", utc_timestamp());
  j.key("gpu").begin_object().field("name", gpu.name).field("driver", driver_version());
  j.field("compute_capability", std::to_string(gpu.cc_major) + "." + std::to_string(gpu.cc_minor));
  j.field("sm_count", gpu.sm_count).field("cuda_runtime", gpu.runtime_version).end_object();
  j.field("version", version());
}

void begin_cpu_result(JsonWriter& j, const std::string& benchmark, const std::string& cpu, int threads) {
  j.begin_object().field("benchmark", benchmark).field("commit", commit_id()).field("date", utc_timestamp());
  j.key("machine").begin_object().field("cpu", cpu).field("threads", threads).end_object();
  j.field("version", version());
}

bool finish_result(JsonWriter& j, const std::string& path) {
  j.end_object();
  std::string error;
  if (write_output(path, j.str() + "\n", &error)) return true;
  std::fprintf(stderr, "flashattn bench: %s\n", error.c_str());
  return false;
}

}  // namespace flashattn::cli
