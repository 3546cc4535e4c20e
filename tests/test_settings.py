"""Settings from the environment, with clear errors for bad values."""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from executor import ConfigurationError, Settings, TruncationPolicy


def test_defaults_follow_the_seeds() -> None:
    settings = Settings()
    assert settings.truncation == TruncationPolicy(3000, 50_000, 0.6)
    assert settings.bash_default_timeout == 10.0


def test_from_env_reads_toolpool_variables() -> None:
    settings = Settings.from_env(
        {
            "TOOLPOOL_REDIS_URL": "redis://h:1/0",
            "TOOLPOOL_WORKSPACE": "/srv/ws",
            "TOOLPOOL_BASH_MAX_TIMEOUT": "60",
            "TOOLPOOL_MAX_RESULT_CHARS": "2000",
            "TOOLPOOL_HEAD_RATIO": "0.5",
            "UNRELATED": "x",
        }
    )
    assert settings.redis_url == "redis://h:1/0"
    assert settings.workspace == Path("/srv/ws")
    assert settings.bash_max_timeout == 60.0
    assert settings.truncation == TruncationPolicy(2000, 50_000, 0.5)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TOOLPOOL_HTTP_TIMEOUT": "soon"}, "TOOLPOOL_HTTP_TIMEOUT='soon' is not a valid float"),
        ({"TOOLPOOL_RESULT_CAP": "0"}, "global_cap must be at least 1"),
        ({"TOOLPOOL_HEAD_RATIO": "2"}, "head_ratio must be between 0 and 1"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Settings.from_env(env)


def test_only_from_env_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # A reason to keep the dataclass over pydantic-settings, whose Settings() reads it too.
    monkeypatch.setenv("TOOLPOOL_QUEUE", "from-env")
    assert Settings().queue == "default"
    assert Settings.from_env().queue == "from-env"


def test_settings_are_frozen_and_changed_by_copy() -> None:
    settings = Settings()
    with pytest.raises(FrozenInstanceError):
        settings.queue = "other"  # type: ignore[misc]
    changed = settings.with_changes(queue="other")
    assert (settings.queue, changed.queue) == ("default", "other")
