"""Disk cache of LLM answers (SQLite), keyed by a hash of model, prompt, decoding params and sample index."""
from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

from bench.wal import open_wal


def call_key(kind: str, model_id: str, payload: dict) -> str:
    """Stable hash of everything that determines an answer."""
    blob = json.dumps({"kind": kind, "model": model_id, **payload}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class CallCache:
    """Key -> JSON value. Safe for several processes (WAL, busy timeout); committed after every write."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn = open_wal(self.path, "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, value TEXT NOT NULL)")

    def get_many(self, keys: list[str]) -> dict[str, dict]:
        found: dict[str, dict] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                chunk = keys[start:start + 500]
                marks = ",".join("?" * len(chunk))
                for key, value in self._conn.execute(f"SELECT key, value FROM calls WHERE key IN ({marks})", chunk):
                    found[key] = json.loads(value)
        return found

    def put_many(self, entries: dict[str, dict]) -> None:
        if not entries:
            return
        with self._lock:
            self._conn.executemany("INSERT OR REPLACE INTO calls (key, value) VALUES (?, ?)",
                                   [(k, json.dumps(v, ensure_ascii=False)) for k, v in entries.items()])
            self._conn.commit()

    def __len__(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
