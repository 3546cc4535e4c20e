"""Settings by concern, and the one table that reads them from the environment and back.

A concern is a frozen group (a ``SettingsGroup`` dataclass) whose fields, each declared with
``setting(default, env, help)``, are the rows of the table: field, variable (``TOOLPOOL_`` +
``env``), parser (from the field's type), check, default, help. ``rows(group)`` lists them;
``group.from_env()`` reads them, ``group.environment()`` writes them for a child process, and
checks run on every construction. A new setting is one row.

``Settings`` holds what the orchestrator and the workers share: ``redis`` (where Redis is and
the prefix of its keys), ``client`` (what the orchestrator reads: queue, turn timeout, how it
judges a running call alive, session), ``worker`` (how workers run calls and keep results) and
``truncation``. A tool's own settings (bash's, get_weather's) are a group declared beside the
tool (``@tool(settings=...)``), carried in ``Settings.tools`` and handed to that tool alone.
"""

from __future__ import annotations

import os
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from executor._errors import ConfigurationError

ENV_PREFIX = "TOOLPOOL_"

G = TypeVar("G", bound="SettingsGroup")
#: A check: the problem with a value ("must be at least 1"), or None when it is fine.
Check = Callable[[Any], "str | None"]

_DECLARED = "toolpool.setting"


@dataclass(frozen=True)
class _Declared:
    """What ``setting`` records on a field; ``rows`` completes it into a ``Row``."""

    env: str
    help: str
    check: Check | None
    parse: Callable[[str], Any] | None


@dataclass(frozen=True)
class Row:
    """One setting: the field of its group (the concern), its variable, how the variable's
    text is read and written, what a value must be, its default and what it is for."""

    group: type[SettingsGroup]
    field: str
    variable: str
    parse: Callable[[str], Any]
    type_name: str
    optional: bool
    check: Check | None
    default: Any
    help: str


def setting(
    default: Any,
    env: str,
    help: str,
    *,
    check: Check | None = None,
    parse: Callable[[str], Any] | None = None,
) -> Any:
    """A field of a settings group, read from ``TOOLPOOL_`` + ``env``; ``parse`` defaults to
    the field's type (str, int, float, bool, Path, or one of them or None)."""
    return field(default=default, metadata={_DECLARED: _Declared(env, help, check, parse)})


def at_least(minimum: float, meaning: str = "") -> Check:
    """A check: the value is ``minimum`` or more (``meaning`` says what ``minimum`` means)."""
    said = f"{minimum:g} ({meaning}) or more" if meaning else f"at least {minimum:g}"
    return lambda value: None if value >= minimum else f"must be {said}"


def between(low: float, high: float) -> Check:
    """A check: ``low`` <= value <= ``high``."""
    return lambda value: None if low <= value <= high else f"must be between {low:g} and {high:g}"


def one_of(choices: tuple[str, ...]) -> Check:
    """A check: the value is one of ``choices``."""
    return lambda value: None if value in choices else f"must be one of {', '.join(choices)}"


class SettingsGroup:
    """A frozen dataclass of settings of one concern, each field declared with ``setting``.

    Construction checks every value (``ConfigurationError`` naming the field); ``from_env``
    reads the group's variables (naming the variable); ``environment`` writes them.
    """

    def __post_init__(self) -> None:
        for row in rows(type(self)):
            value = getattr(self, row.field)
            problem = _problem(row, value)
            if problem:
                raise ConfigurationError(
                    f"{type(self).__name__}.{row.field} {problem}, got {value!r}"
                )

    @classmethod
    def from_env(cls: type[G], environ: Mapping[str, str] | None = None) -> G:
        """This group from ``TOOLPOOL_*`` variables (``os.environ`` by default); unset ones
        keep their defaults. A bad value is a ``ConfigurationError`` naming the variable."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for row in rows(cls):
            raw = env.get(row.variable)
            if raw is None:
                continue
            try:
                value = row.parse(raw)
            except ValueError:
                raise ConfigurationError(
                    f"{row.variable}={raw!r} is not a valid {row.type_name} ({row.help})"
                ) from None
            problem = _problem(row, value)
            if problem:
                raise ConfigurationError(f"{row.variable}={raw!r} {problem} ({row.help})")
            values[row.field] = value
        return cls(**values)

    def environment(self) -> dict[str, str]:
        """The ``TOOLPOOL_*`` variables from which ``from_env`` rebuilds this group, every
        row's (an unset optional one as ""). ``ConfigurationError`` if a value would not
        read back equal (a type its parser does not make), rather than hand on another."""
        env: dict[str, str] = {}
        differ = []
        for row in rows(type(self)):
            value = getattr(self, row.field)
            env[row.variable] = _text(value)
            try:
                same = row.parse(env[row.variable]) == value
            except ValueError:
                same = False
            if not same:
                differ.append(f"{type(self).__name__}.{row.field}={value!r}")
        if differ:
            raise ConfigurationError(
                "These settings cannot be passed on through TOOLPOOL_* variables (they would "
                f"read back different): {', '.join(differ)}."
            )
        return env


def rows(group: type[SettingsGroup]) -> tuple[Row, ...]:
    """The table's rows of one group, in field order; ``ConfigurationError`` if ``group`` is
    no dataclass of ``setting`` fields of a type the table can parse."""
    found = _ROWS.get(group)
    if found is None:
        found = _ROWS[group] = _rows(group)
    return found


_ROWS: dict[type[SettingsGroup], tuple[Row, ...]] = {}


def _rows(group: type[SettingsGroup]) -> tuple[Row, ...]:
    if not (isinstance(group, type) and issubclass(group, SettingsGroup) and is_dataclass(group)):
        raise ConfigurationError(f"{group!r} is not a SettingsGroup dataclass")
    hints = typing.get_type_hints(group)
    found = []
    for item in fields(group):
        declared = item.metadata.get(_DECLARED)
        if not isinstance(declared, _Declared) or item.default is MISSING:
            raise ConfigurationError(
                f"{group.__name__}.{item.name} is not declared with setting(default, env, help)"
            )
        kind, optional = _unwrap(hints[item.name])
        parse = declared.parse or _PARSERS.get(kind)
        if parse is None:
            raise ConfigurationError(
                f"{group.__name__}.{item.name}: no parser for {kind!r}; give setting(parse=...)"
            )
        found.append(
            Row(
                group=group,
                field=item.name,
                variable=ENV_PREFIX + declared.env,
                parse=_or_none(parse) if optional else parse,
                type_name=getattr(kind, "__name__", str(kind)),
                optional=optional,
                check=declared.check,
                default=item.default,
                help=declared.help,
            )
        )
    return tuple(found)


def check_unique(groups: Iterable[type[SettingsGroup]]) -> None:
    """``ConfigurationError`` if two rows of ``groups`` read the same variable."""
    seen: dict[str, str] = {}
    for group in groups:
        for row in rows(group):
            where = f"{group.__name__}.{row.field}"
            if seen.setdefault(row.variable, where) != where:
                raise ConfigurationError(
                    f"{row.variable} is read by both {seen[row.variable]} and {where}"
                )


def _problem(row: Row, value: Any) -> str | None:
    if row.check is None or (row.optional and value is None):
        return None
    return row.check(value)


def _boolean(raw: str) -> bool:
    words = {
        "1": True,
        "true": True,
        "yes": True,
        "on": True,
        "0": False,
        "false": False,
        "no": False,
        "off": False,
    }
    try:
        return words[raw.strip().lower()]
    except KeyError:
        raise ValueError(raw) from None


_PARSERS: dict[Any, Callable[[str], Any]] = {
    str: str,
    int: int,
    float: float,
    bool: _boolean,
    Path: Path,
}


def _unwrap(hint: Any) -> tuple[Any, bool]:
    """``X`` and whether the field also takes None (``X | None``)."""
    args = typing.get_args(hint)
    if type(None) in args:
        rest = [arg for arg in args if arg is not type(None)]
        if len(rest) == 1:
            return rest[0], True
    return hint, False


def _or_none(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    # An empty variable is an unset optional setting: how a pool hands "none" to its children.
    return lambda raw: None if raw == "" else parse(raw)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


# -- the groups every process shares ----------------------------------------------------------


@dataclass(frozen=True)
class RedisGroup(SettingsGroup):
    """Where Redis is and how toolpool's keys there are named: what a connection needs
    (``executor._connect`` parses ``url`` into its ``RedisSettings`` and builds the clients)."""

    url: str | None = setting(
        None, "REDIS_URL", "redis://, rediss:// (TLS) or unix:// URL; a password goes in it"
    )
    key_prefix: str = setting("toolpool", "KEY_PREFIX", "every key toolpool uses starts with it")
    replicas: int = setting(
        0,
        "REDIS_REPLICAS",
        "replicas that must hold each write a guarantee rests on before it is acted on (WAIT); "
        "0: act once the primary has it",
        check=at_least(0),
    )
    replica_wait_ms: int = setting(
        500,
        "REDIS_REPLICA_WAIT_MS",
        "how long such a write waits for its replicas before it fails like an outage",
        check=at_least(1),
    )


@dataclass(frozen=True)
class ClientGroup(SettingsGroup):
    """What the orchestrator reads: where it sends calls, how long a turn may take, when a
    running call counts as lost (the workers' heartbeat keeps to the same two values), its
    default session, and how long RQ keeps the jobs it enqueues."""

    queue: str = setting("default", "QUEUE", "the RQ queue toolpool.<queue>")
    turn_timeout: float = setting(
        900.0, "TURN_TIMEOUT", "seconds Executor.run waits before timeout results"
    )
    call_heartbeat_s: float = setting(
        1.0, "CALL_HEARTBEAT_S", "seconds between renewals of a running call's liveness key"
    )
    call_liveness_s: float = setting(
        5.0, "CALL_LIVENESS_S", "seconds a running call's liveness key lives unrenewed"
    )
    session: str | None = setting(None, "SESSION", "the session a client's calls run in")
    session_idle_ttl: float = setting(
        24 * 3600.0, "SESSION_IDLE_TTL", "seconds a new session lives without calls"
    )
    # How long RQ keeps a finished job's own record (its hash and finished-registry entry).
    # toolpool's result keys (result_ttl) are what callers read, and nothing of toolpool reads
    # a finished job's record: by default none is kept (it cost 1.7 KB a call, more than the
    # call's own keys). A positive value keeps it for rq-dashboard's list of finished jobs.
    rq_record_ttl: int = setting(
        0, "RQ_RECORD_TTL", "seconds RQ keeps the record of a job that ended well (0: none)"
    )


@dataclass(frozen=True)
class WorkerGroup(SettingsGroup):
    """How a worker runs calls: its folders, lock scope and lease, how long what it writes to
    Redis is kept, and which calls it serves."""

    workspace: Path = setting(
        Path(), "WORKSPACE", "the folder file tools may touch in calls without a session"
    )
    scope: str = setting("global", "SCOPE", "lock scope: workers sharing it share one lock")
    lock_lease_ms: int = setting(10_000, "LOCK_LEASE_MS", "lock lease; renewed every third")
    lock_wait_timeout: float = setting(
        300.0, "LOCK_WAIT_TIMEOUT", "seconds a call waits for the lock"
    )
    # How long results and turn plans are kept: an hour, as full outputs. Redis then holds
    # about an hour of calls (under 1 KB each for a small result), not a day's.
    result_ttl: int = setting(
        3600, "RESULT_TTL", "seconds results, turn plans and call-id claims are kept"
    )
    full_output_ttl: int = setting(
        3600, "FULL_OUTPUT_TTL", "seconds the full output of a truncated result is kept"
    )
    full_output_max_bytes: int = setting(
        16 * 1024 * 1024, "FULL_OUTPUT_MAX_BYTES", "the largest full output kept"
    )
    events_maxlen: int = setting(10_000, "EVENTS_MAXLEN", "the event stream's cap")
    # Sessions: a worker with a sessions root serves session S in sessions_root/S, on the
    # queue of its host (default: the machine's host name).
    sessions_root: Path | None = setting(
        None, "SESSIONS_ROOT", "serve session S in SESSIONS_ROOT/S"
    )
    # False: the worker takes only session calls (started with a sessions root, no workspace).
    serve_pool_calls: bool = setting(
        True, "SERVE_POOL_CALLS", "take calls without a session (else only session calls)"
    )
    host: str = setting("", "HOST", "the host name sessions are pinned to (default: this one)")
    session_sweep_s: float = setting(
        30.0, "SESSION_SWEEP_S", "seconds between looks for idle sessions to delete"
    )

    @property
    def folders(self) -> tuple[Path, ...]:
        """This worker's own folders, which hold other calls' files: the pool workspace and
        the sessions root (if any)."""
        if self.sessions_root is None:
            return (self.workspace,)
        return (self.workspace, self.sessions_root)


@dataclass(frozen=True)
class TruncationPolicy(SettingsGroup):
    """How tool output is cut before a model sees it.

    ``default_max_chars`` applies to tools that set no ``max_result_chars`` (3000);
    ``global_cap`` is the ceiling no tool may exceed (50,000); ``head_ratio`` is the share of
    the kept characters taken from the start (0.6; 0.5 keeps half and half).
    """

    default_max_chars: int = setting(
        3000, "MAX_RESULT_CHARS", "the result limit of a tool without its own", check=at_least(1)
    )
    global_cap: int = setting(
        50_000, "RESULT_CAP", "the limit no tool's may exceed", check=at_least(1)
    )
    head_ratio: float = setting(
        0.6, "HEAD_RATIO", "the share of a cut result kept from its start", check=between(0, 1)
    )

    def limit_for(self, tool_max_chars: int | None) -> int:
        """The character limit for a tool: its own or the default, never above the cap."""
        wanted = self.default_max_chars if tool_max_chars is None else tool_max_chars
        return min(wanted, self.global_cap)


#: Settings' groups by attribute, in order.
_GROUPS: dict[str, type[SettingsGroup]] = {
    "redis": RedisGroup,
    "client": ClientGroup,
    "worker": WorkerGroup,
    "truncation": TruncationPolicy,
}
#: A setting's keyword for ``Settings(...)``: its variable without the prefix, in lowercase.
_KEYWORDS: dict[str, tuple[str, str]] = {
    row.variable.removeprefix(ENV_PREFIX).lower(): (attribute, row.field)
    for attribute, group in _GROUPS.items()
    for row in rows(group)
}


@dataclass(frozen=True, init=False)
class Settings:
    """Every setting the orchestrator and the workers share, by concern, frozen.

    Build it with ``from_env()`` or directly: by group (``Settings(worker=WorkerGroup(
    workspace=p))``) or one setting at a time, by its variable's name in lowercase without
    ``TOOLPOOL_`` (``Settings(redis_url=u, workspace=p)``); read it by group
    (``settings.redis.url``, ``settings.worker.workspace``). ``tools`` holds tools' own
    settings groups (at most one of each class); ``tool(BashSettings)`` gives one, or its
    defaults.
    """

    redis: RedisGroup
    client: ClientGroup
    worker: WorkerGroup
    truncation: TruncationPolicy
    tools: tuple[SettingsGroup, ...]

    def __init__(
        self,
        *,
        redis: RedisGroup | None = None,
        client: ClientGroup | None = None,
        worker: WorkerGroup | None = None,
        truncation: TruncationPolicy | None = None,
        tools: Iterable[SettingsGroup] = (),
        **settings: Any,
    ) -> None:
        given: dict[str, Any] = {
            "redis": redis,
            "client": client,
            "worker": worker,
            "truncation": truncation,
        }
        changes: dict[str, dict[str, Any]] = {}
        for name, value in settings.items():
            if name not in _KEYWORDS:
                raise TypeError(
                    f"Settings has no setting {name!r}; a tool's own settings are a group "
                    "of their own, given in tools=(...)"
                )
            attribute, field_name = _KEYWORDS[name]
            changes.setdefault(attribute, {})[field_name] = value
        for attribute, kind in _GROUPS.items():
            group: Any = given[attribute] or kind()
            if attribute in changes:
                group = replace(group, **changes[attribute])
            object.__setattr__(self, attribute, group)
        object.__setattr__(self, "tools", _distinct(tools))

    def tool(self, kind: type[G]) -> G:
        """The tool settings group of class ``kind`` held here, or its defaults."""
        for group in self.tools:
            if type(group) is kind:
                return group
        return kind()

    def with_changes(self, **changes: Any) -> Settings:
        """A copy with some groups (``worker=...``, ``tools=...``) or settings (``queue=...``,
        by the names ``Settings(...)`` takes) replaced."""
        current: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in current.keys() & changes.keys():
            current[name] = changes.pop(name)
        return Settings(**current, **changes)

    def with_tools(self, *groups: SettingsGroup) -> Settings:
        """A copy holding ``groups`` in place of the tool settings of their classes."""
        kinds = {type(group) for group in groups}
        kept = [group for group in self.tools if type(group) not in kinds]
        return self.with_changes(tools=(*kept, *groups))

    def environment(self) -> dict[str, str]:
        """The ``TOOLPOOL_*`` variables from which ``from_env(tools=...)`` rebuilds these
        settings (see ``SettingsGroup.environment``)."""
        env: dict[str, str] = {}
        for group in self._groups():
            env.update(group.environment())
        return env

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        tools: Iterable[type[SettingsGroup]] = (),
    ) -> Settings:
        """Read ``TOOLPOOL_*`` variables (``os.environ`` by default); unset ones keep their
        defaults. ``tools``: the tool settings groups to read as well (a worker's tools').

        Each variable is a row of the table (``rows``): ``TOOLPOOL_REDIS_URL``,
        ``TOOLPOOL_QUEUE``, ``TOOLPOOL_WORKSPACE``, ``TOOLPOOL_MAX_RESULT_CHARS``, ...
        """
        env = os.environ if environ is None else environ
        kinds = tuple(dict.fromkeys(tools))
        check_unique((*_GROUPS.values(), *kinds))
        return cls(
            redis=RedisGroup.from_env(env),
            client=ClientGroup.from_env(env),
            worker=WorkerGroup.from_env(env),
            truncation=TruncationPolicy.from_env(env),
            tools=[kind.from_env(env) for kind in kinds],
        )

    def _groups(self) -> tuple[SettingsGroup, ...]:
        return (self.redis, self.client, self.worker, self.truncation, *self.tools)


def _distinct(tools: Iterable[SettingsGroup]) -> tuple[SettingsGroup, ...]:
    # In one order whatever the order given, so that equal settings compare equal.
    found = tuple(sorted(tools, key=lambda group: _name(type(group))))
    for group in found:
        rows(type(group))  # a settings group, or ConfigurationError
    kinds = [type(group) for group in found]
    doubled = sorted({kind.__name__ for kind in kinds if kinds.count(kind) > 1})
    if doubled:
        raise ConfigurationError(f"Settings.tools holds more than one {', '.join(doubled)}")
    return found


def _name(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


# Query options that carry a password (a Sentinel's, a TLS key's), masked like the URL's own.
_SECRET_OPTIONS = re.compile(r"(?<=[?&])((?:sentinel|ssl)_password=)[^&#]*")


def shown_url(url: str) -> str:
    """The URL without its passwords, for messages and logs."""
    parts = urlsplit(url)
    query = _SECRET_OPTIONS.sub(r"\1***", "?" + parts.query)[1:]
    if not parts.password and query == parts.query:
        return url
    netloc = parts.netloc
    if parts.password:
        netloc = netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc, query=query))
