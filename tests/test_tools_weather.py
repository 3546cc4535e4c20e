"""get_weather against a real HTTP server on 127.0.0.1 that plays Open-Meteo; no internet."""

from __future__ import annotations

import json
import socket
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from executor import ErrorType, ToolResult, ToolStatus
from workers.tools.weather import WeatherSettings, get_weather

RunTool = Callable[..., ToolResult]

SEARCH = "/v1/search"
FORECAST = "/v1/forecast"
BERLIN = {
    "name": "Berlin",
    "latitude": 52.52437,
    "longitude": 13.41053,
    "country": "Germany",
    "admin1": "Land Berlin",
}
CURRENT = {
    "time": "2026-07-20T12:00",
    "temperature_2m": 21.4,
    "relative_humidity_2m": 55,
    "apparent_temperature": 20.9,
    "weather_code": 3,
    "wind_speed_10m": 12.6,
}


class FakeOpenMeteo:
    """Answers each path with a set status and body, and records every request it gets."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, bytes]] = {
            SEARCH: (200, json.dumps({"results": [BERLIN]}).encode()),
            FORECAST: (200, json.dumps({"current": CURRENT}).encode()),
        }
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self.stalled_paths: set[str] = set()
        self.release = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, path: str, status: int, body: Any) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.answers[path] = (status, raw)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urllib.parse.urlsplit(self.path)
                fake.requests.append((parts.path, urllib.parse.parse_qs(parts.query)))
                if parts.path in fake.stalled_paths:
                    fake.release.wait(30)
                status, body = fake.answers.get(parts.path, (404, b'{"error": true}'))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                """Keep the test output quiet."""

        return Handler


@pytest.fixture
def service() -> Iterator[FakeOpenMeteo]:
    fake = FakeOpenMeteo()
    # A short poll interval: shutdown() waits for serve_forever's next poll.
    thread = threading.Thread(target=fake.server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield fake
    fake.release.set()
    fake.server.shutdown()
    fake.server.server_close()
    thread.join(10)


def _settings(url: str, http_timeout: float = 5.0) -> WeatherSettings:
    return WeatherSettings(geocoding_url=url, weather_url=url, http_timeout=http_timeout)


def test_answer_reads_like_a_sentence(run_tool: RunTool, service: FakeOpenMeteo) -> None:
    result = run_tool(get_weather, _settings=_settings(service.url), city="Berlin")

    assert result.status is ToolStatus.OK
    assert result.content == (
        "Current weather in Berlin, Land Berlin, Germany: overcast, 21.4 °C, "
        "feels like 20.9 °C, humidity 55%, wind 12.6 km/h."
    )


def test_requests_carry_the_documented_parameters(
    run_tool: RunTool, service: FakeOpenMeteo
) -> None:
    run_tool(get_weather, _settings=_settings(service.url + "/"), city="  São Paulo ")

    assert service.requests == [
        (SEARCH, {"name": ["São Paulo"], "count": ["1"], "language": ["en"], "format": ["json"]}),
        (
            FORECAST,
            {
                "latitude": ["52.52437"],
                "longitude": ["13.41053"],
                "current": [
                    "temperature_2m,relative_humidity_2m,apparent_temperature,weather_code,"
                    "wind_speed_10m"
                ],
            },
        ),
    ]


def test_unknown_weather_code_and_missing_fields(run_tool: RunTool, service: FakeOpenMeteo) -> None:
    service.answer(
        SEARCH, 200, {"results": [{"name": "Oslo", "latitude": 59.9, "longitude": 10.7}]}
    )
    service.answer(FORECAST, 200, {"current": {"temperature_2m": -3, "weather_code": 42}})

    result = run_tool(get_weather, _settings=_settings(service.url), city="Oslo")

    assert result.content == "Current weather in Oslo: weather code 42, -3 °C."


def test_city_not_found(run_tool: RunTool, service: FakeOpenMeteo) -> None:
    service.answer(SEARCH, 200, {"generationtime_ms": 0.4})

    result = run_tool(get_weather, _settings=_settings(service.url), city="Atlantis")

    assert result.error_type is ErrorType.TOOL_ERROR
    assert "City not found: 'Atlantis'" in result.content
    assert [path for path, _ in service.requests] == [SEARCH]


@pytest.mark.parametrize("path", [SEARCH, FORECAST])
def test_server_error_is_reported(run_tool: RunTool, service: FakeOpenMeteo, path: str) -> None:
    service.answer(path, 500, {"reason": "boom"})

    result = run_tool(get_weather, _settings=_settings(service.url), city="Berlin")

    host = service.url.removeprefix("http://")
    assert result.error_type is ErrorType.TOOL_ERROR
    assert f"The weather service at {host} answered HTTP 500" in result.content
    assert "Try again later" in result.content


@pytest.mark.parametrize(
    ("path", "body", "problem"),
    [
        (FORECAST, b"{not json", "the body is not valid JSON"),
        (SEARCH, b"\xff\xfe", "the body is not valid JSON"),
        (SEARCH, b"[1, 2]", "the body is not a JSON object"),
        (SEARCH, {"results": [{"name": "Nowhere"}]}, "no latitude/longitude"),
        (FORECAST, {"hourly": {}}, "no current temperature"),
    ],
)
def test_malformed_answers_are_reported(
    run_tool: RunTool, service: FakeOpenMeteo, path: str, body: Any, problem: str
) -> None:
    service.answer(path, 200, body)

    result = run_tool(get_weather, _settings=_settings(service.url), city="Berlin")

    assert result.error_type is ErrorType.TOOL_ERROR
    assert "sent an answer that cannot be used" in result.content
    assert problem in result.content


def test_unreachable_service_names_the_host(run_tool: RunTool) -> None:
    # A bound socket that never listens: connecting to it is refused, and no one can take
    # the port meanwhile.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        host = f"127.0.0.1:{closed.getsockname()[1]}"

        result = run_tool(get_weather, _settings=_settings(f"http://{host}"), city="Berlin")

    assert result.error_type is ErrorType.TOOL_ERROR
    assert f"The weather service at {host} is unreachable" in result.content
    assert "Try again later" in result.content


def test_slow_service_times_out(run_tool: RunTool, service: FakeOpenMeteo) -> None:
    service.stalled_paths.add(FORECAST)

    result = run_tool(
        get_weather, _settings=_settings(service.url, http_timeout=0.3), city="Berlin"
    )

    host = service.url.removeprefix("http://")
    assert result.error_type is ErrorType.TOOL_ERROR
    assert f"The weather service at {host} did not answer within 0.3 s" in result.content
    assert result.duration_ms < 5000


@pytest.mark.parametrize(
    ("city", "message"),
    [("", "The city name is empty"), ("   ", "The city name is empty"), ("x" * 101, "at most 100")],
)
def test_city_name_is_checked_before_any_request(
    run_tool: RunTool, service: FakeOpenMeteo, city: str, message: str
) -> None:
    result = run_tool(get_weather, _settings=_settings(service.url), city=city)

    assert result.error_type is ErrorType.TOOL_ERROR
    assert message in result.content
    assert service.requests == []


def test_flags_follow_the_seed_table() -> None:
    assert get_weather.is_concurrency_safe
    assert get_weather.is_read_only
    assert get_weather.parameters["required"] == ["city"]
