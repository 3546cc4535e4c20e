"""What crosses Redis: the call and result models, key names, turn plans, results, events.

Only JSON crosses Redis. Every key name is built in ``_keys``; RQ's jobs and queues are
``executor._rq``'s.

Each name loads its module on first use: the lock, which needs only key names, loads neither
the catalog nor, with it, the tool contract.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from executor._lazy import face

if TYPE_CHECKING:
    from executor._errors import NotServedOnQueue, NoWorkerError
    from executor.wire._acks import Acks, Rider
    from executor.wire._catalog import (
        Catalog,
        WorkerCatalog,
        publish_catalog,
        read_catalog,
        read_entries,
        withdraw_catalog,
    )
    from executor.wire._claims import CallClaims, ClaimHold
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
    from executor.wire._processes import ProcessRecord
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
    "Acks",
    "Batch",
    "CallClaims",
    "CallJob",
    "Catalog",
    "ClaimHold",
    "Entered",
    "ErrorType",
    "Event",
    "EventLog",
    "Keys",
    "LockKeys",
    "NextBatch",
    "NoWorkerError",
    "NotServedOnQueue",
    "ProcessRecord",
    "ResultStore",
    "Rider",
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

# Where each public name is defined: ``__getattr__`` imports that module on first use.
_MODULE_OF: dict[str, str] = {
    "CREATING": "executor.wire._sessions",
    "DEFAULT_SCOPE": "executor.wire._keys",
    "DELETING": "executor.wire._sessions",
    "READY": "executor.wire._sessions",
    "Acks": "executor.wire._acks",
    "Batch": "executor.wire._turns",
    "CallClaims": "executor.wire._claims",
    "CallJob": "executor.wire._turns",
    "Catalog": "executor.wire._catalog",
    "ClaimHold": "executor.wire._claims",
    "Entered": "executor.wire._sessions",
    "ErrorType": "executor.wire._models",
    "Event": "executor.wire._events",
    "EventLog": "executor.wire._events",
    "Keys": "executor.wire._keys",
    "LockKeys": "executor.wire._keys",
    "NextBatch": "executor.wire._turns",
    "NoWorkerError": "executor._errors",
    "NotServedOnQueue": "executor._errors",
    "ProcessRecord": "executor.wire._processes",
    "ResultStore": "executor.wire._results",
    "Rider": "executor.wire._acks",
    "SessionInfo": "executor.wire._sessions",
    "SessionStore": "executor.wire._sessions",
    "ToolCall": "executor.wire._models",
    "ToolResult": "executor.wire._models",
    "ToolStatus": "executor.wire._models",
    "TurnPlan": "executor.wire._turns",
    "WorkerCatalog": "executor.wire._catalog",
    "append_jsonl": "executor.wire._events",
    "check_session_name": "executor.wire._sessions",
    "follow_event_batches": "executor.wire._events",
    "follow_events": "executor.wire._events",
    "host_name": "executor.wire._sessions",
    "invalid_arguments_text": "executor.wire._refusals",
    "job_id": "executor.wire._turns",
    "new_turn_id": "executor.wire._turns",
    "parse_call": "executor.wire._models",
    "partition": "executor.wire._turns",
    "publish_catalog": "executor.wire._catalog",
    "read_catalog": "executor.wire._catalog",
    "read_entries": "executor.wire._catalog",
    "read_events": "executor.wire._events",
    "session_scope": "executor.wire._sessions",
    "unknown_tool_text": "executor.wire._refusals",
    "withdraw_catalog": "executor.wire._catalog",
}

if not TYPE_CHECKING:
    # For the interpreter only: a type checker that saw a module ``__getattr__`` would accept
    # any name from here, a misspelt one included, as an ``object``.
    __getattr__, __dir__ = face(__name__, _MODULE_OF, globals(), __all__)
