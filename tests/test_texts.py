"""The texts a model reads from toolpool itself (``executor._texts``), against a snapshot.

Every text is rendered with sample values and compared with ``snapshots/texts.json``, so a
change to what models are told is a deliberate one: rerun with TOOLPOOL_UPDATE_SNAPSHOTS=1 to
accept it, and review the snapshot's diff.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from executor import _texts as texts

SNAPSHOT = Path(__file__).parent / "snapshots" / "texts.json"
_TOOLS = ["bash", "read_file", "write_file"]

# One rendering per function of executor._texts (some with two, for a part that is optional).
SAMPLES: dict[str, Callable[[], str]] = {
    "unknown_tool": lambda: texts.unknown_tool("read_fil", _TOOLS),
    "unknown_tool, none served": lambda: texts.unknown_tool("read_fil", []),
    "not_on_queue": lambda: texts.not_on_queue("grep", _TOOLS, "toolpool.default"),
    "withheld_on_queue": lambda: texts.withheld_on_queue(
        "write_file", "toolpool.default", "the worker runs read-only", ["read_file"]
    ),
    "withheld_by_worker": lambda: texts.withheld_by_worker(
        "bash", "it is disabled on the worker", ["read_file", "write_file"]
    ),
    "unknown_tool_answer": lambda: texts.unknown_tool_answer(
        texts.unknown_tool("read_fil", _TOOLS), "read_file"
    ),
    "unknown_tool_answer, no close name": lambda: texts.unknown_tool_answer(
        texts.unknown_tool("fly", _TOOLS)
    ),
    "invalid_arguments_answer": lambda: texts.invalid_arguments_answer(
        "read_file", ["offset: 'x' is not of type 'integer'", "path: Field required"]
    ),
    "check_blocked": lambda: texts.check_blocked("no shell in this session"),
    "user_rejected": texts.user_rejected,
    "call_limit_reached": lambda: texts.call_limit_reached(3),
    "turn_stopped": lambda: texts.turn_stopped("read_file", "c1", texts.user_rejected()),
    "call_id_taken": lambda: texts.call_id_taken("toolu_01"),
    "turn_cancelled": lambda: texts.turn_cancelled("bash"),
    "never_enqueued": lambda: texts.never_enqueued("bash"),
    "session_refused": lambda: texts.session_refused("bash", texts.session_missing("s1")),
    "session_missing": lambda: texts.session_missing("s1"),
    "session_gone": lambda: texts.session_gone("s1"),
    "session_not_ready": lambda: texts.session_not_ready("s1", "creating"),
    "session_on_other_host": lambda: texts.session_on_other_host("s1", "h2"),
    "session_folder_missing": lambda: texts.session_folder_missing("s1", "h1", "/srv/sessions/s1"),
    "sessions_only": texts.sessions_only,
    "no_sessions": lambda: texts.no_sessions("s1"),
    "lock_not_granted": lambda: texts.lock_not_granted(
        "write_file", "No exclusive grant of the lock on scope 'global' within 300.000 s."
    ),
    "lease_ended_before_start": lambda: texts.lease_ended_before_start("write_file"),
    "redis_lost_before_run": lambda: texts.redis_lost_before_run(
        "bash", "Error 111 connecting to 127.0.0.1:6380. Connection refused."
    ),
    "worker_lost": lambda: texts.worker_lost("bash"),
    "worker_lost, by its pool": lambda: texts.worker_lost(
        "bash", "host.4242.1, pid 4242", "was killed by signal SIGKILL"
    ),
    "turn_timeout": lambda: texts.turn_timeout("bash", 900.0),
    "time_limit": lambda: texts.time_limit("get_weather", 30.0),
    "time_limit, committed": lambda: texts.time_limit("write_file", 2.5, committed=True),
    "lock_lost, read-only": lambda: texts.lock_lost("read_file", True),
    "lock_lost, with side effects": lambda: texts.lock_lost(
        "write_file", False, "The write was not committed: ..."
    ),
    "fence_shared": texts.fence_shared,
    "fence_unproven": lambda: texts.fence_unproven("global"),
    "fence_lost": lambda: texts.fence_lost("global"),
    "shared_lock_lost": lambda: texts.shared_lock_lost("its lease ran out"),
    "write_not_undone": lambda: texts.write_not_undone("Permission denied"),
    "command_stopped": lambda: texts.command_stopped("Output so far:\nhello"),
    "commit_busy": lambda: texts.commit_busy("/srv/workspace", 30.0),
    "no_file_locks": lambda: texts.no_file_locks("/mnt/nfs", "Function not implemented"),
    "tool_crashed": lambda: texts.tool_crashed("calculator", ZeroDivisionError("division by zero")),
    "pool_failed": lambda: texts.pool_failed("read_file", TimeoutError("no result within 30 s")),
    "truncation_marker": lambda: texts.truncation_marker(1200, 31),
    "truncation_marker, one of each, kept": lambda: texts.truncation_marker(
        1, 1, texts.full_output_note("toolu_01")
    ),
    "full_output_note": lambda: texts.full_output_note("toolu_01"),
    "full_output_note, first bytes": lambda: texts.full_output_note("toolu_01", 1048576),
}


def _functions() -> set[str]:
    return {
        name
        for name, value in vars(texts).items()
        if inspect.isfunction(value) and value.__module__ == texts.__name__ and name[0] != "_"
    }


def test_every_text_has_a_sample() -> None:
    sampled = {key.split(",")[0] for key in SAMPLES}
    assert sampled == _functions(), "add a sample to SAMPLES for each new text (and drop old)"


def test_every_text_says_when_it_is_used() -> None:
    undocumented = [name for name in _functions() if not inspect.getdoc(getattr(texts, name))]
    assert undocumented == []


def test_texts_match_the_snapshot() -> None:
    current = json.dumps({key: make() for key, make in SAMPLES.items()}, indent=2) + "\n"
    if os.environ.get("TOOLPOOL_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.write_text(current, encoding="utf-8")
    assert current == SNAPSHOT.read_text(encoding="utf-8"), (
        "A text models read changed. If that is intended, rerun with "
        "TOOLPOOL_UPDATE_SNAPSHOTS=1 pytest tests/test_texts.py and review the diff of "
        "tests/snapshots/texts.json."
    )


# docs/guarantees.md: a model is told whether the call ran. "Did not run" is safe to repeat;
# "may have run" must make it check before repeating a side effect.
DID_NOT_RUN = [
    "turn_stopped",
    "turn_cancelled",
    "never_enqueued",
    "session_refused",
    "lock_not_granted",
    "lease_ended_before_start",
]
MAY_HAVE_RUN = ["worker_lost", "worker_lost, by its pool", "turn_timeout"]


@pytest.mark.parametrize("key", DID_NOT_RUN)
def test_a_call_that_did_not_run_is_told_so(key: str) -> None:
    text = SAMPLES[key]()
    assert " did not run: " in text
    assert "check its effects" not in text.lower()


@pytest.mark.parametrize("key", [*MAY_HAVE_RUN, "lock_lost, with side effects"])
def test_a_call_that_may_have_run_is_told_to_check_its_effects(key: str) -> None:
    text = SAMPLES[key]()
    assert "did not run" not in text
    assert "check its effects before calling it again." in text.lower()


def test_a_read_that_lost_its_lock_may_simply_be_called_again() -> None:
    assert texts.lock_lost("read_file", True).endswith("Call it again.")
    assert "check its effects" not in texts.lock_lost("read_file", True).lower()
