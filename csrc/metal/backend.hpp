// lmtail Metal backend: the LM-head tail on a Metal device through metal-cpp.
//
// This header is free of Metal types so that the Python bindings include it without metal-cpp.
// The same sources build twice: against Apple's metal-cpp (namespace lmt::metal, backend
// "metal") and against the CPU emulator in csrc/emu (namespace lmt::metal_emu, backend
// "metal-emu"); LMT_METAL_NS selects the namespace.
//
// Every op copies its small inputs into shared buffers (the head weights are wrapped without a
// copy), encodes one concurrent compute encoder with a memoryBarrier(resources) between every
// dependent pair of dispatches, commits and waits; the matvec can hand its logits buffer to the
// caller (matvec_shared: a numpy view of contents(), no copy out).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lmtail/weight_type.hpp"

#ifndef LMT_METAL_NS
#define LMT_METAL_NS metal_emu
#endif

// Test hooks (planted bugs: barriers removed, a NaN written into the logits, raw dispatches)
// exist only with LMTAIL_METAL_TESTING, which only CMake's test-only target
// _lmtail_testing (LMTAIL_TESTING=ON, tests/_metal_testing.py) defines, and only on top of the
// emulator: the shipped host code -- backend "metal" and backend "metal-emu" -- has none.
#if defined(LMTAIL_METAL_TESTING) && !defined(LMTAIL_METAL_EMU)
#error "LMTAIL_METAL_TESTING: the test hooks exist only in the emulator build"
#endif

namespace lmt::LMT_METAL_NS {

// Named barriers of the encoders, so the test build can remove one (a planted bug) and watch
// the emulator's hazard checker catch it; in the shipped builds every barrier is always encoded.
enum Barrier : uint32_t {
    kBarrierNormHead = 1u << 0,     // rms_norm -> head
    kBarrierHeadScale = 1u << 1,    // head -> x*scale
    kBarrierSoftcapInv = 1u << 2,   // x*scale -> x*(1/cap)
    kBarrierSoftcapTanh = 1u << 3,  // x*(1/cap) -> tanh
    kBarrierSoftcapCap = 1u << 4,   // tanh -> x*cap
    kBarrierCapArgmax = 1u << 5,    // last logits write -> argmax phase 1
    kBarrierArgmaxPhases = 1u << 6, // phase 1 -> phase 2 (partials)
    kBarrierDebugPlant = 1u << 7,   // (test build) planted NaN -> its neighbours
};

#if defined(LMTAIL_METAL_TESTING)
const std::vector<std::pair<std::string, uint32_t>> &barrier_names();
struct Debug {
    uint32_t skip_barriers = 0;  // mask of Barrier
    int64_t plant_nan = -1;      // head graph: write NaN into logits[plant_nan] after the head
};
Debug &debug();
#endif

// Device name, and where the kernels come from; both read when the device context is first
// created. The metallib at `path` when that file exists; otherwise, when a source directory is
// set (development: a checkout whose metallib was not built), every kernels_dir/*.metal compiled
// at run time (one library per file, fast math off, `#include "lmtail/..."` inlined from
// include_dir since a library built from a string has no include path). The emulator runs the
// kernels compiled into this binary either way; from source it offers only the kernels the
// source declares.
std::string device_name();
void set_library_path(const std::string &path);
void set_source_dir(const std::string &kernels_dir, const std::string &include_dir);
// Where the context's kernels came from: "metallib:<path>" or "source:<n> files from <dir>".
std::string library_origin();

void rms_norm(const float *x, const float *gamma, float *y, int64_t n_rows, int64_t cols, float eps);
// The weight types the matvec (and the head graph) run: one row each in csrc/metal/matvec.cpp.
std::vector<WeightType> matvec_types();
// Bytes of one row of `cols` weights of `type`: UnsupportedError for a type without a Metal
// kernel, ArgumentError naming the block for cols that are not a multiple of it.
size_t matvec_row_bytes(WeightType type, int64_t cols);
// logits (T x rows) = W x^T in f32 for W of `type` (rows of row_stride bytes; cols a multiple of
// the type's block); UnsupportedError for a type without a Metal kernel.
void matvec(WeightType type, const uint8_t *w, int64_t rows, int64_t cols, size_t row_stride, const float *x,
            int64_t T, float *logits);
// The same matvec, the logits left in the shared buffer it was computed in (zero-copy): `data`
// points at its contents (T x rows floats), `keep` owns the buffer (the last owner releases it).
struct SharedFloats {
    float *data = nullptr;
    std::shared_ptr<void> keep;
};
SharedFloats matvec_shared(WeightType type, const uint8_t *w, int64_t rows, int64_t cols, size_t row_stride,
                           const float *x, int64_t T);
void scale(float *x, int64_t n, float s);
void tanh(float *x, int64_t n);
void softcap(float *x, int64_t n, float s, float cap, bool four_pass);
// precision="ggml": llama.cpp's own kernels from the library at `library` (a metallib; metal-emu:
// a shared object translated from llama.cpp's sources by lmtail._ggml_metal). csrc/metal/ggml.cpp.
std::vector<std::string> ggml_kernel_names();
void ggml_softcap(const std::string &library, float *x, int64_t n, float s, float cap);
void ggml_matvec(const std::string &library, WeightType type, const uint8_t *w, int64_t rows, int64_t cols,
                 size_t row_stride, const float *x, int64_t T, float *out);
void argmax_rows(const float *x, int64_t n_rows, int64_t n, uint32_t *out);

void greedy_argmax_rows(const float *x, int64_t n_rows, int64_t n, const uint32_t *excluded, int64_t n_excluded,
                        uint32_t *out);
void topk_rows(const float *x, int64_t n_rows, int64_t n, int64_t k, uint32_t *ids, float *values);

// The whole tail as one graph in one concurrent encoder:
//   norm -> head (any matvec_types() type) -> x*scale -> x*(1/cap) -> tanh -> x*cap -> greedy phase 1 -> phase 2
// Route A: the capped logits stay in a shared buffer (copied to `logits` when non-null).
// Route B: the 4-byte result slot per row stays on the device; `result` receives its raw
// value. Unless `raw`, 0xFFFFFFFF raises NonFiniteError and any other value >= rows raises too.
// When `embed` is non-null, a get_rows dispatch gathers embed[result] (rows x embed_dim) into
// `embed_out` on the device, reading the token id from the result slot (the next step's input).
struct HeadArgs {
    WeightType type = WeightType::Q5_K;
    const uint8_t *w = nullptr;
    int64_t rows = 0, cols = 0;
    size_t row_stride = 0;
    const float *gamma = nullptr;  // null: no norm
    const float *hidden = nullptr;
    int64_t T = 1;
    float eps = 1e-5f, scale = 1.0f, cap = 0.0f;
    const uint32_t *excluded = nullptr;
    int64_t n_excluded = 0;
    const float *embed = nullptr;
    int64_t embed_rows = 0, embed_dim = 0;
};
// Zero-copy host view of a shared buffer's contents(): `owner` keeps the buffer alive.
struct SharedView {
    std::shared_ptr<void> owner;
    void *data = nullptr;
};
// `logits_view` (optional) receives the retained logits buffer itself, published only when the
// result checks pass (a failing call never hands out its logits); each call has its own buffer.
void head_greedy(const HeadArgs &a, float *logits, uint32_t *result, float *embed_out, bool raw,
                 SharedView *logits_view = nullptr);

// precision="ggml" head: [lmtail's rms_norm ->] llama.cpp's kernel_mul_mv[_ext] -> its scale and four
// cap nodes, one concurrent encoder with a barrier between dependent nodes (ggml.cpp). Uses a.type,
// w, rows, cols, row_stride, gamma, hidden, T, eps, scale, cap. Returns -1 and fills `logits`
// (T x rows) when every pre-cap logit is finite, else the index of the first non-finite one
// (`logits` untouched).
int64_t ggml_head(const std::string &library, const HeadArgs &a, float *logits);

#if defined(LMTAIL_METAL_TESTING)
// A raw dispatch for tests: bind host arrays (copied in, copied back when `write_back`) or bytes.
struct RawArg {
    int index;
    void *data;
    size_t bytes;
    bool is_bytes;
    bool write_back;
};
void dispatch_raw(const std::string &kernel, const uint32_t groups[3], const uint32_t threads[3],
                  const std::vector<RawArg> &args);
#endif

}  // namespace lmt::LMT_METAL_NS
