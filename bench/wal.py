"""SQLite files that several processes share (the LLM call cache, the embedding cache)."""
from __future__ import annotations

import sqlite3
import time
from pathlib import Path


def open_wal(path: Path, schema: str) -> sqlite3.Connection:
    """A connection in WAL mode with the schema created, retried while another process sets up the same file
    (switching to WAL takes an exclusive lock and ignores the busy timeout)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=60, check_same_thread=False)
    for attempt in range(100):
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(schema)
            conn.commit()
            return conn
        except sqlite3.OperationalError:
            if attempt == 99:
                raise
            time.sleep(0.1)
    return conn
