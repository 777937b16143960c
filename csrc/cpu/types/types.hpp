// The CPU column of the weight-type table: what each type's directory csrc/cpu/types/<name>/
// provides. Adding a type = its block header (lmtail/blocks/<name>.h), its directory with a
// `const CpuTypeImpl kCpu<NAME>` row, one line in LMT_CPU_TYPES below and its name in
// LMTAIL_CPU_TYPES (CMakeLists.txt). Dispatch, argument checks and the capability table
// (lmtail.capabilities()) read these rows; nothing else names a type.
#pragma once

#include <cstdint>

#include "cpu/internal.hpp"
#include "lmtail/weight_type.hpp"

namespace lmt::cpu {

// A checked matvec call: cols is a positive multiple of the block, row_stride >= the row bytes,
// rows >= 1, T >= 1; isa is resolved (never Auto) and precision is one the type supports. With
// Precision::Ggml, isa is the ggml build to reproduce (cpu/ggml/ggml_isa.hpp), already checked
// against the row's ggml_builds and this CPU (matvec raises UnsupportedError otherwise).
struct MatvecCall {
    const uint8_t *w;
    int64_t rows, cols;
    size_t row_stride;
    const float *x;  // (T, cols)
    int64_t T;
    float *logits;   // (T, rows)
    int n_threads;
    Isa isa;  // a kernel family (kernel_family): never NeonDot, which arrives as Neon + dotprod
    Precision precision;
    bool dotprod = false;  // Isa::NeonDot resolved: a type's dotprod kernel may run instead of its NEON one
};

struct CpuTypeImpl {
    WeightType type;
    uint32_t precisions;          // bit (1 << (int)p) per supported Precision
    Precision default_precision;  // normwise error <= 1e-6 against float64
    void (*matvec)(const MatvecCall &);
    // src rows x cols (cols checked as above) -> dst rows x row_bytes.
    void (*quantize)(const float *src, uint8_t *dst, int64_t rows, int64_t cols, int n_threads);
    void (*dequantize)(const uint8_t *src, float *dst, int64_t rows, int64_t cols, int n_threads);
    // Precision::Ggml: bit (1 << (int)Isa) per ggml build whose bytes the type's ggml route
    // reproduces (cpu/ggml/ggml_isa.hpp: verified against that build of the oracle); "ggml" is
    // offered where this CPU's native ggml build is one of them. 0 without a ggml route.
    uint32_t ggml_builds = 0;
    const char *ggml_not_reproduced = nullptr;  // what the other builds do differently (for the error)
    // Precisions with an Isa::AvxVnni kernel of their own (bit per Precision); for the others
    // matvec() hands the type Isa::Avx2, so its dispatch never sees AvxVnni there.
    uint32_t avx_vnni_precisions = 0;
};

constexpr uint32_t precision_bit(Precision p) { return 1u << (int)p; }

// One line per type the CPU runs.
#define LMT_CPU_TYPES(X) \
    X(F32) \
    X(F16) \
    X(BF16) \
    X(Q4_0) \
    X(Q8_0) \
    X(Q4_K) \
    X(Q5_K) \
    X(Q6_K)

#define LMT_DECLARE_CPU_TYPE(NAME) extern const CpuTypeImpl kCpu##NAME;
LMT_CPU_TYPES(LMT_DECLARE_CPU_TYPE)
#undef LMT_DECLARE_CPU_TYPE

// The row of `type`, or nullptr when the CPU does not run it.
const CpuTypeImpl *cpu_type(WeightType type);

// Rows [0, rows) in tasks of rows_per_task over the pool: fn(r0, r1). The shared row split of
// every type's matvec (rows are split, never a dot product, so threads cannot change bytes).
template <typename Fn>
inline void for_row_tasks(int n_threads, int64_t rows, int64_t rows_per_task, Fn &&fn) {
    const int64_t n_tasks = (rows + rows_per_task - 1) / rows_per_task;
    core::parallel_for(n_threads, n_tasks, [&](int64_t task) {
        const int64_t r0 = task * rows_per_task;
        fn(r0, r0 + rows_per_task < rows ? r0 + rows_per_task : rows);
    });
}

}  // namespace lmt::cpu
