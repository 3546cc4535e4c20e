"""The ``toolpool`` command line: the orchestrator's commands, and those other packages add.

The worker side (``toolpool worker``, ``up``, ``demo``, ``exec``) declares its commands under
the ``toolpool.commands`` entry-point group; this module adds whatever is installed, so the
orchestrator's side never imports the worker side.
"""

from __future__ import annotations

import contextlib
import json
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import click

from executor._settings import Settings
from executor.cli._common import (
    EXIT_FAILED,
    connection_options,
    json_object,
    require_redis,
    session_option,
    settings_for,
    talking_to,
)
from executor.cli._dashboard import dashboard_command
from executor.cli._lock import lock as lock_group
from executor.cli._mcp import mcp_command
from executor.cli._metrics import metrics_command
from executor.cli._ops import events_command, status_command
from executor.cli._sessions import session as session_group
from executor.cli._timeline import timeline_command
from executor.client import Executor, TurnError
from executor.contract import FORMATS, SchemaFormat, ToolInfo, export_tools
from executor.wire import ToolCall, ToolResult, parse_call


class _Toolpool(click.Group):
    """The ``toolpool`` group: its own commands, and on first look-up the installed ones."""

    _installed_added = False

    def _add_installed(self) -> None:
        if self._installed_added:
            return
        self._installed_added = True
        for entry in entry_points(group="toolpool.commands"):
            command = entry.load()
            if isinstance(command, click.Command) and entry.name not in self.commands:
                self.add_command(command, entry.name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._add_installed()
        return super().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        self._add_installed()
        return super().get_command(ctx, cmd_name)


@click.group(cls=_Toolpool, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="toolpool")
def main() -> None:
    """toolpool: run an LLM agent's tool calls on a pool of workers."""


@main.command("tools")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", *FORMATS]),
    default="table",
    show_default=True,
    help="A readable table, or JSON schemas for a model API.",
)
@session_option
@connection_options
def tools_command(fmt: str, session: str | None, redis_url: str | None, prefix: str | None) -> None:
    """List the tools the live workers serve, with flags and limits or as model-API schemas.

    Tools are declared on the workers (`toolpool worker --tools MODULE:ATTR`); each worker
    publishes what it serves, and this reads it from Redis. With --session, the tools of the
    workers of the session's host.
    """
    settings = settings_for(redis_url, prefix, session=session)
    require_redis(settings)
    with talking_to(settings), _executor(settings) as executor:
        catalog = executor.catalog()
    if not catalog.workers:
        raise click.ClickException(
            f"No live worker serves queue {catalog.queue!r}: start workers with "
            "`toolpool worker --redis URL --workspace DIR` (or `toolpool up`)."
        )
    if fmt != "table":
        schema_format: SchemaFormat = fmt  # type: ignore[assignment]
        click.echo(json.dumps(export_tools(catalog.tools(), schema_format), indent=2))
        return
    versions = catalog.versions
    if len(versions) == 1:
        agreement = f"catalog {versions[0]}"
    else:
        agreement = f"workers disagree: {len(versions)} catalog versions {', '.join(versions)}"
    plural = "s" if catalog.workers != 1 else ""
    click.echo(f"queue {catalog.queue}: {catalog.workers} live worker{plural}, {agreement}")
    policy = settings.truncation
    rows = [("TOOL", "MODE", "READ-ONLY", "MAX CHARS", "TIME LIMIT", "WORKERS", "DESCRIPTION")]
    for item in catalog.tools():
        rows.append(
            (
                item.name,
                "shared" if item.is_concurrency_safe else "exclusive",
                "yes" if item.is_read_only else "no",
                str(policy.limit_for(item.max_result_chars)),
                time_limit_text(item),
                str(catalog.serving(item.name)),
                item.description.splitlines()[0] if item.description else "",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    for row in rows:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:6])]
        click.echo("  ".join([*cells, row[6]]))


def time_limit_text(tool: ToolInfo) -> str:
    """A tool's time limit as the table shows it: ``30s``; for a tool whose calls set their
    own limit, the default and the maximum its schema publishes for that argument:
    ``10s (timeout argument, up to 600s)``."""
    if not tool.timeout_argument:
        return f"{tool.timeout:g}s"
    argument = tool.timeout_argument
    schema = tool.parameters.get("properties", {}).get(argument, {})
    default = _schema_number(schema, "default")
    # Without a published maximum, the tool's own limit is the most a call gets.
    maximum = _schema_number(schema, "maximum")
    most = f"up to {(tool.timeout if maximum is None else maximum):g}s"
    if default is None:
        return f"{most} (set by its {argument} argument)"
    return f"{default:g}s ({argument} argument, {most})"


def _schema_number(schema: Any, keyword: str) -> float | None:
    """A number ``keyword`` of a property's schema, or of one of its ``anyOf``/``oneOf``
    branches (pydantic puts an optional number's bounds there)."""
    if not isinstance(schema, dict):
        return None
    value = schema.get(keyword)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    for branch in [*schema.get("anyOf", []), *schema.get("oneOf", [])]:
        found = _schema_number(branch, keyword)
        if found is not None:
            return found
    return None


wait_option = click.option(
    "--wait-for-workers",
    type=float,
    default=0.0,
    show_default=True,
    metavar="SECONDS",
    help="With no live worker on the queue, wait this long for one instead of failing.",
)


@main.command("call")
@click.argument("name")
@click.option("--args", "args_json", default="{}", show_default=True, help="Arguments as JSON.")
@click.option("--id", "call_id", default=None, help="Call id (default: a new one).")
@click.option("--timeout", type=float, default=None, help="Seconds to wait for the result.")
@click.option("--json", "as_json", is_flag=True, help="Print the ToolResult as one JSON object.")
@wait_option
@session_option
@connection_options
def call_command(
    name: str,
    args_json: str,
    call_id: str | None,
    timeout: float | None,
    as_json: bool,
    wait_for_workers: float,
    session: str | None,
    redis_url: str | None,
    prefix: str | None,
) -> None:
    """Run one tool call on the workers and print what it answered: the text the model
    reads, then a line with its status, tool, call id, time and turn (--json: the whole
    ToolResult). Exits 1 if the call answered an error.

    To run a call in this process, without Redis or workers, use ``toolpool exec``.
    """
    call = ToolCall(
        name=name, arguments=json_object(args_json), **({"id": call_id} if call_id else {})
    )
    settings = settings_for(redis_url, prefix, session=session)
    require_redis(settings)
    with talking_to(settings), _executor(settings, wait=wait_for_workers) as executor:
        result = _collected(executor, [call], timeout, announce=False)[0]
    if as_json:
        click.echo(result.model_dump_json(indent=2))
    else:
        click.echo(result.content, nl=not result.content.endswith("\n"))
        click.echo(result_line(result))
    _exit_for([result], "call")


def result_line(result: ToolResult) -> str:
    """The line under a result's text: ``-- ok  calculator  call_1  3 ms  turn T``, with
    the error's kind and where to read a truncated output's whole."""
    status = f"error ({result.error_type.value})" if result.error_type else result.status.value
    parts = [f"-- {status}", result.name, result.call_id, f"{result.duration_ms:.0f} ms"]
    if result.turn_id:
        parts.append(f"turn {result.turn_id}")
    line = "  ".join(parts)
    if result.truncated:
        line += (
            f"\n-- truncated: {result.dropped_chars} of {result.original_chars} chars left out; "
            f"`toolpool output {result.call_id}` prints it whole while it is kept"
        )
    return line


def _collected(
    executor: Executor, calls: list[ToolCall], timeout: float | None, *, announce: bool
) -> list[ToolResult]:
    """Submit a turn, say its id on stderr (``announce``), wait for its results; a turn
    interrupted (Ctrl-C) is cancelled, so nothing of it runs on unseen."""
    turn = executor.submit(calls)
    if announce:
        click.echo(f"turn {turn.turn_id}  (toolpool timeline {turn.turn_id})", err=True)
    try:
        return executor.collect(turn, timeout=timeout)
    except BaseException:
        # The collect's own error is the answer, not this clean-up's.
        with contextlib.suppress(Exception):
            executor.cancel(turn)
        raise


def _exit_for(results: list[ToolResult], command: str) -> None:
    """Exit ``EXIT_FAILED``, saying so on stderr, when any result is an error."""
    failed = [result for result in results if result.is_error]
    if not failed:
        return
    kinds = ", ".join(
        f"{result.call_id}: {result.error_type.value if result.error_type else 'error'}"
        for result in failed
    )
    what = "the call" if len(results) == 1 else f"{len(failed)} of {len(results)} calls"
    click.echo(f"toolpool {command}: {what} answered an error ({kinds})", err=True)
    sys.exit(EXIT_FAILED)


@main.command("run")
@click.argument("source", type=click.File("r", encoding="utf-8"))
@click.option("--timeout", type=float, default=None, help="Seconds to wait for the turn.")
@click.option(
    "--jsonl",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Append the turn's events to this JSONL log.",
)
@wait_option
@session_option
@connection_options
def run_command(
    source: Any,
    timeout: float | None,
    jsonl: Path | None,
    wait_for_workers: float,
    session: str | None,
    redis_url: str | None,
    prefix: str | None,
) -> None:
    """Run a turn: tool calls in (a JSON array or JSON lines, FILE or - for stdin), results
    out as JSON lines, in call order; the turn's id on stderr. Exits 1 if any call answered
    an error.

    Calls may be {"id", "name", "arguments"}, OpenAI tool calls or Anthropic tool_use blocks.
    """
    calls = _read_calls(source.read())
    settings = settings_for(redis_url, prefix, session=session)
    require_redis(settings)
    with talking_to(settings), _executor(settings, jsonl, wait=wait_for_workers) as executor:
        try:
            results = _collected(executor, calls, timeout, announce=True)
        except TurnError as exc:  # e.g. two calls with one id: the input's mistake
            raise click.UsageError(str(exc)) from None
    for result in results:
        click.echo(result.model_dump_json())
    _exit_for(results, "run")


@main.command("output")
@click.argument("call_id")
@connection_options
def output_command(call_id: str, redis_url: str | None, prefix: str | None) -> None:
    """Print the full output kept for a truncated call."""
    settings = settings_for(redis_url, prefix)
    require_redis(settings)
    with talking_to(settings), _executor(settings) as executor:
        text = executor.full_output(call_id)
    if text is None:
        raise click.ClickException(
            f"No full output is kept for {call_id!r}: the call was not truncated, or its "
            f"output expired (kept {settings.worker.full_output_ttl} s)."
        )
    click.echo(text, nl=not text.endswith("\n"))


main.add_command(status_command)
main.add_command(events_command)
main.add_command(lock_group)
main.add_command(session_group)
main.add_command(mcp_command)
main.add_command(timeline_command)
main.add_command(metrics_command)
main.add_command(dashboard_command)


def _executor(settings: Settings, jsonl: Path | None = None, *, wait: float = 0.0) -> Executor:
    try:
        return Executor(settings=settings, jsonl=jsonl, wait_for_workers=wait)
    except ValueError as exc:  # a URL redis-py cannot parse
        raise click.BadParameter(str(exc), param_hint="--redis") from None


def _read_calls(text: str) -> list[ToolCall]:
    """The calls in ``run``'s input; a usage error naming the first mistake (and its call)."""
    items = _read_items(text)
    if not items:
        raise click.UsageError(
            "No tool calls in the input: give a JSON array of calls, or one call per line."
        )
    calls = []
    for number, item in enumerate(items, 1):
        try:
            calls.append(parse_call(item))
        except ValueError as exc:
            raise click.UsageError(f"Call {number} is not a tool call: {exc}") from None
    return calls


def _read_items(text: str) -> list[Any]:
    """The JSON values in ``text``: one document (an array of calls, or one call), else JSON
    lines, one call a line."""
    stripped = text.strip()
    if not stripped:
        return []
    try:
        whole = json.loads(stripped)
    except (ValueError, RecursionError) as exc:
        if stripped.startswith("["):
            raise click.UsageError(f"The input is not a JSON array or JSON lines: {exc}") from None
    else:
        return whole if isinstance(whole, list) else [whole]
    items = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except (ValueError, RecursionError) as exc:
            raise click.UsageError(
                f"The input is not a JSON array or JSON lines: line {number} is not JSON ({exc})."
            ) from None
    return items


if __name__ == "__main__":
    main()
