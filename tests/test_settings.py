"""Settings by concern: the one table, the environment both ways, clear errors, and a tool that
gets its own settings and nothing else."""

from __future__ import annotations

import re
from dataclasses import FrozenInstanceError, dataclass
from pathlib import Path

import pytest

from executor import (
    ConfigurationError,
    Settings,
    ToolCall,
    ToolContext,
    ToolDefinitionError,
    ToolRegistry,
    TruncationPolicy,
    Workspace,
    tool,
)
from executor._settings import (
    ClientGroup,
    RedisGroup,
    SettingsGroup,
    WorkerGroup,
    check_unique,
    rows,
    setting,
)
from workers import builtin_registry
from workers.pipeline._runner import CallEnvironment, run_call
from workers.tools._shell_settings import BashSettings
from workers.tools.weather import WeatherSettings

ROOT = Path(__file__).resolve().parents[1]
CORE = (RedisGroup, ClientGroup, WorkerGroup, TruncationPolicy)
TOOLS = builtin_registry().settings_classes()


def test_defaults_follow_the_seeds() -> None:
    settings = Settings()
    assert settings.truncation == TruncationPolicy(3000, 50_000, 0.6)
    assert settings.redis == RedisGroup(url=None, key_prefix="toolpool")
    assert settings.client.queue == "default"
    assert settings.worker.workspace == Path()
    assert settings.tool(BashSettings).default_timeout == 10.0
    assert settings.tool(WeatherSettings).http_timeout == 5.0


def test_the_builtin_tools_own_the_bash_and_weather_groups() -> None:
    assert set(TOOLS) == {BashSettings, WeatherSettings}


def test_from_env_reads_toolpool_variables() -> None:
    settings = Settings.from_env(
        {
            "TOOLPOOL_REDIS_URL": "redis://h:1/0",
            "TOOLPOOL_WORKSPACE": "/srv/ws",
            "TOOLPOOL_QUEUE": "q",
            "TOOLPOOL_BASH_MAX_TIMEOUT": "60",
            "TOOLPOOL_BASH_NETWORK": "yes",
            "TOOLPOOL_MAX_RESULT_CHARS": "2000",
            "TOOLPOOL_HEAD_RATIO": "0.5",
            "UNRELATED": "x",
        },
        tools=[BashSettings],
    )
    assert settings.redis.url == "redis://h:1/0"
    assert settings.worker.workspace == Path("/srv/ws")
    assert settings.client.queue == "q"
    assert settings.tool(BashSettings) == BashSettings(max_timeout=60.0, network=True)
    assert settings.truncation == TruncationPolicy(2000, 50_000, 0.5)


def test_from_env_reads_only_the_tool_groups_asked_for() -> None:
    env = {"TOOLPOOL_BASH_MAX_TIMEOUT": "60"}
    assert Settings.from_env(env).tools == ()
    assert BashSettings.from_env(env).max_timeout == 60.0


def test_an_empty_optional_variable_is_unset() -> None:
    settings = Settings.from_env({"TOOLPOOL_SESSIONS_ROOT": "", "TOOLPOOL_SESSION": ""})
    assert (settings.worker.sessions_root, settings.client.session) == (None, None)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TOOLPOOL_HTTP_TIMEOUT": "soon"}, "TOOLPOOL_HTTP_TIMEOUT='soon' is not a valid float"),
        ({"TOOLPOOL_LOCK_LEASE_MS": "1.5"}, "TOOLPOOL_LOCK_LEASE_MS='1.5' is not a valid int"),
        ({"TOOLPOOL_BASH_NETWORK": "maybe"}, "TOOLPOOL_BASH_NETWORK='maybe' is not a valid bool"),
        ({"TOOLPOOL_RESULT_CAP": "0"}, "TOOLPOOL_RESULT_CAP='0' must be at least 1"),
        ({"TOOLPOOL_HEAD_RATIO": "2"}, "TOOLPOOL_HEAD_RATIO='2' must be between 0 and 1"),
        (
            {"TOOLPOOL_BASH_SANDBOX": "sometimes"},
            "TOOLPOOL_BASH_SANDBOX='sometimes' must be one of off, auto, required",
        ),
        (
            {"TOOLPOOL_BASH_WARM_PEERS": "some"},
            "TOOLPOOL_BASH_WARM_PEERS='some' must be one of off, new, all",
        ),
        (
            {"TOOLPOOL_BASH_MEMORY_MB": "-1"},
            "TOOLPOOL_BASH_MEMORY_MB='-1' must be 0 (no limit) or more",
        ),
    ],
)
def test_bad_values_name_the_variable_and_the_value(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        Settings.from_env(env, tools=TOOLS)


@pytest.mark.parametrize(
    ("raw", "mode"),
    [("new", "new"), ("ALL", "all"), ("off", "off"), ("1", "all"), ("true", "all"), ("no", "off")],
)
def test_the_peers_mode_is_read_by_name_or_as_the_yes_or_no_it_once_was(
    raw: str, mode: str
) -> None:
    # Before it had modes, yes made ahead the sandboxes of every session made or run in.
    assert BashSettings.from_env({"TOOLPOOL_BASH_WARM_PEERS": raw}).warm_peers == mode
    assert BashSettings().warm_peers == "new"


def test_a_bad_variable_says_what_the_setting_is_for() -> None:
    with pytest.raises(ConfigurationError, match=r"\(get_weather's seconds per HTTP request\)"):
        WeatherSettings.from_env({"TOOLPOOL_HTTP_TIMEOUT": "soon"})


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: TruncationPolicy(global_cap=0), "TruncationPolicy.global_cap must be at least 1"),
        (
            lambda: BashSettings(sandbox="sometimes"),
            "BashSettings.sandbox must be one of off, auto, required, got 'sometimes'",
        ),
        (
            lambda: BashSettings(tmp_mb=-5),
            "BashSettings.tmp_mb must be 0 (no limit) or more, got -5",
        ),
    ],
)
def test_bad_values_given_directly_name_the_field(build: object, message: str) -> None:
    assert callable(build)
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        build()


def test_only_from_env_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # A reason to keep the dataclass over pydantic-settings, whose Settings() reads it too.
    monkeypatch.setenv("TOOLPOOL_QUEUE", "from-env")
    monkeypatch.setenv("TOOLPOOL_BASH_SANDBOX", "off")
    assert Settings().client.queue == "default"
    assert Settings().tool(BashSettings).sandbox == "auto"
    assert Settings.from_env().client.queue == "from-env"


def test_settings_are_frozen_and_changed_by_copy() -> None:
    settings = Settings()
    with pytest.raises(FrozenInstanceError):
        settings.client = ClientGroup(queue="other")  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        settings.client.queue = "other"  # type: ignore[misc]
    changed = settings.with_changes(queue="other")
    assert (settings.client.queue, changed.client.queue) == ("default", "other")
    assert changed.worker == settings.worker


def test_one_setting_at_a_time_or_by_group_is_the_same() -> None:
    flat = Settings(redis_url="redis://h/0", workspace=Path("/w"), queue="q", max_result_chars=9)
    grouped = Settings(
        redis=RedisGroup(url="redis://h/0"),
        worker=WorkerGroup(workspace=Path("/w")),
        client=ClientGroup(queue="q"),
        truncation=TruncationPolicy(default_max_chars=9),
    )
    assert flat == grouped
    assert Settings().with_changes(worker=WorkerGroup(scope="s")).worker.scope == "s"
    # A setting on top of its group's given object replaces that one field only.
    both = Settings(worker=WorkerGroup(scope="s"), lock_lease_ms=50)
    assert (both.worker.scope, both.worker.lock_lease_ms) == ("s", 50)


def test_an_unknown_keyword_names_it_and_where_tool_settings_go() -> None:
    with pytest.raises(TypeError, match=r"no setting 'bash_sandbox'.*tools="):
        Settings(bash_sandbox="off")
    with pytest.raises(TypeError, match="no setting 'quue'"):
        Settings().with_changes(quue="q")


def test_tool_settings_are_held_one_group_per_class() -> None:
    settings = Settings(tools=[BashSettings(sandbox="off")])
    assert settings.tool(BashSettings).sandbox == "off"
    assert settings.tool(WeatherSettings) == WeatherSettings()
    changed = settings.with_tools(BashSettings(network=True), WeatherSettings(http_timeout=1.0))
    assert changed.tool(BashSettings) == BashSettings(network=True)
    assert changed.tool(WeatherSettings).http_timeout == 1.0
    with pytest.raises(ConfigurationError, match="more than one BashSettings"):
        Settings(tools=[BashSettings(), BashSettings()])


def test_the_environment_reads_back_equal() -> None:
    settings = Settings(
        redis_url="unix:///tmp/r.sock?db=2",
        key_prefix="tp2",
        queue="q7",
        session="s1",
        call_heartbeat_s=0.25,
        scope="s9",
        workspace=Path("/w"),
        sessions_root=Path("/s"),
        serve_pool_calls=False,
        truncation=TruncationPolicy(10, 20, 0.125),
        tools=[BashSettings(network=True, hide="/x /y", cpu_seconds=1.5), WeatherSettings()],
    )
    env = settings.environment()
    assert Settings.from_env(env, tools=TOOLS) == settings
    assert env["TOOLPOOL_BASH_NETWORK"] == "true"
    assert env["TOOLPOOL_HEAD_RATIO"] == "0.125"


def test_the_environment_unsets_what_is_none_over_an_inherited_variable() -> None:
    # A pool's children inherit its environment: None must not leave a stale value there.
    inherited = {"TOOLPOOL_SESSIONS_ROOT": "/elsewhere", "TOOLPOOL_SESSION": "other"}
    env = {**inherited, **Settings().environment()}
    rebuilt = Settings.from_env(env)
    assert (rebuilt.worker.sessions_root, rebuilt.client.session) == (None, None)


def test_a_value_that_would_read_back_different_is_refused() -> None:
    settings = Settings(workspace="/not/a/path/object", lock_lease_ms=1.5)
    with pytest.raises(ConfigurationError, match="cannot be passed on") as raised:
        settings.environment()
    assert "WorkerGroup.workspace='/not/a/path/object'" in str(raised.value)
    assert "WorkerGroup.lock_lease_ms=1.5" in str(raised.value)


def test_each_variable_is_read_by_one_setting() -> None:
    check_unique((*CORE, *TOOLS))
    variables = [row.variable for group in (*CORE, *TOOLS) for row in rows(group)]
    assert len(variables) == len(set(variables)) == 47

    @dataclass(frozen=True)
    class Clash(SettingsGroup):
        queue: str = setting("x", "QUEUE", "a second reader of TOOLPOOL_QUEUE")

    with pytest.raises(ConfigurationError, match="TOOLPOOL_QUEUE is read by both"):
        Settings.from_env({}, tools=[Clash])


def test_every_variable_is_documented() -> None:
    texts = [ROOT.joinpath("README.md").read_text()]
    texts += [path.read_text() for path in sorted(ROOT.joinpath("docs").glob("*.md"))]
    shown = "\n".join(texts)
    missing = [
        row.variable
        for group in (*CORE, *TOOLS)
        for row in rows(group)
        # The settings table names variables without their prefix.
        if f"`{row.variable.removeprefix('TOOLPOOL_')}`" not in shown
        and f"/ `{row.variable.removeprefix('TOOLPOOL_')}`" not in shown
        and row.variable not in shown
    ]
    assert missing == []


def test_a_group_of_a_type_the_table_cannot_read_is_refused() -> None:
    @dataclass(frozen=True)
    class Odd(SettingsGroup):
        when: complex = setting(1j, "ODD_WHEN", "a type with no parser")

    with pytest.raises(ToolDefinitionError, match="no parser"):
        tool(settings=Odd)(_echo)

    @dataclass(frozen=True)
    class Undeclared(SettingsGroup):
        plain: int = 3

    with pytest.raises(ToolDefinitionError, match=r"Undeclared\.plain is not declared"):
        tool(settings=Undeclared)(_echo)


def _echo(text: str) -> str:
    """Repeat text."""
    return text


@dataclass(frozen=True)
class GreetSettings(SettingsGroup):
    greeting: str = setting("hello", "TEST_GREETING", "what greet says")


seen: list[object] = []


@tool(settings=GreetSettings)
def greet(ctx: ToolContext, name: str) -> str:
    """Greet someone."""
    seen.append(ctx.settings)
    return f"{ctx.settings_as(GreetSettings).greeting} {name}"


@tool
def plain(ctx: ToolContext) -> str:
    """Say what settings a tool without its own gets."""
    seen.append(ctx.settings)
    return "ok"


def test_a_tool_gets_its_own_settings_and_nothing_else(tmp_path: Path) -> None:
    seen.clear()
    settings = Settings(
        queue="secret-queue", tools=[GreetSettings(greeting="hi"), BashSettings(sandbox="off")]
    )
    env = CallEnvironment(workspace=Workspace(tmp_path), settings=settings)
    registry = ToolRegistry([greet, plain])

    result = run_call(ToolCall(name="greet", arguments={"name": "Ada"}), registry, env)
    run_call(ToolCall(name="plain", arguments={}), registry, env)

    assert result.content == "hi Ada"
    assert seen == [GreetSettings(greeting="hi"), None]


def test_a_tool_run_without_settings_gets_its_defaults(tmp_path: Path) -> None:
    assert ToolContext(workspace=Workspace(tmp_path)).settings_as(GreetSettings).greeting == "hello"
    given = ToolContext(workspace=Workspace(tmp_path), settings=BashSettings(), tool_name="greet")
    with pytest.raises(ConfigurationError, match=r"given BashSettings, not GreetSettings"):
        given.settings_as(GreetSettings)


def test_a_workers_tool_settings_come_from_its_environment() -> None:
    registry = ToolRegistry([greet, *builtin_registry()])
    read = Settings.from_env({"TOOLPOOL_TEST_GREETING": "salut"}, tools=registry.settings_classes())
    assert read.tool(GreetSettings).greeting == "salut"
    assert {type(group) for group in read.tools} == {GreetSettings, BashSettings, WeatherSettings}
