"""Disk cache of LLM answers (SQLite), keyed by a hash of model, prompt, decoding params and sample index."""
from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path

from bench.wal import open_wal


def call_key(kind: str, model_id: str, payload: dict) -> str:
    """Stable hash of everything that determines an answer."""
    blob = json.dumps({"kind": kind, "model": model_id, **payload}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


SCHEMA = "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
ANSWER_FIELDS = ("text", "prompt_tokens", "completion_tokens")  # what an answer is (latency_s: how long it took)


def open_read_only(path: str | Path, where: str = "--cache-from") -> sqlite3.Connection:
    """A cache opened for reading only: never written, never locked for writing (a shared file on a network
    filesystem, several machines reading it). A file whose folder is read-only opens as immutable."""
    from bench.errors import ConfigError

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{where} {path}: no such cache file")
    for query in ("mode=ro", "immutable=1"):
        try:
            conn = sqlite3.connect(f"file:{path.resolve()}?{query}", uri=True, check_same_thread=False, timeout=60)
            conn.execute("SELECT key, value FROM calls LIMIT 1").fetchall()
            return conn
        except sqlite3.DatabaseError as exc:
            error = exc
    raise ConfigError(f"{where} {path}: not an LLM answer cache ({error})")


def _select(conn: sqlite3.Connection, keys: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for start in range(0, len(keys), 500):
        chunk = keys[start:start + 500]
        marks = ",".join("?" * len(chunk))
        found.update(conn.execute(f"SELECT key, value FROM calls WHERE key IN ({marks})", chunk))
    return found


class CallCache:
    """Key -> JSON value. Safe for several processes on one machine (WAL, busy timeout); committed after every
    write. `read_from`: caches only read (--cache-from), asked for what this one lacks; nothing is written there."""

    def __init__(self, path: str | Path, read_from: list[str | Path] | tuple = ()):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn = open_wal(self.path, SCHEMA)
        self._shared = [open_read_only(p) for p in read_from]
        self.shared_hits = 0  # answers read from the read-only caches

    def get_many(self, keys: list[str]) -> dict[str, dict]:
        with self._lock:
            raw = _select(self._conn, keys)
            for conn in self._shared:
                missing = [k for k in keys if k not in raw]
                if not missing:
                    break
                more = _select(conn, missing)
                self.shared_hits += len(more)
                raw.update(more)
        return {key: json.loads(value) for key, value in raw.items()}

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
            for conn in self._shared:
                conn.close()


def same_answer(a: str, b: str) -> bool:
    """Two cached values give the same answer (their timing aside)."""
    x, y = json.loads(a), json.loads(b)
    return all(x.get(f) == y.get(f) for f in ANSWER_FIELDS)


def merge_caches(paths: list[Path], out: Path) -> dict:
    """Every key of `paths` into the cache `out` (created, or added to). Where two answer a key differently, the
    first answer stays (`out`'s own, then the caches' in order): {keys, added, differed}."""
    from bench.errors import ConfigError

    out = Path(out)
    for path in paths:
        if Path(path).resolve() == out.resolve():
            raise ConfigError(f"cache merge: --out {out} is also one of the caches merged")
    sources = [open_read_only(p, "cache merge:") for p in paths]
    target = CallCache(out)
    added = differed = 0
    try:
        with target._lock:
            conn = target._conn
            for source in sources:
                rows = source.execute("SELECT key, value FROM calls")
                while batch := rows.fetchmany(2000):
                    have = _select(conn, [k for k, _ in batch])
                    fresh = [(k, v) for k, v in batch if k not in have]
                    differed += sum(1 for k, v in batch if k in have and not same_answer(have[k], v))
                    conn.executemany("INSERT OR IGNORE INTO calls (key, value) VALUES (?, ?)", fresh)
                    added += len(fresh)
                conn.commit()
            keys = conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    finally:
        for source in sources:
            source.close()
        target.close()
    return {"keys": keys, "added": added, "differed": differed}
