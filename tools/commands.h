// The subcommands of the `flashattn` tool. Each parses argv[first..argc) and returns the exit code
// (cli::kExitOk, kExitFailure or kExitUsage).
#pragma once

#include <string>
#include <vector>

#include "flashattn/attention.h"

namespace flashattn::cli {

int cmd_run(int argc, char** argv, int first);
int cmd_check(int argc, char** argv, int first);
int cmd_bench(int argc, char** argv, int first);
int cmd_info(int argc, char** argv, int first);

// The CUDA algorithms that capabilities() reports available (built, and a device present).
std::vector<Algorithm> available_cuda_algorithms();
// True when some available CUDA algorithm (any, when `algorithm` is auto) accepts `dtype`.
bool cuda_offers(Algorithm algorithm, DType dtype);

}  // namespace flashattn::cli
