"""``toolpool exec``: run one tool call in this process, without Redis or workers."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from executor import Settings, ToolCall, Workspace
from executor.cli._common import json_object, or_fail
from workers.cli._registry import build_registry, tools_option
from workers.pipeline._runner import CallEnvironment, run_call


@click.command("exec")
@click.argument("name")
@click.option("--args", "args_json", default="{}", show_default=True, help="Arguments as JSON.")
@click.option(
    "--workspace",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="TOOLPOOL_WORKSPACE",
    default=".",
    show_default=True,
    help="The folder the file tools may touch (env TOOLPOOL_WORKSPACE).",
)
@click.option("--id", "call_id", default=None, help="Call id (default: a new one).")
@tools_option
def exec_command(
    name: str, args_json: str, workspace: Path, call_id: str | None, tool_specs: tuple[str, ...]
) -> None:
    """Run one tool call in this process and print its ToolResult as JSON (exit 1 if it failed).

    No Redis, no workers, no lock: the same validation, time limit and truncation as on a
    worker. Useful to try a tool, or a tool of your own, before serving it.
    """
    call = ToolCall(
        name=name, arguments=json_object(args_json), **({"id": call_id} if call_id else {})
    )
    registry = or_fail(lambda: build_registry(tool_specs))
    settings = or_fail(lambda: Settings.from_env(tools=registry.settings_classes()))
    env = CallEnvironment(workspace=or_fail(lambda: Workspace(workspace)), settings=settings)
    result = run_call(call, registry, env)
    click.echo(result.model_dump_json(indent=2))
    sys.exit(1 if result.is_error else 0)
