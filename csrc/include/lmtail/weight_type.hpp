// Weight types of the LM head: one row per type. Values are ggml's type ids
// (gguf.GGMLQuantizationType), block sizes come from the per-type headers in lmtail/blocks/.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lmtail/kernel_abi.h"

namespace lmt {

enum class WeightType : int {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q8_0 = 8,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    BF16 = 30,
};

struct WeightTypeInfo {
    WeightType type;
    const char *name;     // ggml's name: "Q6_K", "BF16", ...
    int32_t block_elems;  // weights per block (cols must be a multiple)
    int32_t block_bytes;  // bytes per block
};

// Every type lmtail's core knows, in ggml id order. Which backend runs which type is the
// backends' capability table (lmt::cpu::type_supported, lmtail.capabilities()).
inline constexpr WeightTypeInfo kWeightTypes[] = {
    {WeightType::F32, "F32", LMT_F32_BLOCK_ELEMS, LMT_F32_BLOCK_BYTES},
    {WeightType::F16, "F16", LMT_F16_BLOCK_ELEMS, LMT_F16_BLOCK_BYTES},
    {WeightType::Q4_0, "Q4_0", LMT_Q4_0_BLOCK_ELEMS, LMT_Q4_0_BLOCK_BYTES},
    {WeightType::Q8_0, "Q8_0", LMT_Q8_0_BLOCK_ELEMS, LMT_Q8_0_BLOCK_BYTES},
    {WeightType::Q4_K, "Q4_K", LMT_QK_K, LMT_Q4K_BLOCK_BYTES},
    {WeightType::Q5_K, "Q5_K", LMT_QK_K, LMT_Q5K_BLOCK_BYTES},
    {WeightType::Q6_K, "Q6_K", LMT_QK_K, LMT_Q6K_BLOCK_BYTES},
    {WeightType::BF16, "BF16", LMT_BF16_BLOCK_ELEMS, LMT_BF16_BLOCK_BYTES},
};

// The row of `type`, or nullptr for a value lmtail does not know.
inline const WeightTypeInfo *weight_type_info(WeightType type) {
    for (const WeightTypeInfo &i : kWeightTypes)
        if (i.type == type) return &i;
    return nullptr;
}
// ggml's name ("Q5_K"); "unknown" for a value without a row.
const char *weight_type_name(WeightType type);

}  // namespace lmt
