// A small fork-join pool for the CPU kernels: `workers` threads (the caller is one of them) pull task
// indices from a shared atomic counter until the tasks run out or one of them fails.
//
// Results must not depend on which worker runs which task: every task owns the outputs it writes, so
// the kernels are race-free and bitwise reproducible for any thread count by construction.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

#include "flashattn/types.h"

namespace flashattn::detail::cpu {

class TaskQueue {
 public:
  explicit TaskQueue(int64_t num_tasks) : num_tasks_(num_tasks) {}

  // Takes the next task index; false when none is left or a worker has failed.
  bool pop(int64_t* task) {
    if (failed_.load(std::memory_order_relaxed)) return false;
    const int64_t t = next_.fetch_add(1, std::memory_order_relaxed);
    if (t >= num_tasks_) return false;
    *task = t;
    return true;
  }
  void fail() { failed_.store(true, std::memory_order_relaxed); }
  int64_t size() const { return num_tasks_; }

 private:
  const int64_t num_tasks_;
  std::atomic<int64_t> next_{0};
  std::atomic<bool> failed_{false};
};

// The worker count for a call: `requested` when > 0, else the hardware threads; never more than
// `num_tasks` and never less than 1.
int resolve_worker_count(int requested, int64_t num_tasks);

// Runs `worker(queue)` on `workers` threads, the calling thread included, and waits for all of them.
// A worker allocates its scratch once and then drains the queue. The first error a worker returns
// (or an exception it throws: std::bad_alloc -> out of memory, anything else -> runtime error) stops
// the others at their next pop and is returned. If threads cannot be created the remaining workers
// still drain the queue.
Status run_workers(int workers, int64_t num_tasks, const std::function<Status(TaskQueue&)>& worker);

}  // namespace flashattn::detail::cpu
