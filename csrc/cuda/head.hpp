// Device-resident LM-head tail for the CUDA backend: weights uploaded once, then per call
// norm -> head -> scale -> cap (four nodes) -> selection, with the three read-back routes:
// full rows (route A), 4 bytes per row (route B, greedy), k candidates per row (route C, top-k).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lmt::cuda {

bool device_available();

class DeviceHead {
  public:
    // weight_type: a ggml type id of mul_mv_types(); norm_kind: 0 none, 1 rms. gamma may be null.
    DeviceHead(const uint8_t *w, int weight_type, int rows, int cols, size_t row_stride, const float *gamma,
               int norm_kind, float eps, float scale, float softcap, int max_tokens);
    ~DeviceHead();
    DeviceHead(const DeviceHead &) = delete;
    DeviceHead &operator=(const DeviceHead &) = delete;

    int rows() const { return rows_; }
    int cols() const { return cols_; }
    // Runs the tail on T hidden rows (a host pointer, or with on_device a device pointer: read
    // in place when 16-byte aligned, else copied device to device). Returns false if a pre-cap
    // logit was non-finite (nothing is read back then).
    // check_latch = false (route B): skip the pre-cap latch read-back and the cap; greedy() then
    // checks, caps and reduces in one kernel, so the route reads back only its 4 bytes per row.
    bool run_tail(const float *hidden, int T, bool check_latch = true, bool on_device = false);
    // The stream (a cudaStream_t; nullptr: the legacy default stream) every later call enqueues
    // its kernels and copies on; each call returns once its results are complete.
    void set_stream(void *stream) { stream_ = stream; }
    // Route A: copy the T x rows capped logits to host memory.
    void read_logits(float *out, int T);
    // Route A into device memory: the T x rows capped logits to `dst` (device to device).
    void copy_logits_device(float *dst, int T);
    // The latch over the stored (capped) logits: false if any is non-finite (a scale that
    // overflows float32 turns a finite logit into inf). 4 bytes per row back.
    bool stored_logits_finite(int T);
    // One whole row t of the last tail (the top-k route's fallback): rows_ floats.
    void read_row(int t, float *out);
    // Route B: greedy ids (LMT_ARGMAX_INVALID on a non-finite row), exclusion bitmask (or empty).
    void greedy(const std::vector<uint32_t> &excl_mask, int T, uint32_t *out);
    // Route C: top-k candidates per row.
    void topk(int T, int k, uint32_t *ids, float *vals);
    uint64_t bytes_read_back() const { return bytes_back_; }

  private:
    void ensure_tokens(int T);
    void *stream_ = nullptr;
    int type_, rows_, cols_, norm_kind_, max_tokens_ = 0;
    size_t row_stride_;
    float eps_, scale_, cap_;
    uint8_t *w_ = nullptr;
    float *gamma_ = nullptr, *hidden_ = nullptr, *normed_ = nullptr, *logits_ = nullptr;
    uint64_t *keys_ = nullptr, *top_scratch_ = nullptr;
    uint32_t *bad_ = nullptr, *out_ = nullptr, *mask_ = nullptr, *ids_ = nullptr;
    float *vals_ = nullptr;
    size_t top_scratch_elems_ = 0;
    int top_k_cap_ = 0;
    uint32_t *host_out_ = nullptr;  // pinned, 4 bytes per row
    bool capped_ = true;            // logits_ hold the capped logits of the last tail
    uint64_t bytes_back_ = 0;
};

}  // namespace lmt::cuda
