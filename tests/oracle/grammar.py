"""llama.cpp's grammar sampler as a differential-test oracle (llama-cpp-python's ctypes API).

Every entry point runs in a forked child (``vocab._isolated``): llama.cpp aborts the process on
some inputs (GGML_ASSERT, ``GGML_ABORT`` when an EOG token is accepted without a complete parse)
and can grow stacks without bound on hidden left recursion.  A child that runs longer than
``timeout`` seconds is killed and reported as :class:`OracleLoadError`.
"""

from __future__ import annotations

import ctypes
import os
import signal

import numpy as np

from .vocab import OracleLoadError, Vocab, _isolated, _llama_cpp  # noqa: F401

_TD = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])


def _with_alarm(timeout: float, fn, *args):
    def handler(signum, frame):  # in the child: give up loudly
        os._exit(3)

    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


class _Sampler:
    def __init__(self, v: Vocab, grammar: bytes, root: bytes):
        lc = v._lc
        self.lc = lc
        self.v = v
        self.smpl = lc.llama_sampler_init_grammar(v._vocab, grammar, root)
        self.n = v.n_tokens
        self.arr = np.zeros(self.n, dtype=_TD)
        self.ids = np.arange(self.n, dtype=np.int32)

    def ok(self) -> bool:
        return bool(self.smpl)

    def mask(self) -> np.ndarray:
        a = self.arr
        a["id"] = self.ids
        a["logit"] = 0.0
        a["p"] = 0.0
        lc = self.lc
        data = a.ctypes.data_as(ctypes.POINTER(lc.llama_token_data))
        cur = lc.llama_token_data_array(data, self.n, -1, False)
        lc.llama_sampler_apply(self.smpl, ctypes.byref(cur))
        return np.isfinite(a["logit"])

    def allows(self, tokens) -> np.ndarray:
        a = np.zeros(len(tokens), dtype=_TD)
        a["id"] = tokens
        lc = self.lc
        data = a.ctypes.data_as(ctypes.POINTER(lc.llama_token_data))
        cur = lc.llama_token_data_array(data, len(tokens), -1, False)
        lc.llama_sampler_apply(self.smpl, ctypes.byref(cur))
        return np.isfinite(a["logit"])

    def accept(self, t: int) -> None:
        self.lc.llama_sampler_accept(self.smpl, int(t))

    def free(self) -> None:
        if self.smpl:
            self.lc.llama_sampler_free(self.smpl)
            self.smpl = None


def _parse_ok(path: str, grammar: bytes, root: bytes) -> bool:
    with Vocab(path) as v:
        s = _Sampler(v, grammar, root)
        ok = s.ok()
        s.free()
        return ok


def parse_ok(vocab_path, grammar: str | bytes, root: str = "root", timeout: float = 20.0) -> bool:
    """Does ``llama_sampler_init_grammar`` build a sampler (non-NULL) for this grammar?"""
    g = grammar.encode() if isinstance(grammar, str) else grammar
    return _isolated(_with_alarm, timeout, _parse_ok, os.fspath(vocab_path), g, root.encode())


def _pieces(path: str) -> list[bytes]:
    with Vocab(path) as v:
        return _pieces_inproc(v)


def pieces(vocab_path) -> list[bytes]:
    """``llama_token_to_piece(vocab, t, special=true, lstrip=0)`` for every token."""
    return _isolated(_pieces, os.fspath(vocab_path))


def _tokenize(path: str, text: bytes) -> list[int]:
    with Vocab(path) as v:
        lc = v._lc
        n_max = len(text) + 16
        arr = (ctypes.c_int * n_max)()
        n = lc.llama_tokenize(v._vocab, text, len(text), arr, n_max, False, False)
        return list(arr[: max(n, 0)])


def tokenize(vocab_path, text: str | bytes) -> list[int]:
    t = text.encode() if isinstance(text, str) else text
    return _isolated(_tokenize, os.fspath(vocab_path), t)


def _run_stream(v: Vocab, s: _Sampler, forced, n_random: int, seed: int, lens, eog):
    """Force ``forced`` while llama.cpp allows it, then draw allowed non-EOG tokens at random."""
    rng = np.random.default_rng(seed)
    masks, toks = [], []
    forced = list(forced)
    i = 0
    n_rand = 0
    while True:
        m = s.mask()
        masks.append(np.packbits(m))
        t = None
        if i < len(forced) and m[forced[i]]:
            t = forced[i]
            i += 1
        else:
            i = len(forced)
            if n_rand >= n_random:
                break
            cand = np.flatnonzero(m & ~eog)
            if cand.size == 0:
                break
            r = rng.random()
            L = lens[cand]
            if r < 0.35:  # short tokens: structure (quotes, brackets, operators)
                sub = cand[L <= 2]
            elif r < 0.7:  # long tokens: many code points, partial UTF-8 tails
                sub = cand[L >= np.sort(L)[-min(len(L), 20)]]
            else:
                sub = cand
            t = int(rng.choice(sub if sub.size else cand))
            n_rand += 1
        s.accept(int(t))
        toks.append(int(t))
    return toks, masks


def _streams(path: str, jobs):
    with Vocab(path) as v:
        lens = np.array([len(p) for p in _pieces_inproc(v)])
        eog = np.zeros(v.n_tokens, bool)
        eog[list(v.eog_ids())] = True
        out = []
        for grammar, root, specs in jobs:
            res = []
            for text, n_random, seed in specs:
                s = _Sampler(v, grammar, root)
                if not s.ok():
                    raise RuntimeError("llama_sampler_init_grammar returned NULL")
                forced = _tokenize_inproc(v, text) if text else []
                res.append(_run_stream(v, s, forced, n_random, seed, lens, eog))
                s.free()
            out.append(res)
        return out


def _tokenize_inproc(v: Vocab, text: bytes) -> list[int]:
    lc = v._lc
    n_max = len(text) + 16
    arr = (ctypes.c_int * n_max)()
    n = lc.llama_tokenize(v._vocab, text, len(text), arr, n_max, False, False)
    return list(arr[: max(n, 0)])


def mask_streams(vocab_path, jobs, timeout: float = 300.0):
    """Full llama.cpp masks along token streams, many grammars in one child process.

    ``jobs``: ``[(grammar, root, [(text, n_random, seed), ...]), ...]``.  Each stream tokenizes
    ``text`` with llama.cpp (no special tokens), forces those tokens while the grammar allows them,
    then draws ``n_random`` allowed non-EOG tokens (a mix of short, long and uniform picks).
    Returns, per job, a list of ``(tokens, masks)``; ``masks[i]`` (np.packbits) is the mask before
    ``tokens[i]``, plus one after the last token.
    """
    enc = [
        (g.encode() if isinstance(g, str) else g, root.encode(),
         [((t.encode() if isinstance(t, str) else t), n, seed) for t, n, seed in specs])
        for g, root, specs in jobs
    ]  # fmt: skip
    return _isolated(_with_alarm, timeout, _streams, os.fspath(vocab_path), enc)


def _pieces_inproc(v: Vocab) -> list[bytes]:
    """``llama_token_to_piece(vocab, t, special=true, lstrip=0)`` for every token (a piece longer
    than the 4 KiB buffer is read again into one of its size)."""
    lc = v._lc
    buf = ctypes.create_string_buffer(4096)
    out = []
    for t in range(v.n_tokens):
        n = lc.llama_token_to_piece(v._vocab, t, buf, 4096, 0, True)
        if n < 0:
            big = ctypes.create_string_buffer(-n)
            n = lc.llama_token_to_piece(v._vocab, t, big, -n, 0, True)
            out.append(big.raw[:n])
        else:
            out.append(buf.raw[:n])
    return out


def _parse_ok_many(path: str, grammars: list[bytes], root: bytes) -> list[bool]:
    with Vocab(path) as v:
        out = []
        for g in grammars:
            s = _Sampler(v, g, root)
            out.append(s.ok())
            s.free()
        return out


def parse_ok_many(vocab_path, grammars, root: str = "root", timeout: float = 60.0) -> list[bool]:
    """``parse_ok`` for many grammars in one child (none of them may hang llama.cpp)."""
    gs = [g.encode() if isinstance(g, str) else g for g in grammars]
    return _isolated(_with_alarm, timeout, _parse_ok_many, os.fspath(vocab_path), gs, root.encode())


def _pieces_and_eog(path: str):
    with Vocab(path) as v:
        return _pieces_inproc(v), v.eog_ids()


def pieces_and_eog(vocab_path) -> tuple[list[bytes], tuple[int, ...]]:
    """Every token's ``token_to_piece(special=true)`` and the EOG ids, from one load."""
    return _isolated(_pieces_and_eog, os.fspath(vocab_path))


def _time_stream(path: str, grammar: bytes, root: bytes, text: bytes, reps_init: int):
    import time as _time

    with Vocab(path) as v:
        lc = v._lc
        init = []
        for _ in range(reps_init):
            t0 = _time.perf_counter()
            s = lc.llama_sampler_init_grammar(v._vocab, grammar, root)
            init.append(_time.perf_counter() - t0)
            lc.llama_sampler_free(s)
        toks = _tokenize_inproc(v, text)
        s = _Sampler(v, grammar, root)
        one = np.zeros(1, dtype=_TD)
        one_p = lc.llama_token_data_array(one.ctypes.data_as(ctypes.POINTER(lc.llama_token_data)), 1, -1, False)
        arr = s.arr
        full_p = lc.llama_token_data_array(arr.ctypes.data_as(ctypes.POINTER(lc.llama_token_data)), s.n, -1, False)
        check, full, used = [], [], []
        for t in toks:
            arr["id"] = s.ids
            arr["logit"] = 0.0
            full_p.size = s.n
            t0 = _time.perf_counter()
            lc.llama_sampler_apply(s.smpl, ctypes.byref(full_p))
            full.append(_time.perf_counter() - t0)
            if not np.isfinite(arr["logit"][t]):
                break
            one["id"] = t
            one["logit"] = 0.0
            one_p.size = 1
            t0 = _time.perf_counter()
            lc.llama_sampler_apply(s.smpl, ctypes.byref(one_p))
            check.append(_time.perf_counter() - t0)
            s.accept(t)
            used.append(t)
        s.free()
        return used, init, check, full


def time_stream(vocab_path, grammar, text, root: str = "root", reps_init: int = 50, timeout: float = 300.0):
    """llama.cpp timings along ``text`` tokenized by llama.cpp: (tokens, init s, check s, full mask s).

    ``check``: ``llama_sampler_apply`` on a one-element array holding the next token (llama-server's
    check of a sampled token); ``full``: ``llama_sampler_apply`` over the whole vocabulary.
    """
    g = grammar.encode() if isinstance(grammar, str) else grammar
    t = text.encode() if isinstance(text, str) else text
    return _isolated(_with_alarm, timeout, _time_stream, os.fspath(vocab_path), g, root.encode(), t, reps_init)


def _common_run(path: str, grammar: bytes, chain_spec, n_steps: int, logits_seed: int, scale: float, grammar_first: bool):
    with Vocab(path) as v:
        lc = v._lc
        n = v.n_tokens
        chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
        for name, *args in chain_spec:
            if name == "top_k":
                s = lc.llama_sampler_init_top_k(int(args[0]))
            elif name == "top_p":
                s = lc.llama_sampler_init_top_p(float(args[0]), int(args[1]) if len(args) > 1 else 1)
            elif name == "temp":
                s = lc.llama_sampler_init_temp(float(args[0]))
            elif name == "dist":
                s = lc.llama_sampler_init_dist(int(args[0]))
            elif name == "xtc":
                s = lc.llama_sampler_init_xtc(float(args[0]), float(args[1]), int(args[2]), int(args[3]))
            elif name == "mirostat_v2":
                s = lc.llama_sampler_init_mirostat_v2(int(args[0]), float(args[1]), float(args[2]))
            else:
                raise ValueError(name)
            lc.llama_sampler_chain_add(chain, s)
        grmr = lc.llama_sampler_init_grammar(v._vocab, grammar, b"root")
        rng = np.random.default_rng(logits_seed)
        arr = np.zeros(n, dtype=_TD)
        ptr = arr.ctypes.data_as(ctypes.POINTER(lc.llama_token_data))
        one = np.zeros(1, dtype=_TD)
        one_ptr = one.ctypes.data_as(ctypes.POINTER(lc.llama_token_data))
        eog = set(v.eog_ids())
        toks, rejected = [], 0
        for _ in range(n_steps):
            logits = (rng.standard_normal(n) * scale).astype(np.float32)

            def fill():
                arr["id"] = np.arange(n, dtype=np.int32)
                arr["logit"] = logits
                arr["p"] = 0.0
                return lc.llama_token_data_array(ptr, n, -1, False)

            def chosen(c) -> int:
                # XTC advances the array's data pointer (llama.cpp: cur_p->data += pos_last), so
                # `selected` indexes from the shifted start.
                shift = (ctypes.cast(c.data, ctypes.c_void_p).value - arr.ctypes.data) // arr.itemsize
                return int(arr["id"][shift + c.selected])

            cur = fill()
            if grammar_first:
                lc.llama_sampler_apply(grmr, ctypes.byref(cur))
            lc.llama_sampler_apply(chain, ctypes.byref(cur))
            t = chosen(cur)
            if not grammar_first:
                one["id"] = t
                one["logit"] = 1.0
                one["p"] = 0.0
                single = lc.llama_token_data_array(one_ptr, 1, -1, False)
                lc.llama_sampler_apply(grmr, ctypes.byref(single))
                if not np.isfinite(one["logit"][0]):
                    rejected += 1
                    cur = fill()
                    lc.llama_sampler_apply(grmr, ctypes.byref(cur))
                    lc.llama_sampler_apply(chain, ctypes.byref(cur))
                    t = chosen(cur)
            lc.llama_sampler_accept(grmr, t)
            lc.llama_sampler_accept(chain, t)
            toks.append(t)
            if t in eog:
                break
        lc.llama_sampler_free(grmr)
        lc.llama_sampler_free(chain)
        return toks, rejected


def common_sample_run(vocab_path, grammar, chain_spec, n_steps: int = 30, logits_seed: int = 0, scale: float = 3.0,
                      grammar_first: bool = False, timeout: float = 300.0):
    """llama.cpp's samplers driven with ``common_sampler_sample``'s discipline on seeded random
    logits; returns (tokens, number of rejected first draws)."""
    g = grammar.encode() if isinstance(grammar, str) else grammar
    return _isolated(_with_alarm, timeout, _common_run, os.fspath(vocab_path), g, list(chain_spec), n_steps,
                     logits_seed, scale, grammar_first)


def _lazy_stream(path: str, grammar: bytes, patterns, tokens, text: bytes, words):
    with Vocab(path) as v:
        lc = v._lc
        n_pat = len(patterns)
        pat_arr = (ctypes.c_char_p * max(n_pat, 1))(*patterns)
        tok_arr = (ctypes.c_int * max(len(tokens), 1))(*tokens)
        if words is not None:
            w_arr = (ctypes.c_char_p * max(len(words), 1))(*words)
            smpl = lc.llama_sampler_init_grammar_lazy(v._vocab, grammar, b"root", w_arr, len(words), tok_arr, len(tokens))
        else:
            smpl = lc.llama_sampler_init_grammar_lazy_patterns(v._vocab, grammar, b"root", pat_arr, n_pat, tok_arr,
                                                              len(tokens))
        if not smpl:
            raise RuntimeError("lazy grammar sampler is NULL")
        s = _Sampler.__new__(_Sampler)
        s.lc, s.v, s.smpl, s.n = lc, v, smpl, v.n_tokens
        s.arr = np.zeros(s.n, dtype=_TD)
        s.ids = np.arange(s.n, dtype=np.int32)
        toks = _tokenize_inproc(v, text)
        masks = []
        for t in toks:
            masks.append(np.packbits(s.mask()))
            s.accept(t)
        masks.append(np.packbits(s.mask()))
        s.free()
        return toks, masks


def lazy_mask_stream(vocab_path, grammar, text, patterns=(), tokens=(), words=None, timeout: float = 120.0):
    """Masks of a lazy grammar sampler along ``text`` tokenized by llama.cpp (forced, unchecked)."""
    g = grammar.encode() if isinstance(grammar, str) else grammar
    pats = [p.encode() if isinstance(p, str) else p for p in patterns]
    ws = None if words is None else [w.encode() if isinstance(w, str) else w for w in words]
    t = text.encode() if isinstance(text, str) else text
    return _isolated(_with_alarm, timeout, _lazy_stream, os.fspath(vocab_path), g, pats, list(tokens), t, ws)
