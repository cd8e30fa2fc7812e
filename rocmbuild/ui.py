"""The one rich Console (stderr) and Progress, and JSON output (stdout).

Human text and progress always go to stderr; ``--json`` prints exactly one JSON object on
stdout. Nothing here ever prompts: rocmbuild runs unattended.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from typing import Any, Iterator

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)

console = Console(stderr=True, highlight=False, soft_wrap=True)

_quiet = False


def set_quiet(quiet: bool) -> None:
    """With ``--json`` or ``--quiet`` informational text is suppressed (errors still print)."""
    global _quiet
    _quiet = quiet


def info(text: str) -> None:
    if not _quiet:
        console.print(text)


def warn(text: str) -> None:
    console.print(f"[yellow]warning:[/] {text}")


def error(message: str, hint: str = "") -> None:
    console.print(f"[bold red]error:[/] {message}")
    if hint:
        console.print(f"[cyan]hint:[/] {hint}")


def emit_json(obj: dict[str, Any]) -> None:
    """Print exactly one JSON object on stdout."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


@contextmanager
def progress(description: str, total: float | None = None) -> Iterator[tuple[Progress, Any]]:
    """A progress bar on stderr; yields (progress, task_id). Disabled when quiet or not a tty."""
    prog = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=_quiet or not console.is_terminal,
    )
    with prog:
        task = prog.add_task(description, total=total)
        yield prog, task
