// A small persistent thread pool for the CPU kernels.
//
// parallel_for(n_threads, n_tasks, fn) runs fn(task) for every task index on up to n_threads
// threads, the caller included. Kernels split work by output rows (or by independent chunks
// combined order-independently), so results never depend on the thread count or on which
// thread ran which task.
//
// Concurrent callers (several Python threads) are serialised on one mutex; a call made from
// inside a task runs inline on that thread (no nested fork, no deadlock).
#pragma once

#include <cstdint>
#include <functional>

namespace lmt::core {

void parallel_for(int n_threads, int64_t n_tasks, const std::function<void(int64_t)> &fn);

// Resolve a requested thread count: <= 0 -> lmt::cpu::default_threads().
int resolve_threads(int n_threads);

}  // namespace lmt::core
