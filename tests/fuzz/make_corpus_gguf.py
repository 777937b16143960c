"""Regenerate the committed seed corpus of the GGUF fuzz target (tests/fuzz/corpus/gguf/).

    python tests/fuzz/make_corpus_gguf.py

Small files (< 64 KB each) that load, built with tests/_gguf_util.py: tiny heads of several
architectures (untied, tied, soft-capped, scaled, LayerNorm, f16/bf16 norms), vocab-only files
(SPM with byte and control tokens, byte-level BPE) and a hand-assembled file holding every GGUF
value type, nested arrays and a version-2 header.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import _gguf_util as gu  # noqa: E402
from _gguf_util import KV, f32, head_model, u32  # noqa: E402

OUT = HERE / "corpus" / "gguf"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for p in OUT.iterdir():
        p.unlink()
    head_model(OUT / "head_llama.gguf", "llama", rows=16, cols=256)
    head_model(OUT / "head_llama_f16norm.gguf", "llama", rows=8, cols=512, norm="f16", seed=1)
    head_model(OUT / "head_qwen3_bf16norm.gguf", "qwen3", rows=8, cols=256, norm="bf16", seed=2)
    head_model(OUT / "head_gemma2_tied_cap.gguf", "gemma2", rows=12, cols=256, head="tied",
               kv={"gemma2.final_logit_softcapping": f32(30.0)}, seed=3)
    head_model(OUT / "head_granite_scale.gguf", "granite", rows=8, cols=256, kv={"granite.logit_scale": f32(8.0)},
               seed=4)
    head_model(OUT / "head_command_r_layernorm.gguf", "command-r", rows=8, cols=256, head="tied", eps=None,
               kv={"command-r.attention.layer_norm_epsilon": f32(1e-5), "command-r.logit_scale": f32(0.0625)},
               seed=5)
    head_model(OUT / "head_unknown_arch.gguf", "myarch", rows=8, cols=256, kv={"myarch.logit_scale": f32(0.5)},
               vocab=False, seed=6)
    gu.minimal_raw_head(rows=4, cols=256).write(OUT / "head_raw_minimal.gguf")
    # Other head types (issue 14): a Q8_0 head of hidden size 640 (not a multiple of 256), a tied BF16
    # head, and a Q3_K head (a real ggml type lmtail does not run: UnsupportedError).
    head_model(OUT / "head_llama_q8_0_640.gguf", "llama", rows=8, cols=640, head_type=gu.HEAD_TYPES["Q8_0"][0], seed=7)
    head_model(OUT / "head_gemma2_tied_bf16.gguf", "gemma2", rows=8, cols=96, head="tied",
               head_type=gu.HEAD_TYPES["BF16"][0], seed=8)
    head_model(OUT / "head_llama_q3_k_refused.gguf", "llama", rows=4, cols=256, head_type=gu.OTHER_TYPES["Q3_K"][0],
               seed=9)

    spm = ["<unk>", "<s>", "</s>", "<0x0A>", "<0x41>", "\u2581the", "\u2581a", "b", "<|im_end|>", "<|eot_id|>"]
    gu.write_gguf(OUT / "vocab_spm.gguf", "llama",
                  gu.vocab_kv(spm, model="llama", types=[2, 3, 3, 6, 6, 1, 1, 1, 4, 3], eos=2, eot=9))
    bpe = ["!", "\u0120the", "\u0120a", "\u010a", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "\u00e9", "x"]
    kv = gu.vocab_kv(bpe, model="gpt2", types=[1, 1, 1, 1, 3, 3, 3, 1, 5], eos=4)
    kv["tokenizer.ggml.pre"] = "qwen2"
    kv["tokenizer.ggml.eog_token_ids"] = KV([4, 6], "ARRAY", "INT32")
    gu.write_gguf(OUT / "vocab_bpe.gguf", "qwen2", kv)

    # Every value type, a nested array, a tensor of each float type: by hand, version 2.
    r = gu.RawGGUF(version=2)
    r.kv("general.architecture", 8, "llama")
    for name, vt, v in (("u8", 0, 200), ("i8", 1, -3), ("u16", 2, 60000), ("i16", 3, -2), ("u32", 4, 1 << 31),
                        ("i32", 5, -7), ("f32", 6, 1.5), ("bool", 7, 1), ("u64", 10, 1 << 40), ("i64", 11, -(1 << 40)),
                        ("f64", 12, 2.5)):
        r.kv(f"test.{name}", vt, v)
    r.kv("test.str", 8, "h\u00e9llo")
    r.kv("test.arr_f32", 9, [1.0, 2.0], 6)
    r.kv("test.arr_str", 9, ["a", "", "c"], 8)
    r.kv("test.nested", 9, [(5, [1, 2]), (8, ["x"])], 9)
    r.kv("llama.attention.layer_norm_rms_epsilon", 6, 1e-6)
    norm = np.ones(256, np.float32).tobytes()
    r.tensor("output_norm.weight", [256], gu.F32, 0)
    r.tensor("extra.f16", [4, 2], gu.F16, 1024)
    r.data = norm + bytes(16)
    r.write(OUT / "raw_all_types_v2.gguf")

    total = 0
    for p in sorted(OUT.iterdir()):
        n = p.stat().st_size
        assert n < 64 * 1024, (p, n)
        total += n
        print(f"{p.name}: {n} bytes")
    assert total < 1 << 20
    print(f"total {total} bytes")


if __name__ == "__main__":
    main()
