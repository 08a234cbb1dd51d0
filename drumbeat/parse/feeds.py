"""RSS and Atom feeds: the root elements that name one and the link of each item.

The XML itself is read by :func:`drumbeat.parse.sitemaps.read_xml_links`, which streams
sitemaps and feeds alike through one safe, bounded parser; this module says what a
feed's records are and where their links stand:

* RSS 2.0 (``<rss>``): ``channel/item/link``, the link as text;
* RSS 1.0 (``<rdf:RDF>``): ``item/link`` in the RSS 1.0 namespace, as text;
* Atom (``<feed>`` in the Atom namespace): ``entry/link``, its ``href``, when its
  ``rel`` is absent or ``alternate`` (``self``, ``edit``, ``enclosure`` and the like
  point at the feed's machinery, not at the item's page).
"""

from __future__ import annotations

from typing import Final

from lxml import etree

RSS: Final = "rss"
ATOM: Final = "atom"

ATOM_NS: Final = "{http://www.w3.org/2005/Atom}"
RSS1_NS: Final = "{http://purl.org/rss/1.0/}"
RDF_ROOT: Final = "{http://www.w3.org/1999/02/22-rdf-syntax-ns#}RDF"

# Media types a feed is served as. text/xml and application/xml may hold one too: the
# root element decides (drumbeat.parse.sitemaps.read_xml_links).
FEED_TYPES: Final = frozenset(
    {"application/rss+xml", "application/atom+xml", "application/rdf+xml"}
)


def feed_records(root_tag: str) -> tuple[str, str, str] | None:
    """For a document whose root element is ``root_tag`` (Clark notation), the feed's
    kind, its records' tag and their link's tag; None when it is no feed."""
    if root_tag == "rss":
        return RSS, "item", "link"
    if root_tag == RDF_ROOT:
        return RSS, RSS1_NS + "item", RSS1_NS + "link"
    if root_tag == ATOM_NS + "feed":
        return ATOM, ATOM_NS + "entry", ATOM_NS + "link"
    return None


def item_link(kind: str, record: etree._Element, link_tag: str) -> str | None:
    """The link of one feed item (see the module docstring); None when it has none."""
    for child in record.iterchildren(link_tag):
        if kind == ATOM:
            rel = child.get("rel")
            href = child.get("href")
            if href and (rel is None or str(rel).strip().lower() == "alternate"):
                return str(href).strip()
        elif child.text:
            return str(child.text).strip() or None
    return None
