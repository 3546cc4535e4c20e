"""The get_weather tool: current weather for a city from an Open-Meteo-compatible service.

Two HTTP GETs with the standard library: the geocoding search turns the city name into
coordinates, then the forecast's ``current`` block gives the weather there. Both base URLs
come from the settings, so tests and private deployments point it elsewhere.
"""

from __future__ import annotations

import http.client
import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

from executor import ToolError
from executor._settings import SettingsGroup, setting
from executor.contract import ToolContext, tool

MAX_CITY_CHARS = 100
# Both answers are a few hundred bytes; a body far larger is not the service we expect.
_MAX_BODY_BYTES = 1024 * 1024
_READ_CHUNK = 65536
_USER_AGENT = "toolpool-get_weather/0.1"
_CURRENT_FIELDS = (
    "temperature_2m",
    "relative_humidity_2m",
    "apparent_temperature",
    "weather_code",
    "wind_speed_10m",
)

# WMO weather interpretation codes, as Open-Meteo documents them.
_WMO_CODES: dict[int, str] = {
    0: "clear sky",
    1: "mainly clear",
    2: "partly cloudy",
    3: "overcast",
    45: "fog",
    48: "depositing rime fog",
    51: "light drizzle",
    53: "moderate drizzle",
    55: "dense drizzle",
    56: "light freezing drizzle",
    57: "dense freezing drizzle",
    61: "slight rain",
    63: "moderate rain",
    65: "heavy rain",
    66: "light freezing rain",
    67: "heavy freezing rain",
    71: "slight snowfall",
    73: "moderate snowfall",
    75: "heavy snowfall",
    77: "snow grains",
    80: "slight rain showers",
    81: "moderate rain showers",
    82: "violent rain showers",
    85: "slight snow showers",
    86: "heavy snow showers",
    95: "thunderstorm",
    96: "thunderstorm with slight hail",
    99: "thunderstorm with heavy hail",
}


@dataclass(frozen=True)
class WeatherSettings(SettingsGroup):
    """Where get_weather asks, and how long it waits for an answer."""

    weather_url: str = setting(
        "https://api.open-meteo.com", "WEATHER_URL", "the forecast service's base URL"
    )
    geocoding_url: str = setting(
        "https://geocoding-api.open-meteo.com",
        "GEOCODING_URL",
        "the geocoding service's base URL",
    )
    http_timeout: float = setting(5.0, "HTTP_TIMEOUT", "get_weather's seconds per HTTP request")


@tool(concurrency_safe=True, read_only=True, settings=WeatherSettings)
def get_weather(
    ctx: ToolContext,
    city: Annotated[
        str, Field(description="City name, e.g. 'Berlin' or 'San Francisco' (English names).")
    ],
) -> str:
    """Get the current weather for a city: temperature, feels-like, humidity, wind, sky."""
    name = city.strip()
    if not name:
        raise ToolError("The city name is empty. Give a city name, e.g. 'Berlin'.")
    if len(name) > MAX_CITY_CHARS:
        raise ToolError(
            f"The city name is {len(name)} characters long; at most {MAX_CITY_CHARS} are "
            "accepted. Give just the city's name."
        )
    deadline = time.monotonic() + min(
        ctx.settings_as(WeatherSettings).http_timeout * 2, ctx.remaining()
    )
    place = _find_city(ctx, name, deadline)
    current = _current_weather(ctx, place, deadline)
    return _describe(place, current)


def _find_city(ctx: ToolContext, name: str, deadline: float) -> dict[str, Any]:
    query = {"name": name, "count": 1, "language": "en", "format": "json"}
    url = _url(ctx.settings_as(WeatherSettings).geocoding_url, "/v1/search", query)
    answer = _get_json(url, ctx.settings_as(WeatherSettings).http_timeout, deadline)
    results = answer.get("results")
    if not results:
        raise ToolError(
            f"City not found: {name!r}. Check the spelling, use the English name, or try a "
            "larger city nearby."
        )
    place = results[0] if isinstance(results, list) else None
    if not isinstance(place, dict) or not all(
        _is_number(place.get(key)) for key in ("latitude", "longitude")
    ):
        raise _malformed(url, "the geocoding result has no latitude/longitude")
    return place


def _current_weather(ctx: ToolContext, place: dict[str, Any], deadline: float) -> dict[str, Any]:
    query = {
        "latitude": place["latitude"],
        "longitude": place["longitude"],
        "current": ",".join(_CURRENT_FIELDS),
    }
    url = _url(ctx.settings_as(WeatherSettings).weather_url, "/v1/forecast", query)
    answer = _get_json(url, ctx.settings_as(WeatherSettings).http_timeout, deadline)
    current = answer.get("current")
    if not isinstance(current, dict) or not _is_number(current.get("temperature_2m")):
        raise _malformed(url, "the forecast has no current temperature")
    return current


def _describe(place: dict[str, Any], current: dict[str, Any]) -> str:
    name = place.get("name")
    # The region tells apart towns that share a name (Springfield); skip it when it repeats.
    region = place.get("admin1") if place.get("admin1") != name else None
    where = ", ".join(str(part) for part in (name, region, place.get("country")) if part)
    parts = [f"{current['temperature_2m']:g} °C"]
    if _is_number(current.get("apparent_temperature")):
        parts.append(f"feels like {current['apparent_temperature']:g} °C")
    if _is_number(current.get("relative_humidity_2m")):
        parts.append(f"humidity {current['relative_humidity_2m']:g}%")
    if _is_number(current.get("wind_speed_10m")):
        parts.append(f"wind {current['wind_speed_10m']:g} km/h")
    sky = _sky(current.get("weather_code"))
    return f"Current weather in {where}: {sky}, " + ", ".join(parts) + "."


def _sky(code: Any) -> str:
    if not _is_number(code):
        return "conditions unknown"
    return _WMO_CODES.get(int(code), f"weather code {code:g}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _url(base: str, path: str, query: dict[str, Any]) -> str:
    return base.rstrip("/") + path + "?" + urllib.parse.urlencode(query)


def _get_json(url: str, timeout: float, deadline: float) -> dict[str, Any]:
    """GET ``url`` and decode its JSON object; every failure becomes a clear ``ToolError``."""
    host = urllib.parse.urlsplit(url).netloc
    request = urllib.request.Request(
        url, headers={"User-Agent": _USER_AGENT, "Accept": "application/json"}
    )
    wait = max(min(timeout, deadline - time.monotonic()), 0.1)
    try:
        with urllib.request.urlopen(request, timeout=wait) as response:
            body = _read_body(response, host, deadline)
    except urllib.error.HTTPError as exc:
        exc.close()
        raise ToolError(
            f"The weather service at {host} answered HTTP {exc.code} ({exc.reason}). "
            "Try again later."
        ) from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise _timed_out(host, timeout) from None
        raise ToolError(
            f"The weather service at {host} is unreachable ({exc.reason}). Try again later."
        ) from None
    except TimeoutError:
        raise _timed_out(host, timeout) from None
    except (OSError, http.client.HTTPException) as exc:
        raise ToolError(
            f"The connection to the weather service at {host} failed ({exc!r}). Try again later."
        ) from None
    try:
        answer = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise _malformed(url, "the body is not valid JSON") from None
    if not isinstance(answer, dict):
        raise _malformed(url, "the body is not a JSON object")
    return answer


def _read_body(response: http.client.HTTPResponse, host: str, deadline: float) -> bytes:
    # The socket timeout bounds each read, not the whole body: a server that trickles
    # bytes is stopped by the deadline instead.
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError(f"reading the answer from {host} took too long")
        chunk = response.read(_READ_CHUNK)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > _MAX_BODY_BYTES:
            raise ToolError(
                f"The weather service at {host} sent more than {_MAX_BODY_BYTES} bytes; that "
                "is not a weather answer. Check the service URL in the settings."
            )
        chunks.append(chunk)


def _timed_out(host: str, timeout: float) -> ToolError:
    return ToolError(
        f"The weather service at {host} did not answer within {timeout:g} s. Try again later."
    )


def _malformed(url: str, problem: str) -> ToolError:
    host = urllib.parse.urlsplit(url).netloc
    return ToolError(
        f"The weather service at {host} sent an answer that cannot be used: {problem}. "
        "Try again later."
    )
