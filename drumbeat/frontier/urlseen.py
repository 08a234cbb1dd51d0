"""URL-seen on DRUM (IRLbot §IV.C): which discovered URLs are new to the crawl.

URLs are submitted in batches as (fingerprint, payload) pairs; a payload is the URL with
its depth, discovered-from URL and, for a redirect's target, the number of redirects that
led to it, kept as DRUM aux data. DRUM answers in merge rounds,
so new URLs come out later, in arrival order, from :meth:`DrumURLSeen.take_new`. RAM is
fixed by ``ram_bytes`` whatever the number of URLs seen.

Crash consistency with the manager's checkpoint: :meth:`commit` returns DRUM's manifest,
which the checkpoint stores; reopening with it rolls URL-seen back to exactly the moment of
that checkpoint, so no URL is marked seen without being in the frontier or pending here.
That holds in the middle of a round's new URLs too: the manifest notes how many of them
were taken (see :meth:`DrumURLSeen.take_new`).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Sequence
from operator import length_hint
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

from drumbeat.drum import AuxArray, Drum, DrumStats, Gathered, Snapshot
from drumbeat.frontier.seencache import RecentFingerprints

if TYPE_CHECKING:
    from drumbeat.store.durable import Durable


def payload_tail(depth: int, via: str | None, hops: int = 0) -> str:
    """What follows the URL in its payload: ``\\n depth \\n via``, then ``\\n hops`` for
    a redirect's target (hops > 0). Shared by the URLs of one page, so fetchers build it
    once per page (fetcher_links.pack_found).

    Normalized URLs never contain a newline (WHATWG parsing strips or escapes it).
    """
    tail = f"\n{depth}\n{via or ''}"
    return f"{tail}\n{hops}" if hops else tail


def encode_payload(url: str, depth: int, via: str | None, hops: int = 0) -> bytes:
    return (url + payload_tail(depth, via, hops)).encode()


def encode_payloads(
    urls: Sequence[str], depths: Sequence[int], vias: Sequence[str | None]
) -> AuxArray:
    """Payloads of found links (no redirect hops) as one AuxArray (one join and encode)."""
    return AuxArray.from_strs([u + payload_tail(d, v) for u, d, v in zip(urls, depths, vias)])


def decode_payload(data: bytes) -> tuple[str, int, str | None, int]:
    """(url, depth, via, hops) of a payload made by :func:`encode_payload(s)`."""
    url, depth, via, *hops = data.decode().split("\n")
    return url, int(depth), via or None, int(hops[0]) if hops else 0


def payload_url(data: bytes) -> str:
    """The URL of a payload, without decoding the rest (see :func:`payload_tail`)."""
    return data[: data.index(b"\n")].decode()


# Told the URLs a submit sent on to DRUM: their fingerprints and payloads.
Sent = Callable[[np.ndarray, AuxArray], None]


class SeenManifest(Snapshot, total=False):
    """A commit of :class:`DrumURLSeen`: DRUM's manifest, with the place in a round's
    new URLs that :meth:`DrumURLSeen.take_new` had reached."""

    urlseen_taken: list[int]  # [epoch, new URLs taken of it]; [-1, 0]: none yet


class DrumURLSeen:
    """URL-seen for one crawl, stored in ``directory``.

    Checks are gathered in RAM until GATHER_URLS URLs wait, then given to DRUM as one
    submit (in submission order; see drumbeat.drum.gather): a crawl of one site sends a
    page or two of links at a time. Gathered URLs are DRUM's as far as anyone can tell:
    they count as :attr:`pending`, and :meth:`flush` and :meth:`commit` give them to
    DRUM first (the manager's journal holds them meanwhile).
    """

    GATHER_URLS = 1024

    def __init__(
        self,
        directory: Path,
        *,
        ram_bytes: int,
        manifest: SeenManifest | None = None,
        fsync: bool | str = True,
        background: bool = False,
        on_round_done: Callable[[], None] | None = None,
        cache_bytes: int = 0,
    ) -> None:
        """``background``: DRUM's merge rounds run in a thread (see Drum), which calls
        ``on_round_done`` when one has merged. ``cache_bytes`` (0: none): a
        :class:`RecentFingerprints` of that size drops the copies of URLs sent lately
        before they reach DRUM."""
        if manifest is None and directory.exists():
            # No checkpoint names this state: it belongs to a run that died before its
            # first checkpoint, whose URLs will all be discovered again.
            shutil.rmtree(directory)
        self.drum = Drum(
            directory,
            ram_bytes=ram_bytes,
            manifest=manifest,
            fsync=fsync,
            background=background,
            on_round_done=on_round_done,
        )
        self._cache = RecentFingerprints(cache_bytes) if cache_bytes else None
        self._submitted_since_flush = 0
        # Checks not yet given to DRUM (see GATHER_URLS).
        self._gathered: Gathered[tuple[np.ndarray, AuxArray]] = Gathered(
            self.GATHER_URLS, self._submit_gathered
        )
        # [epoch, new URLs] of a round taken that far before the commit reopened here.
        taken = None if manifest is None else manifest.get("urlseen_taken")
        self._taken_before: list[int] = taken or [-1, 0]
        # The round take_new is delivering (epoch -1: none yet): its new URLs before the
        # current chunk, and that chunk (an iterator over a list, whose length_hint says
        # what is left of it) with its length; skipped URLs count as delivered.
        self._chunk: Iterator[bytes]
        self._epoch, self._done, self._chunk, self._chunk_n = -1, 0, iter(()), 0

    def submit(
        self,
        fingerprints: Sequence[int],
        payloads: Sequence[bytes] | AuxArray,
        sent: Sent | None = None,
    ) -> int:
        """Queue URLs for the check; new ones come out of :meth:`take_new` after a merge.
        Returns how many of them the cache dropped as sent before.

        ``payloads`` (from :func:`encode_payload`) may come as an AuxArray, e.g. from
        :func:`encode_payloads`, which DRUM takes without converting. ``sent``, if given,
        is called with the fingerprints and payloads that went on to DRUM (those the
        cache did not drop), when there are any.
        """
        if not len(fingerprints):
            return 0
        fps = np.fromiter(fingerprints, np.uint64, len(fingerprints))
        return self._check(fps, payloads, sent)

    def submit_packed(
        self, fingerprints: bytes, payloads: bytes, lengths: bytes, sent: Sent | None = None
    ) -> int:
        """:meth:`submit` for URLs packed by fetchers (see queue.base.FoundURLs): ``n``
        uint64 fingerprints, payloads back to back, ``n`` uint32 payload lengths."""
        fps = np.frombuffer(fingerprints, np.uint64)
        if not len(fps):
            return 0
        return self._check(fps, AuxArray.from_lengths(payloads, lengths), sent)

    def known(self, fingerprints: np.ndarray) -> np.ndarray:
        """A bool array: which of ``fingerprints`` (uint64) the cache holds, so that
        :meth:`submit` would drop them as sent before (all False without a cache). A
        caller that filters links costs less asking this first: such a link passed its
        filter when it was sent."""
        if self._cache is None:
            return np.zeros(len(fingerprints), bool)
        known: np.ndarray = ~self._cache.unseen(fingerprints)
        return known

    def _check(
        self, fps: np.ndarray, aux: Sequence[bytes] | AuxArray, sent: Sent | None = None
    ) -> int:
        """Send the URLs to DRUM, less those the cache knows were sent already; return
        how many those were."""
        cache = self._cache
        dropped = 0
        if cache is not None:
            if len(aux) != len(fps):
                raise ValueError(f"{len(aux)} payloads for {len(fps)} fingerprints")
            kept = np.flatnonzero(cache.unseen(fps))
            dropped = len(fps) - len(kept)
            if dropped:
                fps, aux = fps[kept], AuxArray.of(aux).take(kept)
                if not len(fps):
                    return dropped
        aux = AuxArray.of(aux)
        if sent is not None:
            sent(fps, aux)
        self._gathered.add((fps, aux), len(fps))
        self._submitted_since_flush += len(fps)
        if cache is not None:
            cache.remember(fps)  # only now: they are as good as DRUM's
        return dropped

    def _submit_gathered(self, gathered: list[tuple[np.ndarray, AuxArray]]) -> None:
        """Give DRUM the gathered checks, as one submit."""
        if len(gathered) == 1:
            fps, aux = gathered[0]
        else:
            fps = np.concatenate([fps for fps, _ in gathered])
            aux = AuxArray.concat([aux for _, aux in gathered])
        self.drum.check_update(fps, aux=aux)

    @property
    def pending(self) -> int:
        """URLs submitted since the last flush (they may have been merged already)."""
        return self._submitted_since_flush

    @property
    def busy(self) -> bool:
        """A merge round runs in the background: new URLs may still come out of it."""
        return self.drum.busy

    @property
    def last_round_s(self) -> float:
        """Wall seconds the last merge round took."""
        return self.drum.last_round_s

    def settle(self) -> None:
        """Wait for a background merge round to end (see Drum.settle)."""
        self.drum.settle()

    def flush(self, wait: bool = True) -> None:
        """Merge everything submitted so far (``wait=False``: in the background, if so
        configured; see Drum.flush)."""
        self._gathered.give()
        self.drum.flush(wait=wait)
        self._submitted_since_flush = 0

    def take_new(self) -> Iterator[bytes]:
        """Payloads of URLs seen for the first time, in the order they were submitted.

        A caller may stop partway through a round and :meth:`commit`: reopened at that
        commit, this goes on after the last payload taken (DRUM alone would deliver
        the round again from its start, and the caller would queue its first URLs twice).
        So a checkpoint need not wait for a round of a million new URLs to be placed.
        """
        # A round left partway by an earlier call is delivered again from its start.
        self._epoch, self._done, self._chunk, self._chunk_n = -1, 0, iter(()), 0
        return self._new_payloads()

    def _new_payloads(self) -> Iterator[bytes]:
        for result in self.drum.take_results():
            new = result.aux.select(np.flatnonzero(result.unique))
            if result.epoch != self._epoch:
                self._epoch, self._done, self._chunk_n = result.epoch, 0, 0
            self._done += self._chunk_n
            skip = 0
            if self._taken_before[0] == result.epoch:
                skip = max(0, min(len(new), self._taken_before[1] - self._done))
            self._chunk, self._chunk_n = iter(new), len(new)
            for _ in range(skip):
                next(self._chunk)
            yield from self._chunk

    def commit(self) -> SeenManifest:
        """DRUM's manifest (see Drum.commit), with the new URLs taken of the round that
        :meth:`take_new` is delivering."""
        self._gathered.give()  # a checkpoint holds every URL submitted before it
        manifest = cast("SeenManifest", self.drum.commit())  # a fresh copy, ours to extend
        if self._epoch == -1:  # nothing delivered yet: the place reopened at still holds
            manifest["urlseen_taken"] = list(self._taken_before)
        else:
            taken = self._done + self._chunk_n - length_hint(self._chunk)
            manifest["urlseen_taken"] = [self._epoch, taken]
        return manifest

    def stats(self) -> DrumStats:
        return self.drum.stats()

    def __len__(self) -> int:
        return self.drum.stats().keys_stored


if TYPE_CHECKING:

    def _durable(seen: DrumURLSeen) -> Durable[SeenManifest]:
        return seen  # DrumURLSeen keeps the store contract: commit() -> its state
