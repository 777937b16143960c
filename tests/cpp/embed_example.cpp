// Embedding example: a tiny Q5_K head run through the C++ lmt::Head (norm -> head -> scale ->
// soft cap -> greedy / top-k / logits), then its fail-closed behaviour. Built against the
// installed package and run by tests/test_packaging.py
// (test_cpp_program_builds_against_installed_package), which checks every line it prints
// against lmtail.Head in Python: one implementation, the same bytes.
#include <lmtail/cpu.hpp>
#include <lmtail/head.hpp>

#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

int main() {
    const int64_t rows = 5, cols = 256;
    std::vector<float> w(rows * cols), gamma(cols), x(cols);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) w[r * cols + c] = 0.01f * (float)((r * 7 + c) % 13) * (r == 3 ? 2.0f : 1.0f);
    for (int64_t c = 0; c < cols; ++c) {
        gamma[c] = 1.0f + 0.125f * (float)(c % 4);
        x[c] = 0.5f * (float)(c % 7) - 1.0f;
    }
    std::vector<uint8_t> q(rows * (cols / 256) * LMT_Q5K_BLOCK_BYTES);
    lmt::cpu::quantize_q5_k(w.data(), q.data(), rows, cols);

    // The weight memory is used in place (keep it alive); gamma is copied.
    lmt::HeadOptions opt;
    opt.norm = lmt::NormKind::Rms;
    opt.gamma = gamma.data();
    opt.eps = 1e-5f;
    opt.logit_scale = 0.5f;
    opt.softcap = 20.0f;  // precision: the default, I24
    const lmt::Head head(q.data(), lmt::WeightType::Q5_K, rows, cols, q.size() / rows, opt);

    lmt::HeadWorkspace ws;  // one per thread; reused call after call
    uint32_t tok = 0;
    head.greedy(x.data(), 1, &tok, ws);
    std::printf("greedy %u\n", tok);
    const uint32_t excluded[] = {3};
    head.greedy(x.data(), 1, &tok, ws, excluded, 1);
    std::printf("greedy_excl %u\n", tok);
    uint32_t ids[3];
    float vals[3];
    head.topk(x.data(), 1, 3, ids, vals, ws);
    std::printf("topk %u %u %u\n", ids[0], ids[1], ids[2]);
    std::vector<float> logits(rows);
    head.logits(x.data(), 1, logits.data(), ws);
    std::printf("logits");
    for (float v : logits) {
        uint32_t b;
        std::memcpy(&b, &v, 4);
        std::printf(" %08x", b);
    }
    std::printf("\n");

    // Fail closed: a hidden state whose mean of squares overflows float (ggml would normalise it
    // to zeros and pick token 0) or that holds a NaN throws, and the output is left untouched.
    std::vector<float> huge(x);
    huge[7] = 1e21f;
    std::vector<float> kept(logits);
    try {
        head.logits(huge.data(), 1, logits.data(), ws);
    } catch (const lmt::NonFiniteError &e) {
        std::printf("overflow refused %s\n", std::memcmp(kept.data(), logits.data(), rows * 4) == 0 ? "untouched" : "CHANGED");
    }
    // Invalid construction: a weight type the CPU does not run (Q4_1), a negative soft cap.
    int refused = 0;
    try {
        lmt::Head bad(q.data(), static_cast<lmt::WeightType>(3), rows, cols, q.size() / rows, opt);
    } catch (const lmt::ArgumentError &) {
        ++refused;
    }
    try {
        lmt::HeadOptions neg = opt;
        neg.softcap = -1.0f;
        lmt::Head bad(q.data(), lmt::WeightType::Q5_K, rows, cols, q.size() / rows, neg);
    } catch (const lmt::ArgumentError &) {
        ++refused;
    }
    std::printf("error ok %d\n", refused);

    // One Head, four threads, each with its own workspace: every thread gets the same token.
    std::vector<uint32_t> got(4, 0xFFFFFFFFu);
    std::vector<std::thread> pool;
    for (int i = 0; i < 4; ++i)
        pool.emplace_back([&, i] {
            lmt::HeadWorkspace mine;
            for (int rep = 0; rep < 50; ++rep) head.greedy(x.data(), 1, &got[(size_t)i], mine);
        });
    for (auto &t : pool) t.join();
    bool same = true;
    for (uint32_t g : got) same = same && g == got[0];
    std::printf("threads %s %u\n", same ? "agree" : "DISAGREE", got[0]);
    return 0;
}
