// Fork-join worker threads over a shared task counter.
#include "cpu/thread_pool.h"

#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace flashattn::detail::cpu {

int resolve_worker_count(int requested, int64_t num_tasks) {
  int64_t workers = requested > 0 ? requested : int64_t(std::thread::hardware_concurrency());
  if (workers > num_tasks) workers = num_tasks;
  return workers < 1 ? 1 : int(workers);
}

Status run_workers(int workers, int64_t num_tasks, const std::function<Status(TaskQueue&)>& worker) {
  TaskQueue queue(num_tasks);
  std::mutex error_mutex;
  Status first_error;

  // Never lets an exception leave a worker: it would terminate the process from a std::thread.
  auto guarded = [&]() {
    Status s;
    try {
      s = worker(queue);
    } catch (const std::bad_alloc&) {
      s = Status(StatusCode::kOutOfMemory, "backend cpu: out of host memory for tile scratch buffers");
    } catch (const std::exception& e) {
      s = Status::Runtime(std::string("backend cpu: ") + e.what());
    } catch (...) {
      s = Status::Runtime("backend cpu: unknown exception in a worker thread");
    }
    if (!s.ok()) {
      queue.fail();
      std::lock_guard<std::mutex> lock(error_mutex);
      if (first_error.ok()) first_error = s;
    }
  };

  std::vector<std::thread> threads;
  try {
    threads.reserve(size_t(workers > 1 ? workers - 1 : 0));
    for (int i = 1; i < workers; ++i) threads.emplace_back(guarded);
  } catch (...) {
    // Fewer threads than asked (resource limits): the ones that started, and this one, drain the queue.
  }
  guarded();
  for (std::thread& t : threads) t.join();
  return first_error;
}

}  // namespace flashattn::detail::cpu
