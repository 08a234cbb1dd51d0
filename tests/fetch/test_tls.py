"""HTTPS through both HTTP clients, against a real TLS server on loopback.

The server's certificate comes from a throw-away CA (trustme) that the system does not
trust, as a self-signed or private-CA site would: with ``verify_tls`` (the default) the
fetch fails with ``tls:certificate``; without it, the page is fetched and its heads are
the bytes exchanged inside TLS, ready for WARC. A server that speaks no TLS on the port
gives ``tls:error``. Loopback only.
"""

from __future__ import annotations

import asyncio
import ssl

import pytest
import trustme

from drumbeat.fetch.curl import CurlHttpClient
from drumbeat.fetch.guard import AddressPolicy
from drumbeat.fetch.http import AiohttpClient
from drumbeat.settings import Settings

BODY = b"<html><body><a href='/next'>next</a></body></html>"
CLIENTS = [AiohttpClient, CurlHttpClient]


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        # Inside TLS: the request's head. Without TLS: whatever arrives (a ClientHello),
        # which is then answered in plain HTTP.
        if writer.get_extra_info("ssl_object") is not None:
            await reader.readuntil(b"\r\n\r\n")
        else:
            await reader.read(1)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
            b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY
        )
        await writer.drain()
    except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
        pass  # a client that refused our certificate hangs up during the handshake
    finally:
        writer.close()


async def _fetch(client_class, url: str, *, verify_tls: bool):
    client = client_class(
        user_agent="drumbeat-test",
        policy=AddressPolicy(allow_loopback=True),
        resolver=None,
        total_timeout_s=10,
        verify_tls=verify_tls,
    )
    try:
        return await client.fetch(url, "127.0.0.1")
    finally:
        await client.close()


async def _with_server(tls: bool, client_class, verify_tls: bool):
    ctx = None
    if tls:
        ca = trustme.CA()
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("localhost").configure_cert(ctx)
    server = await asyncio.start_server(_serve, "127.0.0.1", 0, ssl=ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        return await _fetch(client_class, f"https://localhost:{port}/page", verify_tls=verify_tls)
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("client_class", CLIENTS)
def test_an_untrusted_certificate_is_tls_certificate(client_class) -> None:
    response = asyncio.run(_with_server(True, client_class, verify_tls=True))
    assert response.status is None
    assert response.error == "tls:certificate"
    assert response.body == b""


@pytest.mark.parametrize("client_class", CLIENTS)
def test_without_verification_the_page_is_fetched_for_the_archive(client_class) -> None:
    response = asyncio.run(_with_server(True, client_class, verify_tls=False))
    assert response.error is None and response.status == 200
    assert response.body == BODY and response.ip == "127.0.0.1"
    assert response.response_head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert response.response_head.endswith(b"\r\n\r\n")
    assert response.request_head.startswith(b"GET /page HTTP/1.1\r\n")
    assert b"\r\nHost: localhost:" in response.request_head


@pytest.mark.parametrize("client_class", CLIENTS)
def test_a_server_without_tls_is_tls_error(client_class) -> None:
    response = asyncio.run(_with_server(False, client_class, verify_tls=False))
    assert response.status is None
    assert response.error == "tls:error"


def test_verification_is_on_by_default() -> None:
    assert Settings().tls_verify is True
