from __future__ import annotations

import asyncio
import gc
import hashlib
import io
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from base64 import b32encode
from pathlib import Path

import pytest
from fastwarc.warc import WarcHeader, WarcRecord, WarcRecordType
from warcio.archiveiterator import ArchiveIterator

from drumbeat.fetch.response import FetchResponse
from drumbeat.store import warc
from drumbeat.store.warc import (
    OPEN_SUFFIX,
    WarcLocation,
    WarcWriter,
    iter_records,
    recover_directory,
)

REQUEST_HEAD = b"GET /p HTTP/1.1\r\nHost: example.test\r\nUser-Agent: drumbeat\r\n\r\n"


def response_head(body: bytes) -> bytes:
    # Odd spacing and a folded line: the block must keep the head byte for byte.
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type:text/html\r\nX-Folded: a\r\n  b\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    )


def body_for(i: int) -> bytes:
    return b"<html><body>" + (b"page %d " % i) * (50 + i % 200) + b"</body></html>"


def write_pages(writer: WarcWriter, n: int, start: int = 0) -> list[WarcLocation]:
    return [
        writer.write_fetch(
            f"http://example.test/p{i}",
            ip="127.0.0.1",
            request_head=REQUEST_HEAD,
            response_head=response_head(body_for(i)),
            body=body_for(i),
            truncated="length" if i % 3 == 0 else None,
            fetch_time=1_700_000_000.25 + i,
        )
        for i in range(start, start + n)
    ]


def sha1_label(data: bytes) -> str:
    return "sha1:" + b32encode(hashlib.sha1(data).digest()).decode()


def warc_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.endswith(".warc.gz"))


def test_round_trip_with_warcio(tmp_path: Path) -> None:
    with WarcWriter(tmp_path, gzip_level=1) as writer:
        locations = write_pages(writer, 20)
        assert [p.name for p in tmp_path.iterdir()] == [locations[0].filename + OPEN_SUFFIX]
    files = warc_files(tmp_path)
    assert [f.name for f in files] == [locations[0].filename]
    assert not list(tmp_path.glob("*" + OPEN_SUFFIX))

    records = list(iter_records(files[0]))  # digests are checked while reading
    assert records[0].rec_type == "warcinfo"
    assert records[0].header("WARC-Filename") == files[0].name
    assert [r.rec_type for r in records[1:]] == ["response", "request"] * 20
    by_offset = {r.offset: r for r in records}
    for i, loc in enumerate(locations):
        response = by_offset[loc.offset]
        assert response.length == loc.length
        request = records[records.index(response) + 1]
        body = body_for(i)
        assert response.rec_headers.protocol == "WARC/1.1"
        assert response.header("WARC-Target-URI") == f"http://example.test/p{i}"
        assert response.header("WARC-IP-Address") == "127.0.0.1"
        assert response.header("WARC-Truncated") == ("length" if i % 3 == 0 else None)
        assert response.header("WARC-Date") == time.strftime(
            "%Y-%m-%dT%H:%M:%S.250000Z", time.gmtime(1_700_000_000 + i)
        )
        assert response.header("WARC-Block-Digest") == sha1_label(response_head(body) + body)
        assert response.header("WARC-Payload-Digest") == sha1_label(body)
        assert response.content == body
        assert response.http_headers is not None
        assert response.http_headers.get_statuscode() == "200"
        assert request.header("WARC-Concurrent-To") == response.header("WARC-Record-ID")
        assert request.header("WARC-Block-Digest") == sha1_label(REQUEST_HEAD)
        assert request.header("WARC-Date") == response.header("WARC-Date")


def test_records_are_fastwarcs_own_serialization() -> None:
    """The writer takes a record's bytes from FastWARC's pickled state when a sample shows
    that is write()'s output (the fast path, live on the FastWARC this project installs);
    both must give what write(checksum_data=True) gives, digests included."""
    assert warc.state_is_written_record()
    body = body_for(7)
    block = response_head(body) + body

    def record() -> WarcRecord:
        made = WarcRecord()
        made.init_headers(
            record_type=WarcRecordType.response,
            record_urn=b"urn:uuid:00000000-0000-4000-8000-000000000007",
        )
        made.headers[WarcHeader.WARC_DATE] = "2023-11-14T22:13:20Z"
        made.headers[WarcHeader.WARC_TARGET_URI] = "http://example.test/p7"
        return made

    checked = record()
    checked.set_bytes_content(block)
    written = io.BytesIO()
    checked.write(written, checksum_data=True)  # FastWARC computes the digest
    for serialize in (warc.record_bytes, warc.written_bytes):
        ours = record()
        ours.headers[WarcHeader.WARC_BLOCK_DIGEST] = sha1_label(block)
        ours.set_bytes_content(block)
        assert serialize(ours) == written.getvalue()
    # The writer's own record has the same layout, but for its id and date.
    _, built = WarcWriter.build_record(
        WarcRecordType.response, [(WarcHeader.WARC_TARGET_URI, "http://example.test/p7")], block
    )
    assert _without_id_and_date(built) == _without_id_and_date(written.getvalue())


def _without_id_and_date(record: bytes) -> bytes:
    return re.sub(rb"(WARC-Record-ID|WARC-Date): [^\r]*\r\n", b"", record)


@pytest.mark.parametrize("size", [0, 1, 19, 20, 21, 64, 1000])
def test_sha1_label_is_base32_of_sha1(size: int) -> None:
    data = random.Random(size).randbytes(size)
    assert warc.sha1_label(data) == sha1_label(data)  # this file's, through base64


def test_location_reads_one_record_by_seeking(tmp_path: Path) -> None:
    with WarcWriter(tmp_path) as writer:
        locations = write_pages(writer, 5)
    path = tmp_path / locations[3].filename
    with open(path, "rb") as f:
        f.seek(locations[3].offset)
        member = f.read(locations[3].length)
    record = next(iter(ArchiveIterator(io.BytesIO(member), check_digests="raise")))
    assert record.rec_headers.get_header("WARC-Target-URI") == "http://example.test/p3"
    assert record.raw_stream.read() == body_for(3)
    assert str(locations[3]) == f"{locations[3].filename}:{locations[3].offset}"


def test_each_record_is_its_own_gzip_member(tmp_path: Path) -> None:
    with WarcWriter(tmp_path) as writer:
        write_pages(writer, 4)
    records = list(iter_records(warc_files(tmp_path)[0]))
    data = warc_files(tmp_path)[0].read_bytes()
    for r in records:
        assert data[r.offset : r.offset + 2] == b"\x1f\x8b"
    assert records[-1].offset + records[-1].length == len(data)


def test_rotation_by_size(tmp_path: Path) -> None:
    writer = WarcWriter(tmp_path, max_file_bytes=3_000, prefix="rot")
    locations = write_pages(writer, 30)
    writer.close()
    stats = writer.stats()
    files = warc_files(tmp_path)
    assert len(files) > 3
    assert stats.files_finished == len(files)
    assert {loc.filename for loc in locations} == {f.name for f in files}
    assert all(f.name.startswith("rot-") for f in files)
    responses = 0
    for f in files:
        records = list(iter_records(f))
        assert records[0].rec_type == "warcinfo"
        # A fetch never straddles files, and a file stops soon after the limit.
        assert [r.rec_type for r in records[1:]] == ["response", "request"] * (
            (len(records) - 1) // 2
        )
        responses += (len(records) - 1) // 2
        last_pair = records[-2].length + records[-1].length
        assert f.stat().st_size < 3_000 + last_pair
    assert responses == 30
    assert stats.records == 30 * 2 + len(files)


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_sync_off_loop_goes_on_through_writes_rotation_and_cancellation(tmp_path: Path) -> None:
    """The fsync runs on a thread while the loop writes and rotates; every record stays
    readable, and no descriptor is left open, even by a sync that was cancelled."""
    writer = WarcWriter(tmp_path, max_file_bytes=3_000)
    # Objects of earlier tests in this process that hold descriptors in reference
    # cycles: collected now, not by a collection in the middle of the count.
    gc.collect()
    before = open_descriptors()

    async def crawl() -> None:
        await writer.sync_off_loop()  # no file yet: nothing to do
        write_pages(writer, 5)
        syncing = asyncio.ensure_future(writer.sync_off_loop())
        await asyncio.sleep(0)  # the thread has the descriptor of the file now open
        write_pages(writer, 25, start=5)  # rotates, closing that file
        await syncing
        cancelled = asyncio.ensure_future(writer.sync_off_loop())
        await asyncio.sleep(0)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled

    asyncio.run(crawl())  # returns once its thread pool has finished
    assert writer.stats().files_finished > 3
    writer.close()
    assert open_descriptors() == before
    urls = [
        r.header("WARC-Target-URI")
        for f in warc_files(tmp_path)
        for r in iter_records(f)
        if r.rec_type == "response"
    ]
    assert urls == [f"http://example.test/p{i}" for i in range(30)]


class _SlowToClose(io.BufferedWriter):
    """A WARC file whose close takes a while after the file is closed (the writer
    forgets it only then): a sync from another thread finds it closed unless the
    writer's lock keeps it out."""

    def close(self) -> None:
        super().close()
        time.sleep(0.002)


def _slow_to_close(path: Path, mode: str = "r", buffering: int = -1, **kwargs):
    """``open``, with a new WARC file (mode "xb") slow to close."""
    if mode != "xb":
        return open(path, mode, buffering, **kwargs)
    return _SlowToClose(io.FileIO(path, "x"), buffering)


def test_syncs_from_the_loop_while_a_thread_writes_and_rotates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fetcher archives a lane's pages in a thread of its own while its event loop
    answers the manager's syncs: syncs and flushes from the loop, while another thread
    writes and rotates files every few records, all succeed, and every record is
    written whole, once, in order."""
    monkeypatch.setattr(warc, "open", _slow_to_close, raising=False)
    writer = WarcWriter(tmp_path, max_file_bytes=3_000)
    pages = 300

    async def crawl() -> int:
        loop = asyncio.get_running_loop()
        writing = loop.run_in_executor(
            None, lambda: [write_pages(writer, 10, start=i) for i in range(0, pages, 10)]
        )
        syncs = 0
        while not writing.done() and syncs < 100_000:
            writer.flush()
            if syncs % 20 == 0:
                await writer.sync_off_loop()
            else:
                await asyncio.sleep(0)
            syncs += 1
        await writing
        return syncs

    syncs = asyncio.run(crawl())
    writer.close()
    assert syncs > 1 and writer.stats().files_finished > 10
    urls = [
        r.header("WARC-Target-URI")
        for f in warc_files(tmp_path)
        for r in iter_records(f)
        if r.rec_type == "response"
    ]
    assert urls == [f"http://example.test/p{i}" for i in range(pages)]


def exchanges(n: int) -> list[FetchResponse]:
    """The exchanges write_pages writes, as the fetcher hands them over."""
    return [
        FetchResponse(
            url=f"http://example.test/p{i}",
            ip="127.0.0.1",
            request_head=REQUEST_HEAD,
            response_head=response_head(body_for(i)),
            body=body_for(i),
            truncated="length" if i % 3 == 0 else None,
            fetch_time=1_700_000_000.25 + i,
        )
        for i in range(n)
    ]


def test_write_fetches_is_write_fetch_for_each(tmp_path: Path) -> None:
    """A batch gives the records write_fetch gives one by one, in order (record IDs
    aside), rotates between exchanges, and returns each one's location."""
    (tmp_path / "one").mkdir()
    (tmp_path / "all").mkdir()
    with WarcWriter(tmp_path / "one", max_file_bytes=3_000) as writer:
        one_by_one = write_pages(writer, 30)
    with WarcWriter(tmp_path / "all", max_file_bytes=3_000) as writer:
        together = writer.write_fetches(exchanges(17)) + writer.write_fetches(exchanges(30)[17:])

    def records(directory: Path) -> list[tuple]:
        # Record IDs and the warcinfo's date are made at write time; member lengths and
        # so offsets follow from how they compress.
        made_now = ("WARC-Record-ID", "WARC-Concurrent-To", "WARC-Filename", "WARC-Block-Digest")
        return [
            (
                f.name.rsplit("-", 2)[-2],
                r.rec_type,
                r.content,
                [
                    (k, v)
                    for k, v in r.rec_headers.headers
                    if k not in made_now and not (r.rec_type == "warcinfo" and k == "WARC-Date")
                ],
            )
            for f in warc_files(directory)
            for r in iter_records(f)
        ]

    assert records(tmp_path / "all") == records(tmp_path / "one")
    assert len(warc_files(tmp_path / "all")) > 3
    assert len(together) == len(one_by_one) == 30
    for i, location in enumerate(together):
        assert isinstance(location, WarcLocation)
        with open(tmp_path / "all" / location.filename, "rb") as f:
            f.seek(location.offset)
            member = f.read(location.length)
        record = next(iter(ArchiveIterator(io.BytesIO(member), check_digests="raise")))
        assert record.rec_headers.get_header("WARC-Target-URI") == f"http://example.test/p{i}"


def test_write_fetches_returns_os_errors_and_raises_bugs_before_writing(tmp_path: Path) -> None:
    writer = WarcWriter(tmp_path / "gone")
    (tmp_path / "gone").rmdir()  # the disk refuses the file: each exchange says so
    failed = writer.write_fetches(exchanges(2))
    assert [type(x) for x in failed] == [FileNotFoundError, FileNotFoundError]
    (tmp_path / "gone").mkdir()
    broken = exchanges(3)
    broken[1].body = None  # type: ignore[assignment]  # a bug's stand-in
    with pytest.raises(TypeError):
        writer.write_fetches(broken)
    assert writer.stats().records == 0 and not list((tmp_path / "gone").iterdir())
    [location] = writer.write_fetches(exchanges(1))
    writer.close()
    assert isinstance(location, WarcLocation)
    assert [r.rec_type for r in iter_records(warc_files(tmp_path / "gone")[0])] == [
        "warcinfo",
        "response",
        "request",
    ]


def test_idle_writer_leaves_no_file_and_never_reuses_names(tmp_path: Path) -> None:
    WarcWriter(tmp_path).close()
    assert list(tmp_path.iterdir()) == []
    names = set()
    for _ in range(3):
        with WarcWriter(tmp_path) as writer:
            names.add(write_pages(writer, 1)[0].filename)
    assert len(names) == 3
    assert len(warc_files(tmp_path)) == 3


def test_write_after_close_fails(tmp_path: Path) -> None:
    writer = WarcWriter(tmp_path)
    writer.close()
    with pytest.raises(ValueError):
        write_pages(writer, 1)


def make_open_file(directory: Path, n: int) -> tuple[Path, list[int]]:
    """An `.open` file as a killed writer leaves it, and the end offset of each member."""
    writer = WarcWriter(directory)
    write_pages(writer, n)
    writer.sync()
    (path,) = directory.glob("*" + OPEN_SUFFIX)
    final = directory / path.name[: -len(OPEN_SUFFIX)]
    os.rename(path, final)
    ends = [r.offset + r.length for r in iter_records(final)]
    os.rename(final, path)
    return path, ends


@pytest.mark.parametrize("seed", range(6))
def test_recovery_after_torn_tail(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    src, ends = make_open_file(tmp_path / "src", 12)
    data = src.read_bytes()
    for trial in range(5):
        cut = rng.randrange(1, len(data))
        garbage = rng.randbytes(rng.choice([0, 1, 17, 500])) if trial % 2 else b""
        directory = tmp_path / f"t{trial}"
        directory.mkdir()
        path = directory / src.name
        path.write_bytes(data[:cut] + garbage)

        (result,) = recover_directory(directory)
        complete = [e for e in ends if e <= cut]
        assert result.records_kept == len(complete)
        if not complete:
            assert result.final_path is None
            assert list(directory.iterdir()) == []
            continue
        assert result.final_path == directory / src.name[: -len(OPEN_SUFFIX)]
        assert result.bytes_cut == cut + len(garbage) - complete[-1]
        assert list(directory.iterdir()) == [result.final_path]
        assert result.final_path.read_bytes() == data[: complete[-1]]
        assert len(list(iter_records(result.final_path))) == len(complete)


def test_recovery_keeps_intact_file_and_ignores_final_files(tmp_path: Path) -> None:
    _path, ends = make_open_file(tmp_path, 3)
    with WarcWriter(tmp_path) as writer:
        write_pages(writer, 1)
    (result,) = recover_directory(tmp_path)
    assert (result.bytes_cut, result.records_kept) == (0, len(ends))
    assert len(warc_files(tmp_path)) == 2
    assert recover_directory(tmp_path) == []


def test_recovery_skips_a_file_a_live_writer_holds(tmp_path: Path) -> None:
    writer = WarcWriter(tmp_path)
    write_pages(writer, 2)
    writer.flush()
    (path,) = tmp_path.glob("*" + OPEN_SUFFIX)
    size = path.stat().st_size
    assert recover_directory(tmp_path) == []
    assert path.stat().st_size == size
    write_pages(writer, 1)
    writer.close()
    assert len(list(iter_records(warc_files(tmp_path)[0]))) == 1 + 3 * 2


def test_recovery_cuts_at_a_corrupted_member(tmp_path: Path) -> None:
    path, ends = make_open_file(tmp_path, 5)
    data = bytearray(path.read_bytes())
    data[ends[2] + 40] ^= 0xFF  # inside the fourth member: CRC or inflate fails
    path.write_bytes(bytes(data))
    (result,) = recover_directory(tmp_path)
    assert result.records_kept == 3
    assert result.final_path is not None
    assert result.final_path.stat().st_size == ends[2]


CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from drumbeat.store.warc import WarcWriter
    body = b"<html>" + b"x" * 3000 + b"</html>"
    head = b"HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\n\\r\\n" % len(body)
    writer = WarcWriter(Path(sys.argv[1]), max_file_bytes=200_000, gzip_level=0)
    deadline = time.monotonic() + 20
    for i in range(1_000_000):
        writer.write_fetch(f"http://example.test/{i}", ip="127.0.0.1",
                           request_head=b"GET / HTTP/1.1\\r\\n\\r\\n", response_head=head,
                           body=body, truncated=None, fetch_time=time.time())
        if i % 50 == 0:
            writer.flush()
        if i == 200:
            print("ready", flush=True)
        if time.monotonic() > deadline:
            break
    """
)


@pytest.mark.parametrize("seed", range(3))
def test_recovery_after_sigkill(tmp_path: Path, seed: int) -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, env=env
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(random.Random(seed).uniform(0.0, 0.4))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL

    results = recover_directory(tmp_path)
    assert len(results) <= 1  # only the file being written was open
    assert not list(tmp_path.glob("*" + OPEN_SUFFIX))
    urls = []
    for f in warc_files(tmp_path):
        records = list(iter_records(f))
        assert records[0].rec_type == "warcinfo"
        urls += [r.header("WARC-Target-URI") for r in records if r.rec_type == "response"]
    # Files are read in name order = write order: no response was lost before the tail.
    numbers = [int(u.rsplit("/", 1)[1]) for u in urls]
    assert numbers == list(range(len(numbers)))
    assert len(numbers) > 200
