"""QR: URLs wait on disk for robots.txt and are replayed by generations."""

from drumbeat.frontier.qr import RobotsWaitQueue
from drumbeat.testing import FakeClock


def make(tmp_path, clock, state=None, **kw):
    return RobotsWaitQueue(
        tmp_path / "qr", state=state, max_wait_s=30.0, clock=clock, fsync=False, **kw
    )


def test_a_generation_waits_for_the_requests_issued_up_to_its_close(tmp_path):
    clock = FakeClock(100.0)
    qr = make(tmp_path, clock)
    gen = qr.issue()
    qr.working("http://a.test", gen)
    qr.add(b"http://a.test/1")
    qr.add(b"http://a.test/2")
    clock.now += 1.5
    assert qr.replay(10) == []  # a.test's robots.txt is not answered yet
    later = qr.issue()  # a request issued after the first generation closed
    qr.working("http://b.test", later)
    qr.add(b"http://b.test/1")
    qr.answered("http://a.test")
    assert qr.replay(10) == [b"http://a.test/1", b"http://a.test/2"]
    clock.now += 1.5
    assert qr.replay(10) == []  # b.test is still out
    qr.answered("http://b.test")
    assert qr.replay(1) == [b"http://b.test/1"]
    assert len(qr) == 0 and qr.repeats == 0


def test_a_slow_answer_holds_urls_back_no_longer_than_max_wait(tmp_path):
    clock = FakeClock(100.0)
    qr = make(tmp_path, clock)
    qr.working("http://slow.test", qr.issue())
    qr.add(b"u1")
    clock.now += 29
    assert qr.replay(10) == []
    clock.now += 1
    assert qr.replay(10) == [b"u1"]
    assert qr.repeats == 1  # it will pass through QR again


def test_min_wait_keeps_retry_urls_from_cycling(tmp_path):
    clock = FakeClock(100.0)
    qr = make(tmp_path, clock, min_wait_s=30.0)
    qr.add(b"u1")
    clock.now += 5
    assert qr.replay(10) == []
    clock.now += 25
    assert qr.replay(10) == [b"u1"]


def test_commit_and_reopen_replays_at_once(tmp_path):
    clock = FakeClock(100.0)
    qr = make(tmp_path, clock)
    qr.working("http://a.test", qr.issue())
    for i in range(5):
        qr.add(b"u%d" % i)
    state = qr.commit()
    qr.add(b"after-commit")
    qr.close()
    again = make(tmp_path, clock, state=state)
    assert len(again) == 5
    assert again.replay(3) == [b"u0", b"u1", b"u2"]  # nothing is known to be outstanding
    assert again.replay(10) == [b"u3", b"u4"]
