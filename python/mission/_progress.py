"""Progress bars for long uploads and downloads: on the terminal (stderr) or in a notebook.

The native module calls ``update(files_done, files, bytes_done, bytes)`` from Python's own thread
about 20 times a second while a transfer runs. A bar appears only once a transfer has run for
half a second, so quick transfers stay quiet.
"""

from __future__ import annotations

import importlib
import sys
import time
from typing import Any, Optional, TextIO

_DELAY = 0.5
_WIDTH = 24


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (where output goes to a notebook cell)."""
    if "IPython" not in sys.modules:
        return False
    shell = sys.modules["IPython"].get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def notebook_display() -> Any:
    """IPython's ``IPython.display`` module, which exists only where :func:`in_notebook` holds
    (imported by name so the package neither needs IPython nor its types)."""
    return importlib.import_module("IPython.display")


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover - the loop always returns


class ProgressBar:
    """A transfer's bar: ``title`` then files, bytes and a percentage."""

    def __init__(self, title: str, stream: Optional[TextIO] = None, notebook: bool = False) -> None:
        self.title = title
        self.stream = stream if stream is not None else sys.stderr
        self.notebook = notebook
        self.started = time.monotonic()
        self.shown = False
        self._handle: Any = None

    def line(self, files_done: int, files: int, bytes_done: int, total: int) -> str:
        fraction = bytes_done / total if total else (files_done / files if files else 1.0)
        filled = int(fraction * _WIDTH)
        return (f"{self.title} [{'#' * filled}{'.' * (_WIDTH - filled)}] {fraction:4.0%}  "
                f"{files_done}/{files} files  {_size(bytes_done)}/{_size(total)}")

    def update(self, files_done: int, files: int, bytes_done: int, total: int) -> None:
        if not self.shown and time.monotonic() - self.started < _DELAY:
            return
        self.shown = True
        text = self.line(files_done, files, bytes_done, total)
        if self.notebook:
            ipython = notebook_display()
            value = bytes_done if total else files_done
            maximum = total or files or 1
            html = f'<progress value="{value}" max="{maximum}" style="width:20em"></progress> <code>{text}</code>'
            if self._handle is None:
                self._handle = ipython.display(ipython.HTML(html), display_id=True)
            else:
                self._handle.update(ipython.HTML(html))
        else:
            self.stream.write("\r" + text)
            self.stream.flush()

    def close(self) -> None:
        if self.shown and not self.notebook:
            self.stream.write("\n")
            self.stream.flush()


def reporter(progress: Any, title: str) -> Any:
    """What to report a transfer's progress to: ``progress`` is ``None`` (a bar when attached to
    a terminal or a notebook), ``False`` (none), ``True`` (a bar on stderr) or an object with
    ``update(files_done, files, bytes_done, bytes)``."""
    if progress is None:
        if in_notebook():
            return ProgressBar(title, notebook=True)
        return ProgressBar(title) if sys.stderr is not None and sys.stderr.isatty() else None
    if progress is False:
        return None
    if progress is True:
        return ProgressBar(title)
    if not callable(getattr(progress, "update", None)):
        raise TypeError("progress: expected None, a bool, or an object with an update() method")
    return progress
