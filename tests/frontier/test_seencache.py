"""The cache in front of URL-seen drops repeated URLs and changes nothing URL-seen says."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drumbeat.fetcher_links import pack_found
from drumbeat.frontier.seencache import RecentFingerprints
from drumbeat.frontier.urlseen import DrumURLSeen, decode_payload, encode_payload
from drumbeat.settings import Settings, SettingsError, validate
from drumbeat.urls import fingerprint


def _fps(*values: int) -> np.ndarray:
    return np.array(values, np.uint64)


def test_a_fingerprint_remembered_is_seen_until_a_newer_one_takes_its_slot() -> None:
    cache = RecentFingerprints(64)  # 8 slots
    assert cache.entries == 8
    assert cache.unseen(_fps(5, 13, 6)).tolist() == [True, True, True]
    cache.remember(_fps(5, 6))
    assert cache.unseen(_fps(5, 13, 6, 14)).tolist() == [False, True, False, True]
    cache.remember(_fps(13))  # 13 = 5 + 8: the same slot
    assert cache.unseen(_fps(5, 13)).tolist() == [True, False]


def test_its_size_is_a_power_of_two_within_the_ram_given() -> None:
    assert RecentFingerprints(8).entries == 1
    assert RecentFingerprints(100).entries == 8
    assert RecentFingerprints(64 << 20).entries == 8 << 20
    with pytest.raises(ValueError):
        RecentFingerprints(7)


def test_a_fingerprint_of_zero_is_never_taken_for_remembered() -> None:
    cache = RecentFingerprints(64)
    assert cache.unseen(_fps(0)).tolist() == [True]  # the empty slots hold 0
    cache.remember(_fps(0))
    assert cache.unseen(_fps(0)).tolist() == [True]


def _delivered(seen: DrumURLSeen) -> list[tuple]:
    seen.flush()
    return [decode_payload(p) for p in seen.take_new()]


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3)), max_size=30), max_size=6),
    st.sampled_from([8, 64, 1 << 12]),
)
def test_urlseen_delivers_the_same_with_a_cache_of_any_size(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[tuple[int, int]]], cache_bytes: int
) -> None:
    # Batches of links (URL number, depth), some merged before the next arrive: with a
    # cache, even one of a single slot, the same URLs come out new with the same payloads
    # (the first copy's depth), in the same order; the cache drops only repeats.
    plain = DrumURLSeen(tmp_path_factory.mktemp("plain"), ram_bytes=1 << 20, fsync=False)
    cached = DrumURLSeen(
        tmp_path_factory.mktemp("cached"), ram_bytes=1 << 20, fsync=False, cache_bytes=cache_bytes
    )
    submitted = dropped = 0
    for i, batch in enumerate(batches):
        for seen in (plain, cached):
            by_depth: dict[int, list[str]] = {}
            for n, depth in batch:
                by_depth.setdefault(depth, []).append(f"http://h{n % 5}.test/{n}")
            for depth, links in by_depth.items():
                found = pack_found(links, depth, "http://via.test/")
                hits = seen.submit_packed(found.fingerprints, found.payloads, found.lengths)
                if seen is cached:
                    dropped += hits
                    submitted += len(links)
        if i % 2:
            assert _delivered(cached) == _delivered(plain)
    assert _delivered(cached) == _delivered(plain)
    assert len(cached) == len(plain)
    assert dropped <= submitted - len(plain)  # only copies of URLs sent before


def test_repeated_links_do_not_reach_drum_and_are_counted(tmp_path) -> None:
    seen = DrumURLSeen(tmp_path / "u", ram_bytes=1 << 20, fsync=False, cache_bytes=1 << 16)
    links = [f"http://a.test/{i}" for i in range(100)]
    assert (
        seen.submit([fingerprint(u) for u in links], [encode_payload(u, 1, None) for u in links])
        == 0
    )
    again = [*links[::2], "http://b.test/"]
    assert (
        seen.submit([fingerprint(u) for u in again], [encode_payload(u, 2, None) for u in again])
        == 50
    )
    assert seen.pending == 101  # the 50 repeats never went on to DRUM
    assert [u for u, *_ in _delivered(seen)] == [*links, "http://b.test/"]
    with pytest.raises(ValueError, match="2 payloads for 1 fingerprints"):
        seen.submit([fingerprint("http://c.test/")], [b"x", b"y"])


def test_known_says_which_links_submit_would_drop(tmp_path) -> None:
    links = [f"http://a.test/{i}" for i in range(4)]
    fps = np.array([fingerprint(u) for u in links], np.uint64)
    for cache_bytes, after in ((1 << 16, [True, True, False, False]), (0, [False] * 4)):
        seen = DrumURLSeen(
            tmp_path / str(cache_bytes), ram_bytes=1 << 20, fsync=False, cache_bytes=cache_bytes
        )
        assert seen.known(fps).tolist() == [False] * 4
        seen.submit(fps[:2].tolist(), [encode_payload(u, 1, None) for u in links[:2]])
        assert seen.known(fps).tolist() == after
        assert seen.submit(fps.tolist(), [encode_payload(u, 1, None) for u in links]) == sum(after)


def test_a_crawl_reopened_at_a_checkpoint_finds_again_what_it_lost(tmp_path) -> None:
    # URLs sent after the last checkpoint are lost when the crawl dies; the cache (in RAM)
    # goes with them, so their next copies reach URL-seen and come out new.
    seen = DrumURLSeen(tmp_path / "u", ram_bytes=1 << 20, cache_bytes=1 << 16)
    seen.submit([fingerprint("http://a.test/1")], [encode_payload("http://a.test/1", 1, None)])
    manifest = seen.commit()
    seen.submit([fingerprint("http://a.test/2")], [encode_payload("http://a.test/2", 1, None)])
    seen.drum.close()
    again = DrumURLSeen(tmp_path / "u", ram_bytes=1 << 20, manifest=manifest, cache_bytes=1 << 16)
    urls = ["http://a.test/1", "http://a.test/2"]
    assert (
        again.submit([fingerprint(u) for u in urls], [encode_payload(u, 1, None) for u in urls])
        == 0
    )
    assert [u for u, *_ in _delivered(again)] == urls


@pytest.mark.parametrize("value", [-1, 1, 7])
def test_a_cache_size_below_one_entry_is_refused(value: int) -> None:
    with pytest.raises(SettingsError, match="urlseen_cache_bytes"):
        validate(Settings(urlseen_cache_bytes=value))
    validate(Settings(urlseen_cache_bytes=0))
