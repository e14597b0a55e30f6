"""The sign-flip test's Monte Carlo sums, counted fast and to the bit (``pairs``).

The test counts the random sign patterns s whose sum |s·x| reaches a threshold, each sum being
the float the batch's matrix-vector product ``signs @ x`` (BLAS) gives. The same count is found
here without that product for almost every batch: each pattern's sum is added up from a table
of the 256 signed sums of every 8 consecutive differences (one look-up per 8 signs instead of
8 multiply-adds, and no 2000 x m float matrix to build). Both floats lie within a proven bound
of the exact sum (any order of m additions of ±x_j errs by at most gamma_m·Σ|x_j|, gamma_n =
n·u/(1 - n·u), u = 2^-53); a pattern whose table sum is farther than both bounds from the
threshold is on the same side of it in both. A batch with a pattern closer than that (ties of
discrete differences, say) is counted from the product itself, as before. When every
difference is a multiple of one power of two and their absolute sum stays below 2^53 (whole
numbers, halves...), every partial sum is exact in both ways and the table sums are the
product's. A test checks the p equals the one numpy's own draws and product give."""

from __future__ import annotations

import functools
import math

import numpy as np

BATCH = 2000  # patterns per batch: the draws, and a fallback's float matrix, 2000 x m at most
_UNIT = 2.0**-53
# row b: the signs the 8 bits of b give (bit j set: +1 for the difference 8c + j, else -1)
_BYTE_SIGNS = (2 * ((np.arange(256)[:, None] >> np.arange(8)[None, :]) & 1) - 1).astype(float)


class CoinFlips:
    """The 0/1 draws ``np.random.default_rng(seed).integers(0, 2, size, dtype=np.int8)`` gives,
    call after call, in a tenth of its time: that call draws each value from one byte of a
    32-bit word (low byte first; Lemire's method with a range of 2 keeps the byte's top bit and
    never rejects), the words being PCG64's 64-bit outputs split low half first, a half left
    over kept for the next call. Read here straight from the generator's raw outputs; a test
    checks the draws equal numpy's own, call after call."""

    def __init__(self, seed: int) -> None:
        self._generator = np.random.default_rng(seed).bit_generator
        if not isinstance(self._generator, np.random.PCG64):
            raise TypeError("CoinFlips reads PCG64's outputs")
        self._left: np.ndarray | None = None  # a 32-bit half kept for the next call

    def _bytes(self, count: int) -> np.ndarray:
        """The next ``count`` bytes the draws read, one a value."""
        words = -(-count // 4)
        parts = []
        if self._left is not None and words > 0:
            parts.append(self._left)
            words -= 1
            self._left = None
        if words > 0:
            raw = np.asarray(self._generator.random_raw(-(-words // 2)), dtype="<u8").view("<u4")
            if words % 2:
                self._left = raw[-1:].copy()
                raw = raw[:-1]
            parts.append(raw)
        if not parts:
            return np.zeros(0, dtype=np.uint8)
        stream = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return stream.view(np.uint8)[:count]

    def draw(self, rows: int, columns: int) -> np.ndarray:
        return self.top_bits(rows, columns).view(np.int8)

    def top_bits(self, rows: int, columns: int) -> np.ndarray:
        """The next draws as booleans (a draw is its byte's top bit)."""
        return (self._bytes(rows * columns) >= 128).reshape(rows, columns)


def _exact(x: np.ndarray) -> bool:
    """Every sum of ±x_j is exact in floats, in any order: the x_j are multiples of one power
    of two, 2^low, and Σ|x_j| < 2^(53 + low)."""
    x = x[x != 0]
    if len(x) == 0 or not np.all(np.isfinite(x)):
        return len(x) == 0
    mantissas, exponents = np.frexp(x)
    whole = np.ldexp(mantissas, 53).astype(np.int64)  # x_j = whole_j · 2^(exponent_j - 53)
    trailing = np.log2((whole & -whole).astype(np.float64)).astype(np.int64)
    low = int(np.min(exponents - 53 + trailing))
    with np.errstate(over="ignore"):
        scaled = np.abs(np.ldexp(x, -low))
    return bool(np.all(np.isfinite(scaled))) and math.fsum(scaled.tolist()) < 2.0**53


def _bound(x: np.ndarray) -> float:
    """How far the table's sum and the product's may lie from the exact sum, the two bounds
    added (0 when both are exact): the product adds m terms, the table 8 per entry, then its
    ⌈m/8⌉ entries; gamma_(m+16) covers either."""
    if _exact(x):
        return 0.0
    terms = len(x) + 16
    gamma = terms * _UNIT / (1 - terms * _UNIT)
    return 2 * gamma * math.fsum(np.abs(x).tolist()) * (1 + 2.0**-20)


@functools.lru_cache(maxsize=1)
def _patterns(seed: int, m: int, resamples: int) -> tuple[np.ndarray, ...]:
    """Each batch's patterns, 8 signs a byte (bit j of byte c: the draw for difference 8c + j),
    kept for the next call with the same seed, pairs and resamples: an experiment's metrics
    share them (m/8 bytes a pattern: 6.25 MB for 5,000 pairs)."""
    flips = CoinFlips(seed)
    batches = []
    for start in range(0, resamples, BATCH):
        codes = np.packbits(
            flips.top_bits(min(BATCH, resamples - start), m), axis=1, bitorder="little"
        )
        codes.flags.writeable = False
        batches.append(codes)
    return tuple(batches)


def count_at_least(x: np.ndarray, threshold: float, *, seed: int, resamples: int) -> int:
    """How many of ``resamples`` random sign patterns (``CoinFlips(seed)``, batches of
    ``BATCH``) give |signs @ x| ≥ ``threshold``, that product's float for each."""
    m = len(x)
    chunks = -(-m // 8)
    padded = np.zeros(chunks * 8)
    padded[:m] = x
    table = (padded.reshape(chunks, 8) @ _BYTE_SIGNS.T).ravel()  # chunk c's sums at c·256 + b
    offsets = np.arange(chunks, dtype=np.intp) * 256
    bound = _bound(x)
    # twice the bound, and room for the rounding of threshold ± margin itself
    margin = 2 * bound + 4 * _UNIT * abs(threshold) if bound else 0.0
    signs: np.ndarray | None = None
    hits = 0
    for packed in _patterns(seed, m, resamples):
        size = len(packed)
        codes = packed.astype(np.intp)
        codes += offsets
        sums = np.abs(table[codes].sum(axis=1))
        if margin == 0.0:
            hits += int(np.count_nonzero(sums >= threshold))
            continue
        above = sums > threshold + margin
        if np.count_nonzero(above | (sums < threshold - margin)) == size:
            hits += int(np.count_nonzero(above))
            continue
        # a pattern too close to call: this batch's sums as the product gives them
        if signs is None:
            signs = np.empty((min(BATCH, resamples), m))
        bits = np.unpackbits(packed, axis=1, count=m, bitorder="little").view(np.int8)
        np.copyto(signs[:size], bits * np.int8(2) - np.int8(1), casting="unsafe")
        hits += int(np.count_nonzero(np.abs(signs[:size] @ x) >= threshold))
    return hits
