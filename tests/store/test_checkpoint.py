import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drumbeat.checkpoint import CheckpointError, CheckpointMeta, Checkpoints, queue_line


def test_write_and_read_back(tmp_path):
    cps = Checkpoints(tmp_path)
    assert cps.current() is None

    def save_extra(directory):
        (directory / "extra.txt").write_text("saved with the checkpoint")

    rows = [
        ("http://a.test/", 0, None),
        ("http://a.test/x", 1, "http://a.test/"),
        ("http://a.test/y", 2, "http://a.test/x", 1),
    ]  # a redirect's target: its hops
    meta = CheckpointMeta(seeds=["http://a.test/"], pages_done=5, urlseen_manifest={"seq": 3})
    path = cps.write(meta, rows, [save_extra])
    assert cps.current() == path
    assert list(cps.read_queue(path)) == [(*r, 0)[:4] for r in rows]
    assert cps.read_meta(path) == meta
    assert (path / "extra.txt").read_text() == "saved with the checkpoint"
    second = cps.write(CheckpointMeta(), [], [])
    assert cps.current() == second and not path.exists()


def test_a_half_written_checkpoint_is_never_live(tmp_path):
    cps = Checkpoints(tmp_path)
    live = cps.write(CheckpointMeta(pages_done=1), [], [])
    # A crash mid-write leaves a directory CURRENT does not name: it is ignored and replaced.
    (cps.root / "ckpt-000002").mkdir()
    (cps.root / "ckpt-000002" / "queue.jsonl").write_text('["tor')
    assert cps.current() == live
    assert cps.read_meta(cps.write(CheckpointMeta(pages_done=2), [], [])).pages_done == 2


def test_corruption_names_the_file(tmp_path):
    cps = Checkpoints(tmp_path)
    live = cps.write(CheckpointMeta(), [("http://a.test/", 0, None)], [])
    (live / "state.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="state.json"):
        cps.read_meta(live)
    (live / "queue.jsonl").write_text('["http://a.test/", 0\n')
    with pytest.raises(CheckpointError, match="queue.jsonl line 1"):
        list(cps.read_queue(live))


@settings(max_examples=300, deadline=None)
@given(
    st.text(), st.integers(0, 1 << 40), st.none() | st.text(), st.none() | st.integers(0, 1 << 20)
)
def test_queue_lines_are_json_dumps_output(url, depth, via, hops):
    row = (url, depth, via) if hops is None else (url, depth, via, hops)
    assert queue_line(*row) == json.dumps(list(row), ensure_ascii=False) + "\n"
