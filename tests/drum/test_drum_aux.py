"""AuxArray's vectorized gather and string encoding, and the callers' aux in compact form."""

from __future__ import annotations

from array import array
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from drumbeat.drum import AuxArray
from drumbeat.frontier.urlseen import DrumURLSeen, decode_payload, encode_payload, encode_payloads

items = st.lists(st.binary(max_size=12), max_size=30)


@settings(max_examples=200, deadline=None)
@given(items, st.data())
def test_take_matches_select(values: list[bytes], data: st.DataObject) -> None:
    aux = AuxArray.of([b"pad", *values])[1:]  # a slice: offsets do not start at 0
    idx = data.draw(st.lists(st.integers(0, max(0, len(values) - 1)), max_size=40 if values else 0))
    taken = aux.take(np.array(idx, np.intp))
    assert taken.tolist() == aux.select(np.array(idx, np.intp)) == [values[i] for i in idx]
    assert taken.offsets[0] == 0 and len(taken.blob) == taken.nbytes


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=8), max_size=20))
def test_from_strs_is_utf8_of_each_item(strs: list[str]) -> None:
    assert AuxArray.from_strs(strs).tolist() == [s.encode() for s in strs]


def test_encode_payloads_matches_encode_payload() -> None:
    urls = ["https://a.example/", "https://b.example/x?y=1", "https://xn--bcher-kva.example/"]
    depths, vias = [0, 3, 12], [None, "https://a.example/", "https://b.example/"]
    packed = encode_payloads(urls, depths, vias)
    assert packed.tolist() == [encode_payload(*t) for t in zip(urls, depths, vias)]
    assert [decode_payload(p) for p in packed] == list(zip(urls, depths, vias, [0, 0, 0]))


def test_urlseen_takes_payloads_as_auxarray(tmp_path: Path) -> None:
    seen = DrumURLSeen(tmp_path / "seen", ram_bytes=4 << 20, fsync=False)
    urls = [f"https://site{i % 7}.example/p{i % 11}" for i in range(60)]
    fps = [hash(u) & (2**64 - 1) for u in urls]
    seen.submit(fps[:30], encode_payloads(urls[:30], [1] * 30, [None] * 30))
    seen.submit(fps[30:], [encode_payload(u, 1, None) for u in urls[30:]])
    seen.flush()
    got = [decode_payload(p)[0] for p in seen.take_new()]
    assert got == list(dict.fromkeys(urls))


def test_from_lengths_reads_items_packed_back_to_back() -> None:
    aux = AuxArray.from_lengths(b"abcdef", array("I", [1, 0, 3, 2]).tobytes())
    assert aux.tolist() == [b"a", b"", b"bcd", b"ef"]
    assert len(AuxArray.from_lengths(b"", b"")) == 0
