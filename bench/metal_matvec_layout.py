"""Memory-access model of metal/matvec.metal, and the paper estimate per type for Apple M-series.

    python bench/metal_matvec_layout.py [--rows 202048] [--cols 6656]

metal-emu runs the kernels as C++ on raw pointers and cannot trace loads, so this replays the
kernel's lane -> byte mapping instead: lane l of a SIMD-group owns the 8-weight slices
l, l + 32, ... of its row (one pass = 256 weights), and each type's lmt_mv_slice reads the bytes
listed below (the block layouts of csrc/include/lmtail/blocks/*.h). Per pass it reports the
bytes the SIMD-group touches, their span, the 128-byte lines one load instruction (the same
load site in all 32 lanes) touches, and how often a byte is loaded by more than one lane (L1
hits, not DRAM traffic). The estimate is bytes per token (the weights; x and y are < 0.1%)
against each chip's bandwidth.
"""

from __future__ import annotations

import argparse

# name -> (block elems, block bytes)
TYPES = {"Q6_K": (256, 210), "Q8_0": (32, 34), "Q4_0": (32, 18), "Q4_K": (256, 144), "Q5_K": (256, 176),
         "F16": (1, 2), "BF16": (1, 2), "F32": (1, 4)}  # fmt: skip
LINE = 128


def slice_sites(t: str, i0: int) -> list[list[int]]:
    """Byte offsets in the row read for weights [i0, i0 + 8): one list per load site."""
    be, bb = TYPES[t]
    if be == 1:
        return [[i0 * bb + e * bb + k for k in range(bb)] for e in range(8)]
    b, i = divmod(i0, be)
    base = b * bb
    if t == "Q8_0":
        return [[base, base + 1]] + [[base + 2 + i + e] for e in range(8)]
    if t == "Q4_0":
        q = i if i < 16 else i - 16
        return [[base, base + 1]] + [[base + 2 + q + e] for e in range(8)]
    if t == "Q6_K":
        h, r = divmod(i, 128)
        quarter, l0 = r // 32, r % 32
        ql = base + 64 * h + l0 + (32 if quarter & 1 else 0)
        qh = base + 128 + 32 * h + l0
        return ([[base + 208, base + 209], [base + 192 + i // 16]] + [[ql + e] for e in range(8)]
                + [[qh + e] for e in range(8)])
    # Q4_K / Q5_K: d, dmin, the 6-bit scale and min of sub-block j, qs (and Q5_K's qh)
    j = i // 32
    sc = [j, j + 4] if j < 4 else [j + 4, j - 4, j]
    qs_off = 16 if t == "Q4_K" else 48
    g, l0 = i // 64, i % 32
    sites = [[base, base + 1, base + 2, base + 3], [base + 4 + s for s in sc]]
    sites += [[base + qs_off + 32 * g + l0 + e] for e in range(8)]
    if t == "Q5_K":
        sites += [[base + 16 + l0 + e] for e in range(8)]
    return sites


def model(t: str, cols: int, row_offset: int) -> dict:
    be, bb = TYPES[t]
    row_bytes = cols // be * bb
    passes = -(-cols // 256)
    touched_total, loads_total, max_lines_site, lines_total = 0, 0, 0, 0
    for p in range(passes):
        per_lane = [slice_sites(t, 8 * (32 * p + lane)) for lane in range(32) if 8 * (32 * p + lane) < cols]
        touched = {row_offset + o for sites in per_lane for s in sites for o in s}
        touched_total += len(touched)
        loads_total += sum(len(s) for sites in per_lane for s in sites)
        lines_total += len({o // LINE for o in touched})
        for k in range(len(per_lane[0])):
            lines = {(row_offset + o) // LINE for sites in per_lane for o in sites[k]}
            max_lines_site = max(max_lines_site, len(lines))
    return dict(row_bytes=row_bytes, row_lines=len({(row_offset + o) // LINE for o in range(row_bytes)}), passes=passes, bytes_per_pass=touched_total / passes,
                reload=loads_total / touched_total, lines_per_pass=lines_total / passes,
                line_use=touched_total / (lines_total * LINE), max_lines_per_load=max_lines_site,
                covered=touched_total == row_bytes)


CHIPS = [("M1", 68.25), ("M1 Pro / M2 Pro", 200), ("M3 Pro", 150), ("M4 Pro", 273), ("M1/M2/M3 Max", 400),
         ("M4 Max", 546), ("M1/M2 Ultra", 800), ("M3 Ultra", 819)]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=202048)
    ap.add_argument("--cols", type=int, default=6656)
    ap.add_argument("--efficiency", type=float, default=0.85, help="fraction of the bandwidth assumed")
    a = ap.parse_args()
    print(f"access model, cols {a.cols} (a row at a 128-byte boundary / at +32: GGUF's alignment)")
    print("line use: bytes the pass uses / bytes of the lines it touches (the rest of a shared line is the")
    print("next pass's, an L1 hit); row line use: row bytes / lines of the row, mean over the row start")
    print("offsets a tensor of these rows has (every row at r * row_bytes)")
    print("type   row B  B/pass  lines/pass  line use  max lines/load  lane reloads  row line use  covers row")
    for t in TYPES:
        m0, m32 = model(t, a.cols, 0), model(t, a.cols, 32)
        offs = sorted({(r * m0["row_bytes"]) % LINE for r in range(LINE)})
        use = sum(m0["row_bytes"] / (len({(o + b) // LINE for b in range(m0["row_bytes"])}) * LINE) for o in offs) / len(offs)
        print(f"{t:5s} {m0['row_bytes']:6d} {m0['bytes_per_pass']:7.1f} {m0['lines_per_pass']:5.2f}/{m32['lines_per_pass']:.2f}"
              f"   {m0['line_use']:.2f}/{m32['line_use']:.2f}   {m0['max_lines_per_load']:d}/{m32['max_lines_per_load']:d}"
              f"            {m0['reload']:.2f}         {use:.3f}        {m0['covered']}")
    print(f"\npaper estimate, {a.rows} x {a.cols}, T = 1: ms at 100% of the bandwidth / at {a.efficiency:.0%}")
    print("type   GB/token  " + "  ".join(f"{c:>15s}" for c, _ in CHIPS))
    for t in TYPES:
        gb = a.rows * model(t, a.cols, 0)["row_bytes"] / 1e9
        cells = [f"{gb / bw * 1e3:6.2f}/{gb / (bw * a.efficiency) * 1e3:6.2f}" for _, bw in CHIPS]
        print(f"{t:5s} {gb:8.3f}  " + "  ".join(f"{c:>15s}" for c in cells))


if __name__ == "__main__":
    main()
