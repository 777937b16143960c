// F16 weights (ggml type 1): one IEEE binary16 per weight, block of 1. Converting to float is
// exact, so the weight lmtail multiplies is the stored weight.
#pragma once

#include "lmtail/blocks/common.h"

#define LMT_F16_BLOCK_ELEMS 1
#define LMT_F16_BLOCK_BYTES 2
