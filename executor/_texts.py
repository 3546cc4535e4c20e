"""Every text a model reads from toolpool itself: one function per situation, in one place.

A tool's own messages (``ToolError("File not found: a.txt")``) are the tool's. These are the
answers the pool gives around a tool: the client answers some calls before enqueueing, a worker
or its pool the others, and both sides use these functions, so a model reads the same words
whoever answered. Each text says which of two things happened, since the model acts on it
(docs/guarantees.md): the call **did not run** (safe to call again) or it **may have run**
("check its effects before calling it again").

Only the standard library is imported here: ``executor._errors`` builds its messages from
these functions, and everything else imports that. ``tests/test_texts.py`` renders every
function with sample values and compares the lot with a snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# The advice of every "may have run" answer.
_CHECK_EFFECTS = "check its effects before calling it again."
_FIX_ARGUMENTS = "Fix the arguments and call the tool again."


def _listed(names: Iterable[str]) -> str:
    return ", ".join(names) or "(none)"


# -- the call names no tool it may use, or bad arguments: it did not run -------------------


def unknown_tool(name: str, available: Iterable[str]) -> str:
    """``UnknownToolError``'s message: a name the registry does not hold, and those it does."""
    return f"Unknown tool {name!r}. Available tools: {_listed(available)}."


def not_on_queue(name: str, available: Iterable[str], queue: str) -> str:
    """``NotServedOnQueue``'s message when no live worker of ``queue`` has the tool at all."""
    return f"{unknown_tool(name, available)} (No live worker on queue {queue!r} serves {name!r}.)"


def withheld_on_queue(name: str, queue: str, reason: str, available: Iterable[str]) -> str:
    """``NotServedOnQueue``'s message when the workers of ``queue`` were started not to serve
    the tool (read-only, disabled), with their ``reason``."""
    return (
        f"{name} is not served on queue {queue!r}: {reason}. "
        f"Tools served there: {_listed(available)}."
    )


def withheld_by_worker(name: str, reason: str, available: Iterable[str]) -> str:
    """The worker's message for a call that reaches it for a tool it was started not to serve."""
    return f"{name} is not served by this worker: {reason}. Tools it serves: {_listed(available)}."


def unknown_tool_answer(problem: str, meant: str | None = None) -> str:
    """An ``unknown_tool`` result: the problem (one of the messages above), the tool the model
    most likely meant if one is close (``read_fil``: ``read_file``), and what to do."""
    hint = f" Did you mean {meant!r}?" if meant else ""
    return f"{problem}{hint} Call one of the available tools instead."


def invalid_arguments_answer(tool: str, problems: Sequence[str]) -> str:
    """An ``invalid_arguments`` result: each way the arguments break the tool's schema."""
    listed = "\n".join(f"- {problem}" for problem in problems)
    return f"Invalid arguments for tool {tool!r}:\n{listed}\n{_FIX_ARGUMENTS}"


# -- rejected: the orchestrator refused the call; it did not run ----------------------------


def check_blocked(reason: str) -> str:
    """A ``rejected`` result: the executor's ``check`` callback blocked the call (``reason``)."""
    return f"Tool blocked: {reason}"


def user_rejected() -> str:
    """A ``rejected`` result (the refusal) when the executor's ``approve`` callback says no."""
    return "The user rejected this call."


def call_limit_reached(limit: int) -> str:
    """A ``rejected`` result (the refusal) of a call past the executor's ``max_tool_calls``."""
    return f"The tool call limit ({limit}) of this run is reached."


def turn_stopped(tool: str, call_id: str, refusal: str) -> str:
    """A ``rejected`` result of a call after a refused one in its turn (the turn stops there);
    ``refusal``: the refused call's answer, one of the three above."""
    return f"{tool!r} did not run: the turn stopped at call {call_id} ({refusal})"


def call_id_taken(call_id: str) -> str:
    """A ``rejected`` result of a call whose id another turn holds (never that turn's result)."""
    return f"Call id {call_id!r} was already used by another turn; each call needs a unique id."


# -- cancelled: it did not run ---------------------------------------------------------------


def turn_cancelled(tool: str) -> str:
    """A ``cancelled`` result of a call whose turn was cancelled before the tool started."""
    return f"{tool!r} did not run: its turn was cancelled."


def never_enqueued(tool: str) -> str:
    """A ``cancelled`` result of a call its ``submit`` lost Redis before enqueueing."""
    return (
        f"{tool!r} did not run: it was never enqueued (Redis could not be reached while its "
        "turn was submitted). Call it again."
    )


# -- unknown_session: the call could not enter its session; it did not run -------------------


def session_refused(tool: str, problem: str) -> str:
    """An ``unknown_session`` result: why the call's session cannot run it (a problem below)."""
    return f"{tool!r} did not run: {problem}."


def session_missing(name: str) -> str:
    """The problem of a session that does not exist."""
    return (
        f"session {name!r} does not exist (never created, deleted, or expired after its idle "
        "time); create it with `toolpool session create`"
    )


def session_gone(name: str) -> str:
    """The problem of a session deleted (or being deleted) while its call was submitted."""
    return f"session {name!r} does not exist or is being deleted"


def session_not_ready(name: str, state: str) -> str:
    """The problem of a session being created or deleted (``state``)."""
    return f"session {name!r} is {state}, not ready"


def session_on_other_host(name: str, host: str) -> str:
    """The problem of a session whose call reached a worker of another host than its own."""
    return (
        f"session {name!r} lives on host {host!r}, not on this worker's host; its folder is on "
        "that host's disk"
    )


def session_folder_missing(name: str, host: str, folder: str) -> str:
    """The problem of a session whose folder is gone from its host's disk."""
    return (
        f"session {name!r} has no folder on host {host!r} ({folder} is missing); delete the "
        "session and create it again"
    )


def sessions_only() -> str:
    """The problem of a call without a session on a worker that serves only sessions."""
    return (
        "this worker serves only sessions (it was started with --sessions-root and no "
        "--workspace); name a session"
    )


def no_sessions(name: str) -> str:
    """The problem of a session's call on a worker that serves no sessions."""
    return (
        "this worker serves no sessions (it was started without --sessions-root), so it "
        f"cannot run a call of session {name!r}"
    )


# -- lock_unavailable: the lock was not had; it did not run ---------------------------------


def lock_not_granted(tool: str, problem: str) -> str:
    """A ``lock_unavailable`` result: the lock (or the commit barrier after it) was not had in
    time; ``problem`` is the lock's own message."""
    return f"{tool!r} did not run: {problem} Try again later."


def lease_ended_before_start(tool: str) -> str:
    """A ``lock_unavailable`` result of a call whose lease was lost before the tool started."""
    return (
        f"{tool!r} did not run: its lock lease ended before the tool started (its worker was "
        "paused or cut off from Redis). Call it again."
    )


# -- worker_lost, timeout, lock_lost: the call may have run ---------------------------------


def redis_lost_before_run(tool: str, error: str) -> str:
    """The answer of a call whose worker lost Redis while preparing it, for longer than it
    waits: the call did not run."""
    return (
        f"The worker preparing {tool!r} could not reach Redis ({error}), so the call did not "
        "run. Submit it again once Redis answers."
    )


def worker_lost(tool: str, worker: str | None = None, ended: str | None = None) -> str:
    """A ``worker_lost`` result: the worker running the call stopped before storing a result.

    Its pool knows which worker and how it ended (``worker``: name and pid; ``ended``: "was
    killed by signal SIGKILL"); anyone else saw only its liveness key expire.
    """
    who = f" ({worker})" if worker else ""
    how = ended or "stopped (it was killed or lost its connection)"
    return (
        f"The worker running {tool!r}{who} {how} before it stored a result. The call may have "
        f"run in part; {_CHECK_EFFECTS}"
    )


def turn_timeout(tool: str, limit: float) -> str:
    """A ``timeout`` result given by the orchestrator: no result within the turn's timeout."""
    return (
        f"No result for {tool!r} within {limit:g} s. The call may still run or have run; "
        + _CHECK_EFFECTS
    )


def time_limit(tool: str, limit: float, committed: bool = False) -> str:
    """A ``timeout`` result given by the worker: the tool ran past its own time limit and was
    stopped (``committed``: its write had landed by then)."""
    landed = " after its write was committed" if committed else ""
    return (
        f"Tool {tool!r} did not finish within {limit:g} s and was stopped{landed}. "
        "Try a smaller request."
    )


def lock_lost(tool: str, read_only: bool, ended_with: str | None = None) -> str:
    """A ``lock_lost`` result of a call whose lease was lost while it ran (a read after its
    one rerun); ``ended_with``: the tool's own error, if it ended in one."""
    advice = "Call it again." if read_only else "Check its effects before calling it again."
    ended = f" It ended with: {ended_with[:300]}" if ended_with is not None else ""
    return (
        f"{tool!r} ran, but the lock was lost while it ran, so its result may be inconsistent "
        f"with concurrent changes. {advice}{ended}"
    )


# -- what a fenced side effect answers when its lock cannot be proven ---------------------


def fence_shared() -> str:
    """A fenced write refused because the call holds the lock shared (a tool declared wrongly)."""
    return (
        "The write was not committed: this call holds the lock shared, and only an exclusive "
        "holder may write. Declare the tool not concurrency-safe."
    )


def fence_unproven(scope: str) -> str:
    """A fenced write refused because Redis could not be reached to prove the lock."""
    return (
        "The write was not committed: Redis could not be reached to prove that this call still "
        f"holds the exclusive lock on scope {scope!r}. The file was left as it was; retry the "
        "call."
    )


def fence_lost(scope: str) -> str:
    """A fenced write refused because the call's exclusive lease had ended."""
    return (
        f"The write was not committed: this call lost the exclusive lock on scope {scope!r} "
        "before the commit (its lease expired or was revoked, and another call may have "
        "written since). The file was left as it was; read it again and retry."
    )


def shared_lock_lost(reason: str) -> str:
    """A fence check of a call holding the lock shared, after that lease was lost."""
    return f"The shared lock was lost ({reason})."


def write_not_undone(strerror: str) -> str:
    """A write that landed after its lease was lost and could not be taken back."""
    return (
        "The write landed after this call lost the exclusive lock and could not be undone "
        f"({strerror}). Check the file before writing it again."
    )


def command_stopped(output: str) -> str:
    """``bash`` stopped because its exclusive lease could no longer be proven; ``output``: what
    the command printed so far, as the tool reports it."""
    return (
        "The command was stopped: this call could no longer prove that it holds the exclusive "
        "lock (its lease ran out, or Redis could not be reached), so another call may run now. "
        "The command and every process it started were killed; its effects may be incomplete, "
        "so check its effects before running it again. " + output
    )


def commit_busy(root: str, timeout: float) -> str:
    """A write (or the barrier a call passes after its grant) that waited past ``timeout`` for
    another call's commit to the workspace."""
    return (
        f"Another call has been committing a write to the workspace ({root}) for over "
        f"{timeout:g} s (a worker stopped in the middle of its commit?); nothing was changed. "
        "Try again later."
    )


def no_file_locks(root: str, strerror: str) -> str:
    """A write refused because the workspace's file system does not lock files."""
    return (
        f"The workspace's file system ({root}) refuses file locks ({strerror}); toolpool "
        "needs them to commit writes safely, so nothing was changed. Put the workspace on a "
        "local file system."
    )


# -- unexpected_error, and the answers of the adapters ------------------------------------


def tool_crashed(tool: str, error: BaseException) -> str:
    """An ``unexpected_error`` result: the tool raised something other than a ``ToolError``."""
    return f"Tool {tool!r} failed unexpectedly: {type(error).__name__}: {error}"


def pool_failed(tool: str, error: BaseException) -> str:
    """The OpenAI Agents adapter's answer to a call the pool could not answer at all."""
    return (
        f"The call to {tool} got no result: the tool pool failed ({type(error).__name__}: {error})"
    )


# -- truncation ---------------------------------------------------------------------------


def truncation_marker(dropped_chars: int, dropped_lines: int, note: str | None = None) -> str:
    """The line put where a cut result's middle was: ``... [1200 characters, 31 lines dropped]
    ...``, with ``note`` (where the full output is kept) inside."""
    chars = f"{dropped_chars} character{'s' if dropped_chars != 1 else ''}"
    lines = f"{dropped_lines} line{'s' if dropped_lines != 1 else ''}"
    extra = f"; {note}" if note else ""
    return f"\n\n... [{chars}, {lines} dropped{extra}] ...\n\n"


def full_output_note(call_id: str, kept_bytes: int | None = None) -> str:
    """The marker's note for a cut result whose full output is kept (``kept_bytes``: only its
    first bytes, when it was longer than the keeper stores)."""
    first = f" (its first {kept_bytes} bytes)" if kept_bytes is not None else ""
    return f"full output: toolpool output {call_id}{first}"
