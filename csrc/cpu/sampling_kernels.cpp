// Hot loops of the llama.cpp-exact samplers. See sampling.hpp for the contract of each kernel.
//
// Precision notes (all matter for bit-exact parity, see ../shared/research/llama-sampling.md):
// - this file is built with -ffp-contract=off, so no FMA is introduced anywhere;
// - sums are sequential in array order, in float unless a double accumulator is named;
// - expf/logf/powf/log2f/exp/pow are the platform libm's (what the reference build calls).
#include "cpu/sampling.hpp"

#include "core/thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace lmt::sampling {

namespace {

// llama.cpp's comparator ("a before b iff a.logit > b.logit"), as a function object so the sorts
// inline it (a function pointer costs an indirect call per comparison; the order is the same).
struct LogitGreater {
    bool operator()(const TokenData &a, const TokenData &b) const { return a.logit > b.logit; }
};
constexpr LogitGreater logit_greater{};

// std::max(a, b) returns a unless a < b (so a NaN in b is skipped, a NaN in a sticks).
inline float std_max(float a, float b) { return (a < b) ? b : a; }

}  // namespace

namespace {
std::atomic<int> g_threads{1};
inline int threads() { return g_threads.load(std::memory_order_relaxed); }
}  // namespace

void set_threads(int n) { g_threads.store(n < 1 ? 1 : n, std::memory_order_relaxed); }
int get_threads() { return threads(); }

int32_t float_to_int_like_cpu(float x) {
#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
    // cvttss2si: the "integer indefinite" value for NaN and out-of-range inputs.
    if (!(x >= -2147483648.0f && x < 2147483648.0f)) return INT32_MIN;
    return (int32_t)x;
#else
    // AArch64 fcvtzs saturates and maps NaN to 0.
    if (x != x) return 0;
    if (x >= 2147483648.0f) return INT32_MAX;
    if (x < -2147483648.0f) return INT32_MIN;
    return (int32_t)x;
#endif
}

void fill(TokenData *d, const float *logits, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        d[i].id = (int32_t)i;
        d[i].logit = logits[i];
        d[i].p = 0.0f;
    }
}

int64_t greedy(const TokenData *d, size_t n) {
    int64_t sel = 0;
    for (size_t i = 1; i < n; ++i) {
        if (d[i].logit > d[sel].logit) sel = (int64_t)i;
    }
    return sel;
}

void temperature(TokenData *d, size_t n, float t) {
    if (n == 0) return;
    if (t <= 0.0f) {
        size_t best = 0;
        float best_l = d[0].logit;
        for (size_t i = 1; i < n; ++i) {
            if (d[i].logit > best_l) {
                d[best].logit = -INFINITY;
                best = i;
                best_l = d[i].logit;
            } else {
                d[i].logit = -INFINITY;
            }
        }
        return;
    }
    for (size_t i = 0; i < n; ++i) d[i].logit /= t;
}

namespace {

// The 128-bucket partial sort over [-10, 10), reading element i through src(i) (a TokenData array,
// or raw logits for a fresh array: the result is the same as filling first).
constexpr size_t kParallelMin = 16384;  // below this the per-bucket sorts run on the calling thread

// A grow-only scratch buffer that is not value-initialised (TokenData and int are trivial), kept
// per thread across calls: the bucket sort's temporaries cost no allocation or zeroing per token.
template <typename T>
struct GrowBuf {
    std::unique_ptr<T[]> p;
    size_t cap = 0;
    T *get(size_t n) {
        if (n > cap) {
            p.reset(new T[n]);
            cap = n;
        }
        return p.get();
    }
};

// One bucket of the scattered output and how it is to be sorted.
struct Segment {
    TokenData *first;
    size_t count;
    size_t keep;
    bool partial;  // the boundary bucket: std::partial_sort to keep (even when keep == count)
};

inline void sort_segment(const Segment &g) {
    if (!g.partial) {
        std::sort(g.first, g.first + g.count, logit_greater);
    } else {
        std::partial_sort(g.first, g.first + g.keep, g.first + g.count, logit_greater);
    }
}

// First half of the bucket sort: histogram over 128 buckets on [-10, 10), the buckets needed to
// cover npartial entries, and a stable scatter (array order within a bucket) into `out`.
// segs[0..n_segs) lists those buckets from the highest; sorting each one (sort_segment) in any
// order or lazily completes llama.cpp's partial sort. Returns n_segs.
template <typename Src>
int bucket_scatter(Src src, size_t n, size_t npartial, GrowBuf<TokenData> &out, size_t *n_out, Segment *segs) {
    constexpr int kBuckets = 128;
    constexpr float kLow = -10.0f;
    constexpr float kHigh = 10.0f;
    constexpr float kScale = kBuckets / (kHigh - kLow);
    constexpr float kOffset = -kLow * kScale;

    thread_local GrowBuf<int> bucket_buf;
    int *bucket = bucket_buf.get(n);
    int histo[kBuckets] = {0};
    for (size_t i = 0; i < n; ++i) {
        const float x = kScale * src(i).logit;  // two separate roundings (no FMA), as in the reference
        int b = float_to_int_like_cpu(x + kOffset);
        b = std::max(0, std::min(kBuckets - 1, b));
        bucket[i] = b;
        ++histo[b];
    }
    // Walk down from the top bucket until npartial entries are covered; `lowest` is the last one.
    size_t have = 0;
    int lowest = kBuckets - 1;
    for (; lowest >= 0; --lowest) {
        have += (size_t)histo[lowest];
        if (have >= npartial) break;
    }
    TokenData *const base = out.get(have);
    *n_out = have;
    TokenData *starts[kBuckets];
    {
        TokenData *q = base;
        for (int j = kBuckets - 1; j >= lowest; --j) {
            starts[j] = q;
            q += histo[j];
        }
    }
    for (size_t i = 0; i < n; ++i) {
        const int j = bucket[i];
        if (j >= lowest) *starts[j]++ = src(i);
    }
    // Every fully kept bucket is std::sort-ed, the last one std::partial_sort-ed to what is still
    // needed.
    int n_segs = 0;
    TokenData *q = base;
    size_t done = 0;
    for (int j = kBuckets - 1; j > lowest; --j) {
        segs[n_segs++] = Segment{q, (size_t)histo[j], (size_t)histo[j], false};
        q += histo[j];
        done += (size_t)histo[j];
    }
    if (lowest >= 0) segs[n_segs++] = Segment{q, (size_t)histo[lowest], npartial - done, true};
    return n_segs;
}

// The full bucket partial sort into `out`; returns the number of entries written (>= npartial).
template <typename Src>
size_t bucket_sort_impl(Src src, size_t n, size_t npartial, GrowBuf<TokenData> &out) {
    Segment segs[128];
    size_t have = 0;
    const int n_segs = bucket_scatter(src, n, npartial, out, &have, segs);
    // The buckets are independent, so large inputs may sort them on the thread pool: the result
    // is the same as sorting them one after the other.
    if (have >= kParallelMin && threads() > 1) {
        core::parallel_for(threads(), n_segs, [&](int64_t t) { sort_segment(segs[t]); });
    } else {
        for (int t = 0; t < n_segs; ++t) sort_segment(segs[t]);
    }
    return have;
}

inline auto array_src(const TokenData *d) {
    return [d](size_t i) -> const TokenData & { return d[i]; };
}

}  // namespace

void bucket_sort_desc(const TokenData *d, size_t n, size_t npartial, std::vector<TokenData> &out) {
    GrowBuf<TokenData> tmp;
    const size_t have = bucket_sort_impl(array_src(d), n, npartial, tmp);
    out.assign(tmp.p.get(), tmp.p.get() + have);
}

void sort_desc_inplace(TokenData *d, size_t n, size_t npartial) {
    if (npartial <= 128) {
        std::partial_sort(d, d + npartial, d + n, logit_greater);
        return;
    }
    thread_local GrowBuf<TokenData> tmp;
    bucket_sort_impl(array_src(d), n, npartial, tmp);
    std::copy(tmp.p.get(), tmp.p.get() + npartial, d);
}

namespace {

constexpr size_t kChunk = 16384;  // elementwise passes over more than 2 chunks use the thread pool

// Whether an array of n is worth splitting over the thread pool.
bool split(size_t n) { return n >= 2 * kChunk && threads() > 1; }

// fn(begin, end) over [0, n) in chunks, on the thread pool for large n. Only for passes whose
// elements are independent (expf, divisions): the results do not depend on the split.
template <typename F>
void for_chunks(size_t n, F fn) {
    if (n < 2 * kChunk || threads() <= 1) {
        fn((size_t)0, n);
        return;
    }
    const int64_t tasks = (int64_t)((n + kChunk - 1) / kChunk);
    core::parallel_for(threads(), tasks, [&](int64_t t) {
        const size_t b = (size_t)t * kChunk;
        fn(b, std::min(n, b + kChunk));
    });
}

// The value of the sequential scan  mx = d[0].logit; mx = std::max(mx, d[i].logit)  (a NaN at
// index 0 sticks; later NaNs are skipped; ties keep the earlier value, whose sign of zero cannot
// change any logit - max). Chunked: every chunk's non-NaN maximum, combined in order.
float scan_max(const TokenData *d, size_t n) {
    const float first = d[0].logit;
    if (first != first || n < 64) {
        float mx = first;
        for (size_t i = 1; i < n; ++i) mx = std_max(mx, d[i].logit);
        return mx;
    }
    if (!split(n)) {  // four independent NaN-skipping maxima, combined after d[0]
        float m0 = -INFINITY, m1 = -INFINITY, m2 = -INFINITY, m3 = -INFINITY;
        size_t i = 1;
        for (; i + 4 <= n; i += 4) {
            m0 = std_max(m0, d[i].logit);
            m1 = std_max(m1, d[i + 1].logit);
            m2 = std_max(m2, d[i + 2].logit);
            m3 = std_max(m3, d[i + 3].logit);
        }
        for (; i < n; ++i) m0 = std_max(m0, d[i].logit);
        return std_max(std_max(std_max(std_max(first, m0), m1), m2), m3);
    }
    const size_t tasks = (n + kChunk - 1) / kChunk;
    std::vector<float> part(tasks, -INFINITY);
    core::parallel_for(threads(), (int64_t)tasks, [&](int64_t t) {
        const size_t b = (size_t)t * kChunk, e = std::min(n, b + kChunk);
        float mx = -INFINITY;
        for (size_t i = b; i < e; ++i) mx = std_max(mx, d[i].logit);
        part[(size_t)t] = mx;
    });
    float mx = first;
    for (float v : part) mx = std_max(mx, v);
    return mx;
}

// p_i = expf(logit_i - mx) for every i (independent: chunked).
void exp_shifted(TokenData *d, size_t n, float mx) {
    for_chunks(n, [d, mx](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) d[i].p = expf(d[i].logit - mx);
    });
}

// exp_shifted, returning the sum of the p in array order in Acc (softmax: float, dist: double, as
// llama.cpp accumulates each); the sum stays sequential whatever the thread count.
template <typename Acc>
Acc exp_shifted_sum(TokenData *d, size_t n, float mx) {
    Acc sum = 0;
    if (split(n)) {
        exp_shifted(d, n, mx);
        for (size_t i = 0; i < n; ++i) sum += d[i].p;
    } else {
        for (size_t i = 0; i < n; ++i) {
            const float p = expf(d[i].logit - mx);
            d[i].p = p;
            sum += p;
        }
    }
    return sum;
}

}  // namespace

void softmax(TokenData *d, size_t n, bool sorted) {
    if (n == 0) return;
    const float mx = sorted ? d[0].logit : scan_max(d, n);
    const float sum = exp_shifted_sum<float>(d, n, mx);  // float, sequential, array order
    for_chunks(n, [d, sum](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) d[i].p /= sum;
    });
}

int64_t dist(TokenData *d, size_t n, bool sorted, double u) {
    const float mx = sorted ? d[0].logit : scan_max(d, n);
    const double sum = exp_shifted_sum<double>(d, n, mx);  // double, sequential, array order
    // The running sum uses the unnormalised p (llama.cpp normalises each p after adding it).
    const double target = sum * u;
    double run = 0.0;
    int64_t sel = (int64_t)n - 1;  // not found (NaN sum): the last index
    if (split(n)) {
        for (size_t i = 0; i < n; ++i) {
            run += d[i].p;
            if (run >= target) {
                sel = (int64_t)i;
                break;
            }
        }
        for_chunks(n, [d, sum](size_t b, size_t e) {
            for (size_t i = b; i < e; ++i) d[i].p = (float)((double)d[i].p / sum);
        });
        return sel;
    }
    size_t i = 0;
    for (; i < n; ++i) {
        run += d[i].p;
        d[i].p = (float)((double)d[i].p / sum);
        if (run >= target) {
            sel = (int64_t)i++;
            break;
        }
    }
    for (; i < n; ++i) d[i].p = (float)((double)d[i].p / sum);
    return sel;
}

size_t top_p(TokenData *d, size_t n, bool sorted, float p, size_t min_keep) {
    thread_local GrowBuf<TokenData> buf;
    size_t k = n;
    const TokenData *pd = d;
    bool use_buf = false;
    if (!sorted && n > 1024) {
        k = std::min<size_t>(256, n);
        bucket_sort_impl(array_src(d), n, k, buf);
        pd = buf.p.get();
        use_buf = true;
    } else if (!sorted) {
        sort_desc_inplace(d, n, n);
    }
    // When the 256-candidate guess is too small llama.cpp bucket-sorts the whole array. Here the
    // whole array is scattered once and each bucket is sorted only when the walk (or the final
    // copy) reaches it: the visited prefix is exactly the fully sorted one, the rest is never read.
    Segment segs[128];
    int n_segs = 0, next_seg = 0;
    auto ensure_sorted = [&](size_t upto) {  // every bucket starting at or before position upto
        while (next_seg < n_segs && (size_t)(segs[next_seg].first - buf.p.get()) <= upto) {
            sort_segment(segs[next_seg++]);
        }
    };
    bool full = false;
    float cum = 0.0f;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
        if (full) ensure_sorted(i);
        cum += pd[i].p;
        if (cum >= p && i + 1 >= min_keep) {
            keep = i + 1;
            break;
        }
        if (use_buf && !full && i == k - 1) {  // the guess was too small
            k = n;
            size_t have = 0;
            n_segs = bucket_scatter(array_src(d), n, n, buf, &have, segs);
            next_seg = 0;
            pd = buf.p.get();
            full = true;
        }
    }
    if (use_buf) {
        if (full) ensure_sorted(keep - 1);
        std::copy(buf.p.get(), buf.p.get() + keep, d);
    }
    return keep;
}

size_t min_p(TokenData *d, size_t n, bool *sorted, float p, size_t min_keep) {
    if (!*sorted) {
        float mx = -FLT_MAX;
        for (size_t i = 0; i < n; ++i) mx = std_max(mx, d[i].logit);
        const float lo = mx + logf(p);
        size_t kept = 0;
        for (size_t i = 0; i < n; ++i) kept += d[i].logit >= lo;
        if (kept > 0 && kept >= min_keep) {
            // In-place stable compaction == copying the filtered list back.
            size_t w = 0;
            for (size_t i = 0; i < n; ++i) {
                if (d[i].logit >= lo) d[w++] = d[i];
            }
            return kept;
        }
        sort_desc_inplace(d, n, n);
        *sorted = true;
    }
    const float lo = d[0].logit + logf(p);
    size_t i = 1;
    for (; i < n; ++i) {
        if (d[i].logit < lo && i >= min_keep) break;
    }
    return i;
}

size_t typical(TokenData *d, size_t n, float p, size_t min_keep) {
    // logf(p_i) is computed once and used twice (the reference calls logf twice: same values).
    std::vector<float> score(n);
    float entropy = 0.0f;
    for (size_t i = 0; i < n; ++i) {
        const float lp = logf(d[i].p);
        score[i] = lp;
        entropy += -d[i].p * lp;
    }
    for (size_t i = 0; i < n; ++i) score[i] = fabsf(-score[i] - entropy);
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score[a] < score[b]; });
    float cum = 0.0f;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
        cum += d[order[i]].p;
        if (cum > p && (min_keep == 0 || i >= min_keep - 1)) {
            keep = i + 1;
            break;
        }
    }
    std::vector<TokenData> kept(keep);
    for (size_t i = 0; i < keep; ++i) kept[i] = d[order[i]];
    std::copy(kept.begin(), kept.end(), d);
    return keep;
}

void temp_ext_dynamic(TokenData *d, size_t n, float temp, float delta, float exponent) {
    const float t_min = std_max(0.0f, temp - delta);
    const float t_max = temp + delta;
    const float h_max = -logf(1.0f / (float)n);
    float h = 0.0f;
    for (size_t i = 0; i < n; ++i) {
        const float q = d[i].p;
        if (q > 0.0f) h -= q * logf(q);
    }
    const float h_norm = h / h_max;
    const float t_dyn = t_min + (t_max - t_min) * powf(h_norm, exponent);
    temperature(d, n, t_dyn);
    const double mx = d[0].logit;
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) {
        const double q = exp((double)d[i].logit - mx);
        d[i].p = (float)q;
        sum += q;
    }
    for (size_t i = 0; i < n; ++i) d[i].p = (float)((double)d[i].p / sum);
}

size_t xtc_shift(const TokenData *d, size_t n, float threshold, size_t min_keep) {
    size_t last = 0;
    for (size_t i = 0; i < n; ++i) {
        if (d[i].p >= threshold) {
            last = i;
        } else {
            break;
        }
    }
    if (n - last >= min_keep && last > 0) return last;
    return 0;
}

void top_n_sigma(TokenData *d, size_t n, float nsigma) {
    float mx = d[0].logit;
    float sum = 0.0f;
    size_t count = 0;
    for (size_t i = 0; i < n; ++i) {
        if (d[i].logit != -INFINITY) {
            mx = std_max(mx, d[i].logit);
            sum += d[i].logit;
            ++count;
        }
    }
    const float mean = count > 0 ? sum / (float)count : 0.0f;
    float acc = 0.0f;
    for (size_t i = 0; i < n; ++i) {
        if (d[i].logit != -INFINITY) {
            const double dev = (double)(d[i].logit - mean);
            acc = (float)((double)acc + std::pow(dev, 2.0));
        }
    }
    const float sd = count > 0 ? (float)std::sqrt((double)(acc / (float)count)) : 0.0f;
    const float lo = mx - nsigma * sd;
    for (size_t i = 0; i < n; ++i) {
        if (d[i].logit < lo) d[i].logit = -INFINITY;
    }
}

int32_t mirostat_k(const TokenData *d, size_t n, int32_t m, int32_t n_vocab, float mu) {
    float sum_tb = 0.0f;
    float sum_tt = 0.0f;
    for (size_t i = 0; i < (size_t)(m - 1) && i < n - 1; ++i) {
        const float t = logf((float)(i + 2) / (float)(i + 1));
        const float b = logf(d[i].p / d[i + 1].p);
        sum_tb += t * b;
        sum_tt += t * t;
    }
    const float s = sum_tb / sum_tt;
    const float eps = s - 1.0f;
    const float num = eps * powf(2.0f, mu);
    const float den = 1.0f - powf((float)n_vocab, -eps);
    const float k = powf(num / den, 1.0f / s);
    return std::max(float_to_int_like_cpu(k), 1);
}

size_t mirostat_v2_cut(const TokenData *d, size_t n, float mu) {
    size_t i = 0;
    while (i < n && !(-log2f(d[i].p) > mu)) ++i;
    return i;
}

float mirostat_mu(float mu, float eta, float tau, float p) {
    const float surprise = -log2f(p);
    const float e = surprise - tau;
    return mu - eta * e;
}

void penalties(TokenData *d, size_t n, const int32_t *counts, size_t n_counts, float repeat, float freq,
               float present) {
    for (size_t i = 0; i < n; ++i) {
        const int32_t id = d[i].id;
        if (id < 0 || (size_t)id >= n_counts) continue;
        const int32_t c = counts[id];
        if (c <= 0) continue;
        if (d[i].logit <= 0) {
            d[i].logit *= repeat;
        } else {
            d[i].logit /= repeat;
        }
        const float a = (float)c * freq;
        const float b = 1.0f * present;
        d[i].logit -= a + b;
    }
}

void dry(TokenData *d, size_t n, const int32_t *max_len, size_t n_len, float multiplier, float base,
         int32_t allowed_length) {
    const float kFloatMaxLog = 88.7228391f;
    int max_exp = 0;
    if (base > 1.000001f) max_exp = (int)(kFloatMaxLog / logf(base));
    for (size_t i = 0; i < n; ++i) {
        const int32_t id = d[i].id;
        if (id < 0 || (size_t)id >= n_len) continue;
        const int32_t len = max_len[id];
        if (len == INT32_MIN) continue;
        int e = len - allowed_length;
        if (max_exp > 0 && e > max_exp) e = max_exp;
        const float penalty = (float)((double)multiplier * std::pow((double)base, (double)e));
        d[i].logit -= penalty;
    }
}

void adaptive_transform(TokenData *d, size_t n, float adapted_target) {
    constexpr float kWidth = 0.3f;
    constexpr float kPeak = 5.0f;
    constexpr float kSharp = 10.0f;
    constexpr float kInvWidth = 1.0f / kWidth;
    for (size_t i = 0; i < n; ++i) {
        if (d[i].logit == -INFINITY) continue;
        const float dd = std::fabs((d[i].p - adapted_target) * kInvWidth);
        d[i].logit = kPeak - kSharp * dd * dd / (1.0f + dd);
    }
}

int64_t discrete(const TokenData *d, size_t n, double u, bool libcxx) {
    if (n == 0) return 0;
    std::vector<double> w(n);
    for (size_t i = 0; i < n; ++i) w[i] = (double)d[i].p;
    double s = 0.0;
    for (size_t i = 0; i < n; ++i) s += w[i];
    for (size_t i = 0; i < n; ++i) w[i] = w[i] / s;
    if (!libcxx) {
        if (n < 2) return 0;
        std::vector<double> cp(n);
        std::partial_sum(w.begin(), w.end(), cp.begin());
        cp[n - 1] = 1.0;
        return std::lower_bound(cp.begin(), cp.end(), u) - cp.begin();
    }
    if (n < 2) return 0;  // libc++ keeps no partial sums: upper_bound over nothing -> 0
    std::vector<double> cp(n - 1);
    std::partial_sum(w.begin(), w.end() - 1, cp.begin());
    return std::upper_bound(cp.begin(), cp.end(), u) - cp.begin();
}

void server_probs(TokenData *d, size_t n, size_t n_top) {
    if (n_top > n) n_top = n;
    if (n_top > 0) std::partial_sort(d, d + n_top, d + n, logit_greater);
    float mx = -INFINITY;
    if (n_top > 0) {
        mx = d[0].logit;
    } else {
        for (size_t i = 0; i < n; ++i) mx = std_max(mx, d[i].logit);
    }
    float sum = 0.0f;
    for (size_t i = 0; i < n; ++i) {
        const float p = expf(d[i].logit - mx);
        d[i].p = p;
        sum += p;
    }
    for (size_t i = 0; i < n; ++i) d[i].p /= sum;
}

void sort_by_p_desc(TokenData *d, size_t n) {
    std::sort(d, d + n, [](const TokenData &a, const TokenData &b) { return a.p > b.p; });
}

// ---- fresh-array kernels: fill {i, logits[i], 0} fused with the first sampler ----------------------

int64_t greedy_fresh(const float *x, size_t n) {
    int64_t sel = 0;
    for (size_t i = 1; i < n; ++i) {
        if (x[i] > x[sel]) sel = (int64_t)i;
    }
    return sel;
}

namespace {

// A logits row as the candidate fill sees it: x[i], or -inf where a grammar mask rejects i
// (kMask), and at a few sorted ids (`ov`, ascending, unique) a value rewritten by penalties /
// logit-bias. visit(i, v) is called for i = b .. e-1 in order.
struct Override {
    size_t id;
    float v;
};

template <bool kMask, typename Visit>
inline void scan_row(const float *x, const uint8_t *mask, size_t b, size_t e, const Override *ov, size_t nov,
                     size_t &oi, Visit visit) {
    size_t i = b;
    while (i < e) {
        const size_t stop = (oi < nov && ov[oi].id < e) ? ov[oi].id : e;
        for (; i < stop; ++i) visit(i, (kMask && !mask[i]) ? -INFINITY : x[i]);
        if (i < e) {  // an overridden id
            visit(i, ov[oi++].v);
            ++i;
        }
    }
}

// fill + std::partial_sort(first, first + k, last) for k <= 128: libstdc++'s partial_sort is
// __heap_select + __sort_heap, and the heap-select visits every element past k once, in order,
// so it can read them straight from the row (same comparisons, same result).
template <bool kMask>
void heap_top_k(TokenData *d, const float *x, const uint8_t *mask, size_t n, size_t k, const Override *ov,
                size_t nov) {
#if defined(__GLIBCXX__)
    size_t oi = 0;
    scan_row<kMask>(x, mask, 0, k, ov, nov, oi, [d](size_t i, float v) { d[i] = TokenData{(int32_t)i, v, 0.0f}; });
    auto comp = __gnu_cxx::__ops::__iter_comp_iter(logit_greater);
    std::__make_heap(d, d + k, comp);
    auto visit = [d, k, &comp](size_t i, float v) {
        if (v > d[0].logit) {
            TokenData t{(int32_t)i, v, 0.0f};
            std::__adjust_heap(d, (ptrdiff_t)0, (ptrdiff_t)k, std::move(t), comp);
        }
    };
    // d[0] (the heap's smallest kept logit) never decreases, so a block of 16 logits none of
    // which is > d[0] when the block starts cannot change the heap: it is skipped after one
    // vector compare (ordered > like the scalar one: a NaN is never greater). Other blocks run
    // the scalar visit, in order. A masked-out logit is -inf, never greater: its lane is dropped.
    size_t i = k;
    while (i < n) {
        const size_t stop = oi < nov ? ov[oi].id : n;
#if defined(__SSE2__)
        for (; i + 16 <= stop; i += 16) {
            const __m128 th = _mm_set1_ps(d[0].logit);
            __m128 g0 = _mm_cmpgt_ps(_mm_loadu_ps(x + i), th);
            __m128 g1 = _mm_cmpgt_ps(_mm_loadu_ps(x + i + 4), th);
            __m128 g2 = _mm_cmpgt_ps(_mm_loadu_ps(x + i + 8), th);
            __m128 g3 = _mm_cmpgt_ps(_mm_loadu_ps(x + i + 12), th);
            if (kMask) {  // drop the lanes whose mask byte is 0 (their value is -inf: never > d[0])
                const __m128i rej = _mm_cmpeq_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i *>(mask + i)),
                                                   _mm_setzero_si128());
                const __m128i lo = _mm_unpacklo_epi8(rej, rej), hi = _mm_unpackhi_epi8(rej, rej);
                g0 = _mm_andnot_ps(_mm_castsi128_ps(_mm_unpacklo_epi16(lo, lo)), g0);
                g1 = _mm_andnot_ps(_mm_castsi128_ps(_mm_unpackhi_epi16(lo, lo)), g1);
                g2 = _mm_andnot_ps(_mm_castsi128_ps(_mm_unpacklo_epi16(hi, hi)), g2);
                g3 = _mm_andnot_ps(_mm_castsi128_ps(_mm_unpackhi_epi16(hi, hi)), g3);
            }
            if (_mm_movemask_ps(_mm_or_ps(_mm_or_ps(g0, g1), _mm_or_ps(g2, g3))) == 0) continue;
            for (size_t q = i; q < i + 16; ++q) visit(q, (kMask && !mask[q]) ? -INFINITY : x[q]);
        }
#endif
        for (; i < stop; ++i) visit(i, (kMask && !mask[i]) ? -INFINITY : x[i]);
        if (i < n) {  // an overridden id
            visit(i, ov[oi++].v);
            ++i;
        }
    }
    std::__sort_heap(d, d + k, comp);
#else
    size_t oi = 0;
    scan_row<kMask>(x, mask, 0, n, ov, nov, oi, [d](size_t i, float v) { d[i] = TokenData{(int32_t)i, v, 0.0f}; });
    std::partial_sort(d, d + k, d + n, logit_greater);
#endif
}

}  // namespace

void fill_top_k(TokenData *d, const float *x, size_t n, size_t k) {
    if (k > 128) {
        thread_local GrowBuf<TokenData> tmp;
        bucket_sort_impl([x](size_t i) { return TokenData{(int32_t)i, x[i], 0.0f}; }, n, k, tmp);
        std::copy(tmp.p.get(), tmp.p.get() + k, d);
        return;
    }
    heap_top_k<false>(d, x, nullptr, n, k, nullptr, 0);
}

size_t fill_min_p(TokenData *d, const float *x, size_t n, float p, size_t min_keep, bool *sorted) {
    // One pass: an entry that passes the final threshold (max + logf(p)) also passes the
    // threshold of the running max at its position (float rounding is monotonic), so collect
    // those in order, then filter them with the final threshold.
    const float lp = logf(p);
    float mx = -FLT_MAX;
    float lo_run = mx + lp;
    size_t w = 0;
    for (size_t i = 0; i < n; ++i) {
        const float v = x[i];
        if (mx < v) {
            mx = v;
            lo_run = mx + lp;
        }
        if (v >= lo_run) d[w++] = TokenData{(int32_t)i, v, 0.0f};
    }
    const float lo = mx + lp;
    size_t kept = 0;
    for (size_t i = 0; i < w; ++i) {
        if (d[i].logit >= lo) d[kept++] = d[i];
    }
    if (kept > 0 && kept >= min_keep) {
        *sorted = false;
        return kept;
    }
    fill(d, x, n);
    *sorted = false;
    return min_p(d, n, sorted, p, min_keep);
}

void fill_penalties(TokenData *d, const float *x, size_t n, const int32_t *counts, size_t n_counts, float repeat,
                    float freq, float present) {
    // Ids are 0..n-1 here, so counts[i] is the count of candidate i.
    const size_t m = std::min(n, n_counts);
    for (size_t i = 0; i < n; ++i) {
        float l = x[i];
        const int32_t c = i < m ? counts[i] : 0;
        if (c > 0) {
            if (l <= 0) {
                l *= repeat;
            } else {
                l /= repeat;
            }
            const float a = (float)c * freq;
            const float b = 1.0f * present;
            l -= a + b;
        }
        d[i] = TokenData{(int32_t)i, l, 0.0f};
    }
}

void fill_temperature(TokenData *d, const float *x, size_t n, float t) {
    if (t <= 0.0f) {
        fill(d, x, n);
        temperature(d, n, t);
        return;
    }
    for (size_t i = 0; i < n; ++i) d[i] = TokenData{(int32_t)i, x[i] / t, 0.0f};
}

// ---- many rows -------------------------------------------------------------------------------------

namespace {

// The leading penalties / logit-bias ops of a fresh array touch only a few ids: their values are
// computed here (in op order, on the masked logit) and read in place of x by the fill.
void leading_overrides(const RowPlan &r, size_t n_lead, std::vector<Override> &ov) {
    ov.clear();
    std::vector<size_t> ids;
    for (size_t j = 0; j < n_lead; ++j) {
        const RowOp &op = r.ops[j];
        for (int32_t t : op.ids) {
            if (t < 0 || (size_t)t >= r.n) continue;
            if (op.kind == kOpPenalties && ((size_t)t >= op.n_counts || op.counts[t] <= 0)) continue;
            ids.push_back((size_t)t);
        }
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    for (size_t id : ids) {
        float v = (r.mask && !r.mask[id]) ? -INFINITY : r.x[id];
        for (size_t j = 0; j < n_lead; ++j) {
            const RowOp &op = r.ops[j];
            if (op.kind == kOpPenalties) {  // as penalties(): counts[id] > 0
                const int32_t c = id < op.n_counts ? op.counts[id] : 0;
                if (c <= 0) continue;
                if (v <= 0) {
                    v *= op.f0;
                } else {
                    v /= op.f0;
                }
                const float a = (float)c * op.f1;
                const float b = 1.0f * op.f2;
                v -= a + b;
            } else {  // logit-bias on a fresh array: every entry for this id, in list order
                for (size_t e = 0; e < op.ids.size(); ++e) {
                    if ((size_t)op.ids[e] == id) v += op.vals[e];
                }
            }
        }
        ov.push_back(Override{id, v});
    }
}

template <bool kMask>
void fill_row(TokenData *d, const float *x, const uint8_t *mask, size_t n, const std::vector<Override> &ov) {
    size_t oi = 0;
    scan_row<kMask>(x, mask, 0, n, ov.data(), ov.size(), oi,
                    [d](size_t i, float v) { d[i] = TokenData{(int32_t)i, v, 0.0f}; });
}

void run_row(RowPlan &r) {
    TokenData *d = r.d;
    const size_t n = r.n;
    size_t size = n;
    bool sorted = false;
    int64_t selected = -1;
    size_t j = 0;
    const size_t n_ops = r.ops.size();
    // 1. the fill, fused with the leading sparse ops and a first top-k / min-p / temp / greedy
    size_t n_lead = 0;
    while (n_lead < n_ops && (r.ops[n_lead].kind == kOpPenalties || r.ops[n_lead].kind == kOpBias)) ++n_lead;
    thread_local std::vector<Override> ov;
    leading_overrides(r, n_lead, ov);
    j = n_lead;
    const bool plain = !r.mask && ov.empty();
    const int32_t first = j < n_ops ? r.ops[j].kind : 0;
    if (first == kOpGreedyFresh && plain) {
        r.size = n;
        r.offset = 0;
        r.sorted = false;
        r.selected = greedy_fresh(r.x, n);
        return;
    }
    if (first == kOpTopK && r.ops[j].z0 <= 128) {
        const size_t k = std::min(r.ops[j].z0, n);
        if (r.mask) {
            heap_top_k<true>(d, r.x, r.mask, n, k, ov.data(), ov.size());
        } else {
            heap_top_k<false>(d, r.x, nullptr, n, k, ov.data(), ov.size());
        }
        size = k;
        sorted = true;
        ++j;
    } else if (first == kOpTopK && plain) {
        fill_top_k(d, r.x, n, std::min(r.ops[j].z0, n));
        size = std::min(r.ops[j].z0, n);
        sorted = true;
        ++j;
    } else if (first == kOpMinP && plain) {
        size = fill_min_p(d, r.x, n, r.ops[j].f0, r.ops[j].z0, &sorted);
        ++j;
    } else if (first == kOpTemp && plain) {
        fill_temperature(d, r.x, n, r.ops[j].f0);
        ++j;
    } else if (r.mask) {
        fill_row<true>(d, r.x, r.mask, n, ov);
    } else {
        fill_row<false>(d, r.x, nullptr, n, ov);
    }
    // 2. the rest, as each sampler's apply does it
    for (; j < n_ops; ++j) {
        RowOp &op = r.ops[j];
        switch (op.kind) {
        case kOpPenalties:
            penalties(d, size, op.counts, op.n_counts, op.f0, op.f1, op.f2);
            sorted = false;
            break;
        case kOpTopK: {
            const size_t k = std::min(op.z0, size);
            if (!sorted) sort_desc_inplace(d, size, k);
            size = k;
            sorted = true;
            break;
        }
        case kOpTopP:
            if (size == 0) {
                r.error = 1;
                return;
            }
            softmax(d, size, sorted);
            size = top_p(d, size, sorted, op.f0, op.z0);
            sorted = true;
            break;
        case kOpMinP:
            if (size > 0) size = min_p(d, size, &sorted, op.f0, op.z0);
            break;
        case kOpTypical:
            if (size == 0) {
                r.error = 1;
                return;
            }
            if (!sorted) {
                sort_desc_inplace(d, size, size);
                sorted = true;
            }
            softmax(d, size, sorted);
            size = typical(d, size, op.f0, op.z0);
            sorted = false;
            break;
        case kOpTemp:
            temperature(d, size, op.f0);
            break;
        case kOpTempExtDyn:
            if (size <= 1) break;
            if (!sorted) {
                sort_desc_inplace(d, size, size);
                sorted = true;
            }
            softmax(d, size, sorted);
            temp_ext_dynamic(d, size, op.f0, op.f1, op.f2);
            break;
        case kOpTopNSigma:
            if (size > 1) top_n_sigma(d, size, op.f0);
            break;
        case kOpGreedy:
        case kOpGreedyFresh:
            selected = size ? greedy(d, size) : 0;
            break;
        case kOpDist:
            if (size == 0) {
                selected = -1;
            } else if (size == 1) {
                op.used = true;
                selected = 0;
                d[0].p = 1.0f;
            } else {
                op.used = true;
                selected = dist(d, size, sorted, op.u);
            }
            break;
        default:  // a logit-bias after the array stopped being fresh: the plan builder never sends one
            r.error = 2;
            return;
        }
    }
    r.offset = 0;
    r.size = size;
    r.sorted = sorted;
    r.selected = selected;
}

}  // namespace

void run_rows(RowPlan *rows, size_t n_rows, int threads) {
    if (threads <= 1 || n_rows <= 1) {
        for (size_t i = 0; i < n_rows; ++i) run_row(rows[i]);
        return;
    }
    core::parallel_for(threads, (int64_t)n_rows, [rows](int64_t i) { run_row(rows[(size_t)i]); });
}

// ---- rows started as they are added (RowsJob) --------------------------------------------------

struct RowsJob::State {
    std::vector<RowPlan> plans;  // sized once: rows never move
    std::unique_ptr<std::atomic<uint8_t>[]> done;
    std::atomic<size_t> ready{0};  // rows [0, ready) are published
    std::atomic<size_t> next{0};   // next row to claim
    std::atomic<bool> closed{false};

    // Claim and run one published row; false when none is claimable now. (close() sets next to
    // SIZE_MAX, so no claim succeeds after it.)
    bool run_one() {
        size_t i = next.load(std::memory_order_relaxed);
        for (;;) {
            if (i >= ready.load(std::memory_order_acquire)) return false;
            if (next.compare_exchange_weak(i, i + 1, std::memory_order_acq_rel)) break;
        }
        run_row(plans[i]);
        done[i].store(1, std::memory_order_release);
        return true;
    }
};

namespace {

#if defined(__x86_64__) || defined(_M_X64)
inline void cpu_relax() { _mm_pause(); }
#else
inline void cpu_relax() { std::this_thread::yield(); }
#endif

// Waiting for another thread of this job: spin briefly, then yield the CPU, then sleep a little.
// On a machine with fewer free CPUs than threads the thread waited for may be the one that needs
// this CPU, so a long spin would only delay it.
inline void backoff(int n) {
    if (n < 2000) {
        cpu_relax();
    } else if (n < 4000) {
        std::this_thread::yield();
    } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
}

// Persistent helper threads for RowsJob (separate from core::parallel_for's pool, whose calls
// block their caller). A helper takes the newest job, runs its rows while any are claimable,
// and spins briefly for more before sleeping.
class RowsHelpers {
  public:
    void start(const std::shared_ptr<RowsJob::State> &job, int n) {
        {
            std::lock_guard<std::mutex> lk(mu_);
            while ((int)threads_.size() < n) threads_.emplace_back([this] { loop(); });
            job_ = job;
            want_ = n;
            ++gen_;
            gen_atomic_.store(gen_, std::memory_order_release);
        }
        cv_.notify_all();
    }

  private:
    void loop() {
        uint64_t seen = 0;
        for (;;) {
            std::shared_ptr<RowsJob::State> job;
            // Spin a little for the next job before sleeping (a decode loop samples every few ms).
            for (int spin = 0; spin < 2000 && gen_atomic_.load(std::memory_order_acquire) == seen; ++spin) cpu_relax();
            {
                std::unique_lock<std::mutex> lk(mu_);
                cv_.wait(lk, [&] { return gen_ != seen; });
                seen = gen_;
                if (want_ <= 0) continue;
                --want_;
                job = job_;
            }
            if (!job) continue;
            // Run rows while the job is open; between rows added one at a time, spin a little.
            for (int idle = 0; !job->closed.load(std::memory_order_acquire);) {
                if (job->run_one()) {
                    idle = 0;
                } else if (job->ready.load(std::memory_order_acquire) >= job->plans.size() &&
                           job->next.load(std::memory_order_acquire) >= job->plans.size()) {
                    break;  // every row is claimed
                } else {
                    backoff(++idle);
                }
            }
        }
    }

    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<std::thread> threads_;
    std::shared_ptr<RowsJob::State> job_;
    int want_ = 0;
    uint64_t gen_ = 0;
    std::atomic<uint64_t> gen_atomic_{0};
};

RowsHelpers &rows_helpers() {
    static RowsHelpers *h = new RowsHelpers();  // leaked on purpose, as core's pool
    return *h;
}

}  // namespace

RowsJob::RowsJob(size_t n, int threads) : st_(std::make_shared<State>()) {
    st_->plans.resize(n);
    st_->done.reset(new std::atomic<uint8_t>[n]);
    for (size_t i = 0; i < n; ++i) st_->done[i].store(0, std::memory_order_relaxed);
    if (threads > 1 && n > 1) rows_helpers().start(st_, std::min<int>(threads - 1, (int)n - 1));
}

RowsJob::~RowsJob() { close(); }

RowPlan &RowsJob::slot(size_t k) { return st_->plans[k]; }

void RowsJob::add(size_t k) { st_->ready.store(k + 1, std::memory_order_release); }

const RowPlan &RowsJob::wait(size_t k) {
    State &s = *st_;
    for (int n = 0; !s.done[k].load(std::memory_order_acquire);) {
        if (s.run_one()) {
            n = 0;
        } else {
            backoff(++n);  // row k is running on a helper: it ends within one row's time
        }
    }
    return s.plans[k];
}

void RowsJob::close() {
    State &s = *st_;
    if (s.closed.exchange(true, std::memory_order_acq_rel)) return;
    // No row is claimed from now on; wait for the claimed ones (their memory belongs to the caller).
    const size_t claimed = std::min(s.next.exchange(SIZE_MAX, std::memory_order_acq_rel), s.plans.size());
    for (size_t i = 0; i < claimed; ++i) {
        for (int n = 0; !s.done[i].load(std::memory_order_acquire);) backoff(++n);
    }
}

}  // namespace lmt::sampling
