// Hot loops of the llama.cpp-exact samplers. See sampling.hpp for the contract of each kernel.
//
// Precision notes (all matter for bit-exact parity, see ../shared/research/llama-sampling.md):
// - this file is built with -ffp-contract=off, so no FMA is introduced anywhere;
// - sums are sequential in array order, in float unless a double accumulator is named;
// - expf/logf/powf/log2f/exp/pow are the platform libm's (what the reference build calls).
#include "cpu/sampling.hpp"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <numeric>

namespace lmt::sampling {

namespace {

inline bool logit_greater(const TokenData &a, const TokenData &b) { return a.logit > b.logit; }

// std::max(a, b) returns a unless a < b (so a NaN in b is skipped, a NaN in a sticks).
inline float std_max(float a, float b) { return (a < b) ? b : a; }

}  // namespace

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

void bucket_sort_desc(const TokenData *d, size_t n, size_t npartial, std::vector<TokenData> &out) {
    constexpr int kBuckets = 128;
    constexpr float kLow = -10.0f;
    constexpr float kHigh = 10.0f;
    constexpr float kScale = kBuckets / (kHigh - kLow);
    constexpr float kOffset = -kLow * kScale;

    std::vector<int> bucket(n);
    int histo[kBuckets] = {0};
    for (size_t i = 0; i < n; ++i) {
        const float x = kScale * d[i].logit;  // two separate roundings (no FMA), as in the reference
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
    out.resize(have);
    TokenData *starts[kBuckets];
    {
        TokenData *q = out.data();
        for (int j = kBuckets - 1; j >= lowest; --j) {
            starts[j] = q;
            q += histo[j];
        }
    }
    // Stable scatter: array order within each bucket.
    for (size_t i = 0; i < n; ++i) {
        const int j = bucket[i];
        if (j >= lowest) *starts[j]++ = d[i];
    }
    TokenData *q = out.data();
    size_t done = 0;
    for (int j = kBuckets - 1; j > lowest; --j) {
        std::sort(q, q + histo[j], logit_greater);
        q += histo[j];
        done += (size_t)histo[j];
    }
    if (lowest >= 0) std::partial_sort(q, q + (npartial - done), q + histo[lowest], logit_greater);
}

void sort_desc_inplace(TokenData *d, size_t n, size_t npartial) {
    if (npartial <= 128) {
        std::partial_sort(d, d + npartial, d + n, logit_greater);
        return;
    }
    std::vector<TokenData> tmp;
    bucket_sort_desc(d, n, npartial, tmp);
    std::copy(tmp.data(), tmp.data() + npartial, d);
}

void softmax(TokenData *d, size_t n, bool sorted) {
    if (n == 0) return;
    float mx = d[0].logit;
    if (!sorted) {
        for (size_t i = 1; i < n; ++i) mx = std_max(mx, d[i].logit);
    }
    float sum = 0.0f;
    for (size_t i = 0; i < n; ++i) {
        const float p = expf(d[i].logit - mx);
        d[i].p = p;
        sum += p;
    }
    for (size_t i = 0; i < n; ++i) d[i].p /= sum;
}

int64_t dist(TokenData *d, size_t n, bool sorted, double u) {
    float mx = d[0].logit;
    if (!sorted) {
        for (size_t i = 1; i < n; ++i) mx = std_max(mx, d[i].logit);
    }
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) {
        const float p = expf(d[i].logit - mx);
        d[i].p = p;
        sum += p;
    }
    const double target = sum * u;
    double run = 0.0;
    int64_t sel = -1;
    size_t i = 0;
    for (; i < n; ++i) {
        run += d[i].p;
        d[i].p = (float)((double)d[i].p / sum);
        if (run >= target) {
            sel = (int64_t)i;
            ++i;
            break;
        }
    }
    for (; i < n; ++i) d[i].p = (float)((double)d[i].p / sum);
    return sel < 0 ? (int64_t)n - 1 : sel;
}

size_t top_p(TokenData *d, size_t n, bool sorted, float p, size_t min_keep, std::vector<TokenData> &buf) {
    size_t k = n;
    const TokenData *pd = d;
    bool use_buf = false;
    if (!sorted && n > 1024) {
        k = std::min<size_t>(256, n);
        bucket_sort_desc(d, n, k, buf);
        pd = buf.data();
        use_buf = true;
    } else if (!sorted) {
        sort_desc_inplace(d, n, n);
    }
    float cum = 0.0f;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
        cum += pd[i].p;
        if (cum >= p && i + 1 >= min_keep) {
            keep = i + 1;
            break;
        }
        if (use_buf && i == k - 1) {  // the guess was too small: sort everything
            k = n;
            bucket_sort_desc(d, n, k, buf);
            pd = buf.data();
        }
    }
    if (use_buf) std::copy(buf.data(), buf.data() + keep, d);
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
    float entropy = 0.0f;
    for (size_t i = 0; i < n; ++i) entropy += -d[i].p * logf(d[i].p);
    std::vector<float> score(n);
    for (size_t i = 0; i < n; ++i) score[i] = fabsf(-logf(d[i].p) - entropy);
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

}  // namespace lmt::sampling
