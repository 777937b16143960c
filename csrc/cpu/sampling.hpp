// Hot loops of the llama.cpp-exact samplers (python/lmtail/sampling). Internal header.
//
// Every kernel works on an array of TokenData laid out exactly like llama.cpp's
// llama_token_data {int32 id; float logit; float p;} and reproduces the arithmetic of the
// reference CPU path (src/llama-sampler.cpp of the pinned llama.cpp): float vs double precision,
// sequential accumulation order, the platform libm (expf, logf, powf, log2f, exp, pow), and the
// element order produced by std::sort / std::partial_sort of the standard library this file is
// compiled against (GCC's libstdc++ on Linux reproduces a Linux llama.cpp build exactly).
// The policy around them (parameter checks, RNG draws, state, chain order) lives in Python.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace lmt::sampling {

struct TokenData {
    int32_t id;
    float logit;
    float p;
};
static_assert(sizeof(TokenData) == 12, "TokenData must match llama_token_data (12 bytes)");

// Threads for the large elementwise passes and per-bucket sorts (default 1, like llama.cpp).
// Results never depend on it: only independent work (expf of each element, separate buckets) is
// split; every order-dependent accumulation stays sequential.
void set_threads(int n);
int get_threads();

// float -> int as the reference build's CPU converts it (x86-64: NaN/inf/out of range give INT_MIN;
// elsewhere: saturate, NaN -> 0). The C++ conversion of those values is undefined behaviour.
int32_t float_to_int_like_cpu(float x);

// {id = i, logit = logits[i], p = 0} for i in [0, n).
void fill(TokenData *d, const float *logits, size_t n);

// Index of the first strictly largest logit (scan from 0; NaN never wins unless at index 0).
int64_t greedy(const TokenData *d, size_t n);

// t <= 0: keep the first maximum in array order, set the rest to -inf; t > 0: logit /= t.
void temperature(TokenData *d, size_t n, float t);

// Descending partial sort of d[0, n) so that d[0, npartial) holds the top npartial:
// std::partial_sort when npartial <= 128, else the 128-bucket sort over [-10, 10) (copied back).
void sort_desc_inplace(TokenData *d, size_t n, size_t npartial);

// The 128-bucket partial sort into `out` (d untouched). out.size() >= npartial on return.
void bucket_sort_desc(const TokenData *d, size_t n, size_t npartial, std::vector<TokenData> &out);

// p = expf(logit - max) / float sum. max = d[0].logit when `sorted`, else a std::max scan.
void softmax(TokenData *d, size_t n, bool sorted);

// llama.cpp's dist for n >= 2: float expf, double sums, first index whose running sum reaches
// sum * u; probabilities normalised in the same pass. Returns the selected index.
int64_t dist(TokenData *d, size_t n, bool sorted, double u);

// top-p body after its softmax (not sorted: 256-candidate bucket guess, full-sort fallback).
// Returns the new size; the kept prefix of d is sorted on return.
size_t top_p(TokenData *d, size_t n, bool sorted, float p, size_t min_keep);

// min-p. Returns the new size; *sorted is updated (the unsorted fast path leaves it false).
size_t min_p(TokenData *d, size_t n, bool *sorted, float p, size_t min_keep);

// typical body after a sorted softmax. Returns the new size (entries reordered by score).
size_t typical(TokenData *d, size_t n, float p, size_t min_keep);

// temp-ext body for delta > 0 after a sorted softmax (n >= 2).
void temp_ext_dynamic(TokenData *d, size_t n, float temp, float delta, float exponent);

// XTC after a sorted softmax: number of leading entries to drop (0: nothing removed).
size_t xtc_shift(const TokenData *d, size_t n, float threshold, size_t min_keep);

void top_n_sigma(TokenData *d, size_t n, float nsigma);

// mirostat v1: the top-k size after a sorted softmax (max(int(k), 1)).
int32_t mirostat_k(const TokenData *d, size_t n, int32_t m, int32_t n_vocab, float mu);
// mirostat v2: number of leading entries whose surprise -log2f(p) <= mu.
size_t mirostat_v2_cut(const TokenData *d, size_t n, float mu);
// mu - eta * (-log2f(p) - tau), in float.
float mirostat_mu(float mu, float eta, float tau, float p);

// Repetition penalties from dense per-token counts (counts[id], 0 = absent).
void penalties(TokenData *d, size_t n, const int32_t *counts, size_t n_counts, float repeat, float freq,
               float present);

// DRY penalties from dense per-token repeat lengths (INT32_MIN = absent).
void dry(TokenData *d, size_t n, const int32_t *max_len, size_t n_len, float multiplier, float base,
         int32_t allowed_length);

// adaptive-p logit transform around `adapted_target` (entries at -inf untouched).
void adaptive_transform(TokenData *d, size_t n, float adapted_target);

// std::discrete_distribution over the p of d[0, n) given its uniform draw u.
// libcxx = false: libstdc++ (lower_bound over normalised partial sums, last forced to 1).
// libcxx = true: libc++ (upper_bound over the first n-1 partial sums, n-1 if none).
int64_t discrete(const TokenData *d, size_t n, double u, bool libcxx);

// Server logprobs (get_token_probabilities): partial sort of the n_top largest logits, then a
// float softmax over the whole array in that order.
void server_probs(TokenData *d, size_t n, size_t n_top);

// std::sort by p descending (common_sampler_get_candidates(do_sort = true)).
void sort_by_p_desc(TokenData *d, size_t n);

// Fresh-array kernels: the same result as fill() followed by the named sampler on a new,
// unsorted array (llama_sampler_sample's state), without writing the whole array first.
int64_t greedy_fresh(const float *x, size_t n);
void fill_top_k(TokenData *d, const float *x, size_t n, size_t k);  // 0 < k <= n; d[0, k) sorted
size_t fill_min_p(TokenData *d, const float *x, size_t n, float p, size_t min_keep, bool *sorted);
void fill_temperature(TokenData *d, const float *x, size_t n, float t);
void fill_penalties(TokenData *d, const float *x, size_t n, const int32_t *counts, size_t n_counts, float repeat,
                    float freq, float present);


// ---- many rows in one call (lmtail.common_sampling.common_sample_rows) ---------------------------
// Each row runs the leading part of its chain that needs no Python: the fill fused with its first
// samplers (penalties, logit-bias and a top-k read straight from the logits row, so the row is
// streamed once), then the built-in samplers on the few candidates left. RNG draws are made by
// the caller beforehand (RowOp::u); `used` reports whether the sampler consumed it, so an unused
// draw can be given back. Rows are independent: the result of a row depends on nothing else.
enum RowOpKind : int32_t {
    kOpPenalties = 1,   // counts (dense, per token) read at the distinct ids of `ids`; f0..f2 = repeat, freq, present
    kOpBias = 2,        // ids[j] += vals[j] in list order (only on a fresh array: ids == index)
    kOpTopK = 3,        // z0 = k (> 0)
    kOpTopP = 4,        // f0 = p, z0 = min_keep
    kOpMinP = 5,        // f0 = p, z0 = min_keep
    kOpTypical = 6,     // f0 = p, z0 = min_keep
    kOpTemp = 7,        // f0 = t (temp, or temp-ext with delta <= 0)
    kOpTempExtDyn = 8,  // f0..f2 = t, delta, exponent (delta > 0)
    kOpTopNSigma = 9,   // f0 = n
    kOpGreedy = 10,
    kOpDist = 11,        // u = the uniform_real_distribution<double> draw
    kOpGreedyFresh = 12, // greedy on the unfilled row (a greedy-only chain: nothing else runs)
};

struct RowOp {
    int32_t kind = 0;
    size_t z0 = 0;
    float f0 = 0.0f, f1 = 0.0f, f2 = 0.0f;
    double u = 0.0;
    const int32_t *counts = nullptr;  // kOpPenalties
    size_t n_counts = 0;
    std::vector<int32_t> ids;         // kOpPenalties: history tokens; kOpBias: tokens
    std::vector<float> vals;          // kOpBias: biases
    bool used = false;                // out: the draw u was consumed
};

struct RowPlan {
    const float *x = nullptr;       // the logits row (n values)
    const uint8_t *mask = nullptr;  // nullptr, or n flags: 0 -> the logit is -inf (a grammar's mask)
    size_t n = 0;
    TokenData *d = nullptr;         // room for n candidates
    std::vector<RowOp> ops;
    // out: the candidate window after the ops, as llama_token_data_array
    size_t offset = 0, size = 0;
    int64_t selected = -1;
    bool sorted = false;
    int32_t error = 0;  // nonzero: a state the Python path reports (e.g. softmax over nothing)
};

// Every row, split over `threads` (rows are tasks; a row never depends on the thread count).
void run_rows(RowPlan *rows, size_t n_rows, int threads);

// The same rows, started as they are added and collected one by one, so that the caller's own
// work between rows (Python: planning the next row, finishing the last one) overlaps the helper
// threads' rows. add() publishes row k (rows are added in order, at most n); wait(k) returns
// when row k has run, running unclaimed rows itself meanwhile (so it always makes progress, even
// with no helper scheduled). close() stops handing out rows and waits for those in flight: after
// it no thread touches a row's memory. Rows run by whichever thread claims them: the result of
// a row is the same either way.
class RowsJob {
  public:
    RowsJob(size_t n, int threads);
    ~RowsJob();
    RowPlan &slot(size_t k);  // row k's plan, to fill before add(k)
    void add(size_t k);
    const RowPlan &wait(size_t k);
    void close();

    struct State;

  private:
    std::shared_ptr<State> st_;
};

}  // namespace lmt::sampling
