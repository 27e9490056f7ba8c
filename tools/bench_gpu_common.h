// What the GPU benchmarks of `flashattn bench` (the sweep and the ablation in bench_gpu.cpp, the decode
// benchmark in bench_decode.cpp) share: the refusal when no GPU can run them, the default timing
// settings, and the opening and closing of the JSON result (the CPU benchmarks open and close theirs
// with the CPU counterpart here too).
#pragma once

#include <string>

#include "bench.h"
#include "device_buffers.h"
#include "json_writer.h"

namespace flashattn::cli {

// Timed and untimed runs per measurement when the options leave them at their defaults.
constexpr int kGpuDefaultRepeat = 10;
constexpr int kGpuDefaultWarmup = 3;

inline int gpu_repeat(const BenchOptions& o) { return o.repeat > 0 ? o.repeat : kGpuDefaultRepeat; }
inline int gpu_warmup(const BenchOptions& o) { return o.warmup >= 0 ? o.warmup : kGpuDefaultWarmup; }

// True when no CUDA device can run a GPU benchmark (none is present, or this build has no CUDA kernels),
// after saying so on stderr as "flashattn bench: <option>: <reason>".
bool refuse_without_gpu(const std::string& option);

// Opens the result object with the fields every GPU result starts with: the benchmark's name, the commit,
// the date, the GPU (name, driver, compute capability, SM count, CUDA runtime) and the library version.
void begin_gpu_result(JsonWriter& j, const std::string& benchmark, const GpuInfo& gpu);

// The same for a CPU result: the benchmark's name, the commit, the date, the machine (CPU model and worker
// threads) and the library version.
void begin_cpu_result(JsonWriter& j, const std::string& benchmark, const std::string& cpu, int threads);

// Closes the result object opened by begin_gpu_result or begin_cpu_result and writes it, with a final
// newline, to `path` ("-" = stdout). False, after printing the error, when the file cannot be written.
bool finish_result(JsonWriter& j, const std::string& path);

}  // namespace flashattn::cli
