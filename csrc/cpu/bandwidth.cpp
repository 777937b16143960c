// Read-bandwidth probe for the benchmarks: read every byte once (64-bit loads, summed), split
// over threads by contiguous ranges, like the matvec's row streams.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "cpu/bandwidth.hpp"
#include "cpu/internal.hpp"

namespace lmt::cpu {

uint64_t read_bytes_checksum(const uint8_t *p, size_t bytes, int n_threads) {
    const int nt = core::resolve_threads(n_threads);
    const size_t words = bytes / 8;
    constexpr size_t kTaskWords = 1 << 15;  // 256 KB per task
    const int64_t n_tasks = (int64_t)((words + kTaskWords - 1) / kTaskWords);
    std::vector<uint64_t> sums((size_t)std::max<int64_t>(n_tasks, 1), 0);
    core::parallel_for(nt, n_tasks, [&](int64_t t) {
        const size_t w0 = (size_t)t * kTaskWords, w1 = std::min(words, w0 + kTaskWords);
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        size_t w = w0;
        for (; w + 4 <= w1; w += 4) {
            uint64_t v[4];
            std::memcpy(v, p + 8 * w, 32);
            s0 += v[0];
            s1 += v[1];
            s2 += v[2];
            s3 += v[3];
        }
        for (; w < w1; ++w) {
            uint64_t v;
            std::memcpy(&v, p + 8 * w, 8);
            s0 += v;
        }
        sums[(size_t)t] = s0 + s1 + s2 + s3;
    });
    uint64_t total = 0;
    for (uint64_t s : sums) total += s;
    for (size_t i = words * 8; i < bytes; ++i) total += p[i];
    return total;
}

}  // namespace lmt::cpu
