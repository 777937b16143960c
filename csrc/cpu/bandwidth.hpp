// Read-bandwidth probe of the benchmarks (`lmtail bench`, bench/bench_head.py): internal, not
// installed. It is a measuring tool, not a kernel, so it stays out of the public lmtail/cpu.hpp;
// Python reaches it as lmtail._core.read_bytes_checksum.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lmt::cpu {

// Sum of the `bytes` bytes at p (64-bit words, then the tail bytes), read once with `n_threads`
// threads (<= 0: default_threads()) over contiguous 256 KB ranges, like the matvec's row streams.
uint64_t read_bytes_checksum(const uint8_t *p, size_t bytes, int n_threads = 0);

}  // namespace lmt::cpu
