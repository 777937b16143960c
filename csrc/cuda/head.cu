#include "head.hpp"

#include <algorithm>
#include <stdexcept>

#include "common.cuh"
#include "launch.hpp"

namespace lmt::cuda {

namespace {
// A copy on the head's stream that the host can rely on when it returns.
void copy_sync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
    LMT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
    LMT_CUDA_CHECK(cudaStreamSynchronize(s));
}
}  // namespace

bool device_available() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

DeviceHead::DeviceHead(const uint8_t *w, int weight_type, int rows, int cols, size_t row_stride, const float *gamma,
                       int norm_kind, float eps, float scale, float softcap, int max_tokens)
    : type_(weight_type), rows_(rows), cols_(cols), norm_kind_(norm_kind), eps_(eps), scale_(scale), cap_(softcap) {
    check_mul_mv_shape(weight_type, cols);  // before any allocation: a bad type or shape throws here
    // Rows are stored back to back, rounded up to 16 bytes so every row starts aligned for the
    // matvec's vector loads (Q6_K, Q8_0 and Q4_0 rows are only 2-byte multiples).
    row_stride_ = (mul_mv_row_bytes(weight_type, cols) + 15) / 16 * 16;
    const size_t host_row = mul_mv_row_bytes(weight_type, cols);
    LMT_CUDA_CHECK(cudaMalloc(&w_, (size_t)rows * row_stride_));
    // The host array may have a larger stride; the device rows are row_stride_ apart.
    LMT_CUDA_CHECK(cudaMemcpy2D(w_, row_stride_, w, row_stride, host_row, rows, cudaMemcpyHostToDevice));
    if (gamma) {
        LMT_CUDA_CHECK(cudaMalloc(&gamma_, (size_t)cols * 4));
        LMT_CUDA_CHECK(cudaMemcpy(gamma_, gamma, (size_t)cols * 4, cudaMemcpyHostToDevice));
    }
    LMT_CUDA_CHECK(cudaMalloc(&mask_, ((size_t)rows + 31) / 32 * 4));
    ensure_tokens(std::max(1, max_tokens));
}

DeviceHead::~DeviceHead() {
    for (void *p : {(void *)w_, (void *)gamma_, (void *)hidden_, (void *)normed_, (void *)logits_, (void *)keys_,
                    (void *)top_scratch_, (void *)bad_, (void *)out_, (void *)mask_, (void *)ids_, (void *)vals_})
        if (p) cudaFree(p);
    if (host_out_) cudaFreeHost(host_out_);
}

void DeviceHead::ensure_tokens(int T) {
    if (T <= max_tokens_) return;
    for (void *p : {(void *)hidden_, (void *)normed_, (void *)logits_, (void *)keys_, (void *)bad_, (void *)out_})
        if (p) cudaFree(p);
    if (host_out_) cudaFreeHost(host_out_);
    const size_t chunks = ((size_t)rows_ + 1023) / 1024;
    LMT_CUDA_CHECK(cudaMalloc(&hidden_, (size_t)T * cols_ * 4));
    LMT_CUDA_CHECK(cudaMalloc(&normed_, (size_t)T * cols_ * 4));
    LMT_CUDA_CHECK(cudaMalloc(&logits_, (size_t)T * rows_ * 4));
    LMT_CUDA_CHECK(cudaMalloc(&keys_, (size_t)T * chunks * 8));
    LMT_CUDA_CHECK(cudaMalloc(&bad_, (size_t)T * chunks * 4));
    LMT_CUDA_CHECK(cudaMalloc(&out_, (size_t)T * 4));
    LMT_CUDA_CHECK(cudaMallocHost(&host_out_, (size_t)T * 4));
    max_tokens_ = T;
    top_k_cap_ = 0;  // top-k scratch is sized per (T, k) on demand
}

bool DeviceHead::run_tail(const float *hidden, int T, bool check_latch, bool on_device) {
    ensure_tokens(T);
    const cudaStream_t s = static_cast<cudaStream_t>(stream_);
    const float *x = hidden_;
    if (on_device && reinterpret_cast<uintptr_t>(hidden) % 16 == 0) {
        x = hidden;  // the caller's device rows, read in place
    } else {
        LMT_CUDA_CHECK(cudaMemcpyAsync(hidden_, hidden, (size_t)T * cols_ * 4,
                                       on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice, s));
    }
    if (norm_kind_ == 1) {
        launch_rms_norm(x, gamma_, normed_, T, cols_, eps_, s);
        x = normed_;
    }
    launch_mul_mv(type_, w_, row_stride_, rows_, cols_, x, T, logits_, s);
    if (!check_latch) {  // route B: greedy() checks, caps and reduces
        capped_ = false;
        return true;
    }
    // Pre-cap finite check (tanh would turn +Inf into a finite cap): the greedy reduction's latch,
    // 4 bytes per row back (counted: routes A and C pay it on top of their payload).
    {
        const std::lock_guard<std::mutex> lock(selection_lock());
        launch_argmax_rows(logits_, T, rows_, true, nullptr, keys_, bad_, out_, s);
        copy_sync(host_out_, out_, (size_t)T * 4, cudaMemcpyDeviceToHost, s);
    }
    bytes_back_ += (uint64_t)T * 4;
    for (int t = 0; t < T; ++t)
        if (host_out_[t] == LMT_ARGMAX_INVALID) return false;
    launch_softcap(logits_, (int64_t)T * rows_, scale_, cap_, true, s);
    capped_ = true;
    return true;
}

void DeviceHead::read_logits(float *out, int T) {
    copy_sync(out, logits_, (size_t)T * rows_ * 4, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream_));
    bytes_back_ += (uint64_t)T * rows_ * 4;
}

void DeviceHead::copy_logits_device(float *dst, int T) {
    // Device to device: nothing crosses to the host, so bytes_read_back is unchanged.
    copy_sync(dst, logits_, (size_t)T * rows_ * 4, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream_));
}

bool DeviceHead::stored_logits_finite(int T) {
    const cudaStream_t s = static_cast<cudaStream_t>(stream_);
    const std::lock_guard<std::mutex> lock(selection_lock());
    launch_argmax_rows(logits_, T, rows_, true, nullptr, keys_, bad_, out_, s);
    copy_sync(host_out_, out_, (size_t)T * 4, cudaMemcpyDeviceToHost, s);
    bytes_back_ += (uint64_t)T * 4;
    for (int t = 0; t < T; ++t)
        if (host_out_[t] == LMT_ARGMAX_INVALID) return false;
    return true;
}

void DeviceHead::read_row(int t, float *out) {
    if (t < 0 || t >= max_tokens_) throw std::out_of_range("read_row: row " + std::to_string(t) + " not computed");
    copy_sync(out, logits_ + (size_t)t * rows_, (size_t)rows_ * 4, cudaMemcpyDeviceToHost,
              static_cast<cudaStream_t>(stream_));
    bytes_back_ += (uint64_t)rows_ * 4;
}

void DeviceHead::greedy(const std::vector<uint32_t> &excl_mask, int T, uint32_t *out) {
    const cudaStream_t s = static_cast<cudaStream_t>(stream_);
    const std::lock_guard<std::mutex> lock(selection_lock());  // released after the last copy_sync
    const uint32_t *mask = nullptr;
    if (!excl_mask.empty()) {
        LMT_CUDA_CHECK(cudaMemcpyAsync(mask_, excl_mask.data(), excl_mask.size() * 4, cudaMemcpyHostToDevice, s));
        mask = mask_;
    }
    if (!capped_) {
        // After run_tail(check_latch = false): one kernel checks the pre-cap logits (latch), caps
        // in registers and reduces; then the stored logits are capped for a later read_row.
        if (cap_ > 0.0f && T <= 1024) {
            launch_greedy_softcap_argmax(logits_, T, rows_, scale_, cap_, mask, keys_, bad_, out_, s);
            launch_softcap(logits_, (int64_t)T * rows_, scale_, cap_, true, s);
        } else {
            // No cap (scale only; an overflow to inf is still latched) or too many rows for the
            // one-launch kernel: cap first, then the latching reduction.
            if (cap_ > 0.0f) {
                launch_argmax_rows(logits_, T, rows_, true, nullptr, keys_, bad_, out_, s);
                copy_sync(host_out_, out_, (size_t)T * 4, cudaMemcpyDeviceToHost, s);
                bytes_back_ += (uint64_t)T * 4;
                bool bad = false;
                for (int t = 0; t < T; ++t) bad |= host_out_[t] == LMT_ARGMAX_INVALID;
                if (bad) {
                    std::fill(out, out + T, LMT_ARGMAX_INVALID);
                    return;
                }
            }
            launch_softcap(logits_, (int64_t)T * rows_, scale_, cap_, true, s);
            launch_argmax_rows(logits_, T, rows_, true, mask, keys_, bad_, out_, s);
        }
        capped_ = true;
    } else {
        launch_argmax_rows(logits_, T, rows_, true, mask, keys_, bad_, out_, s);
    }
    copy_sync(host_out_, out_, (size_t)T * 4, cudaMemcpyDeviceToHost, s);
    std::copy(host_out_, host_out_ + T, out);
    bytes_back_ += (uint64_t)T * 4;
}

void DeviceHead::topk(int T, int k, uint32_t *ids, float *vals) {
    const cudaStream_t s = static_cast<cudaStream_t>(stream_);
    const size_t need = topk_scratch_elems(T, rows_, k);
    if (need > top_scratch_elems_ || k * T > top_k_cap_) {
        if (top_scratch_) cudaFree(top_scratch_);
        if (ids_) cudaFree(ids_);
        if (vals_) cudaFree(vals_);
        LMT_CUDA_CHECK(cudaMalloc(&top_scratch_, need * 8));
        LMT_CUDA_CHECK(cudaMalloc(&ids_, (size_t)T * k * 4));
        LMT_CUDA_CHECK(cudaMalloc(&vals_, (size_t)T * k * 4));
        top_scratch_elems_ = need;
        top_k_cap_ = k * T;
    }
    const std::lock_guard<std::mutex> lock(selection_lock());
    launch_topk_rows(logits_, T, rows_, k, top_scratch_, ids_, vals_, s);
    LMT_CUDA_CHECK(cudaMemcpyAsync(ids, ids_, (size_t)T * k * 4, cudaMemcpyDeviceToHost, s));
    copy_sync(vals, vals_, (size_t)T * k * 4, cudaMemcpyDeviceToHost, s);
    bytes_back_ += (uint64_t)T * k * 8;
}

}  // namespace lmt::cuda
