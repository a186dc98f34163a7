"""Embeddings kept across runs (SQLite): a second run embeds nothing it has embedded before.

Keyed by the encoder's identity (its name and a fingerprint of its files, so a changed model never serves old
vectors) and a hash of the text. Each vector keeps the seconds it took to embed, so a method served from this cache
is still charged its own embedding time (bench/encoder.py `account`), as when another method of the run embedded it
first. Safe under several processes (WAL, a busy timeout, INSERT OR IGNORE: two runs that embed the same text store
one row). `--embedding-cache` names the file (default BENCH_CACHE_DIR/embeddings.sqlite; BENCH_EMBEDDING_CACHE
overrides the default) or `off`.
"""
from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import numpy as np

from bench.wal import open_wal

SCHEMA = ("CREATE TABLE IF NOT EXISTS vectors (encoder TEXT NOT NULL, key TEXT NOT NULL, vector BLOB NOT NULL, "
          "seconds REAL NOT NULL, PRIMARY KEY (encoder, key))")


def default_path() -> Path:
    if os.environ.get("BENCH_EMBEDDING_CACHE"):
        return Path(os.environ["BENCH_EMBEDDING_CACHE"])
    return Path(os.environ.get("BENCH_CACHE_DIR", Path.home() / ".cache" / "icl-bench")) / "embeddings.sqlite"


def resolve(option: str | None) -> Path | None:
    """--embedding-cache: auto (the default file), off, or a path."""
    text = str(option or "auto").strip()
    if text.lower() == "off":
        return None
    return default_path() if text.lower() == "auto" else Path(text)


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def encoder_identity(model: str) -> str:
    """The encoder's name and, for a local folder, a fingerprint of its files (names, sizes and the first MiB of
    each weight file): a retrained or replaced model at the same path gets new keys."""
    folder = Path(model)
    if not folder.is_dir():
        return model  # a hub id: its name (the hub's revision is what sentence-transformers resolves it to)
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(folder)}:{path.stat().st_size}".encode())
        if path.suffix in (".safetensors", ".bin", ".pt"):
            with path.open("rb") as fh:
                digest.update(fh.read(1 << 20))
    return f"{folder.name}:{digest.hexdigest()[:16]}"


class EmbeddingCache:
    def __init__(self, path: str | Path, encoder: str):
        self.path = Path(path)
        self.encoder = encoder
        self._lock = threading.Lock()
        self._conn = open_wal(self.path, SCHEMA)

    def get_many(self, texts: list[str]) -> dict[str, tuple[np.ndarray, float]]:
        """text -> (vector, seconds it took to embed), for the texts this encoder has embedded before."""
        by_key = {text_key(t): t for t in texts}
        keys = list(by_key)
        found: dict[str, tuple[np.ndarray, float]] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                chunk = keys[start:start + 500]
                rows = self._conn.execute(
                    f"SELECT key, vector, seconds FROM vectors WHERE encoder = ? AND key IN ({','.join('?' * len(chunk))})",
                    [self.encoder, *chunk])
                for key, blob, seconds in rows:
                    found[by_key[key]] = (np.frombuffer(blob, dtype=np.float32).copy(), float(seconds))
        return found

    def put_many(self, entries: dict[str, tuple[np.ndarray, float]]) -> None:
        if not entries:
            return
        with self._lock:
            self._conn.executemany(
                "INSERT OR IGNORE INTO vectors (encoder, key, vector, seconds) VALUES (?, ?, ?, ?)",
                [(self.encoder, text_key(t), np.asarray(v, dtype=np.float32).tobytes(), float(s))
                 for t, (v, s) in entries.items()])
            self._conn.commit()

    def count(self, texts: list[str] | None = None) -> int:
        """Vectors of this encoder held (of `texts`, when given)."""
        keys = None if texts is None else sorted({text_key(t) for t in texts})
        with self._lock:
            if keys is None:
                return self._conn.execute("SELECT COUNT(*) FROM vectors WHERE encoder = ?", [self.encoder]).fetchone()[0]
            return sum(self._conn.execute(  # counted in SQLite: no vector is read
                f"SELECT COUNT(*) FROM vectors WHERE encoder = ? AND key IN ({','.join('?' * len(chunk))})",
                [self.encoder, *chunk]).fetchone()[0] for chunk in (keys[i:i + 500] for i in range(0, len(keys), 500)))

    def close(self) -> None:
        with self._lock:
            self._conn.close()
