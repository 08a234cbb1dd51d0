"""drumbeat bench site: its reading of nginx's log, and its skip where the site is missing."""

from __future__ import annotations

from drumbeat.bench import benchmarks, site


def test_log_gives_pages_overlap_and_gaps(tmp_path):
    log = tmp_path / "access.log"
    log.write_text(
        # $msec $request_time $connection $status $request_uri
        "10.000 0.000 1 404 /robots.txt\n"
        "10.020 0.010 1 200 /en/index.html\n"
        "10.050 0.020 2 200 /en/c%3D.html\n"
        "10.045 0.010 1 200 /en/cpp.html\n"  # overlaps the one before
        "10.060 0.000 1 200 /common/ext.css\n"
        "10.070 0.000 1 404 /en/gone.html\n"
        "garbage\n"
    )
    pages, requests, span, most, gap, conns = site.read_log(log)
    assert pages == {"/en/index.html", "/en/c=.html", "/en/cpp.html"}
    assert requests == 6
    assert abs(span - 0.070) < 1e-9
    assert most == 2 and conns == 2
    assert gap is not None and gap < 0  # two requests were in flight at once


def test_one_connection_log_has_no_overlap(tmp_path):
    log = tmp_path / "access.log"
    log.write_text("".join(f"{10 + k * 0.01:.3f} 0.004 1 200 /p/{k}.html\n" for k in range(5)))
    pages, _, _, most, gap, _ = site.read_log(log)
    assert len(pages) == 5 and most == 1
    assert gap is not None and abs(gap - 0.006) < 1e-9


def test_skips_with_a_message_without_the_doc_package(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(site, "DOC_ROOT", tmp_path / "absent")
    assert site.main(["--quick"]) == 0
    err = capsys.readouterr().err
    assert "skipped" in err and site.DOC_PACKAGE in err and "install-bench" in err


def test_is_listed():
    assert "site" in benchmarks()


def test_instant_requests_count_as_in_flight(tmp_path):
    log = tmp_path / "access.log"
    log.write_text(
        "10.000 0.000 1 200 /a.html\n10.000 0.000 2 200 /b.html\n10.005 0.000 1 200 /c.html\n"
    )
    assert site.read_log(log)[3] == 1
