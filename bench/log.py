"""The harness's log: stdlib `logging` under the name "bench", one line per phase.

The console gets INFO (or DEBUG with -v, WARNING with -q) on stderr; every run folder also gets the full
DEBUG log in `run.log`.
"""
from __future__ import annotations

import logging
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

LOG = logging.getLogger("bench")
FORMAT = "%(asctime)s [bench] %(message)s"
MARK = " [bench] "  # how a log line is told apart from the one-line error on stderr
RUN_LOG = "run.log"


def configure(verbosity: int = 0) -> None:
    """verbosity -1 (quiet: warnings only), 0 (phases) or 1 (debug); console handler on stderr."""
    level = {-1: logging.WARNING, 0: logging.INFO}.get(verbosity, logging.DEBUG)
    LOG.setLevel(logging.DEBUG)
    for handler in [h for h in LOG.handlers if getattr(h, "bench_console", False)]:
        LOG.removeHandler(handler)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(FORMAT, "%H:%M:%S"))
    handler.setLevel(level)
    handler.bench_console = True
    LOG.addHandler(handler)
    LOG.propagate = False


@contextmanager
def console_log(wanted: bool = True):
    """The phase lines on stderr meanwhile, when `wanted` and the caller configured no logging of its own (a script
    or a notebook calling bench.evaluate would otherwise see nothing for as long as the run takes)."""
    ours = wanted and not LOG.handlers and not logging.getLogger().handlers
    if ours:
        configure(0)
    try:
        yield
    finally:
        if ours:
            for handler in [h for h in LOG.handlers if getattr(h, "bench_console", False)]:
                LOG.removeHandler(handler)
            LOG.propagate = True


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (stderr is no terminal there, but tqdm draws a bar)."""
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


@contextmanager
def run_log(folder: Path):
    """Append everything logged meanwhile to FOLDER/run.log."""
    handler = logging.FileHandler(Path(folder) / RUN_LOG, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    handler.setLevel(logging.DEBUG)
    previous = LOG.level
    LOG.setLevel(logging.DEBUG)
    LOG.addHandler(handler)
    try:
        yield
    finally:
        LOG.removeHandler(handler)
        handler.close()
        LOG.setLevel(previous)


class Progress:
    """Live progress of one phase. On a terminal, a tqdm bar (count, rate, ETA) redrawn every second, so that a
    long LLM batch shows its elapsed time too; elsewhere (CI, nohup, a pipe, a notebook's bench.evaluate), an INFO
    line every `every` seconds with the count, elapsed time and ETA, whether or not the count moved. In a Jupyter
    notebook, tqdm's notebook bar."""

    def __init__(self, total: int | None, desc: str, enabled: bool = True, every: float = 10.0, unit: str = "it",
                 leave: bool = False):
        self.total, self.desc, self.every, self.unit, self.n = total, desc, every, unit, 0
        self.enabled = enabled
        self.bar = None
        self.began = self.last = time.monotonic()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._beat = None
        if enabled and (sys.stderr.isatty() or in_notebook()):
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=desc, unit=unit, leave=leave, dynamic_ncols=True)
        if enabled:
            self._beat = threading.Thread(target=self._heartbeat, name=f"progress {desc}", daemon=True)
            self._beat.start()

    def _heartbeat(self) -> None:
        quiet = max(self.every, 1.0)  # a log line at most this often when nothing moves
        while not self._stop.wait(min(quiet, 1.0)):
            with self._lock:
                if self.bar is not None:
                    self.bar.refresh()  # the elapsed time ticks on while one batch is being answered
                elif time.monotonic() - self.last >= quiet:
                    self._log()

    def _log(self) -> None:
        self.last = time.monotonic()
        LOG.info("%s", self.line())

    def line(self) -> str:
        """'inference knn/sst2: 12/50 items, 0:31 elapsed, ETA 1:38' (the ETA once something is done)."""
        elapsed = time.monotonic() - self.began
        done = f"{self.n}/{self.total}" if self.total else f"{self.n}"
        eta = ""
        if self.total and 0 < self.n < self.total:
            eta = f", ETA {_clock(elapsed / self.n * (self.total - self.n))}"
        return f"{self.desc}: {done} {self.unit}, {_clock(elapsed)} elapsed{eta}"

    def update(self, n: int = 1) -> None:
        with self._lock:
            self.n += n
            if self.bar is not None:
                self.bar.update(n)
            elif self.enabled and time.monotonic() - self.last >= self.every:
                self._log()

    def grow(self, n: int) -> None:
        """The phase turned out n steps longer (a calibrated task's content-free calls)."""
        with self._lock:
            self.total = (self.total or 0) + n
            if self.bar is not None:
                self.bar.total = self.total
                self.bar.refresh()

    def set(self, n: int) -> None:
        """Move to an absolute count (e.g. a call counter read after each pull)."""
        if n > self.n:
            self.update(n - self.n)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the heartbeat (idempotent): a thread left beating would log into a closed stream later."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
        if self.bar is not None:
            self.bar.close()


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"
