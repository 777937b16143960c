// What both ggml anchors (ggml_anchor.cu, ggml_types.cu) use: CK (a CUDA call or exit 3) and
// GGraph (one ggml graph: its own context, the graph of f's output and a compute buffer on the
// backend, all freed with the object).
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <functional>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"

#define CK(expr)                                                                                          \
    do {                                                                                                  \
        cudaError_t e_ = (expr);                                                                          \
        if (e_ != cudaSuccess) {                                                                          \
            std::fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
            std::exit(3);                                                                                 \
        }                                                                                                 \
    } while (0)

struct GGraph {
    ggml_context *ctx = nullptr;
    ggml_cgraph *gf = nullptr;
    ggml_gallocr_t ga = nullptr;
    ggml_tensor *out = nullptr;
    GGraph(ggml_backend_t be, const std::function<ggml_tensor *(ggml_context *)> &f) {
        ggml_init_params p = {ggml_tensor_overhead() * 64 + ggml_graph_overhead(), nullptr, true};
        ctx = ggml_init(p);
        out = f(ctx);
        gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, out);
        ga = ggml_gallocr_new(ggml_backend_get_default_buffer_type(be));
        if (!ggml_gallocr_alloc_graph(ga, gf)) {
            std::fprintf(stderr, "ggml_gallocr_alloc_graph failed\n");
            std::exit(3);
        }
    }
    GGraph(const GGraph &) = delete;
    GGraph &operator=(const GGraph &) = delete;
    ~GGraph() {
        ggml_gallocr_free(ga);
        ggml_free(ctx);
    }
};
