// Bench only: the earlier Q5_K matvec variants (bench/cuda/mul_mv_q5_K_variants.cu), selected by
// LMTAIL_CUDA_MMV; the product runs csrc/cuda/mul_mv.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace lmt::cuda::bench {

size_t mul_mv_q5_K_scratch_bytes(int cols);
void launch_mul_mv_q5_K(const uint8_t *w, size_t row_stride, int rows, int cols, const float *x, int T, float *y,
                        void *scratch, cudaStream_t stream);

}  // namespace lmt::cuda::bench
