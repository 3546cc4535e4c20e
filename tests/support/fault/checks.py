"""The fault run's checks: what its records and the event stream must show after the run.

Each check returns a ``CheckResult`` (violations and notes); ``report`` prints them as a table.
Times are wall-clock seconds (``time.time()``) on one host, so the harness's records, the
file observer and the workers' events compare directly.

Hold intervals run from the ``lock_acquired`` event's ts (stamped after the grant) to the
``lock_released`` event's ``released_at`` (stamped before the release is sent): for a lease that
stayed valid each is inside the true hold, so two such intervals that overlap prove that the
true holds overlapped. A lease that was lost (``held`` False at release) may have ended before
its event was even stamped, so overlaps with it are judged by its writes (check 1b).

With sessions, each session is a lock scope of its own: holds of different scopes may overlap,
holds of one scope may not. A hold's scope is its call's session (``CallRecord.session``, set
by the load; "" for the workers' own scope), and the file checks run per folder.
"""

from __future__ import annotations

import hashlib
import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from executor.wire import Event

WRITE_TOOLS = frozenset({"write_file", "edit_file"})
READ_ONLY_TOOLS = frozenset(
    {"read_file", "grep", "glob", "list_directory", "calculator", "get_weather"}
)
EDIT_LOG = "edits.log"
EDIT_LOG_START = "edits:\nEND\n"
RAN_LOG = "ran.log"  # bash appends its call id: proof that a command ran (bash is not fenced)
_DID_NOT_RUN = frozenset({"lock_unavailable", "cancelled", "rejected"})
SESSION_OVERLAP = "1c exclusive holds overlapping within a session"


def payload(call_id: str, repeats: int) -> str:
    """A write's content: ``writer=<call id>;`` lines and a checksum line, so tears show."""
    body = "\n".join([f"writer={call_id};"] * max(1, repeats))
    return f"{body}\nsum={_digest(body)}\n"


def payload_writer(text: str) -> str | None:
    """The call id of a whole payload, or None if ``text`` is torn, mixed or not a payload."""
    body, sep, tail = text.rpartition("\nsum=")
    if not sep or tail != _digest(body) + "\n":
        return None
    lines = set(body.split("\n"))
    if len(lines) != 1:
        return None
    line = lines.pop()
    if not (line.startswith("writer=") and line.endswith(";")):
        return None
    return line[len("writer=") : -1]


def edit_ids(text: str) -> list[str] | None:
    """The call ids recorded in the edit log, in order; None if it is malformed."""
    lines = text.split("\n")
    if len(lines) < 3 or lines[0] != "edits:" or lines[-2:] != ["END", ""]:
        return None
    ids = [line[2:] for line in lines[1:-2] if line.startswith("e=")]
    return ids if len(ids) == len(lines) - 3 else None


def _digest(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()[:16]


# Faults the harness found that are not fixed yet: a violation matching one is printed, marked
# with the id, but does not fail the run; anything else does. Empty: F1 to F5, found by the
# first long runs, are fixed (F1 a failed lease release turned "ran" into "did not run"; F2
# jobs left started by a worker that died in RQ's finalisation; F3 a committed write answered
# lock_lost; F4 a write landing between the fence check and the rename after the lease ended;
# F5 jobs stranded between RQ's dequeue and a start; F6 a next batch left deferred when one
# parent of a parallel batch had been ended as lost), each with a regression test.
KNOWN_FAULTS: dict[str, tuple[str, ...]] = {}


def known_fault(violation: str) -> str | None:
    """The id of the known fault a violation belongs to, or None for a new one."""
    return next(
        (key for key, texts in KNOWN_FAULTS.items() if any(text in violation for text in texts)),
        None,
    )


@dataclass
class CallRecord:
    """One call as the harness submitted it and what ``collect`` gave back."""

    call_id: str
    tool: str
    path: str = ""
    submitted_at: float = 0.0
    status: str | None = None
    error_type: str | None = None
    stored: tuple[str, str | None] | None = None  # (status, error_type) read back from Redis
    message: str = ""  # the start of an error result's text
    session: str = ""  # the session the call was sent to; "" for none
    answered_at: float = 0.0  # when collect handed out its result


@dataclass
class Fault:
    """One injected fault: kind, when, whom."""

    kind: str
    start: float
    end: float
    pid: int = 0
    call_id: str = ""
    note: str = ""


@dataclass
class Sighting:
    """The observer saw ``writer`` in a file at ``seen``; its previous look was at ``before``."""

    path: str
    writer: str | None
    before: float
    seen: float
    folder: str = ""  # the session whose folder it was; "" for the workspace


@dataclass
class EndState:
    """What the harness found once the load stopped."""

    lock_holders: int = 0
    lock_waiters: int = 0
    queued_jobs: int = 0
    started_jobs: int = 0
    bash_left: list[int] = field(default_factory=list)
    processes_left: list[int] = field(default_factory=list)
    stuck_jobs: list[str] = field(default_factory=list)
    session_calls: int = 0  # calls still listed as a session's, without a result


@dataclass
class CheckResult:
    name: str
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class _Hold:
    call_id: str
    tool: str
    mode: str
    pid: int
    start: float
    end: float | None = None
    held: bool | None = None  # False: lease lost; None: killed or no release event
    lost_event: bool = False


def check_holds(
    events: list[Event],
    records: dict[str, CallRecord],
    faults: list[Fault],
    sightings: list[Sighting],
    *,
    sessions: bool = False,
) -> list[CheckResult]:
    """Check 1, in two parts; with ``sessions``, in three.

    1a: no exclusive hold overlapped another of its scope while both leases were valid (with
    sessions: in the workers' own scope, and 1c: within one session; holds of different
    sessions may overlap). 1b: every holder that outlived its lease had its writes refused:
    none landed after the next grant of its scope, and no write the fence refused landed.
    """
    valid = CheckResult("1a no overlap while leases valid")
    within = CheckResult(SESSION_OVERLAP)
    fenced = CheckResult("1b lost leases' writes refused")
    holds = _holds(events, faults)
    first_seen = _first_landing(sightings)
    scopes: dict[str, list[_Hold]] = defaultdict(list)
    for hold in holds:
        rec = records.get(hold.call_id)
        scopes[rec.session if sessions and rec else ""].append(hold)
    reported: set[str] = set()
    counted = {
        scope: _overlaps(group, first_seen, within if scope else valid, fenced, reported)
        for scope, group in scopes.items()
    }
    default = scopes.get("", [])
    overlaps, excused = counted.get("", (0, 0))
    valid.notes.append(
        f"holds {len(default)}, overlaps {overlaps}, of which with a lease lost "
        f"or ended unseen (judged in 1b) {excused}"
    )
    open_ended = [h for h in default if h.end is None]
    if open_ended:
        valid.notes.append(
            f"{len(open_ended)} holds without a release event (events dropped "
            "while Redis was down); not checkable"
        )
    if sessions:
        _session_notes(within, scopes, counted)
    landed = {s.writer for s in sightings if s.writer is not None}
    for rec in records.values():
        if (
            rec.error_type == "lock_lost"
            and "not committed" in rec.message
            and rec.call_id in landed
        ):
            fenced.violations.append(
                f"{rec.tool} {rec.call_id}: the fence refused the write, yet it landed"
            )
    lost = [h for h in holds if h.held is False]
    lost_writes = [h for h in lost if h.tool in WRITE_TOOLS]
    outcome = Counter(
        "ok (committed before the loss)"
        if (r := records.get(h.call_id)) and r.status == "ok"
        else f"{r.error_type}"
        if r
        else "no record"
        for h in lost_writes
    )
    shown = ", ".join(f"{k} {v}" for k, v in sorted(outcome.items())) or "-"
    fenced.notes.append(f"lost leases {len(lost)}; of writes {len(lost_writes)}: {shown}")
    return [valid, within, fenced] if sessions else [valid, fenced]


def _overlaps(
    holds: list[_Hold],
    first_seen: dict[str, Sighting],
    valid: CheckResult,
    fenced: CheckResult,
    reported: set[str],
) -> tuple[int, int]:
    """Judge the overlaps among the holds of one scope: (overlaps, of which excused)."""
    ordered = sorted((h for h in holds if h.end is not None), key=lambda h: h.start)
    overlaps = excused = 0
    for i, early in enumerate(ordered):
        assert early.end is not None
        for late in ordered[i + 1 :]:
            if late.start >= early.end:
                break
            if "exclusive" not in (early.mode, late.mode):
                continue
            overlaps += 1
            label = (
                f"{early.tool} {early.call_id} [{early.start:.3f}..{early.end:.3f}] vs "
                f"{late.tool} {late.call_id} from {late.start:.3f}"
            )
            # A lease lost at some point (held False) may have ended anywhere in its recorded
            # interval, even before its lock_acquired event was stamped (a holder paused right
            # after its grant); one whose holder was killed (None) ended unseen. Such overlaps
            # are 1b's business: the writes of the lost holder must have been fenced.
            if early.held is True and late.held is not False:
                if early.call_id not in reported:  # one line per holder
                    reported.add(early.call_id)
                    valid.violations.append(f"both leases valid: {label}")
                continue
            excused += 1
            # A write the observer never saw was overwritten before it looked: nothing to
            # hold against it.
            landing = first_seen.get(early.call_id)
            late_write = (
                early.tool in WRITE_TOOLS and landing is not None and landing.before > late.start
            )
            if late_write and early.call_id not in reported:
                reported.add(early.call_id)
                fenced.violations.append(
                    f"a lost holder's write landed after the next grant: {label}"
                )
    return overlaps, excused


def _session_notes(
    within: CheckResult, scopes: dict[str, list[_Hold]], counted: dict[str, tuple[int, int]]
) -> None:
    """1c's notes: holds per session, overlaps within one, exclusive ones across sessions."""
    names = sorted(scope for scope in scopes if scope)
    held = sum(len(scopes[n]) for n in names)
    shares = ", ".join(f"{n} {len(scopes[n])}" for n in names) or "-"
    overlaps = sum(counted[n][0] for n in names)
    excused = sum(counted[n][1] for n in names)
    within.notes.append(
        f"holds {held} ({shares}), overlaps within a session {overlaps}, of "
        f"which with a lease lost or ended unseen (judged in 1b) {excused}"
    )
    tagged = sorted(
        ((h, scope) for scope in names for h in scopes[scope] if h.end is not None),
        key=lambda pair: pair[0].start,
    )
    across = 0
    for i, (early, scope) in enumerate(tagged):
        assert early.end is not None
        for late, other in tagged[i + 1 :]:
            if late.start >= early.end:
                break
            across += other != scope and early.mode == late.mode == "exclusive"
    within.notes.append(f"exclusive holds of two sessions at once (allowed): {across}")
    open_ended = sum(1 for n in names for h in scopes[n] if h.end is None)
    if open_ended:
        within.notes.append(
            f"{open_ended} holds without a release event (events dropped "
            "while Redis was down); not checkable"
        )


def _holds(events: list[Event], faults: list[Fault]) -> list[_Hold]:
    """Every grant, in order; a call run again (call_rerun) has one hold per run."""
    killed = {f.pid: f.start for f in faults if f.kind.startswith("kill") and f.pid}
    holds: list[_Hold] = []
    current: dict[str, _Hold] = {}
    for item in events:
        if item.event == "lock_acquired":
            hold = _Hold(item.call_id, item.tool, str(item.data.get("mode")), item.pid, item.ts)
            holds.append(hold)
            current[item.call_id] = hold
        elif item.event == "lock_released" and item.call_id in current:
            hold = current[item.call_id]
            hold.end = float(item.data.get("released_at", item.ts))
            hold.held = bool(item.data.get("held"))
        elif item.event == "lock_lost" and item.call_id in current:
            current[item.call_id].lost_event = True
    for hold in holds:
        if hold.end is None and hold.pid in killed and killed[hold.pid] >= hold.start:
            hold.end = killed[hold.pid]
    return holds


def _first_landing(sightings: list[Sighting]) -> dict[str, Sighting]:
    """For each writer (payload or edit id), the first time the observer saw its write."""
    first: dict[str, Sighting] = {}
    for seen in sightings:
        if seen.writer is not None and seen.writer not in first:
            first[seen.writer] = seen
    return first


def check_results(
    records: dict[str, CallRecord],
    events: list[Event],
    edit_logs: Sequence[str],
    bash_ran: list[str],
) -> CheckResult:
    """Check 2: one result per call, none lost, none run twice, none run but said not to.

    ``edit_logs``: the final text of each folder's edit log; ``bash_ran``: the ids in the
    folders' ``RAN_LOG``s, together."""
    out = CheckResult("2 one result per call")
    for call_id, count in Counter(bash_ran).items():
        rec = records.get(call_id)
        if count > 1 and (rec is None or rec.error_type != "worker_lost"):
            out.violations.append(f"bash {call_id} ran {count} times")
        if rec is not None and rec.error_type in _DID_NOT_RUN:
            out.violations.append(
                f"bash {call_id} answered {rec.error_type} ('did not run') but it ran"
            )
    missing = [r.call_id for r in records.values() if r.status is None]
    out.violations += [f"no result for {c}" for c in missing]
    for rec in records.values():
        if rec.status is not None and rec.stored != (rec.status, rec.error_type):
            out.violations.append(
                f"{rec.call_id}: collected {rec.status}/{rec.error_type} "
                f"but Redis holds {rec.stored}"
            )
    starts = Counter(e.call_id for e in events if e.event == "tool_execution_started")
    for rec in records.values():
        if rec.error_type == "timeout":
            never = "" if starts[rec.call_id] else " (it never started)"
            out.violations.append(
                f"{rec.tool} {rec.call_id} answered timeout: stuck until the collect timeout{never}"
            )
    # A read-only call that lost its lease is run once more by its worker, on purpose.
    reruns = Counter(e.call_id for e in events if e.event == "call_rerun")
    for call_id, count in starts.items():
        rec = records.get(call_id)
        if count > 1 + reruns[call_id] and (rec is None or rec.error_type != "worker_lost"):
            out.violations.append(f"{call_id} started {count} times")
    for call_id in reruns:
        rec = records.get(call_id)
        if rec is not None and rec.tool not in READ_ONLY_TOOLS:
            out.violations.append(f"{rec.tool} {call_id} has side effects and was run again")
    if reruns:
        out.notes.append(f"read-only calls run again after a lost lease: {len(reruns)}")
    said_not_run = [
        c for c, n in starts.items() if n and c in records and records[c].error_type in _DID_NOT_RUN
    ]
    if said_not_run:
        out.notes.append(
            f"{len(said_not_run)} calls started but were answered 'did not run': "
            + ", ".join(
                f"{records[c].tool} {c} ({records[c].error_type})" for c in said_not_run[:5]
            )
        )
    for text in edit_logs:
        for call_id, count in Counter(edit_ids(text) or []).items():
            if count > 1:
                out.violations.append(f"edit {call_id} landed {count} times")
    crashed = [r for r in records.values() if r.error_type == "unexpected_error"]
    if crashed:
        out.notes.append(
            f"{len(crashed)} answered unexpected_error (a tool crashed): "
            + "; ".join(
                f"{r.tool} {r.call_id}"
                f"{' (it ran)' if r.call_id in bash_ran else ''}: "
                f"{r.message[:90]}"
                for r in crashed[:3]
            )
        )
    kinds = Counter(
        f"{r.status}/{r.error_type}" if r.error_type else str(r.status) for r in records.values()
    )
    out.notes.append(
        f"calls {len(records)}, lost {len(missing)}, outcomes: "
        + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
    )
    return out


def check_files(
    finals: dict[str, str], sightings: list[Sighting], records: dict[str, CallRecord]
) -> CheckResult:
    """Check 3: every file (and every observed state of it) is whole; no edit is lost."""
    out = CheckResult("3 files whole, no lost update")
    for path, text in finals.items():
        if path == EDIT_LOG:
            ids = edit_ids(text)
            if ids is None:
                out.violations.append(f"{path} is malformed at the end")
                continue
            landed = set(ids)
            for rec in (r for r in records.values() if r.tool == "edit_file"):
                if rec.status == "ok" and rec.call_id not in landed:
                    out.violations.append(f"edit {rec.call_id} succeeded but is not in {path}")
            out.notes.append(f"{path}: {len(ids)} edits")
        elif payload_writer(text) is None and text != "":
            out.violations.append(f"{path} is torn or mixed at the end: {text[:80]!r}")
    torn = [s for s in sightings if s.writer == "TORN"]
    out.violations += [f"observer saw {s.path} torn at {s.seen:.3f}" for s in torn[:20]]
    landed = {s.writer for s in sightings if s.writer is not None}
    if EDIT_LOG in finals:
        landed.update(edit_ids(finals[EDIT_LOG]) or [])
    for rec in records.values():
        if (
            rec.error_type == "lock_lost"
            and rec.call_id in landed
            and "not committed" not in rec.message
        ):
            out.violations.append(
                f"{rec.tool} {rec.call_id} committed, then answered lock_lost ('Call it again')"
            )
    for rec in records.values():
        # These answers tell the model the call did not run, so it may call it again.
        if rec.error_type in _DID_NOT_RUN and rec.call_id in landed:
            out.violations.append(
                f"{rec.tool} {rec.call_id} answered {rec.error_type} "
                "('did not run') but its write landed"
            )
    out.notes.append(f"files {len(finals)}, observed states {len(sightings)}")
    return out


def check_folders(
    finals: dict[str, dict[str, str]],
    sightings: list[Sighting],
    records: dict[str, CallRecord],
    bash_ran: dict[str, list[str]],
) -> CheckResult:
    """Check 3 with sessions: ``check_files`` in each folder (``finals`` by session, "" the
    workspace), and no call's write, edit or command (``bash_ran``: the ids in each folder's
    ``RAN_LOG``) landed in another folder than its own."""
    out = CheckResult("3 files whole, no lost update")
    for folder, texts in finals.items():
        label = _folder(folder)
        mine = {c: r for c, r in records.items() if r.session == folder}
        found = check_files(texts, [s for s in sightings if s.folder == folder], mine)
        out.violations += [f"{label}: {v}" for v in found.violations]
        out.notes += [f"{label}: {n}" for n in found.notes]
    for seen in sightings:
        rec = records.get(seen.writer or "")
        if rec is not None and rec.session != seen.folder:
            out.violations.append(
                f"{rec.tool} {rec.call_id} of {_folder(rec.session)} landed "
                f"in {_folder(seen.folder)}'s {seen.path}"
            )
    left = {
        (folder, name): (edit_ids(text) or []) if name == EDIT_LOG else [payload_writer(text) or ""]
        for folder, texts in finals.items()
        for name, text in texts.items()
    }
    left.update({(folder, RAN_LOG): ids for folder, ids in bash_ran.items()})
    for (folder, name), writers in left.items():
        for rec in (records[c] for c in writers if c in records):
            if rec.session != folder:
                out.violations.append(
                    f"{rec.tool} {rec.call_id} of {_folder(rec.session)} is "
                    f"in {_folder(folder)}'s {name}"
                )
    return out


def _folder(session: str) -> str:
    return f"session {session}" if session else "the workspace"


def check_end(state: EndState) -> CheckResult:
    """Check 4: lock free, queue empty, no process left behind."""
    out = CheckResult("4 clean end")
    if state.lock_holders or state.lock_waiters:
        out.violations.append(f"lock: {state.lock_holders} holders, {state.lock_waiters} waiters")
    if state.queued_jobs or state.started_jobs:
        out.violations.append(
            f"queue: {state.queued_jobs} queued, {state.started_jobs} started "
            f"or deferred: {state.stuck_jobs[:6]}"
        )
    if state.session_calls:
        out.violations.append(
            f"sessions: {state.session_calls} calls still listed without a result"
        )
    if state.bash_left:
        out.violations.append(f"bash processes left after the load: {state.bash_left}")
    if state.processes_left:
        out.violations.append(f"processes left after the stop: {state.processes_left}")
    return out


def recovery_times(
    events: list[Event], faults: list[Fault], scope_of: Mapping[str, str] | None = None
) -> dict[str, list[float]]:
    """Check 5: holder death -> next grant, and worker death -> its call's error result.

    With ``scope_of`` (call id -> session, "" for none), the next grant is the next one in the
    scope of the holder's call; other scopes do not wait for it."""
    scopes = scope_of or {}
    grants = sorted(
        (e.ts, e.pid, scopes.get(e.call_id, "")) for e in events if e.event == "lock_acquired"
    )
    started_by = {e.call_id: e.pid for e in events if e.event == "tool_execution_started"}
    lost_at = {e.call_id: e.ts for e in events if e.event == "call_lost"}
    times: dict[str, list[float]] = {}
    for fault in faults:
        if fault.kind in ("kill_holder", "stop_holder", "cut_holder") and fault.pid:
            scope = scopes.get(fault.call_id, "")
            after = [
                ts
                for ts, pid, where in grants
                if ts >= fault.start and pid != fault.pid and where == scope
            ]
            if after:
                times.setdefault(f"{fault.kind}: next grant", []).append(after[0] - fault.start)
        if fault.kind.startswith("kill") and fault.pid:
            for call_id, pid in started_by.items():
                if pid == fault.pid and call_id in lost_at and lost_at[call_id] >= fault.start:
                    times.setdefault("worker death: error result", []).append(
                        lost_at[call_id] - fault.start
                    )
    return times


def report(
    checks: list[CheckResult],
    faults: list[Fault],
    times: dict[str, list[float]],
    figures: dict[str, Any],
) -> str:
    """The printed table."""
    lines = ["", "== fault run =="]
    lines += [f"{key:<28} {value}" for key, value in figures.items()]
    kinds = Counter(f.kind for f in faults)
    injected = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
    lines.append(f"{'faults injected':<28} {injected}")
    lines.append("")
    width = max([34, *(len(check.name) for check in checks)])
    lines.append(f"{'check':<{width}} {'violations':>10}")
    for check in checks:
        lines.append(f"{check.name:<{width}} {len(check.violations):>10}")
        lines += [f"    note: {n}" for n in check.notes]
        for violation in check.violations[:15]:
            known = known_fault(violation)
            lines.append(f"    VIOLATION{f' (known {known})' if known else ''}: {violation}")
    lines.append("")
    lines.append(f"{'5 recovery (s)':<{width}} {'n':>4} {'median':>8} {'max':>8}")
    for name, values in sorted(times.items()):
        lines.append(
            f"  {name:<{width - 2}} {len(values):>4} {statistics.median(values):>8.3f} "
            f"{max(values):>8.3f}"
        )
    return "\n".join(lines)
