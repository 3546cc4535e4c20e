"""Keep full output: the whole text of a result cut by truncation, for ``toolpool output``.

``truncate.finish`` asks a keeper only for the text a tool itself returned, and only when it is
longer than the limit; the note the keeper returns goes into the truncation marker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import redis

from executor import Settings
from executor.wire import ResultStore, ToolCall

log = logging.getLogger(__name__)

#: ``keep(call, text)``: store ``text`` and return the note for the marker (None: not kept).
KeepFullOutput = Callable[[ToolCall, str], "str | None"]


class FullOutputKeeper:
    """The worker's keeper: the full output in Redis, ``settings.worker.full_output_ttl`` s.

    Keeping is a courtesy: when Redis does not answer, the result is still cut and answered,
    only without the note that says where the rest is.
    """

    def __init__(self, results: ResultStore, settings: Settings) -> None:
        self._results = results
        self._ttl = settings.worker.full_output_ttl
        self._max_bytes = settings.worker.full_output_max_bytes

    def __call__(self, call: ToolCall, text: str) -> str | None:
        """Store ``text`` as the full output of ``call``; the marker's note, or None."""
        try:
            return self._results.keep_full_output(
                call.id, text, ttl=self._ttl, max_bytes=self._max_bytes
            )
        except redis.RedisError as exc:
            log.warning("toolpool: could not keep the full output of %s: %s", call.id, exc)
            return None
