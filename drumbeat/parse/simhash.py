"""Simhash fingerprints of page text, and the permuted-table keys that find near ones.

A page's text, lower-cased with ASCII punctuation and whitespace as spaces, is cut into
word shingles: each run of three words, a word standing for its first 8 bytes. Each
shingle is hashed to 64 bits (multiply-add, then splitmix64's finalizer), and bit ``i``
of the simhash (Charikar 2002) is set when more than half of the shingles have it set:
pages sharing most of their shingles get fingerprints a few bits apart (Manku, Jain and Das Sarma,
WWW 2007: near-duplicate web pages lie within a Hamming distance of 3).

Everything is numpy over the text's bytes, a few passes per page: hashing each word
with a Python call of xxhash costs several times the page's parse (docs/benchmarks.md,
"Near duplicates"); xxhash only seeds the constants. Pages with many features keep a
sample of them, chosen by hash value (the same ones on two copies), so that the bit
count stays a small part of the cost.

The lookup of fingerprints within a distance is :class:`drumbeat.store.dedup.ContentIndex`'s.
"""

from __future__ import annotations

import numpy as np
import xxhash

__all__ = [
    "MIN_FEATURES",
    "distance",
    "simhash",
]

MIN_FEATURES = 16  # below this a page's text says too little to call it a near-duplicate
# Shingles kept: all up to _SAMPLE_FROM, else about _SAMPLE_FROM to 2 * _SAMPLE_FROM.
_SAMPLE_FROM = 2048

# Lower-case ASCII letters and digits stay, other ASCII bytes become spaces, bytes of
# UTF-8 sequences (>= 0x80) stay: words of any script are words.
_NORMALIZE = bytes(
    (b | 0x20) if chr(b).isalpha() else b if chr(b).isdigit() or b >= 0x80 else 0x20
    for b in range(256)
)
_SEED = np.frombuffer(
    xxhash.xxh3_128_digest(b"drumbeat simhash 1") + xxhash.xxh3_128_digest(b"drumbeat 2"),
    dtype=np.uint64,
)
_K0, _K1, _K2 = _SEED[:3] | np.uint64(1)  # odd multipliers
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)  # splitmix64
_S27, _S30, _S31 = np.uint64(27), np.uint64(30), np.uint64(31)
# Byte value -> its 8 bits (little-endian order), for counting bits by byte histograms.
_BITS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little").astype(
    np.float64
)
_BYTE_BASE = np.arange(8, dtype=np.uint16) * 256
# [n]: the low n bytes of a little-endian uint64 (a word's first n bytes).
_PREFIX_MASK = np.array([(1 << 8 * n) - 1 for n in range(9)], dtype=np.uint64)


def simhash(text: str, *, max_bytes: int = 1 << 20) -> int | None:
    """The 64-bit simhash of ``text`` (its first ``max_bytes`` of UTF-8), or None when
    it has fewer than :data:`MIN_FEATURES` words."""
    raw = text.encode("utf-8", "replace")[:max_bytes].translate(_NORMALIZE)
    n = len(raw)
    rows = n // 8 + 2
    buf = b" " + raw + b" " * (8 * rows + 8 - n)
    spaces = np.frombuffer(buf, dtype=np.uint8, count=n + 2) == 0x20
    starts = np.flatnonzero(spaces[:-1] > spaces[1:])  # a space, then a word
    if len(starts) < MIN_FEATURES + 2:
        return None
    lengths = np.flatnonzero(spaces[:-1] < spaces[1:]) - starts  # a word, then a space
    # The uint64 at byte offset s + 1 of buf is row s % 8, column s // 8 of these eight
    # shifted copies: an aligned gather (a strided, unaligned view gathers slowly).
    shifted = np.frombuffer(b"".join([buf[r : r + 8 * rows] for r in range(1, 9)]), dtype=np.uint64)
    # Each word's first 8 bytes (little-endian: the low bytes), the rest masked off.
    word = shifted[(starts & 7) * rows + (starts >> 3)] & _PREFIX_MASK[np.minimum(lengths, 8)]
    with np.errstate(over="ignore"):
        x = word[:-2] * _K0
        x += word[1:-1] * _K1
        x += word[2:] * _K2
        shift = max(0, int(len(x) // _SAMPLE_FROM).bit_length() - 1)
        if shift:  # keep the shingles whose top ``shift`` bits are 0 (1 in 2**shift)
            x = x[x >> np.uint64(64 - shift) == 0]
            if len(x) < MIN_FEATURES:
                return None
        x = _mix(x)
    histogram = np.bincount(
        (x.view(np.uint8).reshape(-1, 8) + _BYTE_BASE).ravel(), minlength=8 * 256
    ).reshape(8, 256)
    ones = histogram.astype(np.float64) @ _BITS  # [byte, bit]: shingles with it set
    bits = ones.ravel() * 2 > len(x)
    return int(np.packbits(bits, bitorder="little").view("<u8")[0])


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, in place."""
    x ^= x >> _S30
    x *= _M1
    x ^= x >> _S27
    x *= _M2
    x ^= x >> _S31
    return x


def distance(a: int, b: int) -> int:
    """The Hamming distance of two 64-bit fingerprints."""
    return (a ^ b).bit_count()
