"""Progress of long reads (decompression, spooling, parsing) on stderr, in one place.

A *progress* is what the commands hand down to :func:`forensics.timeline.build_timeline` and
:func:`forensics.inputs.read_inputs`: any callable taking one line of text (the plain lines shown when
stderr is not a terminal), or None for silence (``-q``). A :class:`Reporter` is such a callable that
also draws a ``rich`` bar per file on a terminal: bytes done, rate, time left. Readers ask for a bar
through :func:`byte_task`, which falls back to a plain line every few seconds for a plain callable.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

#: A plain progress line at most this often per file.
PLAIN_EVERY_S = 2.0

#: C0 and C1 controls, DEL and the Unicode line breaks: what a terminal acts on instead of showing.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: control characters (ESC, OSC, BEL, CR, newline…) shown as
    ``\\xNN``, so a file name from an archive cannot set the window title or clear the screen.

    >>> printable("reading \\x1b]0;owned\\x07x.log")
    'reading \\\\x1b]0;owned\\\\x07x.log'
    """
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", text)


class Task:
    """One file's progress: call it with the bytes done so far; ``done()`` when finished."""

    def __init__(self, say: Callable[[str], None] | None, label: str, total: int) -> None:
        self.say, self.label, self.total = say, printable(label), total
        self.t0 = self.said = time.monotonic()

    def __call__(self, done: int) -> None:
        now = time.monotonic()
        if self.say is None or now - self.said < PLAIN_EVERY_S:
            return
        self.said = now
        rate = done / max(now - self.t0, 1e-9) / (1 << 20)
        self.say(f"  {self.label}: {done / (1 << 20):,.0f} of {self.total / (1 << 20):,.0f} MiB ({rate:,.0f} MiB/s)")

    def done(self) -> None:
        pass


class _BarTask(Task):
    def __init__(self, owner: Reporter, label: str, total: int) -> None:
        super().__init__(None, label, total)
        self.owner = owner
        from rich.markup import escape

        # a bar's description is rich markup: a name holding "[bold]" or "[/]" must print as written
        self.id = owner._bars().add_task(escape(self.label), total=total or None)

    def __call__(self, done: int) -> None:
        if self.owner.live is not None:
            self.owner.live.update(self.id, completed=done)  # rich limits its own refresh rate

    def done(self) -> None:
        self.owner._finish(self.id)


class Reporter:
    """Progress on a stream (stderr): a bar per task where the stream is a terminal, else plain lines.

    >>> import io
    >>> out = io.StringIO()
    >>> r = Reporter(out)
    >>> r("reading x.log (2.0 MiB)")
    >>> out.getvalue()
    'reading x.log (2.0 MiB)\\n'
    """

    def __init__(self, stream: TextIO | None = None, bar: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.bar = bool(isatty and isatty()) if bar is None else bar
        self.live: Any = None
        self.open = 0

    def __call__(self, line: str) -> None:
        line = printable(line)
        if self.live is not None:
            self.live.console.print(line, markup=False, highlight=False)
            return
        self.stream.write(line + "\n")
        self.stream.flush()

    def task(self, label: str, total: int) -> Task:
        if not self.bar:
            return Task(self, label, total)
        return _BarTask(self, label, total)

    def _bars(self) -> Any:
        if self.live is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            console = Console(file=self.stream, force_terminal=self.bar or None)
            self.live = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(binary_units=True),
                                 TransferSpeedColumn(), TimeRemainingColumn(), console=console)
            self.live.start()
        self.open += 1
        return self.live

    def _finish(self, task_id: Any) -> None:
        if self.live is None:
            return
        t = self.live.tasks[[x.id for x in self.live.tasks].index(task_id)]
        self.live.update(task_id, completed=t.total or t.completed)
        self.open -= 1
        if self.open <= 0:
            self.close()

    def close(self) -> None:
        """Stop drawing (the finished bars stay on screen)."""
        if self.live is not None:
            live, self.live = self.live, None
            self.open = 0
            live.stop()


def for_stderr(quiet: bool) -> Reporter | None:
    """What the commands pass down: None with ``-q``, else a Reporter on stderr."""
    return None if quiet else Reporter()


def byte_task(progress: Callable[[str], None] | None, label: str, total: int) -> Task | None:
    """A per-file byte counter on ``progress``: its bar if it draws them, else plain lines; None if silent."""
    if progress is None:
        return None
    task = getattr(progress, "task", None)
    if callable(task):
        return task(label, total)
    return Task(progress, label, total)
