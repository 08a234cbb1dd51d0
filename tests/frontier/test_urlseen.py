"""URL-seen on DRUM: new URLs come out once, in order, and roll back with a checkpoint."""

from itertools import islice

from drumbeat.fetcher_links import pack_found
from drumbeat.frontier.urlseen import DrumURLSeen, decode_payload, encode_payload
from drumbeat.urls import fingerprint


def _submit(seen: DrumURLSeen, urls: list[str], depth: int = 1) -> None:
    seen.submit(
        [fingerprint(u) for u in urls], [encode_payload(u, depth, "http://v.test/") for u in urls]
    )


def _new(seen: DrumURLSeen) -> list[str]:
    seen.flush()
    return [decode_payload(p)[0] for p in seen.take_new()]


def test_new_urls_come_out_once_in_arrival_order(tmp_path):
    seen = DrumURLSeen(tmp_path / "u", ram_bytes=1 << 20, fsync=False)
    _submit(seen, ["http://a.test/2", "http://a.test/1", "http://a.test/2"])
    assert _new(seen) == ["http://a.test/2", "http://a.test/1"]
    _submit(seen, ["http://a.test/1", "http://b.test/", "http://a.test/3"])
    assert _new(seen) == ["http://b.test/", "http://a.test/3"]
    assert len(seen) == 4 and seen.pending == 0
    assert decode_payload(encode_payload("http://x.test/", 3, None)) == (
        "http://x.test/",
        3,
        None,
        0,
    )
    # A redirect's target carries its hop count; the fetcher packs it the same way.
    assert decode_payload(encode_payload("http://x.test/", 3, "http://v.test/", 2)) == (
        "http://x.test/",
        3,
        "http://v.test/",
        2,
    )
    found = pack_found(["http://x.test/"], 3, "http://v.test/", 2)
    assert found.payloads_list() == [encode_payload("http://x.test/", 3, "http://v.test/", 2)]


def test_reopening_with_a_manifest_rolls_back_to_it(tmp_path):
    seen = DrumURLSeen(tmp_path / "u", ram_bytes=1 << 20)
    _submit(seen, ["http://a.test/1"])
    assert _new(seen) == ["http://a.test/1"]
    _submit(seen, ["http://a.test/2"])  # pending at the checkpoint: replayed after reopening
    manifest = seen.commit()
    _submit(seen, ["http://a.test/3"])
    assert _new(seen) == ["http://a.test/2", "http://a.test/3"]  # after the checkpoint
    again = DrumURLSeen(tmp_path / "u", ram_bytes=1 << 20, manifest=manifest)
    _submit(again, ["http://a.test/1", "http://a.test/3"])
    assert _new(again) == ["http://a.test/2", "http://a.test/3"]


def test_small_checks_wait_for_one_drum_submit_and_a_commit_keeps_them(tmp_path):
    """A few URLs at a time are gathered for one DRUM submit (GATHER_URLS): they count
    as pending, and a commit gives them to DRUM, so that a checkpoint holds them."""
    seen = DrumURLSeen(tmp_path / "u", ram_bytes=1 << 20)
    _submit(seen, ["http://a.test/1", "http://a.test/2"])
    _submit(seen, ["http://a.test/3"])
    assert seen.pending == 3 and seen.drum.stats().pending == 0
    manifest = seen.commit()
    assert seen.drum.stats().pending == 3
    again = DrumURLSeen(tmp_path / "u", ram_bytes=1 << 20, manifest=manifest)
    _submit(again, ["http://a.test/2", "http://a.test/4"])
    assert _new(again) == [f"http://a.test/{i}" for i in (1, 2, 3, 4)]
    # Enough URLs go to DRUM at once, in the order they came.
    many = [f"http://b.test/{i}" for i in range(DrumURLSeen.GATHER_URLS)]
    _submit(again, many[:10])
    assert again.drum.stats().pending == 0
    _submit(again, many[10:])
    assert again.drum.stats().pending == len(many)
    assert _new(again) == many


def test_a_round_taken_partway_goes_on_from_there_after_reopening(tmp_path):
    # A checkpoint may fall in the middle of a round's new URLs (the manager places a
    # large one over many turns): reopened at it, the round goes on where it was left,
    # across DRUM's chunks, and a second commit before anything is taken keeps the place.
    urls = [f"http://a.test/{i}" for i in range(20_000)]
    seen = DrumURLSeen(tmp_path / "u", ram_bytes=1 << 20)
    _submit(seen, urls)
    seen.flush()
    new = seen.take_new()
    assert [decode_payload(p)[0] for p in islice(new, 7_000)] == urls[:7_000]
    manifest = seen.commit()
    assert len(list(islice(new, 2_000))) == 2_000  # taken after the checkpoint: lost
    seen.drum.close()
    again = DrumURLSeen(tmp_path / "u", ram_bytes=1 << 20, manifest=manifest)
    manifest = again.commit()
    again.drum.close()
    again = DrumURLSeen(tmp_path / "u", ram_bytes=1 << 20, manifest=manifest)
    _submit(again, ["http://a.test/0", "http://b.test/"])
    again.flush()
    assert [decode_payload(p)[0] for p in again.take_new()] == [*urls[7_000:], "http://b.test/"]
    # Taken to its end: nothing of the round comes out after reopening.
    manifest = again.commit()
    again.drum.close()
    last = DrumURLSeen(tmp_path / "u", ram_bytes=1 << 20, manifest=manifest)
    assert list(last.take_new()) == []


def test_without_a_checkpoint_the_directory_starts_empty(tmp_path):
    seen = DrumURLSeen(tmp_path / "u", ram_bytes=1 << 20)
    _submit(seen, ["http://a.test/1"])
    assert _new(seen) == ["http://a.test/1"]
    seen.commit()
    fresh = DrumURLSeen(tmp_path / "u", ram_bytes=1 << 20)
    _submit(fresh, ["http://a.test/1"])
    assert _new(fresh) == ["http://a.test/1"]
