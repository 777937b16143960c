// Embedding example: quantise a tiny head, run the tail, print greedy and top-3 ids.
#include <lmtail/cpu.hpp>

#include <cstdio>
#include <vector>

int main() {
    const int64_t rows = 5, cols = 256;
    std::vector<float> w(rows * cols), x(cols, 1.0f);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) w[r * cols + c] = 0.01f * (float)((r * 7 + c) % 13) * (r == 3 ? 2.0f : 1.0f);
    std::vector<uint8_t> q(rows * (cols / 256) * LMT_Q5K_BLOCK_BYTES);
    lmt::cpu::quantize_q5_k(w.data(), q.data(), rows, cols);
    std::vector<float> normed(cols), logits(rows);
    lmt::cpu::rms_norm(x.data(), nullptr, normed.data(), 1, cols, 1e-5f);
    lmt::cpu::matvec_q5_k(q.data(), rows, cols, q.size() / rows, normed.data(), 1, logits.data());
    lmt::cpu::softcap(logits.data(), rows, 0.5f, 20.0f, /*four_pass=*/true);
    const uint32_t excluded[] = {3};
    std::printf("greedy %u\n", lmt::cpu::greedy_argmax(logits.data(), rows, nullptr, 0));
    std::printf("greedy_excl %u\n", lmt::cpu::greedy_argmax(logits.data(), rows, excluded, 1));
    uint32_t ids[3];
    float vals[3];
    lmt::cpu::topk(logits.data(), rows, 3, ids, vals);
    std::printf("topk %u %u %u\n", ids[0], ids[1], ids[2]);
    try {
        lmt::cpu::topk(logits.data(), rows, 9, ids, vals);
    } catch (const lmt::ArgumentError &e) {
        std::printf("error ok\n");
    }
    return 0;
}
