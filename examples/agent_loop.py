"""An agent loop, whole and offline: a model asks for tools, the pool runs them, it answers.

    .venv/bin/python examples/agent_loop.py

What a deployment runs apart, this starts from one process: a private Redis and a worker pool
(``workers.LocalPool``) serving this folder (read-only tools only, so nothing here is
changed), and a small local server that speaks OpenAI's Chat Completions API and replays a
scripted model: its first answer asks for three tools at once, its second reads their
results and answers. The loop in ``agent_loop`` is the part you would write: the official
``openai`` client, the pool's tools as the model's tools, each turn's calls run on the pool in
one ``Executor.run``, the results fed back, until the model answers in words.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from openai import OpenAI

from executor import Executor, export_tools, openai_tool_messages
from workers import LocalPool

QUESTION = "What is this project, and where is its demo? Look around before you answer."
# The scripted model's first turn: three calls at once, as a model sends them.
FIRST_CALLS = [
    ("list_directory", {"path": "."}),
    ("read_file", {"path": "pyproject.toml", "limit": 12}),
    ("grep", {"pattern": r"def run_demo\("}),
]


def agent_loop(client: OpenAI, executor: Executor, question: str) -> str:
    """Ask, run the model's tool calls on the pool, feed the results back; the answer."""
    # Plain dicts in the shape of the openai client's tool parameters.
    tools: Any = export_tools(executor.tools(), "openai")
    messages: list[Any] = [{"role": "user", "content": question}]
    while True:
        reply = client.chat.completions.create(model="scripted", messages=messages, tools=tools)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content or ""
        results = executor.run([call.model_dump() for call in message.tool_calls])
        for result in results:
            first = result.content.splitlines()[0] if result.content else ""
            print(f"  {result.name}({result.status.value}): {first[:70]}")
        messages += openai_tool_messages(results)


class ScriptedModel(BaseHTTPRequestHandler):
    """``POST /v1/chat/completions``: the script's next answer for the conversation so far."""

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        names = {tool["function"]["name"] for tool in request.get("tools", [])}
        if not {name for name, _ in FIRST_CALLS} <= names:
            self._send(400, {"error": {"message": f"the tools offered lack some: {names}"}})
            return
        messages = request["messages"]
        if messages[-1]["role"] == "user":
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)},
                    }
                    for i, (name, args) in enumerate(FIRST_CALLS)
                ],
            }
        else:
            message = {"role": "assistant", "content": _answer(messages)}
        self._send(
            200,
            {
                "id": "chatcmpl-scripted",
                "object": "chat.completion",
                "created": 0,
                "model": "scripted",
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if "tool_calls" in message else "stop",
                    }
                ],
            },
        )

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass  # quiet


def _answer(messages: list[dict[str, Any]]) -> str:
    """The scripted model's answer, read off the tool results it was sent."""
    results = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    listing, pyproject, found = (results[f"call_{i}"] for i in range(len(FIRST_CALLS)))
    entries = len([line for line in listing.splitlines() if line and not line.startswith("(")])
    named = re.search(r'^\s*(?:\d+\s*[|:\t]\s*)?name\s*=\s*"([^"]+)"', pyproject, re.MULTILINE)
    name = named.group(1) if named else "an unnamed project"
    where = found.splitlines()[0].split(":", 1)[0] if found.strip() else "nowhere"
    return f"This is {name}: the folder has {entries} entries, and its demo starts in {where}."


@contextmanager
def scripted_model() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedModel)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def main() -> int:
    # Read-only tools on this folder: the example changes nothing here.
    with LocalPool(Path.cwd(), workers=2, read_only=True) as pool, scripted_model() as model_url:
        client = OpenAI(base_url=model_url, api_key="offline", max_retries=0)
        with Executor(settings=pool.settings) as executor:
            print(f"user: {QUESTION}")
            answer = agent_loop(client, executor, QUESTION)
            print(f"assistant: {answer}")
    return 0


if __name__ == "__main__":
    # Run as a file from a fresh clone: the repository root makes the packages importable.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
