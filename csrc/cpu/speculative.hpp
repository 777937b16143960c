// Host kernels of exact speculative verification (python/lmtail/speculative.py).
//
// The verifier's policy (accept tests, draw schedule) lives in Python; these are its O(vocab)
// loops: the residual max(p - q, 0) over a caller-given token order, the selection walk, and the
// probability-row checks. All are deterministic functions of their inputs (fixed summation
// order, no threads), so a seeded verification replays byte for byte.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lmt::spec {

// Residual weights along `order` (nullptr: ids 0..V-1): out_w[j] = max(p[id] - q[id], 0) in float
// for id = order[j] (q == nullptr: max(p[id], 0)). Returns how many are positive. Throws
// lmt::ArgumentError when an id is outside [0, V) or repeated (a repeated id would count its mass
// twice).
// out_blocks (may be null): also the kSelectBlock block sums of out_w for blocked_select, computed
// while the weights are still in cache. Without an order the rows are split into chunks over
// `threads` threads (the bytes never depend on it).
size_t residual_weights(const float *p, const float *q, size_t V, const int32_t *order, size_t n_order,
                        float *out_w, double *out_blocks, int threads);

// Tokens of the whole vocabulary with a positive residual (the set `order` must cover).
size_t residual_support(const float *p, const float *q, size_t V);

// The selection walk over weights w[0, n) (>= 0) given one uniform u in [0, 1):
// the weights are summed in blocks of kSelectBlock positions (each block a sequential double sum,
// the blocks then added in order: S), target = u * S, and the first index with a positive weight
// at which the running sum reaches the target is returned, the running sum advancing by whole
// blocks and then element by element inside the block that reaches the target. If rounding leaves
// the target unreached, the last positive weight. A zero weight is never selected. -1 when no
// weight is positive. Blocks keep the sum's dependency chain short (independent per block):
// at 200k weights this is ~4x faster than one sequential chain (see docs/DESIGN.md).
constexpr size_t kSelectBlock = 32;
// pre_blocks: the block sums residual_weights wrote (null: computed here).
int64_t blocked_select(const float *w, size_t n, double u, const double *pre_blocks = nullptr);

// Row checks for probability inputs: the sum (float lanes per block of 256, blocks added in
// double; a fixed order) and the count of entries that are negative or not finite.
void row_stats(const float *x, size_t n, double *sum, size_t *n_bad, int threads);
// The same for `rows` rows of n entries, `stride` floats apart, in one dispatch: sums[r], n_bad[r].
void rows_stats(const float *x, size_t rows, size_t n, size_t stride, double *sums, size_t *n_bad, int threads);

// Checks a sparse probability row (ids, p) of n entries over a vocabulary of V tokens and looks
// up one token: sum (double, in order), entries that are negative or not finite, the first id
// outside [0, V) or repeated, and p at `tok` (0 when the row does not list it).
struct SparseRowInfo {
    double sum;
    size_t n_bad;
    bool found_bad;  // an id is out of range or repeated
    int64_t bad_id;  // the first such id
    bool repeated;   // bad_id is a repeat (else out of range)
    float p_tok;
};
SparseRowInfo sparse_row(const int32_t *ids, const float *p, size_t n, size_t V, int64_t tok);

// The accept tests of one step, given the next raw mt19937 state words (untempered, as the engine
// stores them; one per examined draft): draft i is accepted iff p[i] > 0 and (q[i] <= 0 or
// p[i] >= q[i] or u < p[i] / q[i]) with u the stdlib's uniform_real_distribution<float> of word i
// (stdlib: 0 libstdc++, 1 libc++, 2 c++26). Returns how many drafts were accepted (= examined - 1
// when one is rejected); examined = min(accepted + 1, n).
size_t accept_run(const double *p, const double *q, const uint32_t *raw, size_t n, int stdlib);

}  // namespace lmt::spec
