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

import itertools

import numpy as np
import xxhash

__all__ = [
    "MIN_FEATURES",
    "distance",
    "simhash",
    "simhashes",
]

MIN_FEATURES = 16  # below this a page's text says too little to call it a near-duplicate
_CHUNK_BYTES = 1 << 16  # text simhashed together (docs/benchmarks.md, "Duplicates")
# Shingles kept: all up to _SAMPLE_FROM, else about _SAMPLE_FROM to 2 * _SAMPLE_FROM.
_SAMPLE_FROM = 512

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
_BYTE_BASE = np.arange(8, dtype=np.uint16) * 256  # a byte position's first bin
_ONE = np.uint64(1)
# [n]: the low n bytes of a little-endian uint64 (a word's first n bytes).
_PREFIX_MASK = np.array([(1 << 8 * n) - 1 for n in range(9)], dtype=np.uint64)


def simhash(text: str, *, max_bytes: int = 1 << 20) -> int | None:
    """The 64-bit simhash of ``text`` (its first ``max_bytes`` of UTF-8), or None when
    it has fewer than :data:`MIN_FEATURES` shingles: :func:`simhashes` of one text."""
    return simhashes([text], max_bytes=max_bytes)[0]


def simhashes(texts: list[str], *, max_bytes: int = 1 << 20) -> list[int | None]:
    """The simhash of each of ``texts``, as :func:`simhash` gives it.

    Texts go through each step together, about _CHUNK_BYTES of them at a time: a
    page's work is a few passes over its bytes and words, and one numpy call per step
    for the chunk rather than per page (calls, not arithmetic, were most of the cost
    page by page); larger chunks outgrow the CPU's caches and cost more again."""
    prints: list[int | None] = []
    chunk: list[str] = []
    size = 0
    for text in texts:
        chunk.append(text)
        size += len(text)
        if size >= _CHUNK_BYTES:
            prints += _simhashes(chunk, max_bytes)
            chunk, size = [], 0
    if chunk:
        prints += _simhashes(chunk, max_bytes)
    return prints


def _simhashes(texts: list[str], max_bytes: int) -> list[int | None]:
    raws = [t.encode("utf-8", "replace")[:max_bytes] for t in texts]
    # One buffer: each text after a space, so that no word spans two texts.
    begins = list(itertools.accumulate((len(r) + 1 for r in raws), initial=0))[:-1]
    joined = (b" " + b" ".join(raws)).translate(_NORMALIZE)
    n = len(joined)
    buf = joined + b" " * (16 - n % 8)
    spaces = np.frombuffer(buf, dtype=np.uint8, count=n + 1) == 0x20
    # Where a word begins and where it ends, alternately: buf begins and ends with a space.
    edges = np.flatnonzero(spaces[:-1] != spaces[1:]) + 1
    starts = edges[0::2]
    lengths = edges[1::2] - starts
    # Each word's first 8 bytes as a little-endian uint64 (the rest masked off), from
    # the two aligned words that hold them: aligned gathers (numpy gathers from an
    # unaligned view, or bytes one by one, several times slower).
    aligned = np.frombuffer(buf, dtype="<u8")
    low_bits = (starts & 7).astype(np.uint64) * np.uint64(8)
    with np.errstate(over="ignore"):
        word = aligned[starts >> 3] >> low_bits
        # << 1 then << (63 - low_bits): no shift by 64, which numpy leaves undefined.
        word |= (aligned[(starts >> 3) + 1] << _ONE) << (np.uint64(63) - low_bits)
    word &= _PREFIX_MASK[np.minimum(lengths, 8)]
    first = np.searchsorted(starts, begins)  # each text's first word
    words_in = np.diff(first, append=len(starts))
    with np.errstate(over="ignore"):
        x = word[:-2] * _K0
        x += word[1:-1] * _K1
        x += word[2:] * _K2
    # Drop the shingles that span two texts: the two before each text's first word.
    spanning = np.concatenate([first[1:] - 2, first[1:] - 1])
    x = np.delete(x, np.unique(spanning[(spanning >= 0) & (spanning < len(x))]))
    shingles = np.maximum(words_in - 2, 0)
    page = np.repeat(np.arange(len(texts)), shingles)
    # A text with many shingles keeps those whose top bits are 0 (1 in 2**shift): the
    # same ones on two copies, and a bounded bit count.
    shifts = {max(0, int(c // _SAMPLE_FROM).bit_length() - 1) for c in shingles.tolist()}
    tops = [((1 << k) - 1) << (64 - k) for k in range(max(shifts) + 1)]
    if len(shifts) == 1:
        kept = np.flatnonzero(x & np.uint64(tops[shifts.pop()]) == 0)
    else:
        each = [max(0, int(c // _SAMPLE_FROM).bit_length() - 1) for c in shingles.tolist()]
        top = np.array([tops[k] for k in each], dtype=np.uint64)
        kept = np.flatnonzero(x & top[page] == 0)
    with np.errstate(over="ignore"):
        x, page = _mix(x[kept]), page[kept]
    counts = np.bincount(page, minlength=len(texts))
    # Per text, byte position and byte value: one histogram (uint16 while it fits).
    position: np.ndarray = page.astype(np.intp if len(texts) > 31 else np.uint16) * 2048
    histogram = np.bincount(
        ((position[:, None] + _BYTE_BASE) + x.view(np.uint8).reshape(-1, 8)).ravel(),
        minlength=len(texts) * 8 * 256,
    ).reshape(-1, 256)
    ones = (histogram.astype(np.float64) @ _BITS).reshape(len(texts), 64)  # [text, bit]
    bits = np.packbits(ones * 2 > counts[:, None], axis=1, bitorder="little")
    prints = bits.view("<u8").ravel().tolist()
    return [p if c >= MIN_FEATURES else None for p, c in zip(prints, counts.tolist())]


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
