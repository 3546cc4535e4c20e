"""The ``toolpool`` command line: list tools, run calls locally or through the workers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from executor.cli_common import (
    build_registry,
    connection_options,
    or_fail,
    require_redis,
    settings_for,
    talking_to,
    tools_option,
)
from executor.cli_ops import events_command, status_command
from executor.client import Executor
from executor.demo import demo_command
from executor.export import FORMATS, SchemaFormat, export_tools
from executor.lock.cli import lock as lock_group
from executor.models import ToolCall, parse_call
from executor.runner import CallEnvironment, run_call
from executor.settings import Settings
from executor.workspace import Workspace
from workers.cli import up_command, worker_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
@tools_option
def tools_command(fmt: str, tool_specs: tuple[str, ...]) -> None:
    """List the tools, with their flags and limits or as model-API schemas."""
    registry = or_fail(lambda: build_registry(tool_specs))
    if fmt != "table":
        schema_format: SchemaFormat = fmt  # type: ignore[assignment]
        click.echo(json.dumps(export_tools(registry, schema_format), indent=2))
        return
    policy = Settings.from_env().truncation
    rows = [("TOOL", "MODE", "READ-ONLY", "MAX CHARS", "TIMEOUT", "DESCRIPTION")]
    for item in registry:
        rows.append(
            (
                item.name,
                "shared" if item.is_concurrency_safe else "exclusive",
                "yes" if item.is_read_only else "no",
                str(policy.limit_for(item.max_result_chars)),
                f"{item.timeout:g}s",
                item.description.splitlines()[0] if item.description else "",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:5])]
        click.echo("  ".join([*cells, row[5]]))


@main.command("call")
@click.argument("name")
@click.option("--args", "args_json", default="{}", show_default=True, help="Arguments as JSON.")
@click.option("--local", is_flag=True, help="Run in this process, without Redis or workers.")
@click.option(
    "--workspace",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="TOOLPOOL_WORKSPACE",
    default=".",
    show_default=True,
    help="With --local: the folder the file tools may touch (env TOOLPOOL_WORKSPACE).",
)
@click.option("--id", "call_id", default=None, help="Call id (default: a new one).")
@click.option("--timeout", type=float, default=None, help="Seconds to wait for the result.")
@connection_options
@tools_option
def call_command(
    name: str,
    args_json: str,
    local: bool,
    workspace: Path,
    call_id: str | None,
    timeout: float | None,
    redis_url: str | None,
    prefix: str | None,
    tool_specs: tuple[str, ...],
) -> None:
    """Run one tool call and print its ToolResult as JSON (exit 1 if the call failed).

    Without --local the call goes through Redis to the workers (toolpool worker / up).
    """
    arguments = _json_object(args_json)
    call = ToolCall(name=name, arguments=arguments, **({"id": call_id} if call_id else {}))
    registry = or_fail(lambda: build_registry(tool_specs))
    if local:
        settings = or_fail(Settings.from_env)
        env = CallEnvironment(workspace=or_fail(lambda: Workspace(workspace)), settings=settings)
        result = run_call(call, registry, env)
    else:
        settings = settings_for(redis_url, prefix)
        require_redis(settings)
        with talking_to(settings), _executor(settings, registry) as executor:
            result = executor.run([call], timeout=timeout)[0]
    click.echo(result.model_dump_json(indent=2))
    sys.exit(1 if result.is_error else 0)


@main.command("run")
@click.argument("source", type=click.File("r", encoding="utf-8"))
@click.option("--timeout", type=float, default=None, help="Seconds to wait for the turn.")
@click.option("--jsonl", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Append the turn's events to this JSONL log.")  # fmt: skip
@connection_options
@tools_option
def run_command(
    source: Any,
    timeout: float | None,
    jsonl: Path | None,
    redis_url: str | None,
    prefix: str | None,
    tool_specs: tuple[str, ...],
) -> None:
    """Run a turn: tool calls in (a JSON array or JSON lines, FILE or - for stdin), results
    out as JSON lines, in call order.

    Calls may be {"id", "name", "arguments"}, OpenAI tool calls or Anthropic tool_use blocks.
    """
    calls = _read_calls(source.read())
    settings = settings_for(redis_url, prefix)
    require_redis(settings)
    registry = or_fail(lambda: build_registry(tool_specs))
    with talking_to(settings), _executor(settings, registry, jsonl) as executor:
        results = executor.run(calls, timeout=timeout)
    for result in results:
        click.echo(result.model_dump_json())


@main.command("output")
@click.argument("call_id")
@connection_options
def output_command(call_id: str, redis_url: str | None, prefix: str | None) -> None:
    """Print the full output kept for a truncated call."""
    settings = settings_for(redis_url, prefix)
    require_redis(settings)
    with talking_to(settings), _executor(settings, None) as executor:
        text = executor.full_output(call_id)
    if text is None:
        raise click.ClickException(
            f"No full output is kept for {call_id!r}: the call was not truncated, or its "
            f"output expired (kept {settings.full_output_ttl} s)."
        )
    click.echo(text, nl=not text.endswith("\n"))


main.add_command(status_command)
main.add_command(events_command)
main.add_command(lock_group)
main.add_command(demo_command)
main.add_command(worker_command)
main.add_command(up_command)


def _executor(settings: Settings, registry: Any, jsonl: Path | None = None) -> Executor:
    try:
        return Executor(settings=settings, registry=registry, jsonl=jsonl)
    except ValueError as exc:  # a URL redis-py cannot parse
        raise click.BadParameter(str(exc), param_hint="--redis") from None


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint="--args") from None
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object, e.g. '{\"path\": \"a.txt\"}'",
                                 param_hint="--args")  # fmt: skip
    return value


def _read_calls(text: str) -> list[ToolCall]:
    stripped = text.strip()
    if not stripped:
        raise click.UsageError("No tool calls in the input.")
    try:
        if stripped.startswith("["):
            items = json.loads(stripped)
        else:
            items = [json.loads(line) for line in stripped.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise click.UsageError(f"The input is not a JSON array or JSON lines: {exc}") from None
    calls = []
    for number, item in enumerate(items, 1):
        try:
            calls.append(parse_call(item))
        except ValueError as exc:
            raise click.UsageError(f"Call {number} is not a tool call: {exc}") from None
    return calls


if __name__ == "__main__":
    main()
