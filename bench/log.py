"""The harness's log: stdlib `logging` under the name "bench", one line per phase.

The console gets INFO (or DEBUG with -v, WARNING with -q) on stderr; every run folder also gets the full
DEBUG log in `run.log`.
"""
from __future__ import annotations

import logging
import sys
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
    """A tqdm bar on a terminal; without one (CI, nohup, a pipe), an INFO line at most every `every` seconds."""

    def __init__(self, total: int | None, desc: str, enabled: bool = True, every: float = 10.0, unit: str = "it",
                 leave: bool = False):
        self.total, self.desc, self.every, self.unit, self.n = total, desc, every, unit, 0
        self.enabled = enabled
        self.bar = None
        self.last = time.monotonic()
        if enabled and sys.stderr.isatty():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=desc, unit=unit, leave=leave)

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.enabled and time.monotonic() - self.last >= self.every:
            self.last = time.monotonic()
            LOG.info("%s: %d%s %s", self.desc, self.n, f"/{self.total}" if self.total else "", self.unit)

    def set(self, n: int) -> None:
        """Move to an absolute count (e.g. a call counter read after each pull)."""
        if n > self.n:
            self.update(n - self.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
