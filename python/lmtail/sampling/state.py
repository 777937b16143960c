"""Per-request sampler state: the separately seeded streams of one request, snapshottable.

llama.cpp gives each stochastic feature its own ``std::mt19937`` so that, e.g., enabling XTC
cannot shift the draws dist sees. :class:`RequestSamplerState` names those streams for a chain —
``distribution_rng`` (dist), ``xtc_rng``, ``mirostat_rng`` (+ ``mirostat_mu``) and ``adaptive``
(adaptive-p's engine and EMA) — together with the token histories (penalties, DRY), and
snapshots/restores them as bytes so a migrated or reopened session resumes its exact draw
sequence mid-stream instead of reseeding.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ParameterError
from . import samplers as S
from .rng import Mt19937


@dataclass
class AdaptiveState:
    """adaptive-p's engine and its EMA (weighted sum, total weight)."""

    rng: Mt19937
    weighted_sum: float
    total_weight: float


class RequestSamplerState:
    """A live view of a :class:`~lmtail.sampling.Chain`'s per-request state.

    Attributes are ``None`` when the chain has no such sampler. ``snapshot()`` captures every
    sampler's state (the chain's full state); ``restore(blob)`` puts it back, after which
    ``chain.sample`` continues exactly where the snapshot was taken.
    """

    def __init__(self, chain):
        self.chain = chain

    def _first(self, types):
        for s in self.chain.samplers:
            if isinstance(s, types):
                return s
        return None

    @property
    def distribution_rng(self) -> Mt19937 | None:
        """dist's engine (the stream speculative.verify draws from), or None."""
        s = self._first(S.Dist)
        return s.rng if s else None

    @property
    def xtc_rng(self) -> Mt19937 | None:
        """XTC's engine, or None."""
        s = self._first(S.XTC)
        return s.rng if s else None

    @property
    def mirostat_rng(self) -> Mt19937 | None:
        """mirostat's (v1 or v2) engine, or None."""
        s = self._first((S.Mirostat, S.MirostatV2))
        return s.rng if s else None

    @property
    def mirostat_mu(self) -> float | None:
        """mirostat's current mu, or None."""
        s = self._first((S.Mirostat, S.MirostatV2))
        return float(s.mu) if s else None

    @property
    def adaptive(self) -> AdaptiveState | None:
        """adaptive-p's engine and EMA (a copy of the EMA values), or None."""
        s = self._first(S.AdaptiveP)
        return AdaptiveState(s.rng, float(s.weighted_sum), float(s.total_weight)) if s else None

    @property
    def draws(self) -> dict[str, int]:
        """Engine outputs consumed so far per stream."""
        out = {}
        for key in ("distribution_rng", "xtc_rng", "mirostat_rng"):
            r = getattr(self, key)
            if r is not None:
                out[key] = r.consumed
        a = self.adaptive
        if a is not None:
            out["adaptive_rng"] = a.rng.consumed
        return out

    def snapshot(self) -> bytes:
        """The chain's full state as bytes (``Chain.snapshot``)."""
        return self.chain.snapshot()

    def restore(self, blob: bytes) -> None:
        """Restore ``snapshot()`` bytes (``Chain.restore``: validated first, all-or-nothing)."""
        if not isinstance(blob, (bytes, bytearray)):
            raise ParameterError(f"RequestSamplerState.restore: expected bytes; found {type(blob).__name__}")
        self.chain.restore(blob)

    def __repr__(self) -> str:
        return f"RequestSamplerState({self.chain!r}, draws={self.draws}, mirostat_mu={self.mirostat_mu})"


__all__ = ["RequestSamplerState", "AdaptiveState"]
