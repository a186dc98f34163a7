"""calls.jsonl: one line per LLM call, written as soon as the call is answered."""
from __future__ import annotations

import gzip
import json
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Iterator


@dataclass(frozen=True)
class CallScope:
    """Who is calling: accounting labels carried by every call."""

    method: str
    task: str
    phase: str  # "selection" | "inference"


@dataclass
class CallRecord:
    ts: float
    method: str
    task: str
    phase: str
    kind: str  # "generate" | "loglik"
    model: str
    key: str
    prompt_tokens: int
    prefilled_tokens: int
    completion_tokens: int
    latency_s: float
    cached: bool
    sample_index: int = 0
    rank: int = 0


class CallLog:
    """Append-only JSONL writer (flushed per batch, so a killed run loses nothing answered)."""

    def __init__(self, path: str | Path | None, rank: int = 0):
        self.path = Path(path) if path else None
        self.rank = rank
        self._lock = threading.Lock()
        self._handle = None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = self.path.open("a", encoding="utf-8")
        self.records: list[CallRecord] = []  # this process's calls, for in-run accounting

    def write(self, records: Iterable[CallRecord]) -> None:
        records = list(records)
        with self._lock:
            for rec in records:
                rec.rank = self.rank
                self.records.append(rec)
                if self._handle:
                    self._handle.write(json.dumps(asdict(rec), ensure_ascii=False) + "\n")
            if self._handle:
                self._handle.flush()

    def close(self) -> None:
        if self._handle:
            self._handle.close()
            self._handle = None


def read_calls(path: str | Path) -> Iterator[dict]:
    """The log's calls; a published run folder may hold it gzipped (PATH.gz) instead."""
    path = Path(path)
    packed = path.with_name(path.name + ".gz")
    if not path.exists() and not packed.exists():
        return
    with (path.open(encoding="utf-8") if path.exists() else gzip.open(packed, "rt", encoding="utf-8")) as handle:
        for line in handle:
            line = line.strip()
            if line:
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by a kill; the call is in the cache and will be logged again as cached
