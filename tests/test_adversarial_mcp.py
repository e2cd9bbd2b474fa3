"""The MCP route under hostile clients (issue 49): bad JSON-RPC, oversized input, unknown tools, no key.

Against a real `extractor serve` (scripted engine) with API keys: every answer is a 4xx or a tool
error naming the problem, never a 5xx, and nothing is left in flight or stuck afterwards.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from extractor.server.mcp import tools

from .conftest import LANDMARK_TEXT
from .live import served

pytestmark = pytest.mark.adversarial
KEY = "k-adversarial-mcp-01"
AUTH = {"authorization": f"Bearer {KEY}"}
MCP_HEADERS = {**AUTH, "accept": "application/json, text/event-stream", "content-type": "application/json"}
INITIALIZE = (
    b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", '
    b'"capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}'
)


def statuses(metrics: str) -> dict[str, float]:
    """``/mcp``'s request counts by status."""
    found: dict[str, float] = {}
    for line in metrics.splitlines():
        match = re.match(r'extractor_requests_total\{route="/mcp",status="(\d+)",task="-"\} (\S+)', line)
        if match:
            found[match[1]] = float(match[2])
    return found


def test_hostile_mcp_requests_get_4xx_or_tool_errors_and_nothing_sticks(tmp_path: Path) -> None:
    env = {"EXTRACTOR_API_KEYS": KEY, "EXTRACTOR_MAX_BODY_BYTES": "65536", "EXTRACTOR_MAX_TEXT_CHARS": "2000"}
    with served(tmp_path, env=env) as (_, url), httpx.Client(base_url=url, timeout=30) as http:
        mcp = url + "/mcp"
        raw: list[tuple[str, dict[str, str], bytes, set[int]]] = [
            ("no key", {k: v for k, v in MCP_HEADERS.items() if k != "authorization"}, INITIALIZE, {401}),
            ("a wrong key", {**MCP_HEADERS, "authorization": "Bearer nope"}, INITIALIZE, {401}),
            ("not JSON", MCP_HEADERS, b'{"jsonrpc": "2.0", "id": 1, "method": ', {400}),
            ("a duplicate key", MCP_HEADERS, b'{"jsonrpc": "2.0", "jsonrpc": "2.0", "id": 1}', {400}),
            ("nesting", MCP_HEADERS, b"[" * 100 + b"]" * 100, {400}),
            ("not JSON-RPC", MCP_HEADERS, b'{"hello": "world"}', {400}),
            ("an empty batch", MCP_HEADERS, b"[]", {400}),
            ("a string", MCP_HEADERS, b'"initialize"', {400}),
            ("a call before initialize", MCP_HEADERS, b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}', {400}),
            ("an unknown session", {**MCP_HEADERS, "mcp-session-id": "nope"}, INITIALIZE, {400, 404}),
            ("over the body limit", MCP_HEADERS, b'{"x": "' + b"a" * 70_000 + b'"}', {413}),
            ("any accept header", {**MCP_HEADERS, "accept": "*/*"}, INITIALIZE, {200, 406}),
            ("not JSON at all", {**MCP_HEADERS, "content-type": "text/plain"}, INITIALIZE, {400, 415}),
        ]
        for case, headers, body, expected in raw:
            answer = http.post(mcp, content=body, headers=headers)
            assert answer.status_code in expected, (case, answer.status_code, answer.text[:300])
        assert http.get(mcp, headers=AUTH).status_code in {400, 404, 405, 406}
        assert http.delete(mcp, headers={**AUTH, "mcp-session-id": "nope"}).status_code in {400, 404}
        assert http.put(mcp, headers=AUTH).status_code == 405

        async def calls() -> list[Any]:
            client = httpx2.AsyncClient(headers=AUTH, timeout=30)
            async with Client(streamable_http_client(mcp, http_client=client)) as session:
                return [
                    await session.call_tool("nope", {"text": "x"}),
                    await session.call_tool("landmark_slots", {"text": "x" * 2001}),
                    await session.call_tool("landmark_slots", {"text": 7}),
                    await session.call_tool("landmark_slots", {"document": {"content": "%%%"}}),
                    await session.call_tool("landmark_slots", {"text": LANDMARK_TEXT}),
                ]

        *refused, fine = asyncio.run(calls())
        kinds = [(r.meta or {})[tools.ERROR_META]["error"] for r in refused]
        assert kinds == ["not_found", "too_large", "bad_request", "bad_document"]
        assert all(r.is_error for r in refused) and not fine.is_error
        metrics = http.get("/metrics", headers=AUTH).text
        counted = statuses(metrics)
        assert counted and not [s for s in counted if s.startswith("5")], counted
        assert "extractor_in_flight 0.0" in metrics and "extractor_queue_depth 0.0" in metrics
        assert http.get("/healthz").status_code == 200
