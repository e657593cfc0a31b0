"""Clients and raw-socket helpers shared by the fake model server tests."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any

import anthropic
import openai
from google import genai
from google.genai import types as genai_types

from flowproof.testing import (
    FakeModelServer,
)

MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]


#: The SDK clients made for the test running now, closed after it (tests/testing/conftest.py):
#: a client left to the garbage collector leaks its pooled socket into whichever test runs then.
OPEN_CLIENTS: list[Any] = []


def openai_client(server: FakeModelServer) -> openai.OpenAI:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="test-key", max_retries=0, timeout=10)
    OPEN_CLIENTS.append(client)
    return client


def anthropic_client(server: FakeModelServer) -> anthropic.Anthropic:
    client = anthropic.Anthropic(base_url=server.url, api_key="test-key", max_retries=0, timeout=10)
    OPEN_CLIENTS.append(client)
    return client


def gemini_client(server: FakeModelServer) -> genai.Client:
    client = genai.Client(api_key="test-key", http_options=genai_types.HttpOptions(base_url=server.url))
    OPEN_CLIENTS.append(client)
    return client


def close_clients() -> None:
    """Close every client `openai_client`, `anthropic_client` and `gemini_client` made."""
    while OPEN_CLIENTS:
        OPEN_CLIENTS.pop().close()


def raw_post(server: FakeModelServer, path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    """POST with http.client and return status, lowercase headers and the whole body bytes."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"content-type": "application/json"})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def sse_data(raw: bytes) -> list[str]:
    """The data lines of an SSE body, in order."""
    return [line[len("data: "):] for line in raw.decode().splitlines() if line.startswith("data: ")]


def dechunk(payload: bytes) -> tuple[list[bytes], bytes]:
    """The chunk payloads of a chunked HTTP body, and what follows the terminating chunk."""
    chunks: list[bytes] = []
    while True:
        size_line, _, payload = payload.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return chunks, payload
        chunks.append(payload[:size])
        assert payload[size : size + 2] == b"\r\n"
        payload = payload[size + 2 :]


def raw_exchange(server: FakeModelServer, path: str, body: bytes) -> bytes:
    """POST over a bare socket (Connection: close) and return every byte the server sent."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                     % (path.encode(), len(body), body))
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    return raw
