"""A whole turn over plain HTTP, for an agent loop in any language.

Served beside the MCP endpoint, behind the same bearer token:

- ``POST /turns`` with the calls (a JSON array, or ``{"calls": [...], "session": "s",
  "wait": true, "timeout": 60}``): the turn is checked, partitioned and enqueued as
  ``Executor.run`` does it. With ``wait`` (the default) the answer is ``200`` and
  ``{"turn_id": ..., "results": [...]}``, one result per call, in call order; with
  ``"wait": false`` it is ``202`` and ``{"turn_id": ...}``.
- ``GET /turns/{turn_id}?wait=S``: that turn's results once every call has one (``200``), or
  after ``S`` seconds (default 30) those there are, ``null`` for calls still running
  (``202``, with ``"pending"``: how many). Polling never answers a call ``timeout``: the
  calls run on, and a later GET gets their results.
- ``DELETE /turns/{turn_id}``: cancel it; ``204``.

Calls and results are the JSON of ``toolpool run``: calls as ``{"id", "name", "arguments"}``,
OpenAI tool calls or Anthropic ``tool_use`` blocks; results as ``ToolResult`` objects. A turn
that cannot be taken (invalid JSON, two calls with one id, no worker, an unknown session) is
an HTTP error with ``{"error": "..."}`` saying why; a call that fails is a result.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from executor import NoWorkerError, RedisUnavailable, SessionError, ToolpoolError
from executor.client import TurnError
from executor.mcp._server import PoolServer
from executor.wire import ToolResult

# How long a GET waits for a turn's last results by default: under the idle limits of the
# proxies a client may sit behind.
GET_WAIT_S = 30.0
_SHAPE = (
    'Send a JSON array of tool calls, or an object {"calls": [...], "session": NAME, '
    '"wait": true, "timeout": SECONDS}.'
)


def turn_routes(pool: PoolServer) -> list[Route]:
    """The ``/turns`` routes of one pool's HTTP server."""

    async def post(request: Request) -> Response:
        try:
            body = json.loads(await request.body() or b"null")
        except ValueError as exc:
            return _error(400, f"the body is not valid JSON ({exc}). {_SHAPE}")
        try:
            calls, session, wait, timeout = _turn_request(body)
        except (ValueError, TypeError) as exc:
            return _error(400, f"{exc}. {_SHAPE}")

        def submit() -> tuple[int, dict[str, Any]]:
            with pool.executors.borrow() as executor:
                turn = executor.submit(calls, session=session)
                if not wait:
                    return 202, {"turn_id": turn.turn_id}
                return 200, _answer(turn.turn_id, executor.collect(turn, timeout=timeout))

        return await _run(submit)

    async def get(request: Request) -> Response:
        turn_id = request.path_params["turn_id"]
        try:
            unknown = set(request.query_params) - {"wait"}
            if unknown:
                raise ValueError(
                    f"unknown query parameter(s): {', '.join(sorted(unknown))}; "
                    "GET /turns/{turn_id}?wait=SECONDS"
                )
            waiting = _seconds(request.query_params.get("wait"), "wait") or GET_WAIT_S
        except ValueError as exc:
            return _error(400, str(exc))

        def poll() -> tuple[int, dict[str, Any]]:
            with pool.executors.borrow() as executor:
                results = executor.poll(turn_id, wait=waiting)
            pending = sum(result is None for result in results)
            if not pending:
                return 200, _answer(turn_id, results)
            return 202, {**_answer(turn_id, results), "pending": pending}

        return await _run(poll, unknown_turn=True)

    async def delete(request: Request) -> Response:
        turn_id = request.path_params["turn_id"]

        def cancel() -> tuple[int, None]:
            with pool.executors.borrow() as executor:
                executor.cancel(turn_id)
            return 204, None

        return await _run(cancel, unknown_turn=True)

    return [
        Route("/turns", post, methods=["POST"]),
        Route("/turns/{turn_id}", get, methods=["GET"]),
        Route("/turns/{turn_id}", delete, methods=["DELETE"]),
    ]


def _turn_request(body: Any) -> tuple[list[Any], str | None, bool, float | None]:
    if isinstance(body, list):
        body = {"calls": body}
    if not isinstance(body, dict):
        raise ValueError("the body is neither a JSON array of calls nor a JSON object")
    unknown = set(body) - {"calls", "session", "wait", "timeout"}
    if unknown:
        raise ValueError(f"unknown field(s): {', '.join(sorted(unknown))}")
    calls = body.get("calls")
    if not isinstance(calls, list) or not calls:
        raise ValueError('"calls" must be a non-empty JSON array of tool calls')
    session = body.get("session")
    if session is not None and not isinstance(session, str):
        raise ValueError('"session" must be a string')
    wait = body.get("wait", True)
    if not isinstance(wait, bool):
        raise ValueError('"wait" must be true or false')
    return calls, session, wait, _seconds(body.get("timeout"), "timeout")


def _seconds(value: Any, name: str) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number of seconds, got {value!r}") from None
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"{name} must be a number of seconds above 0, got {value!r}")
    return seconds


def _answer(turn_id: str, results: Sequence[ToolResult | None]) -> dict[str, Any]:
    return {
        "turn_id": turn_id,
        "results": [None if r is None else r.model_dump(mode="json") for r in results],
    }


async def _run(
    work: Callable[[], tuple[int, dict[str, Any] | None]], *, unknown_turn: bool = False
) -> Response:
    """Run the blocking ``work`` in a thread; its status and answer, or the HTTP error it
    amounts to (``unknown_turn``: a ``TurnError`` means the turn named is not known)."""
    try:
        status, answer = await anyio.to_thread.run_sync(work)
    except TurnError as exc:
        return _error(404 if unknown_turn else 400, str(exc))
    except NoWorkerError as exc:
        return _error(503, str(exc))
    except RedisUnavailable as exc:
        return _error(503, str(exc))
    except SessionError as exc:
        return _error(404, str(exc))
    except ToolpoolError as exc:  # a turn not as it must be (invalid calls, a refused one)
        return _error(400, str(exc))
    if answer is None:
        return Response(status_code=status)
    return JSONResponse(answer, status_code=status)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)
