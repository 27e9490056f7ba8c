// The `flashattn` command-line tool: run, check and benchmark the attention kernels.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli_args.h"
#include "commands.h"
#include "flashattn/attention.h"

namespace {

constexpr const char* kOverview =
    "usage: flashattn <command> [options]\n"
    "\n"
    "Exact attention kernels of the FlashAttention line: run one problem, check every backend and\n"
    "algorithm against a float64 reference, and benchmark.\n"
    "\n"
    "commands:\n"
    "  run      run one attention problem: timing, TFLOP/s, spot check against the reference\n"
    "  check    correctness sweep over edge shapes on every available backend and algorithm\n"
    "  bench    CPU benchmark beside the machine's SGEMM rate, or (--gpu) the FlashAttention-paper\n"
    "           GPU sweep\n"
    "  info     backends, algorithms, dtypes, head dims, features and CUDA devices of this build\n"
    "\n"
    "options:\n"
    "  --help     show this help (and 'flashattn <command> --help' for a command's options)\n"
    "  --version  print the version\n"
    "\n"
    "Exit status: 0 success, 1 a check failed or the library returned an error, 2 bad command line.\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace flashattn::cli;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    std::fputs(kOverview, stdout);
    return kExitOk;
  }
  const std::string command = argv[1];
  if (command == "--version") {
    std::printf("flashattn %s (cuda %s)\n", flashattn::version(), flashattn::cuda_built() ? "built" : "not built");
    return kExitOk;
  }
  if (command == "run") return cmd_run(argc, argv, 2);
  if (command == "check") return cmd_check(argc, argv, 2);
  if (command == "bench") return cmd_bench(argc, argv, 2);
  if (command == "info") return cmd_info(argc, argv, 2);
  std::fprintf(stderr, "flashattn: unknown command '%s' (see 'flashattn --help')\n", command.c_str());
  return kExitUsage;
}
