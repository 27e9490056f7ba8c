// Candidate forms for A/B timing. A build configured with FLASHATTN_FA2_CANDIDATE=ON or
// FLASHATTN_FA3_CANDIDATE=ON compiles a second form of that family's kernels (their config's kCandidate), in
// which a change under test is written (if constexpr (Cfg::kCandidate)); the shipped code has no such paths,
// so both forms are otherwise the same kernel. Which one a call runs is read from the environment at every
// call, so that one process can time the two in alternation (bench/candidate_ab.py, scripts/candidate_ab.sh).
#pragma once

#include <cstdlib>

namespace flashattn::cuda {

// True where the environment variable `name` holds exactly "1".
inline bool candidate_requested(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] == '1' && v[1] == '\0';
}

constexpr const char* kFa2CandidateEnv = "FLASHATTN_FA2_CANDIDATE";
constexpr const char* kFa3CandidateEnv = "FLASHATTN_FA3_CANDIDATE";
// Appended to the kernel name a call reports when it ran the candidate form.
constexpr const char* kCandidateSuffix = "_candidate";

// Whether this call runs the fa2 (fa3) candidate form: never in a build without one.
inline bool fa2_candidate_requested() {
#if defined(FLASHATTN_FA2_CANDIDATE)
  return candidate_requested(kFa2CandidateEnv);
#else
  return false;
#endif
}
inline bool fa3_candidate_requested() {
#if defined(FLASHATTN_FA3_CANDIDATE)
  return candidate_requested(kFa3CandidateEnv);
#else
  return false;
#endif
}

}  // namespace flashattn::cuda
