"""The ``toolpool`` command line: list tools, run calls."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from executor.errors import ToolpoolError
from executor.export import FORMATS, SchemaFormat, export_tools
from executor.models import ToolCall
from executor.registry import ToolRegistry, load_registry
from executor.runner import CallEnvironment, run_call
from executor.settings import Settings
from executor.workspace import Workspace

T = TypeVar("T")

tools_option = click.option(
    "--tools",
    "tool_specs",
    multiple=True,
    envvar="TOOLPOOL_TOOLS",
    metavar="MODULE:ATTR",
    help="Add a registry of your own tools (repeatable; env TOOLPOOL_TOOLS, space-separated).",
)


def build_registry(tool_specs: tuple[str, ...]) -> ToolRegistry:
    """The built-in tools plus every registry named with ``--tools``."""
    from workers import builtin_registry  # the CLI is the one place executor needs workers

    registry = builtin_registry()
    for spec in tool_specs:
        registry = registry.merged(load_registry(spec))
    return registry


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
    registry = _or_fail(lambda: build_registry(tool_specs))
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
@click.option("--local", is_flag=True, help="Run in this process, without Redis.")
@click.option(
    "--workspace",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="TOOLPOOL_WORKSPACE",
    default=".",
    show_default=True,
    help="Root folder the file tools may touch (env TOOLPOOL_WORKSPACE).",
)
@click.option("--id", "call_id", default=None, help="Call id (default: a new one).")
@tools_option
def call_command(
    name: str,
    args_json: str,
    local: bool,
    workspace: Path,
    call_id: str | None,
    tool_specs: tuple[str, ...],
) -> None:
    """Run one tool call and print its ToolResult as JSON (exit 1 if the call failed)."""
    if not local:
        raise click.UsageError(
            "This version runs calls in this process only: pass --local. "
            "Calls through Redis need the worker pool (toolpool worker)."
        )
    try:
        arguments: Any = json.loads(args_json)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint="--args") from None
    if not isinstance(arguments, dict):
        raise click.BadParameter("must be a JSON object, e.g. '{\"path\": \"a.txt\"}'",
                                 param_hint="--args")  # fmt: skip
    registry = _or_fail(lambda: build_registry(tool_specs))
    settings = _or_fail(Settings.from_env)
    env = CallEnvironment(workspace=_or_fail(lambda: Workspace(workspace)), settings=settings)
    call = ToolCall(name=name, arguments=arguments, **({"id": call_id} if call_id else {}))
    result = run_call(call, registry, env)
    click.echo(result.model_dump_json(indent=2))
    sys.exit(1 if result.is_error else 0)


def _or_fail(build: Callable[[], T]) -> T:
    """Run ``build``; a toolpool error becomes a clean CLI error instead of a traceback."""
    try:
        return build()
    except ToolpoolError as exc:
        raise click.ClickException(str(exc)) from None


if __name__ == "__main__":
    main()
