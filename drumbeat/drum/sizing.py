"""How DRUM splits its RAM budget, after IRLbot's Theorem 2 (Lee et al., TWEB 2009, §IV.D).

Theorem 2 (symbols of the paper): RAM ``R`` holds ``2k`` open-file buffers of
``M`` bytes (per bucket one for ``<key,value>`` pairs, one for aux text) and a
bucket buffer that grows each stored record of ``H`` bytes by ``P`` bytes of
working space while sorting::

    r (H + P) / H + 2 M k = R                                   (8)

One merge round moves ``k r`` bytes of keys, so the cost per URL checked is

    alpha(n, R) = (2UH + pHn) H / (b k r) + 2 + p + 2H/b        (14)

and ``k r`` is largest at ``k0 = R / (4M)``, where ``r = R H / (2 (H + P))``,
giving the first branch of (7) (disk not the limit)::

    alpha(n, R) = 8 M (H + P) (2UH + pHn) / (b R^2) + 2 + p + 2H/b

drumbeat follows that optimum: half of ``R`` goes to the ``2k`` buffers
(``M = R / (4k)``), the other half to the bucket buffer, the chunk
``Delta`` that streams the sorted runs, and the arrival-log buffer. The ``k``
record buffers are one shared RAM buffer of ``k M = R / 4`` in arrival order,
spilled to per-bucket files only when it fills (see ``repository``); the ``k``
aux buffers are the arrival log's, written every ``Delta`` bytes. ``k`` is
``R / (4 M)`` with ``M = 1 MiB``, rounded down to a power of two (buckets are
chosen by the key's high bits), between 1 and 4096. The paper used 256 KiB; creating
a file is costly (with 1024 buckets the opens were a large share of a run) and a
round creates 4 files per bucket, so fewer, larger buffers win; the growth term of
alpha stays negligible below billions of keys.

Theorem 2 counts a full rewrite of the sorted file per round (IRLbot's
design, and drumbeat's before format 5). drumbeat now writes a delta run per
round and rewrites the base only when the deltas reach a quarter of it
(:mod:`.runs`): a round reads every run but writes a small multiple of its own
delta, not the whole repository, so
the measured alpha falls below (14) as ``U`` grows.

``Delta`` is ``R / 16`` but at most 4 MiB (:data:`MAX_CHUNK`): every block is
read into a fresh buffer, and glibc serves buffers above its mmap threshold
(32 MiB at most) from new zeroed pages each time, so reading in large blocks is
several times slower than in 4 MiB blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_M = 1 << 20
MAX_CHUNK = 4 << 20
# A merge round handles runs of consecutive buckets with about this many tuples at
# once (a bucket holding more is merged alone, up to ``bucket_records``). Every
# work array of a unit is then at most a few MiB, memory glibc hands back on the
# next unit; a much larger unit allocates fresh pages every round, which are slow
# on some VMs.
UNIT_RECORDS = 1 << 18
MAX_BUCKETS = 4096
KEY_BYTES = 8  # H
WORK_BYTES = 24  # P: argsort index, group id and flags per record while merging


@dataclass(frozen=True, slots=True)
class Sizing:
    """Derived sizes; all in bytes except the counts."""

    ram_bytes: int  # R
    buckets: int  # k
    buffer_bytes: int  # M, per bucket and per file kind
    chunk_bytes: int  # Delta, cache streaming and result delivery
    bucket_records: int  # r / record size: a bucket this full triggers a merge round

    @property
    def bits(self) -> int:
        return self.buckets.bit_length() - 1


def plan(ram_bytes: int, record_bytes: int, buckets: int | None = None) -> Sizing:
    """Split ``ram_bytes`` as Theorem 2's optimum suggests (see the module docstring)."""
    if ram_bytes < 4096:
        raise ValueError(f"ram_bytes must be at least 4096, got {ram_bytes}")
    if buckets is None:
        k0 = max(1, ram_bytes // (4 * DEFAULT_M))
        buckets = min(MAX_BUCKETS, 1 << (k0.bit_length() - 1))
    elif buckets < 1 or buckets > MAX_BUCKETS or buckets & (buckets - 1):
        raise ValueError(f"buckets must be a power of two in [1, {MAX_BUCKETS}], got {buckets}")
    buffer_bytes = max(64, ram_bytes // (4 * buckets))
    chunk_bytes = max(1024, min(MAX_CHUNK, ram_bytes // 16))
    bucket_side = ram_bytes // 2 - 2 * chunk_bytes
    bucket_records = max(16, bucket_side // (record_bytes + WORK_BYTES))
    return Sizing(ram_bytes, buckets, buffer_bytes, chunk_bytes, bucket_records)


def predicted_alpha(
    *,
    stored: float,
    checked: float,
    unique: float,
    url_bytes: float,
    ram_bytes: float,
    buffer_bytes: float = DEFAULT_M,
    key_bytes: float = KEY_BYTES,
    pointer_bytes: float = WORK_BYTES,
    disk_bytes: float | None = None,
) -> float:
    """alpha(n, R) of Theorem 2, eq. (7): disk bytes moved per byte of URL checked.

    ``stored`` = U (keys already stored), ``checked`` = n, ``unique`` = p,
    ``url_bytes`` = b, ``buffer_bytes`` = M, ``key_bytes`` = H, ``pointer_bytes`` = P,
    ``disk_bytes`` = D (None: unlimited, the first branch).
    """
    H, P, M, R, b, p = key_bytes, pointer_bytes, buffer_bytes, ram_bytes, url_bytes, unique
    growth = 2 * stored * H + p * H * checked
    tail = 2 + p + 2 * H / b
    lam = None if disk_bytes is None else 8 * M * disk_bytes * (H + P) / (H + b)
    if lam is None or disk_bytes is None or lam > R * R:
        return 8 * M * (H + P) * growth / (b * R * R) + tail
    return (H + b) * growth / (b * disk_bytes) + tail
