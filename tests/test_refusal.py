"""A toolpool worker refuses, before anything runs, every job that is not a plain toolpool call.

Jobs are written straight into toolpool's RQ queue, as anyone who can reach the Redis could:
one naming ``os.system``, one naming a harmless importable function with a callback and a
webhook, and two naming toolpool's entry point but carrying callbacks or webhooks. A toolpool
worker (in this process, burst mode) must run none of them, cancel them with their hook
fields deleted, say why in a ``call_refused`` event, and go on serving calls. The control
shows that a plain RQ worker runs the harmless job, its callback and its webhook: the
refusal is toolpool's doing, not something RQ would have done anyway.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis
from rq import Callback, Queue, SimpleWorker
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer
from rq.webhook import Webhook

from executor import Settings, ToolCall, ToolStatus
from executor._rq.jobs import ENTRY_POINT
from executor.client import Executor
from executor.wire import CallJob, Keys, ResultStore
from tests.support import dist_tools
from tests.support.procs import events, named
from workers.pool._process import run_worker

# Harmless functions a job or a callback may name: an RQ worker imports them by these paths.
TOUCH_MARKER = "tests.support.dist_tools.touch_marker"
MARK_CALLBACK = "tests.support.dist_tools.mark_callback"
_HOOK_FIELDS = [
    "success_callback_name",
    "failure_callback_name",
    "stopped_callback_name",
    "webhooks",
]


class _HookServer:
    """A local HTTP server that records the paths webhooks request."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        paths = self.paths

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                paths.append(self.path)
                self.send_response(204)
                self.end_headers()

            do_GET = do_POST = _record

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the test reads ``paths``."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> _HookServer:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def hooks() -> Iterator[_HookServer]:
    with _HookServer() as server:
        yield server


def _enqueue_harmless(queue: Queue, folder: Path, hooks: _HookServer) -> tuple[Job, list[Path]]:
    """A job that touches a file, with a callback that touches another and a webhook."""
    ran, called_back = folder / "job-ran", folder / "callback-ran"
    job = queue.enqueue_call(
        TOUCH_MARKER,
        args=(str(ran),),
        on_success=Callback(MARK_CALLBACK),
        meta={"marker": str(called_back)},
        webhooks=[
            Webhook(f"{hooks.url}/finished", "finished"),
            Webhook(f"{hooks.url}/failed", "failed"),
        ],
    )
    return job, [ran, called_back]


def _payload(call_id: str, path: str) -> dict[str, Any]:
    call = ToolCall(id=call_id, name="write_file", arguments={"path": path, "content": "x"})
    return CallJob(call=call, turn_id=f"turn-{call_id}", index=0).model_dump(mode="json")


def test_plain_rq_worker_runs_whatever_it_is_given(
    client: redis.Redis, tmp_path: Path, hooks: _HookServer
) -> None:
    queue = Queue("control", connection=client, serializer=JSONSerializer)
    job, markers = _enqueue_harmless(queue, tmp_path, hooks)
    SimpleWorker([queue], connection=client, serializer=JSONSerializer, name="plain").work(
        burst=True
    )
    assert job.get_status() is JobStatus.FINISHED
    assert [m.exists() for m in markers] == [True, True]
    assert hooks.paths == ["/finished"]


def test_toolpool_worker_refuses_foreign_jobs_and_keeps_serving(
    redis_url: str, client: redis.Redis, tmp_path: Path, hooks: _HookServer
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    settings = Settings(redis_url=redis_url, workspace=root, lock_lease_ms=3000)
    queue = Queue(
        Keys().queue_name(settings.client.queue), connection=client, serializer=JSONSerializer
    )
    os_marker = tmp_path / f"os-system-ran-{uuid.uuid4().hex}"

    system = queue.enqueue_call("os.system", args=(f"touch {os_marker}",))
    harmless, markers = _enqueue_harmless(queue, tmp_path, hooks)
    with_callbacks = queue.enqueue_call(
        ENTRY_POINT,
        args=(_payload("cb", "callbacks.txt"),),
        on_success=Callback("os.system"),
        on_failure=Callback(MARK_CALLBACK),
        meta={"marker": str(tmp_path / "failure-callback-ran")},
    )
    with_webhook = queue.enqueue_call(
        ENTRY_POINT,
        args=(_payload("wh", "webhook.txt"),),
        webhooks=[Webhook(f"{hooks.url}/entry-finished", "finished")],
    )
    refused = [system, harmless, with_callbacks, with_webhook]
    with Executor(settings=settings, registry=dist_tools.registry()) as executor:
        turn = executor.submit(
            [
                {
                    "id": "after-w",
                    "name": "write_file",
                    "arguments": {"path": "after.txt", "content": "served"},
                },
                {"id": "after-r", "name": "read_file", "arguments": {"path": "after.txt"}},
            ]
        )
        assert run_worker(redis_url, settings, dist_tools.registry(), name="refuser", burst=True)
        served = executor.collect(turn, timeout=10)

    # Nothing of the refused jobs ran: not the function, not a callback, not a webhook.
    assert not os_marker.exists()
    assert [m.exists() for m in markers] == [False, False]
    assert not (tmp_path / "failure-callback-ran").exists()
    assert hooks.paths == []
    assert not (root / "callbacks.txt").exists()
    assert not (root / "webhook.txt").exists()
    assert ResultStore(client, Keys()).get_many(["cb", "wh"]) == {}
    for job in refused:
        assert job.get_status(refresh=True) is JobStatus.CANCELED, job.id
        assert client.hmget(job.key, _HOOK_FIELDS) == [None] * len(_HOOK_FIELDS), job.id

    stream = events(client)
    reasons = {e.data["job_id"]: str(e.data["reason"]) for e in named(stream, "call_refused")}
    assert set(reasons) == {job.id for job in refused}
    assert "'os.system' is not toolpool's entry point" in reasons[system.id]
    assert f"'{TOUCH_MARKER}' is not toolpool's entry point" in reasons[harmless.id]
    assert "success_callback_name" in reasons[with_callbacks.id]
    assert "failure_callback_name" in reasons[with_callbacks.id]
    assert "webhooks" in reasons[with_webhook.id]

    # The same worker then served a turn as usual.
    assert [r.status for r in served] == [ToolStatus.OK, ToolStatus.OK]
    assert served[1].content == "served"
    workers = {e.worker for e in stream if e.event in {"call_refused", "tool_execution_started"}}
    assert workers == {"refuser"}
