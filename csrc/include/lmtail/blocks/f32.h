// F32 weights (ggml type 0): one IEEE binary32 per weight, block of 1.
#pragma once

#include "lmtail/blocks/common.h"

#define LMT_F32_BLOCK_ELEMS 1
#define LMT_F32_BLOCK_BYTES 4
