"""llama.cpp-exact sampling: pinned mt19937, every llama.cpp sampler, chains, per-request state.

A seeded request replays token for token as llama.cpp (the pinned build vendored by
llama-cpp-python 0.3.36) would sample it on Linux: same engine, same draw conventions, same
float/double arithmetic and platform libm, same sort and tie order (GCC libstdc++).
"""

from .candidates import TOKEN_DATA, Candidates
from .chain import (COMMON_DEFAULTS, Chain, build_sampler, common_chain, common_sampler_names, common_spec,
                    get_threads, register_sampler, sampler_names, set_threads)
from .logprobs import TokenLogprobs, post_sampling_logprobs, server_logprobs
from .rng import DEFAULT_SEED, STDLIBS, Mt19937
from .samplers import Sampler, SamplingError
from .state import AdaptiveState, RequestSamplerState
from .topk_route import TopKRows, batch_topk_needed, route_plan, sample_topk, topk_needed

__all__ = [
    "Mt19937", "DEFAULT_SEED", "STDLIBS",
    "Candidates", "TOKEN_DATA",
    "Chain", "common_chain", "common_spec", "build_sampler", "COMMON_DEFAULTS", "set_threads", "get_threads",
    "register_sampler", "sampler_names", "common_sampler_names",
    "RequestSamplerState", "AdaptiveState",
    "TokenLogprobs", "server_logprobs", "post_sampling_logprobs",
    "Sampler", "SamplingError",
    "topk_needed", "batch_topk_needed", "route_plan", "sample_topk", "TopKRows",
]

