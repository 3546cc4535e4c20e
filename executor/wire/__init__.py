"""What crosses Redis: the call and result models, key names, turn plans, results, events.

Only JSON crosses Redis. Every key name is built in ``_keys``; RQ's jobs and queues are
``executor._rq``'s.
"""

from executor._errors import NotServedOnQueue, NoWorkerError
from executor.wire._catalog import (
    Catalog,
    WorkerCatalog,
    publish_catalog,
    read_catalog,
    read_entries,
    withdraw_catalog,
)
from executor.wire._events import (
    Event,
    EventLog,
    append_jsonl,
    follow_event_batches,
    follow_events,
    read_events,
)
from executor.wire._keys import DEFAULT_SCOPE, Keys, LockKeys
from executor.wire._models import ErrorType, ToolCall, ToolResult, ToolStatus, parse_call
from executor.wire._refusals import invalid_arguments_text, unknown_tool_text
from executor.wire._results import ResultStore
from executor.wire._sessions import (
    CREATING,
    DELETING,
    READY,
    Entered,
    SessionInfo,
    SessionStore,
    check_session_name,
    host_name,
    session_scope,
)
from executor.wire._turns import (
    Batch,
    CallJob,
    NextBatch,
    TurnPlan,
    job_id,
    new_turn_id,
    partition,
)

__all__ = [
    "CREATING",
    "DEFAULT_SCOPE",
    "DELETING",
    "READY",
    "Batch",
    "CallJob",
    "Catalog",
    "Entered",
    "ErrorType",
    "Event",
    "EventLog",
    "Keys",
    "LockKeys",
    "NextBatch",
    "NoWorkerError",
    "NotServedOnQueue",
    "ResultStore",
    "SessionInfo",
    "SessionStore",
    "ToolCall",
    "ToolResult",
    "ToolStatus",
    "TurnPlan",
    "WorkerCatalog",
    "append_jsonl",
    "check_session_name",
    "follow_event_batches",
    "follow_events",
    "host_name",
    "invalid_arguments_text",
    "job_id",
    "new_turn_id",
    "parse_call",
    "partition",
    "publish_catalog",
    "read_catalog",
    "read_entries",
    "read_events",
    "session_scope",
    "unknown_tool_text",
    "withdraw_catalog",
]
