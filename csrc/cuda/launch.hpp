// Host launchers of the CUDA kernels (device pointers in, asynchronous on `stream`).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace lmt::cuda {

void launch_rms_norm(const float *x, const float *gamma, float *y, int rows, int cols, float eps, cudaStream_t stream);
// The matvec of every weight type (csrc/cuda/mul_mv.cu), by ggml type id: y (T x rows) = x (T x
// cols) times W^T, batch invariant. mul_mv_types lists the ids it runs; the others throw
// std::invalid_argument (as do cols not a multiple of mul_mv_col_multiple and misaligned rows).
std::vector<int> mul_mv_types();
int mul_mv_col_multiple(int type);
size_t mul_mv_row_bytes(int type, int cols);
void check_mul_mv_shape(int type, int cols);
void launch_mul_mv(int type, const uint8_t *w, size_t row_stride, int rows, int cols, const float *x, int T, float *y,
                   cudaStream_t stream);
void launch_tanh(float *x, int64_t n, cudaStream_t stream);
void launch_softcap(float *x, int64_t n, float s, float cap, bool four_pass, cudaStream_t stream);
// x (rows x V): -inf where the row's int32 bitmask (rows x ceil(V / 32), device memory) is clear.
void launch_apply_bitmask(float *x, const int32_t *mask, int rows, int64_t V, cudaStream_t stream);
// Scratch: part_key and part_bad hold rows * ceil(n / 1024) entries each.
void launch_argmax_rows(const float *x, int rows, int n, bool greedy, const uint32_t *excl_mask, uint64_t *part_key,
                        uint32_t *part_bad, uint32_t *out, cudaStream_t stream);
// Greedy argmax of cap * tanh((x * s) * (1 / cap)) without writing the capped logits (cap > 0,
// rows <= 1024); same latch, exclusion and scratch as launch_argmax_rows.
void launch_greedy_softcap_argmax(const float *x, int rows, int n, float s, float cap, const uint32_t *excl_mask,
                                  uint64_t *part_key, uint32_t *part_bad, uint32_t *out, cudaStream_t stream);
size_t topk_scratch_elems(int rows, int n, int k);
// The argmax and top-k kernels count each row's arriving blocks (and top-k's row floor) in device
// globals that the row's last block resets, so two of them must never run at once on different
// streams (two heads, two shards, two threads). Callers hold this lock from such a launch until
// the stream it went to has been synchronised.
std::mutex &selection_lock();
void launch_topk_rows(const float *x, int rows, int n, int k, uint64_t *scratch, uint32_t *ids, float *vals,
                      cudaStream_t stream);

// Test and benchmark hooks (lmtail_cuda_check): force the other, result-identical path. The
// product never calls them; no environment variable selects a kernel.
void topk_force_bitonic_for_testing(bool on);
void argmax_force_two_phase_for_testing(bool on);
// Benchmark hook only (lmtail_cuda_check ab): run the quantised types on the f32 CUDA-core kernel
// instead of the integer tensor-core one (different bytes; the product never calls it).
void mul_mv_force_f32_for_testing(bool on);

}  // namespace lmt::cuda
