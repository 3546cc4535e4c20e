"""The dashboard's web app: the page, its live stream, timelines, calls and metrics.

Read-only: nothing here changes the pool. Routes:

- ``/``: the page; it updates from ``/api/stream`` without reloading;
- ``/api/state``: the latest snapshot (workers, sessions and their background processes,
  lock, queue, recent calls);
- ``/api/stream``: server-sent events: ``state`` once a second, ``event`` for each of the
  pool's events as it happens;
- ``/api/turns/{turn_id}/timeline.svg``: that turn's timeline;
- ``/api/calls/{call_id}``: a call's stored result and, if it was cut, its full output;
- ``/metrics``: the pool's metrics for Prometheus (with the ``metrics`` extra).

With a token, every route needs it: ``Authorization: Bearer TOKEN``, or ``?token=TOKEN`` (a
browser's event stream cannot send headers; the page passes on the one it was opened with).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib.resources import files
from typing import Any

import redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from executor._connect import READER, connect
from executor._settings import Settings
from executor._timeline import render_svg, turn_bars
from executor.dashboard._feed import Feed
from executor.wire import Acks, Event, Keys, ResultStore, TurnPlan, read_events

# A comment line to every viewer this often: proxies close a stream that stays silent.
_KEEPALIVE_S = 15.0


def dashboard_app(settings: Settings, url: str, *, token: str | None = None) -> Starlette:
    """The dashboard of the pool at ``url`` (Redis), behind ``token`` if one is given."""
    keys = Keys(settings.redis.key_prefix)
    client = connect(url, role=READER)
    results = ResultStore(
        client, keys, ttl=settings.worker.result_ttl, acks=Acks.of(settings, keys)
    )
    metrics = _metrics(client, settings)
    feed = Feed(url, settings, metrics[1] if metrics else (lambda event: None))
    page = files("executor.dashboard").joinpath("page.html").read_text(encoding="utf-8")

    async def index(request: Request) -> Response:
        return HTMLResponse(page)

    async def state(request: Request) -> Response:
        return JSONResponse(feed.state)

    async def stream(request: Request) -> Response:
        async def messages() -> AsyncIterator[str]:
            async with feed.viewer() as queue:
                while True:
                    try:
                        pending = [await asyncio.wait_for(queue.get(), _KEEPALIVE_S)]
                    except asyncio.TimeoutError:
                        yield ": keep-alive\n\n"
                        continue
                    while not queue.empty():  # all it has: one write, however many
                        pending.append(queue.get_nowait())
                    yield "".join(pending)

        return StreamingResponse(
            messages(), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
        )

    async def timeline(request: Request) -> Response:
        turn_id = request.path_params["turn_id"]
        events, stored = await asyncio.to_thread(_turn_events, client, keys, turn_id)
        if not events:
            return JSONResponse({"error": f"No events of turn {turn_id!r}."}, status_code=404)
        plan = TurnPlan.model_validate_json(stored) if stored is not None else None
        bars = turn_bars(events, turn_id, plan)
        workers = len({bar.worker for bar in bars})
        svg = render_svg(bars, f"turn {turn_id}: {len(bars)} calls on {workers} workers")
        return Response(svg, media_type="image/svg+xml")

    async def call(request: Request) -> Response:
        call_id = request.path_params["call_id"]
        result = await asyncio.to_thread(results.get, call_id)
        if result is None:
            return JSONResponse(
                {"error": f"No result of call {call_id!r} is kept."}, status_code=404
            )
        full = await asyncio.to_thread(results.full_output, call_id) if result.truncated else None
        return JSONResponse({"result": result.model_dump(mode="json"), "full_output": full})

    routes = [
        Route("/", index),
        Route("/api/state", state),
        Route("/api/stream", stream),
        Route("/api/turns/{turn_id}/timeline.svg", timeline),
        Route("/api/calls/{call_id}", call),
    ]
    if metrics is not None:
        registry = metrics[0]

        async def scrape(request: Request) -> Response:
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

            body = await asyncio.to_thread(generate_latest, registry)
            return Response(body, media_type=CONTENT_TYPE_LATEST)

        routes.append(Route("/metrics", scrape))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with feed.running():
            yield
        client.close()

    app = Starlette(routes=routes, lifespan=lifespan)
    if token:
        app.add_middleware(_TokenRequired, token=token)
    app.state.feed = feed
    return app


def _turn_events(client: redis.Redis, keys: Keys, turn_id: str) -> tuple[list[Event], Any]:
    events = [item for _, item in read_events(client, keys) if item.turn_id == turn_id]
    return events, client.get(keys.turn(turn_id))


def _metrics(client: redis.Redis, settings: Settings) -> tuple[Any, Callable[[Event], None]] | None:
    """The metrics registry and what counts an event into it, if prometheus-client is there."""
    try:
        from executor._metrics import pool_registry
    except ImportError:
        return None
    registry, counts = pool_registry(client, settings)
    return registry, counts.count


class _TokenRequired:
    """401 for a request without the token (header or ``?token=``)."""

    def __init__(self, app: Callable[..., Awaitable[None]], token: str) -> None:
        self._app = app
        self._token = token.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        request = Request(scope)
        given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        given = given or request.query_params.get("token", "")
        if not hmac.compare_digest(given.encode(), self._token):
            challenge = {"WWW-Authenticate": 'Bearer realm="toolpool"'}
            response = JSONResponse(
                {"error": "This dashboard needs its token."}, status_code=401, headers=challenge
            )
            await response(scope, receive, send)
            return
        await self._app(scope, receive, send)
