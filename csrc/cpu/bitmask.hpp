// Token bitmasks in the int32 layout of XGrammar / llguidance: row r of a (B, W) word array,
// W = ceil(V / 32), token i allowed iff bit (i % 32) of word (i / 32) is set.
#pragma once

#include <cstdint>

namespace lmt::cpu {

// x[r * x_stride + i] = -inf for every i < V whose bit is clear in words[r * w_stride ...];
// bits past V are ignored. Rows are split over up to n_threads threads (<= 0: the default);
// each element is written by one task, so the result does not depend on the thread count.
void apply_bitmask(float *x, int64_t x_stride, const uint32_t *words, int64_t w_stride, int64_t B, int64_t V,
                   int n_threads);

}  // namespace lmt::cpu
