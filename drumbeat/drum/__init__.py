"""DRUM: IRLbot's Disk Repository with Update Management.

Imports numpy, xxhash (block checksums: XXH3 is several times faster than zlib.crc32,
which was a large share of a merge round) and the standard library; nothing of the
crawler.

A repository maps 64-bit keys to fixed-size values (a numpy structured dtype,
possibly empty) and answers *batched* check / update / check+update with
sequential disk I/O only; its RAM is fixed by ``ram_bytes`` and does not grow
with the number of keys stored. It knows nothing about URLs.

API::

    drum = Drum(directory, value_dtype=None, merge="overwrite",   # or "add", "max",
                ram_bytes=64 << 20, buckets=None, fsync=True,     # or f(stored, incoming)
                manifest=None)                                    # Drum.open(dir, manifest)
                # fsync: True (rounds and commits), "commit" (only commits), False
    drum.check(keys, aux=None)                  # keys: 1-d np.uint64; aux: list[bytes],
                                                # (blob, offsets) or AuxArray
    drum.update(keys, values, aux=None)         # values: array of value_dtype
    drum.check_update(keys, values=None, aux=None)
    drum.submit(ops, keys, values=None, aux=None)   # mixed: ops uint8 CHECK/UPDATE/CHECK_UPDATE
    drum.flush()                                # merge everything pending now
    for result in drum.take_results(): ...      # DrumResult chunks, global arrival order
    manifest = drum.commit()                    # durable point; JSON-able
    drum.stats()                                # DrumStats
    Gathered(limit, submit)                     # small submits gathered into one

Calls only buffer. Tuples are spread over ``k`` buckets by the key's high bits;
when the fullest bucket reaches its limit (or on :meth:`Drum.flush`) a merge
round sorts each bucket, looks it up in the sorted runs on disk (a base and a
few deltas, streamed in chunks), classifies every tuple, applies updates with
the merge function, writes the changed records as a new delta run (folding the
newest runs into it, the base only now and then: :mod:`.runs`), and queues the
round's results (see :class:`DrumResult`; semantics of one round are those of
applying its tuples one by one to a dict, :mod:`.merge`).

Durability: :meth:`Drum.commit` acknowledges everything queued before it;
reopening after a crash gives the latest commit or completed round, and
pending acknowledged tuples are merged by the next round. Reopening with a
manifest (one of the last two) rolls back to exactly that commit. Sizing
follows Theorem 2 (:mod:`.sizing`); the on-disk format is in :mod:`.format`.
"""

from __future__ import annotations

from drumbeat.drum.aux import AuxArray
from drumbeat.drum.format import DrumCorruptError, DrumError
from drumbeat.drum.gather import Gathered
from drumbeat.drum.merge import CHECK, CHECK_UPDATE, UPDATE
from drumbeat.drum.repository import Drum, DrumIOError, DrumResult, DrumStats
from drumbeat.drum.sizing import Sizing, plan, predicted_alpha
from drumbeat.drum.state import Snapshot

__all__ = [
    "CHECK",
    "CHECK_UPDATE",
    "UPDATE",
    "AuxArray",
    "Drum",
    "DrumCorruptError",
    "DrumError",
    "DrumIOError",
    "DrumResult",
    "DrumStats",
    "Gathered",
    "Sizing",
    "Snapshot",
    "plan",
    "predicted_alpha",
]
