#include "core/thread_pool.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define LMT_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define LMT_CPU_RELAX() __asm__ __volatile__("yield")
#else
#define LMT_CPU_RELAX() ((void)0)
#endif

#include "lmtail/cpu.hpp"

namespace lmt::core {
namespace {

thread_local bool t_inside_task = false;

class Pool {
  public:
    ~Pool() {
        {
            std::lock_guard<std::mutex> lk(mu_);
            stop_ = true;
            ++generation_;
        }
        cv_.notify_all();
        for (auto &t : workers_) t.join();
    }

    void run(int n_threads, int64_t n_tasks, const std::function<void(int64_t)> &fn) {
        std::lock_guard<std::mutex> call_lock(call_mu_);
        ensure_workers(n_threads - 1);
        {
            std::lock_guard<std::mutex> lk(mu_);
            fn_ = &fn;
            n_tasks_ = n_tasks;
            next_.store(0, std::memory_order_relaxed);
            active_ = n_threads - 1;
            in_work_.store(0, std::memory_order_relaxed);
            closed_ = false;
            error_ = nullptr;
            ++generation_;
            gen_atomic_.store(generation_, std::memory_order_release);
        }
        cv_.notify_all();
        work();
        // Every task is claimed. Close the call to helpers that have not joined yet (a helper
        // still waking up, e.g. on a CPU busy with another process, would otherwise cost its
        // wake-up latency for no work), then wait only for those inside work(): spin briefly
        // (they finish within microseconds of us on balanced work), then sleep.
        {
            std::lock_guard<std::mutex> lk(mu_);
            closed_ = true;
        }
        for (int spin = 0; in_work_.load(std::memory_order_acquire) != 0; ++spin) {
            if (spin < 20000) {
                LMT_CPU_RELAX();
            } else {
                std::unique_lock<std::mutex> lk(mu_);
                done_cv_.wait(lk, [&] { return in_work_.load(std::memory_order_acquire) == 0; });
            }
        }
        fn_ = nullptr;
        if (error_) std::rethrow_exception(error_);
    }

  private:
    void ensure_workers(int n) {
        while ((int)workers_.size() < n) {
            const int id = (int)workers_.size();
            workers_.emplace_back([this, id] { loop(id); });
        }
    }

    void work() {
        t_inside_task = true;
        for (;;) {
            const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
            if (i >= n_tasks_) break;
            try {
                (*fn_)(i);
            } catch (...) {
                std::lock_guard<std::mutex> lk(err_mu_);
                if (!error_) error_ = std::current_exception();
                next_.store(n_tasks_, std::memory_order_relaxed);  // stop handing out tasks
            }
        }
        t_inside_task = false;
    }

    void loop(int id) {
        uint64_t seen = 0;
        for (;;) {
            // Spin a little for the next generation before sleeping: back-to-back kernels of one
            // decode step (norm, head, cap, argmax) then cost no futex wake-up.
            for (int spin = 0; spin < 20000 && gen_atomic_.load(std::memory_order_acquire) == seen; ++spin)
                LMT_CPU_RELAX();
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] { return generation_ != seen; });
            seen = generation_;
            if (stop_) return;
            if (id >= active_ || closed_) continue;  // not needed for this call, or too late for it
            in_work_.fetch_add(1, std::memory_order_relaxed);  // under mu_: ordered with closed_
            lk.unlock();
            work();
            if (in_work_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
                std::lock_guard<std::mutex> lk2(mu_);
                done_cv_.notify_all();
            }
        }
    }

    std::mutex call_mu_;  // one parallel region at a time
    std::mutex mu_;
    std::mutex err_mu_;
    std::condition_variable cv_, done_cv_;
    std::vector<std::thread> workers_;
    const std::function<void(int64_t)> *fn_ = nullptr;
    int64_t n_tasks_ = 0;
    std::atomic<int64_t> next_{0};
    std::atomic<int> in_work_{0};  // helpers inside work() for the current call
    bool closed_ = true;            // the current call takes no more helpers (guarded by mu_)
    std::atomic<uint64_t> gen_atomic_{0};
    int active_ = 0;
    uint64_t generation_ = 0;
    bool stop_ = false;
    std::exception_ptr error_;
};

Pool &pool() {
    // Leaked on purpose: joining threads from a static destructor at interpreter exit can
    // deadlock when the process is torn down from a non-main thread.
    static Pool *p = new Pool();
    return *p;
}

}  // namespace

int resolve_threads(int n_threads) { return n_threads > 0 ? n_threads : lmt::cpu::default_threads(); }

void parallel_for(int n_threads, int64_t n_tasks, const std::function<void(int64_t)> &fn) {
    if (n_tasks <= 0) return;
    n_threads = resolve_threads(n_threads);
    if ((int64_t)n_threads > n_tasks) n_threads = (int)n_tasks;
    if (n_threads <= 1 || t_inside_task) {
        for (int64_t i = 0; i < n_tasks; ++i) fn(i);
        return;
    }
    pool().run(n_threads, n_tasks, fn);
}

}  // namespace lmt::core
