"""EPR, Efficient Prompt Retrieval (Rubin, Herzig and Berant, NAACL 2022): a dense retriever trained on which
BM25 candidates make the LM likeliest to produce a training example's gold output.

Follows the authors' code (OhadRubin/EPR, run.py defaults, find_bm25.py, scorer.py, DPR/):
- training queries are pool items (`n_train_queries`, seeded; test and validation items never);
- BM25 proposes `n_candidates` (their L = 50) pool items per query, searched on the gold OUTPUT of both the query
  and the corpus (their setup "a"), the query itself and repeated questions left out;
- the LM scores each candidate by the log-likelihood of the query's gold output after the one-shot prompt; a
  query's list is sorted best first (their mean token loss ascending; the sum here gives the same order, the
  target being shared);
- positives are the best `top_k` (5), hard negatives the worst `top_k`; each step takes the best candidate as the
  positive (their EPRDataset does not shuffle positives) and one hard negative drawn from the worst `top_k`;
- two encoders (their question and context BERTs): query text = the input, candidate text = input + gold
  output; similarity = dot product; loss = DPR's in-batch NLL, each query against every positive and hard
  negative of the batch, its own positive the target;
- AdamW (lr 1.3416e-4, eps 1e-8, no weight decay), linear warm-up then decay, gradient norm clipped at 2, 30
  epochs, batches of 60 queries (their run.py), the last epoch's encoders kept;
- test time: dense top-k by inner product, the most similar demonstration last, next to the query (their
  few_shot_dsr reverses the ranked list).

Deviations, with reasons:
- the encoders start from all-MiniLM-L6-v2 (mean pooling, L2-normalised: the offline encoder), not
  bert-base-uncased with [CLS] pooling; unit-norm outputs need a temperature, so the similarity is `scale` (20)
  x the dot product (as UDR here);
- the scoring LM is the run's selection LLM (theirs GPT-Neo-2.7B), the prompt the task's prompt;
- BM25 tokens are lowercase words (rank-bm25 over `methods.bm25.bm25_tokens`); theirs split on spaces, case kept;
- `n_train_queries` (200) pool items instead of the whole training set (tens of thousands of queries, 49 LM
  passes each), and the warm-up is the first 10% of steps instead of 1,237 steps, so that a CPU run is feasible;
- test-time k is the run's k; theirs fills a 1,600-token window with as many as fit.
It shares UDR's candidate mining and LM scoring (methods/udr.py) with one round and no re-mining; only the loss
and the sampling differ. A budget that ends the scoring trains on the lists scored so far (a warning on the row).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from bench.errors import ConfigError
from methods.base import register
from methods.udr import UDR, ScoredList, UDRTraining, embed, embed_candidates


@dataclass
class EPRTraining(UDRTraining):
    """DPR's loss on LM-scored lists: one positive among the best `positive_top`, one hard negative among the
    worst `top_k`, every context of the batch a negative for the other queries."""

    positive_top: int = 1  # EPR: always the best; DQ-LoRe: uniform among the best 5
    shared_encoder: bool = False  # DQ-LoRe: one encoder for queries and candidates, no gradient on candidates

    def validate(self, owner: str) -> None:
        super().validate(owner)
        if not isinstance(self.positive_top, int) or not 1 <= self.positive_top <= self.top_k:
            raise ConfigError(f"{owner}: positive_top must be an integer in [1, top_k], got {self.positive_top!r}")

    def encoders(self, base_model, copy) -> tuple[object, object]:
        if self.shared_encoder:
            model = copy(base_model)
            return model, model
        return super().encoders(base_model, copy)

    def pair(self, scored: ScoredList, rng: np.random.Generator) -> tuple[int, int]:
        """(positive, hard negative) indices into a best-first list of at least two candidates."""
        n = len(scored.keys)
        positive = int(rng.integers(min(self.positive_top, n - 1)))
        worst = [i for i in range(max(0, n - self.top_k), n) if i != positive]
        return positive, int(rng.choice(worst))

    def batch_loss(self, q_model, c_model, batch: list[ScoredList], rng: np.random.Generator) -> torch.Tensor:
        pairs = [self.pair(scored, rng) for scored in batch]
        texts = [scored.texts[p] for scored, (p, _) in zip(batch, pairs)]
        texts += [scored.texts[n] for scored, (_, n) in zip(batch, pairs)]
        queries = embed(q_model, [scored.query_text for scored in batch])
        if self.shared_encoder:  # DQ-LoRe's ctx_no_grad: the candidate side is a fixed target
            with torch.no_grad():
                contexts = embed_candidates(c_model, texts)
        else:
            contexts = embed_candidates(c_model, texts)
        logits = self.scale * queries @ contexts.T  # [B, 2B]: positives, then hard negatives
        return F.cross_entropy(logits, torch.arange(len(batch)))


@register("epr")
class EPR(UDR):
    level = "instance"
    needs_loglik = True

    def __init__(self, k: int = 5, n_train_queries: int = 200, n_candidates: int = 50, bm25_field: str = "output",
                 epochs: int = 30, lr: float = 1.3416e-4, batch_queries: int = 60, top_k: int = 5,
                 scale: float = 20.0, warmup: float = 0.1, grad_clip: float = 2.0):
        super(UDR, self).__init__(k)
        self.set_mining(n_train_queries, n_candidates, bm25_field, rounds=1)
        self.training = EPRTraining(epochs=epochs, lr=lr, batch_queries=batch_queries, top_k=top_k, scale=scale,
                                    warmup=warmup, grad_clip=grad_clip, sample_size=2, top_sample=1,
                                    rank_loss_factor=0.0)
        self.training.validate(self.name)

    def selection_call_bound(self, n_val: int, n_test: int) -> int:
        """One log-likelihood call a BM25 candidate of each training query (one round: no re-mining)."""
        return self.n_train_queries * self.n_candidates

    def scale(self) -> dict:
        ours = super().scale()
        if not ours:  # not fitted
            return {}
        ours.pop("rounds", None)
        return {**ours, "authors' scale": "whole training set (up to 44,000 queries), 49 candidates, 30 epochs, "
                                          "GPT-Neo-2.7B scoring"}
