#include "cpu/speculative.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/thread_pool.hpp"
#include "lmtail/cpu.hpp"

namespace lmt::spec {

namespace {
// max(d, 0) as a bit mask: GCC does not vectorise `d > 0 ? d : 0` or std::max without
// -ffast-math (NaN ordering), and the scalar loop ran at ~6 ns per token (measured: 1.2 ms per
// 202048-token row on this VM, against 35 us for numpy's subtract). NaN maps to 0 (rows are
// checked finite before this runs anyway).
inline float positive_part(float d) {
    const int32_t m = -(int32_t)(d > 0.0f);
    int32_t b;
    std::memcpy(&b, &d, 4);
    b &= m;
    float w;
    std::memcpy(&w, &b, 4);
    return w;
}

double block_sum(const float *w, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; ++i) s += (double)w[i];
    return s;
}

// Sums of consecutive kSelectBlock-weight blocks of w[0, n) (the last may be short). Eight blocks
// at a time, interleaved: each block is still its own sequential sum in index order (the
// definition), but eight independent chains keep the adder busy (one chain alone is
// latency-bound: ~290 us at 202048 weights, measured).
void block_sums(const float *w, size_t n, double *blocks) {
    const size_t nb = (n + kSelectBlock - 1) / kSelectBlock, full = n / kSelectBlock;
    size_t b = 0;
    for (; b + 8 <= full; b += 8) {
        double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        const float *base = w + b * kSelectBlock;
        for (size_t i = 0; i < kSelectBlock; ++i)
            for (size_t k = 0; k < 8; ++k) s[k] += (double)base[k * kSelectBlock + i];
        for (size_t k = 0; k < 8; ++k) blocks[b + k] = s[k];
    }
    for (; b < nb; ++b) {
        const size_t lo = b * kSelectBlock;
        blocks[b] = block_sum(w + lo, std::min(kSelectBlock, n - lo));
    }
}

// Rows are split into chunks of this many entries for threads; a multiple of 256 so chunking
// never changes a block.
constexpr size_t kChunk = 65536;
}  // namespace

size_t residual_weights(const float *p, const float *q, size_t V, const int32_t *order, size_t n_order,
                        float *out_w, double *out_blocks, int threads) {
    size_t n = 0;
    if (!order) {
        // Ascending ids, nothing to validate: independent chunks (the thread count cannot change
        // a byte), each a branch-free pass the compiler vectorises, followed by the chunk's block
        // sums for blocked_select while the weights are still in L1/L2.
        const int64_t tasks = (int64_t)((V + kChunk - 1) / kChunk);
        std::vector<size_t> pos((size_t)tasks, 0);
        lmt::core::parallel_for(threads, tasks, [&](int64_t t) {
            const size_t lo = (size_t)t * kChunk, hi = std::min(V, lo + kChunk);
            uint32_t c = 0;  // 32-bit lanes vectorise
            for (size_t i = lo; i < hi; ++i) {
                const float d = q ? p[i] - q[i] : p[i];
                out_w[i] = positive_part(d);
                c += (uint32_t)(d > 0.0f);
            }
            pos[(size_t)t] = c;
            if (out_blocks) block_sums(out_w + lo, hi - lo, out_blocks + lo / kSelectBlock);
        });
        for (size_t c : pos) n += c;
        return n;
    }
    // One byte per token marks ids already seen: V bytes per call (200 KB at 202048) is cheaper
    // than sorting the order, and order validation is what keeps a bad caller from silently
    // biasing the draw.
    std::vector<uint8_t> seen(V, 0);
    for (size_t j = 0; j < n_order; ++j) {
        const int32_t id = order[j];
        if (id < 0 || (size_t)id >= V)
            throw ArgumentError("order: token id " + std::to_string(id) + " at position " + std::to_string(j) +
                                " is outside [0, " + std::to_string(V) + ")");
        if (seen[(size_t)id])
            throw ArgumentError("order: token id " + std::to_string(id) + " appears twice (position " +
                                std::to_string(j) + ")");
        seen[(size_t)id] = 1;
        const float d = q ? p[id] - q[id] : p[id];
        out_w[j] = positive_part(d);
        n += (d > 0.0f);
    }
    if (out_blocks) block_sums(out_w, n_order, out_blocks);
    return n;
}

size_t residual_support(const float *p, const float *q, size_t V) {
    size_t n = 0;
    if (q) {
        for (size_t i = 0; i < V; ++i) n += (p[i] - q[i] > 0.0f);
    } else {
        for (size_t i = 0; i < V; ++i) n += (p[i] > 0.0f);
    }
    return n;
}

int64_t blocked_select(const float *w, size_t n, double u, const double *pre_blocks) {
    if (n == 0) return -1;
    const size_t nb = (n + kSelectBlock - 1) / kSelectBlock;
    std::vector<double> own;
    const double *blocks = pre_blocks;
    if (!blocks) {
        own.resize(nb);
        block_sums(w, n, own.data());
        blocks = own.data();
    }
    size_t b = 0;
    double total = 0.0;
    for (size_t j = 0; j < nb; ++j) total += blocks[j];
    const double target = u * total;
    double run = 0.0;
    for (b = 0; b < nb; ++b) {
        if (run + blocks[b] >= target) {
            const size_t lo = b * kSelectBlock, hi = std::min(lo + kSelectBlock, n);
            double r = run;
            for (size_t i = lo; i < hi; ++i) {
                r += (double)w[i];
                if (r >= target && w[i] > 0.0f) return (int64_t)i;
            }
        }
        run += blocks[b];
    }
    for (size_t i = n; i-- > 0;)  // rounding left the target unreached: the last positive weight
        if (w[i] > 0.0f) return (int64_t)i;
    return -1;
}

namespace {

// One chunk [lo, hi) of a probability row, block by block: the count of entries that are negative or not
// finite (!(|v| <= FLT_MAX) is true for NaN and +-inf) and the sum in 16 float lanes per block of
// 256 entries (relative error ~2e-6 per block, far inside the 1e-3 tolerance it is checked
// against), blocks added in double, in order. The same expression on every build, so the sum's
// bits do not depend on the ISA. On x86-64 Linux GCC also emits an AVX2 clone, picked at load
// time (ifunc). Measured per 202048-entry row, one thread, cache-resident: two SSE2 passes 58 us,
// double lanes 115 us; see docs/DESIGN.md for the fused pass.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // an instrumented ifunc resolver crashes
__attribute__((target_clones("avx2", "default")))
#endif
void chunk_stats(const float *x, size_t lo, size_t hi, double *sum, uint32_t *n_bad) {
    uint32_t bad = 0;
    double total = 0.0;
    size_t i = lo;
    for (; i + 256 <= hi; i += 256) {
        // Two simple loops over the block (the second reads it from L1): each vectorises; one
        // fused loop did not (197 us per row instead of 58).
        for (size_t k = 0; k < 256; ++k) bad += (uint32_t)((x[i + k] < 0.0f) | !(std::fabs(x[i + k]) <= FLT_MAX));
        float acc[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
        for (size_t k = 0; k < 256; k += 16)
            for (size_t j = 0; j < 16; ++j) acc[j] += x[i + k + j];
        double s = 0.0;
        for (size_t j = 0; j < 16; ++j) s += (double)acc[j];
        total += s;
    }
    for (; i < hi; ++i) {
        total += (double)x[i];
        bad += (uint32_t)((x[i] < 0.0f) | !(std::fabs(x[i]) <= FLT_MAX));
    }
    *sum = total;
    *n_bad = bad;
}

}  // namespace

void rows_stats(const float *x, size_t rows, size_t n, size_t stride, double *sums, size_t *n_bad, int threads) {
    // One dispatch for every row of a verification step: tasks are (row, chunk) pairs, so the
    // split never depends on the thread count, and chunk sums are added in chunk order per row.
    const size_t per_row = n ? (n + kChunk - 1) / kChunk : 0;
    const int64_t tasks = (int64_t)(rows * per_row);
    std::vector<double> part((size_t)tasks, 0.0);
    std::vector<uint32_t> bads((size_t)tasks, 0);
    lmt::core::parallel_for(threads, tasks, [&](int64_t t) {
        const size_t r = (size_t)t / per_row, c = (size_t)t % per_row;
        const size_t lo = c * kChunk, hi = std::min(n, lo + kChunk);
        chunk_stats(x + r * stride, lo, hi, &part[(size_t)t], &bads[(size_t)t]);
    });
    for (size_t r = 0; r < rows; ++r) {
        double total = 0.0;
        size_t bad = 0;
        for (size_t c = 0; c < per_row; ++c) {
            total += part[r * per_row + c];
            bad += bads[r * per_row + c];
        }
        sums[r] = total;
        n_bad[r] = bad;
    }
}

void row_stats(const float *x, size_t n, double *sum, size_t *n_bad, int threads) {
    rows_stats(x, 1, n, n, sum, n_bad, threads);
}

size_t accept_run(const double *p, const double *q, const uint32_t *raw, size_t n, int stdlib) {
    for (size_t i = 0; i < n; ++i) {
        uint32_t y = raw[i];  // std::mt19937's tempering
        y ^= y >> 11;
        y ^= (y << 7) & 0x9D2C5680u;
        y ^= (y << 15) & 0xEFC60000u;
        y ^= y >> 18;
        double u;
        if (stdlib == 2) {
            u = (double)(y >> 8) / 16777216.0;
        } else {
            u = (double)(float)y * 0x1p-32;  // float(g0) / 2^32, exact in double
            if (u >= 1.0 && stdlib == 0) u = (double)std::nextafter(1.0f, 0.0f);
        }
        const bool accept = p[i] > 0.0 && (q[i] <= 0.0 || p[i] >= q[i] || u < p[i] / q[i]);
        if (!accept) return i;
    }
    return n;
}

SparseRowInfo sparse_row(const int32_t *ids, const float *p, size_t n, size_t V, int64_t tok) {
    SparseRowInfo r{0.0, 0, false, 0, false, 0.0f};
    for (size_t i = 0; i < n; ++i) {
        const int32_t id = ids[i];
        if (!r.found_bad && (id < 0 || (size_t)id >= V)) {
            r.found_bad = true;
            r.bad_id = id;
        }
        r.n_bad += (size_t)((p[i] < 0.0f) | !(std::fabs(p[i]) <= FLT_MAX));
        r.sum += (double)p[i];
        if (id == tok) r.p_tok = p[i];
    }
    if (!r.found_bad && n > 1 && n <= 64) {
        // Candidate rows are short (k + 1 of a top-k read-back): an open-addressing table of 128
        // slots on the stack (load <= 1/2) finds a repeat in O(n); the ids are in [0, V) here.
        // (Sorting a heap copy cost ~0.7 us per 41-entry row; this ~0.2 us.)
        int32_t slot[128];
        std::fill(slot, slot + 128, -1);
        for (size_t i = 0; i < n; ++i) {
            uint32_t h = ((uint32_t)ids[i] * 2654435761u) >> 25;
            while (slot[h] >= 0 && slot[h] != ids[i]) h = (h + 1) & 127;
            if (slot[h] == ids[i]) {
                r.found_bad = true;
                r.bad_id = ids[i];
                r.repeated = true;
                break;
            }
            slot[h] = ids[i];
        }
    } else if (!r.found_bad && n > 1) {
        // Longer rows: sorting a copy is cheaper than a vocabulary-sized bitmap.
        std::vector<int32_t> s(ids, ids + n);
        std::sort(s.begin(), s.end());
        for (size_t i = 1; i < n; ++i) {
            if (s[i] == s[i - 1]) {
                r.found_bad = true;
                r.bad_id = s[i];
                r.repeated = true;
                break;
            }
        }
    }
    return r;
}

}  // namespace lmt::spec
