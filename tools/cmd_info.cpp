// `flashattn info`: what this build and this machine offer (backends, algorithms, dtypes, head dims,
// features, CUDA devices), from flashattn::capabilities().
#include <cstdio>
#include <string>
#include <vector>

#include "cli_args.h"
#include "cli_common.h"
#include "commands.h"
#include "device_buffers.h"
#include "json_writer.h"

namespace flashattn::cli {
namespace {

std::string join_dtypes(const std::vector<DType>& dtypes) {
  std::string s;
  for (DType d : dtypes) s += std::string(s.empty() ? "" : ",") + to_string(d);
  return s.empty() ? "-" : s;
}

std::string head_dims_text(const Capabilities& c) {
  if (!c.head_dims.empty()) {
    std::string s;
    for (int d : c.head_dims) s += (s.empty() ? "" : ",") + std::to_string(d);
    return s;
  }
  return c.max_head_dim > 0 ? "any <= " + std::to_string(c.max_head_dim) : "-";
}

std::vector<std::pair<const char*, bool>> features(const Capabilities& c) {
  return {{"backward", c.backward}, {"causal", c.causal}, {"window", c.window},
          {"softcap", c.softcap},   {"gqa", c.gqa},       {"varlen", c.varlen}};
}

}  // namespace

std::vector<Algorithm> available_cuda_algorithms() {
  std::vector<Algorithm> algos;
  for (const Capabilities& c : capabilities())
    if (c.backend == Backend::kCUDA && c.available && c.algorithm != Algorithm::kAuto) algos.push_back(c.algorithm);
  return algos;
}

bool cuda_offers(Algorithm algorithm, DType dtype) {
  for (const Capabilities& c : capabilities()) {
    if (c.backend != Backend::kCUDA || !c.available) continue;
    if (algorithm != Algorithm::kAuto && c.algorithm != algorithm) continue;
    for (DType d : c.dtypes)
      if (d == dtype) return true;
  }
  return false;
}

int cmd_info(int argc, char** argv, int first) {
  bool json = false;
  ArgParser parser("info", "flashattn info [--json]",
                   "Lists what this build offers: backends and algorithms (available or why not), their\n"
                   "dtypes, head dims and features, and the CUDA devices present.");
  parser.add_flag("json", &json, "print the result as JSON on stdout");
  switch (parser.parse(argc, argv, first)) {
    case ArgParser::Outcome::kHelpShown: return kExitOk;
    case ArgParser::Outcome::kUsageError: return kExitUsage;
    case ArgParser::Outcome::kRun: break;
  }
  const std::vector<Capabilities> caps = capabilities();
  const std::vector<GpuInfo> gpus = list_gpus();

  if (json) {
    JsonWriter j;
    j.begin_object().field("version", version()).field("cuda_built", cuda_built());
    j.key("cpu").begin_object().field("model", cpu_model()).field("threads", hardware_threads()).end_object();
    j.key("cuda_devices").begin_array();
    for (const GpuInfo& g : gpus) {
      j.begin_object().field("index", g.index).field("name", g.name);
      j.field("compute_capability", std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor));
      j.field("sm_count", g.sm_count).field("memory_gib", g.memory_gib).end_object();
    }
    j.end_array();
    if (!gpus.empty()) j.field("driver", driver_version());
    j.key("capabilities").begin_array();
    for (const Capabilities& c : caps) {
      j.begin_object().field("backend", to_string(c.backend)).field("algorithm", to_string(c.algorithm));
      j.field("available", c.available).field("note", c.note);
      j.key("dtypes").begin_array();
      for (DType d : c.dtypes) j.value(to_string(d));
      j.end_array().key("head_dims").begin_array();
      for (int d : c.head_dims) j.value(d);
      j.end_array().field("max_head_dim", c.max_head_dim);
      for (const auto& [name, on] : features(c)) j.field(name, on);
      j.end_object();
    }
    j.end_array().end_object();
    std::printf("%s\n", j.str().c_str());
    return kExitOk;
  }

  std::printf("flashattn %s\n", version());
  std::printf("cpu        %s, %d hardware threads\n", cpu_model().c_str(), hardware_threads());
  if (!cuda_built()) {
    std::printf("cuda       not built\n");
  } else if (gpus.empty()) {
    std::printf("cuda       built; no device present\n");
  } else {
    std::printf("cuda       built; %zu device(s), driver %s\n", gpus.size(), driver_version().c_str());
    for (const GpuInfo& g : gpus)
      std::printf("  cuda:%d   %s  sm_%d%d  %d SMs  %.1f GiB\n", g.index, g.name.c_str(), g.cc_major, g.cc_minor,
                  g.sm_count, g.memory_gib);
  }
  std::printf("\n%-7s %-9s %-11s %-15s %-22s %s\n", "backend", "algorithm", "available", "dtypes", "head dims",
              "features");
  for (const Capabilities& c : caps) {
    std::string feats;
    for (const auto& [name, on] : features(c))
      if (on) feats += std::string(feats.empty() ? "" : " ") + name;
    std::printf("%-7s %-9s %-11s %-15s %-22s %s\n", to_string(c.backend), to_string(c.algorithm),
                c.available ? "yes" : "no", join_dtypes(c.dtypes).c_str(), head_dims_text(c).c_str(),
                feats.empty() ? "-" : feats.c_str());
    if (!c.note.empty()) std::printf("        %s\n", c.note.c_str());
  }
  return kExitOk;
}

}  // namespace flashattn::cli
