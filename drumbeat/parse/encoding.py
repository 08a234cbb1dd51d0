"""A page's character encoding, found as a browser finds it, and the query encoding of its links.

The HTML Standard's encoding sniffing order: a byte order mark, then the charset of
the HTTP ``Content-Type``, then a ``<meta>`` declaration in the first 1024 bytes,
then a fallback for pages that declare nothing. The header and ``<meta>`` are read by
w3lib (Scrapy's), which maps labels as the Encoding Standard does ("latin1",
"iso-8859-1" and "ascii" are windows-1252, "gbk" is gb18030, ...).

An undeclared page is read as UTF-8 when all of it is valid UTF-8, else as
windows-1252, the fallback of browsers in most locales: text in a legacy encoding is
almost never valid UTF-8 once it holds a non-ASCII byte, and an undeclared UTF-8 page
is what a browser's detector finds UTF-8 too.

The WHATWG URL parser encodes a link's path as UTF-8 but its query in the document's
encoding (:func:`encode_queries`); ada-url, which joins links, knows only UTF-8.
"""

from __future__ import annotations

import codecs
from functools import lru_cache
from urllib.parse import quote_from_bytes

from w3lib.encoding import html_body_declared_encoding, http_content_type_encoding, to_unicode

__all__ = ["UTF8", "encode_queries", "encode_query", "sniff", "to_utf8", "utf8_queries"]

UTF8 = "utf-8"
FALLBACK = "cp1252"  # windows-1252
_BOMS = (
    (codecs.BOM_UTF8, UTF8),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
)
_PRESCAN_BYTES = 1024  # where the Standard's prescan stops looking
# Labels Python knows and the Encoding Standard does not: ignored as unknown labels.
# UTF-7 above all: it spells "<" in ASCII letters, so a page could smuggle markup.
_NOT_WHATWG = frozenset({"utf-7", "utf-32", "utf-32-be", "utf-32-le"})
# Documents in these encodings give their links UTF-8 queries (the URL Standard's
# "get an output encoding").
_UTF8_QUERY_CODECS = frozenset({UTF8, "utf-16-be", "utf-16-le"})
_VALIDATE_CHUNK = 1 << 20
# The special-query percent-encode set, less what ada-url encodes the same way: the
# bytes a query keeps as they are.
_QUERY_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in "\"#<>'")
_C0_AND_SPACE = "".join(map(chr, range(0x21)))


def sniff(body: bytes, content_type: str | None) -> tuple[str, int]:
    """The Python codec of the HTML ``body`` served with the ``Content-Type`` header
    value ``content_type``, and the length of its byte order mark (0 without)."""
    if body and body[0] in b"\xef\xfe\xff":
        for bom, codec in _BOMS:
            if body.startswith(bom):
                return codec, len(bom)
    declared = None if content_type is None else _http_codec(content_type)
    if declared is not None:
        return declared, 0
    head = body[:_PRESCAN_BYTES]
    if b"charset" in head.lower():  # a declaration spells it; most pages have none
        declared = _meta_codec(head)
        if declared is not None:
            return declared, 0
    return _undeclared_codec(body), 0


def to_utf8(body: bytes, content_type: str | None) -> tuple[bytes, str]:
    """``body`` as UTF-8 without a byte order mark, and the codec it was read with.

    A UTF-8 page is returned as it is (the parser replaces invalid sequences); another
    is decoded, its invalid sequences replaced with U+FFFD as the Standard says."""
    codec, bom = sniff(body, content_type)
    if bom:
        body = body[bom:]
    if codec == UTF8:
        return body, codec
    return to_unicode(body, codec).encode(UTF8, "replace"), codec


def utf8_queries(codec: str) -> bool:
    """Whether the links of a page read with ``codec`` take UTF-8 queries."""
    return codec in _UTF8_QUERY_CODECS


def encode_queries(refs: list[str], codec: str) -> list[str]:
    """``refs`` of a page read with ``codec``, each query percent-encoded in ``codec``
    where it holds non-ASCII text, as the URL Standard's parser does with an encoding
    override; a character ``codec`` lacks becomes ``%26%23NNN%3B`` (``&#NNN;``)."""
    return [ref if ref.isascii() else encode_query(ref, codec) for ref in refs]


def encode_query(ref: str, codec: str) -> str:
    """One reference of :func:`encode_queries`."""
    if ref.isascii():
        return ref
    ref = ref.strip(_C0_AND_SPACE)  # as the URL parser does first
    end = ref.find("#")
    end = len(ref) if end < 0 else end
    start = ref.find("?", 0, end) + 1
    if not start or ref[start:end].isascii():
        return ref
    query = ref[start:end].replace("\t", "").replace("\n", "").replace("\r", "")
    encoded = quote_from_bytes(query.encode(codec, "drumbeat_url_ncr"), safe=_QUERY_SAFE)
    return ref[:start] + encoded + ref[end:]


def _url_ncr(error: UnicodeError) -> tuple[str, int]:
    """Encode error handler: each character as an escaped HTML numeric reference."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    chars = error.object[error.start : error.end]
    return "".join(f"%26%23{ord(c)}%3B" for c in chars), error.end


codecs.register_error("drumbeat_url_ncr", _url_ncr)


@lru_cache(maxsize=256)
def _http_codec(content_type: str) -> str | None:
    """The codec a Content-Type's charset names; None when it names none we read.
    Cached: a crawl sees a few distinct values ("text/html; charset=utf-8")."""
    codec = _readable(http_content_type_encoding(content_type))
    return "utf-16-le" if codec == "utf-16" else codec  # the label "utf-16" is LE


def _meta_codec(head: bytes) -> str | None:
    """The codec a ``<meta>`` in ``head`` declares; None when none we read. A UTF-16
    declaration means UTF-8, as the Standard says: ASCII bytes declared it."""
    codec = _readable(html_body_declared_encoding(head))
    if codec is not None and codec.startswith("utf-16"):
        return UTF8
    return codec


@lru_cache(maxsize=256)
def _readable(codec: str | None) -> str | None:
    """``codec`` if it is a text encoding of the Encoding Standard's, else None."""
    if codec is None or codec in _NOT_WHATWG:
        return None
    try:
        b"a".decode(codec)  # LookupError: base64, rot13 and the like are no text encodings
    except UnicodeDecodeError:
        pass  # a text encoding that cannot read "a" (none of the Standard's)
    except LookupError:
        return None
    return codec


def _undeclared_codec(body: bytes) -> str:
    """UTF-8 when ``body`` is valid UTF-8, else windows-1252; validated by chunks, so
    memory stays flat. A sequence cut by the end of the body is valid: a body cut at
    the size limit may end in the middle of a character."""
    if body.isascii():
        return UTF8
    decoder = codecs.getincrementaldecoder(UTF8)()
    view = memoryview(body)
    try:
        for start in range(0, len(body), _VALIDATE_CHUNK):
            decoder.decode(view[start : start + _VALIDATE_CHUNK])
    except UnicodeDecodeError:
        return FALLBACK
    return UTF8
