"""``std::mt19937`` bit for bit, and the ways C++ standard libraries turn its words into draws.

llama.cpp gives every stochastic sampler its own ``std::mt19937`` and draws from it through
``std::uniform_real_distribution<double>`` (dist), ``<float>`` (XTC) and
``std::discrete_distribution<int>`` (mirostat, mirostat v2, adaptive-p). The engine is fully
specified by the C++ standard; the draws are not, so a seeded request replays identically only
under the same *draw convention*:

``"libstdc++"`` (GCC <= 15, every Linux llama.cpp build)
    double: ``(g0 + g1 * 2**32) / 2**64`` with the sum rounded to 53 bits, ``nextafter(1, 0)`` if
    that rounds to 1; float: ``float(g0) / 2**32`` with the same clamp. discrete_distribution
    consumes **no** engine output when it has fewer than two weights.
``"libc++"`` (LLVM, Apple clang: llama.cpp on macOS)
    the same values without the clamp (a draw that rounds to 1 stays 1.0, probability ~2**-54);
    discrete_distribution **always** consumes two words, even for a single weight.
``"c++26"`` (GCC 16 libstdc++ in C++20 mode, MSVC STL >= 17.12: P0952R2)
    truncating ``generate_canonical``: double ``floor(S / 2**11) / 2**53`` (S = g0 + g1 * 2**32),
    float ``floor(g0 / 2**8) / 2**24``; discrete_distribution as libstdc++.
    Not verified against a GCC-16 or MSVC build (none available here).
"""

from __future__ import annotations

import math
import numbers
import struct

import numpy as np

from ..errors import ParameterError

DEFAULT_SEED = 0xFFFFFFFF  # LLAMA_DEFAULT_SEED: "pick a random seed"
STDLIBS = ("libstdc++", "libc++", "c++26")

_N = 624
_M = 397
_UPPER = 0x80000000
_LOWER = 0x7FFFFFFF
_MATRIX_A = 0x9908B0DF
_MASK32 = 0xFFFFFFFF
_TWO32 = 4294967296.0
_TWO64 = 18446744073709551616.0
_ONE_BELOW = math.nextafter(1.0, 0.0) if hasattr(math, "nextafter") else 1.0 - 2.0 ** -53
_ONE_BELOW_F32 = np.nextafter(np.float32(1.0), np.float32(0.0))
_SNAP_MAGIC = b"MT19937\x01"
_F32 = struct.Struct("<f")  # rounds a double to the nearest float32 (ties to even), as (float)x


def check_stdlib(stdlib) -> str:
    """``stdlib`` if it names a draw convention (:data:`STDLIBS`); ParameterError otherwise."""
    if stdlib not in STDLIBS:
        raise ParameterError(f"stdlib: expected one of {', '.join(STDLIBS)}; found {stdlib!r}")
    return stdlib


def check_seed(seed, name: str = "seed") -> int:
    """``seed`` as an int if it is an integer in [0, 2**32 - 1]; ParameterError otherwise."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= int(seed) <= 0xFFFFFFFF:
        raise ParameterError(f"{name}: expected an integer in [0, 2**32 - 1]; found {seed!r}")
    return int(seed)


def random_seed() -> int:
    """What llama.cpp's get_rng_seed(LLAMA_DEFAULT_SEED) returns on Linux: one random_device word."""
    import os

    return int.from_bytes(os.urandom(4), "little")


class Mt19937:
    """Bit-exact ``std::mt19937`` (32-bit Mersenne Twister, standard ``init_genrand`` seeding).

    ``consumed`` counts the 32-bit outputs drawn since seeding. ``snapshot()`` returns the full
    engine state as bytes and ``restore()`` resumes the exact output sequence from it.
    """

    # _tempered: (the word list it was computed from, the 624 tempered outputs of those words),
    # recomputed whenever _mt is another list (a twist, a reseed, a restore, or code that assigns
    # _mt directly, as lmtail.speculative does).
    __slots__ = ("_mt", "_idx", "consumed", "seed", "_tempered")

    def __init__(self, seed: int = 5489):
        self.reseed(seed)

    def reseed(self, seed: int) -> None:
        """``engine.seed(seed)``: standard init_genrand; resets ``consumed``."""
        seed = check_seed(seed)
        mt = [0] * _N
        mt[0] = seed
        for i in range(1, _N):
            prev = mt[i - 1]
            mt[i] = (1812433253 * (prev ^ (prev >> 30)) + i) & _MASK32
        self._mt = mt
        self._idx = _N
        self.consumed = 0
        self.seed = seed
        self._tempered = (None, None)

    def _twist(self) -> None:
        # Copy-on-write: the word list is never changed in place once published, so a saved
        # state (copy(), a chain's undo record) can share it instead of copying 624 words.
        # Vectorised in the four spans whose words depend only on words of earlier spans (word i
        # reads words i + 1 (not yet twisted) and (i + 397) % 624 (twisted when i >= 227)); the
        # same uint32 arithmetic as the word-by-word recurrence, so the same words.
        mt = np.array(self._mt, dtype=np.uint32)
        for lo, hi in ((0, _N - _M), (_N - _M, 2 * (_N - _M)), (2 * (_N - _M), _N - 1)):
            y = (mt[lo:hi] & np.uint32(_UPPER)) | (mt[lo + 1:hi + 1] & np.uint32(_LOWER))
            src = mt[lo + _M:hi + _M] if hi + _M <= _N else mt[lo + _M - _N:hi + _M - _N]
            mt[lo:hi] = src ^ (y >> np.uint32(1)) ^ ((y & np.uint32(1)) * np.uint32(_MATRIX_A))
        y = (int(mt[_N - 1]) & _UPPER) | (int(mt[0]) & _LOWER)
        v = int(mt[_M - 1]) ^ (y >> 1)
        mt[_N - 1] = v ^ _MATRIX_A if y & 1 else v
        self._mt = mt.tolist()
        self._idx = 0

    def _temper(self):
        y = np.array(self._mt, dtype=np.uint32)
        y ^= y >> np.uint32(11)
        y ^= (y << np.uint32(7)) & np.uint32(0x9D2C5680)
        y ^= (y << np.uint32(15)) & np.uint32(0xEFC60000)
        y ^= y >> np.uint32(18)
        self._tempered = t = (self._mt, y.tolist())
        return t

    def __call__(self) -> int:
        """The next 32-bit output (``engine()``)."""
        i = self._idx
        if i >= _N:
            self._twist()
            i = 0
        t = self._tempered
        if t[0] is not self._mt:
            t = self._temper()
        self._idx = i + 1
        self.consumed += 1
        return t[1][i]

    def discard(self, n: int) -> None:
        """Advance by n outputs (``engine.discard(n)``)."""
        for _ in range(n):
            self()

    # -- draws -------------------------------------------------------------------------------
    def uniform_double(self, stdlib: str = "libstdc++") -> float:
        """``uniform_real_distribution<double>(0, 1)``: two outputs."""
        g0 = self()
        g1 = self()
        if stdlib == "c++26":
            return float((g0 + (g1 << 32)) >> 11) / 9007199254740992.0
        r = (float(g0) + float(g1) * _TWO32) / _TWO64
        if r >= 1.0 and stdlib == "libstdc++":
            r = _ONE_BELOW
        return r

    def uniform_float(self, stdlib: str = "libstdc++") -> np.float32:
        """``uniform_real_distribution<float>(0, 1)``: one output, returned as float32."""
        return np.float32(self.uniform_float_value(stdlib))

    def uniform_float_value(self, stdlib: str = "libstdc++") -> float:
        """``uniform_float``'s value as a Python float (a float32 value, exactly): the float draw
        without numpy scalar arithmetic, ~10x cheaper in per-token loops.

        libstdc++ / libc++: ``float(g0) / 2**32`` (g0 rounded to float32 first, as the C++ does),
        libstdc++ clamping a result of 1 to ``nextafter(1, 0)``; c++26: ``floor(g0 / 2**8) / 2**24``."""
        g0 = self()
        if stdlib == "c++26":
            return (g0 >> 8) / 16777216.0
        r = _F32.unpack(_F32.pack(float(g0)))[0] * 2.3283064365386963e-10  # float(g0) / 2**32
        if r >= 1.0 and stdlib == "libstdc++":
            r = float(_ONE_BELOW_F32)
        return r

    # -- state -------------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """The full engine state (624 words, position, output count, seed) as bytes."""
        return _SNAP_MAGIC + struct.pack(f"<{_N}IIQI", *self._mt, self._idx, self.consumed, self.seed)

    @classmethod
    def parse_snapshot(cls, blob) -> "Mt19937":
        """A new engine from ``snapshot()`` bytes; raises ParameterError for anything else.

        Refused: not bytes, a wrong length or magic, a position > 624, and a degenerate state
        (the 19937 state bits -- the top bit of word 0 and words 1..623 -- all zero: the twist then
        yields 0 forever; no seeded engine ever reaches it, since the twist is a bijection on the
        non-zero states). Words are 32-bit by construction of the format."""
        if not isinstance(blob, (bytes, bytearray)) or len(blob) != cls.snapshot_size() or \
                bytes(blob[:8]) != _SNAP_MAGIC:
            raise ParameterError(f"Mt19937.restore: expected a {cls.snapshot_size()}-byte snapshot from "
                                 f"Mt19937.snapshot(); found {type(blob).__name__} of "
                                 f"{len(blob) if hasattr(blob, '__len__') else '?'} bytes")
        vals = struct.unpack(f"<{_N}IIQI", bytes(blob[8:]))
        if vals[_N] > _N:
            raise ParameterError(f"Mt19937.restore: corrupt snapshot (index {vals[_N]} > {_N})")
        mt = list(vals[:_N])
        if not (mt[0] & _UPPER) and not any(mt[1:]):
            raise ParameterError("Mt19937.restore: corrupt snapshot (degenerate all-zero state: the engine "
                                 "would emit 0 forever)")
        e = cls.__new__(cls)
        e._mt = mt
        e._idx, e.consumed, e.seed = vals[_N], vals[_N + 1], vals[_N + 2]
        e._tempered = (None, None)
        return e

    def restore(self, blob: bytes) -> None:
        """Resume from ``snapshot()`` bytes (validated first: on an error nothing changes)."""
        self.assign(self.parse_snapshot(blob))

    def assign(self, other: "Mt19937") -> None:
        """Make this engine a copy of ``other`` (in place: references to it stay valid)."""
        if not isinstance(other, Mt19937):
            raise ParameterError(f"Mt19937.assign: expected an Mt19937; found {type(other).__name__}")
        self._mt = other._mt  # shared: never written in place (see _twist)
        self._idx, self.consumed, self.seed = other._idx, other.consumed, other.seed
        self._tempered = other._tempered

    @staticmethod
    def snapshot_size() -> int:
        """Bytes in a ``snapshot()``: 8 magic + 624 words + index + output count + seed."""
        return 8 + 4 * _N + 4 + 8 + 4

    def copy(self) -> "Mt19937":
        """An independent engine in the same state."""
        c = Mt19937.__new__(Mt19937)
        c._mt = self._mt  # shared: never written in place (see _twist)
        c._idx, c.consumed, c.seed = self._idx, self.consumed, self.seed
        c._tempered = self._tempered
        return c

    def __eq__(self, other) -> bool:
        if not isinstance(other, Mt19937):
            return NotImplemented
        return self._state_tuple() == other._state_tuple()

    def _state_tuple(self):
        # Equal engines produce equal futures: compare the normalised state.
        if self._idx >= _N:
            c = self.copy()
            c._twist()
            return tuple(c._mt), 0
        return tuple(self._mt), self._idx

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"Mt19937(seed={self.seed}, consumed={self.consumed})"


def discrete_draws(stdlib: str, n: int) -> int:
    """Engine outputs one ``std::discrete_distribution`` draw over n weights consumes."""
    if n < 2 and stdlib != "libc++":
        return 0
    return 2


__all__ = ["Mt19937", "DEFAULT_SEED", "STDLIBS", "discrete_draws", "random_seed"]
