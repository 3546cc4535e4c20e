"""``python -m workers.cli worker|up|demo|exec``: the worker side's commands on their own."""

import click

from workers.cli import demo_command, exec_command, up_command, worker_command


@click.group()
def standalone() -> None:
    """toolpool's worker-side commands, without the rest of the ``toolpool`` CLI."""


for _command in (worker_command, up_command, demo_command, exec_command):
    standalone.add_command(_command)

if __name__ == "__main__":
    standalone()
