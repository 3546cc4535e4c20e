"""MCP ``resources``: the workspace's files, listed in pages and read through the pool with
``list_directory`` and ``read_file``, confined like them; driven by the official MCP client
SDK, connected in process to a ``PoolServer`` in front of a real worker process."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError
from mcp_types import TextResourceContents

from executor import Settings
from executor.mcp import PoolServer, ServerPolicy
from tests.support.mcp import start_builtin_pool
from tests.support.procs import MakeWorkers, Workers

pytestmark = pytest.mark.proof  # a worker process behind the server

FILES = ["a.txt", "b/c.txt", "b/d/e.md", "b/f.txt", "z.txt"]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    for name in FILES:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(f"text of {name}\n")
    (tmp_path / "secret.txt").write_text("outside\n")
    os.symlink(tmp_path / "secret.txt", folder / "out.txt")  # a link out: not listed
    (folder / "b" / "empty").mkdir()
    return folder


@pytest.fixture
def pool(redis_url: str, workspace: Path, make_workers: MakeWorkers) -> Iterator[Workers]:
    workers = start_builtin_pool(make_workers, redis_url, workspace, count=1)
    yield workers
    print(workers.diagnosis())


def test_lists_in_pages_reads_and_refuses_an_escape(redis_url: str, pool: Workers) -> None:
    server = PoolServer(Settings(redis_url=redis_url), resources_page=2)

    async def scenario() -> None:
        async with Client(server.server, mode="legacy") as client:
            caps = client.server_capabilities
            assert caps is not None
            assert caps.resources is not None, caps
            names: list[str] = []
            pages = 0
            cursor: str | None = None
            while True:
                page = await client.list_resources(cursor=cursor)
                pages += 1
                assert len(page.resources) <= 2, page
                names += [item.name for item in page.resources]
                cursor = page.next_cursor
                if cursor is None:
                    break
            assert names == FILES
            assert pages == 3
            uris = [f"toolpool://workspace/{name}" for name in FILES]
            assert [f"toolpool://workspace/{name}" for name in names] == uris

            read = await client.read_resource("toolpool://workspace/b/d/e.md")
            (content,) = read.contents
            assert isinstance(content, TextResourceContents)
            assert content.text.rstrip("\n") == "text of b/d/e.md"
            assert content.mime_type == "text/markdown"

            templates = await client.list_resource_templates()
            assert [t.uri_template for t in templates.resource_templates] == [
                "toolpool://workspace/{+path}"
            ]

            for uri, said in [
                ("toolpool://workspace/../secret.txt", "outside the workspace"),
                ("toolpool://workspace/out.txt", "outside the workspace"),
                ("toolpool://workspace/missing.txt", "File not found: missing.txt"),
                ("file:///etc/passwd", "Unknown resource 'file:///etc/passwd'"),
            ]:
                with pytest.raises(MCPError) as refused:
                    await client.read_resource(uri)
                assert said in refused.value.message, (uri, refused.value.message)

    try:
        anyio.run(scenario)
    finally:
        server.close()


def test_a_server_withholding_read_file_declares_no_resources(
    redis_url: str, pool: Workers
) -> None:
    server = PoolServer(
        Settings(redis_url=redis_url), policy=ServerPolicy(deny=frozenset({"read_file"}))
    )

    async def scenario() -> None:
        async with Client(server.server, mode="legacy") as client:
            caps = client.server_capabilities
            assert caps is not None
            assert caps.resources is None, caps

    try:
        anyio.run(scenario)
    finally:
        server.close()
