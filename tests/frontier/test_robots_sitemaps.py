"""robots.txt Sitemap lines (drumbeat.frontier.robots.robots_sitemaps)."""

from __future__ import annotations

from drumbeat.frontier.robots import robots_sitemaps, select_group


def test_sitemap_lines_in_any_place_and_spelling() -> None:
    text = (
        "Sitemap: https://a.test/s1.xml\nUser-agent: other\nDisallow: /\n"
        "sitemap:/relative.xml\nUser-agent: *\nSite-map: https://a.test/s2.xml\nDisallow: /x\n"
    )
    assert robots_sitemaps(text, 10) == [
        "https://a.test/s1.xml",
        "/relative.xml",
        "https://a.test/s2.xml",
    ]
    assert robots_sitemaps(text, 2) == ["https://a.test/s1.xml", "/relative.xml"]
    # They are no rules: the group the crawler follows is the same without them.
    assert "itemap" not in select_group(text, "drumbeat")


def test_no_sitemap_lines_or_garbage() -> None:
    assert robots_sitemaps("User-agent: *\nDisallow: /\n", 10) == []
    assert robots_sitemaps("\x00\xff sitemap garbage", 10) == []
