"""UDR, the Unified Demonstration Retriever (Li et al. 2023, ACL): a bi-encoder trained on LM feedback.

Follows the authors' code (KaiLv69/UDR, its DPR fork and scripts):
- training queries are pool items (`n_train_queries`, seeded; test and validation items never);
- BM25 proposes `n_candidates` (50) pool items per query, searched on the gold OUTPUT field of both the
  query and the corpus (their `setup_type="a"`; `bm25_field="question"` searches questions), the
  query itself and repeated questions left out;
- the LLM scores each candidate by the log-likelihood of the query's gold output after the 1-shot prompt
  ``task.prefix([candidate]) + task.format_query(query)`` (counted oracle calls); a query's list is sorted
  best first. Their score is the mean per-token loss; the sum used here gives the same order, because all
  candidates of a query share the target;
- a bi-encoder: separate query and candidate encoders (their two BERTs), query text = the question, candidate
  text = question + gold output; similarity = dot product;
- each step samples `sample_size` (8) candidates per query from its best-first list: `top_sample` (1) from
  the best `top_k` (5), one from the worst 5, the rest (6) from the others (see Deviations), re-sorted by
  LM score; relevance of the j-th is 1/j (their `EPRDataset.get_entry`, DPR/dpr/data/biencoder_data.py
  l.1246-1249, on lists that scorer.py l.111 sorts best first);
- loss = `rank_loss_factor` (4) x UDR's lambda-MRR list-wise loss (`dearicl.losses.lambda_mrr_loss`) +
  an in-batch cross-entropy: each query against every sampled candidate of the batch, its own best sample
  the positive;
- AdamW (lr 1.3e-4, eps 1e-8, no weight decay), linear warm-up then linear decay, gradient norm clipped at 2,
  10 epochs; three training rounds, each from the initial encoder, with re-mining between them: the round's
  retriever fetches `n_candidates` per query, only new pairs are scored, and they are merged into the list;
- test time: dense top-k by the final query and candidate encoders, the most similar demonstration last
  (next to the query), as their `order: ascending`.

Deviations, with reasons:
- the encoders start from all-MiniLM-L6-v2 (mean pooling, L2-normalised; the offline encoder), not
  bert-base-uncased with [CLS] pooling; its unit-norm outputs need a temperature, so the similarity is
  `scale` (20) x the dot product;
- the scoring LM is the run's selection LLM (not GPT-Neo-2.7B) and the prompt is the task's prompt;
- `n_train_queries` (200) pool items instead of the whole training split, batches of `batch_queries` (16)
  queries instead of 128 x 4 accumulation, and the warm-up is the first 10% of steps instead of 2,000 steps,
  so that a CPU run is feasible; one task per run (their batches are single-task too);
- candidates with tied LM scores share the better relevance (no pair between them);
- the rest of a sample is drawn from every candidate not drawn yet (`UDRTraining.sample`), the undrawn ones
  of the best `top_k` and of the worst 5 included; theirs come from the middle band only, ranks top_k+1 to
  n-top_k (`ctxs_and_index[top_k:-top_k]`), so their sample holds exactly `top_sample` of the best top_k and
  one of the worst top_k, this one possibly more (on 50 candidates 0.5 more of each on average). The worst
  band is 5 here, `top_k` there (equal at the defaults). Reason: lists under 2 top_k + sample_size - 1 -
  top_sample (16) candidates (small pools, scoring cut by a budget) can still be sampled, where their
  middle band is too short and `random.sample` raises; a list of at most `sample_size` is used whole;
- test-time k is the run's k (theirs fills a 1,600-token window).
A budget that ends the LM scoring early trains on the lists scored so far (a warning on the result row);
with no scored list the fit fails: the untuned encoder would be KNN under UDR's name.

`udr@dearicl-data` (run by `--ltr-data dearicl`, the paper's Table 3) is the same bi-encoder, loss and
sampling applied to the subset-level problem of the other LTR baselines: a list is one validation query
with the arms the DEARICL run observed on it, sorted by mean reward; an arm's embedding is the mean of its
demonstrations' candidate-encoder embeddings (five demonstrations exceed MiniLM's 256-token window as one
text); at test time it ranks DEARICL's candidate arms. It shares the encoder, loss and training loop with
the instance-level UDR, which ranks single pool items by their own LM scores.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from rank_bm25 import BM25Okapi

from bench.encoder import item_text
from bench.errors import BudgetExhausted, ConfigError, FitFailed
from bench.items import Item
from bench.tasks.base import normalise_text
from dearicl.losses import PADDED, lambda_mrr_loss
from methods.ltr_base import LTRSelector
from methods.base import FitContext, Selector, register
from methods.bm25 import bm25_tokens

BM25_FIELDS = ("output", "question")


def rank_labels(scores: np.ndarray) -> np.ndarray:
    """UDR relevance 1/rank by LM score; tied candidates share the better rank (no pair between them)."""
    ranks = 1 + (scores[None, :] > scores[:, None]).sum(axis=1)
    return 1.0 / ranks


def embed(model, texts: Sequence[str]) -> torch.Tensor:
    """L2-normalised sentence embeddings with gradients (the same path at training and retrieval time)."""
    preprocess = getattr(model, "preprocess", None) or model.tokenize  # sentence-transformers < 6 has tokenize
    features = {key: value.to(model.device) if isinstance(value, torch.Tensor) else value
                for key, value in preprocess(list(texts)).items()}
    return F.normalize(model(features)["sentence_embedding"], dim=-1)


def encode_texts(model, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """Inference-time embeddings (float32 numpy) from a model in eval mode."""
    model.eval()
    with torch.no_grad():
        parts = [embed(model, texts[i:i + batch_size]).cpu().numpy() for i in range(0, len(texts), batch_size)]
    return np.concatenate(parts).astype(np.float32)


def embed_candidates(model, candidates: Sequence[tuple[str, ...]]) -> torch.Tensor:
    """One vector per candidate: a candidate is one text (a pool item) or several (an arm: their mean)."""
    flat = [t for texts in candidates for t in texts]
    vectors = embed(model, flat)
    sizes = torch.tensor([len(texts) for texts in candidates])
    owner = torch.repeat_interleave(torch.arange(len(candidates)), sizes)
    summed = torch.zeros(len(candidates), vectors.shape[1], dtype=vectors.dtype).index_add_(0, owner, vectors)
    return summed / sizes[:, None].to(vectors.dtype)


@dataclass
class ScoredList:
    """One training query with its candidates, best first by LM score (or mean reward)."""

    query_text: str
    keys: list  # pool item ids (instance level) or arm indices (subset level)
    texts: list[tuple[str, ...]]
    scores: np.ndarray

    def sorted(self) -> "ScoredList":
        order = np.argsort(-self.scores, kind="stable")
        return ScoredList(self.query_text, [self.keys[i] for i in order], [self.texts[i] for i in order],
                          self.scores[order])


@dataclass
class UDRTraining:
    """UDR's training loop for a bi-encoder on scored lists (shared by the instance and subset rankers)."""

    epochs: int = 10
    lr: float = 1.3e-4
    batch_queries: int = 16
    sample_size: int = 8
    top_sample: int = 1
    top_k: int = 5
    rank_loss_factor: float = 4.0
    scale: float = 20.0
    warmup: float = 0.1
    grad_clip: float = 2.0

    def validate(self, owner: str) -> None:
        for name in ("epochs", "batch_queries", "sample_size", "top_k"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigError(f"{owner}: {name} must be an integer >= 1, got {getattr(self, name)!r}")
        if not 0 <= self.top_sample < self.sample_size:
            raise ConfigError(f"{owner}: top_sample must be in [0, sample_size), got {self.top_sample}")
        if not (self.lr > 0 and self.scale > 0 and 0 <= self.warmup < 1 and self.rank_loss_factor >= 0):
            raise ConfigError(f"{owner}: lr and scale must be > 0, warmup in [0, 1), rank_loss_factor >= 0")

    def sample(self, scored: ScoredList, rng: np.random.Generator) -> list[int]:
        """Indices into a best-first list: top_sample of the best top_k, one of the worst 5, the rest between."""
        n = len(scored.keys)
        if n <= self.sample_size:
            return list(range(n))
        top = rng.choice(min(self.top_k, n), size=min(self.top_sample, self.top_k), replace=False).tolist()
        bottom = [int(rng.integers(max(0, n - 5), n))] if self.sample_size - len(top) > 0 else []
        if bottom and bottom[0] in top:  # short lists: the best and worst bands overlap; never one item twice
            bottom = [int(rng.choice([i for i in range(max(0, n - 5), n) if i not in top]))]
        middle = [i for i in range(n) if i not in top and i not in bottom]
        rest = rng.choice(middle, size=self.sample_size - len(top) - len(bottom), replace=False).tolist()
        return sorted(top + bottom + rest)  # best first: the list order is the LM order

    def batch_loss(self, q_model, c_model, batch: list[ScoredList], rng: np.random.Generator) -> torch.Tensor:
        picks = [self.sample(scored, rng) for scored in batch]
        width = max(len(p) for p in picks)
        labels = torch.full((len(batch), width), PADDED)
        texts, owners = [], []
        for row, (scored, pick) in enumerate(zip(batch, picks)):
            labels[row, :len(pick)] = torch.as_tensor(rank_labels(scored.scores[pick]), dtype=torch.float32)
            texts += [scored.texts[i] for i in pick]
            owners.append(len(texts) - len(pick))  # the row's first (best) sampled candidate: the CE positive
        queries = embed(q_model, [scored.query_text for scored in batch])
        candidates = embed_candidates(c_model, texts)
        logits = self.scale * queries @ candidates.T  # [B, all sampled candidates of the batch]
        columns = torch.full((len(batch), width), -1, dtype=torch.long)
        for row, pick in enumerate(picks):
            columns[row, :len(pick)] = torch.arange(owners[row], owners[row] + len(pick))
        own = torch.gather(logits, 1, columns.clamp_min(0))
        rank = lambda_mrr_loss(own, labels)
        contrast = F.cross_entropy(logits, torch.as_tensor(owners))
        return self.rank_loss_factor * rank + contrast

    def encoders(self, base_model, copy) -> tuple[object, object]:
        """Fresh query and candidate encoders (UDR's and EPR's two BERTs); a subclass may share one."""
        return copy(base_model), copy(base_model)

    def train(self, base_model, lists: list[ScoredList], seed: int) -> tuple[object, object, list[float]]:
        """Fresh query and candidate encoders from `base_model`, trained on the lists; mean loss per epoch."""
        import copy

        from transformers import get_linear_schedule_with_warmup

        torch.manual_seed(seed)
        rng = np.random.default_rng(seed)
        q_model, c_model = self.encoders(base_model, copy.deepcopy)
        params = list({id(p): p for p in [*q_model.parameters(), *c_model.parameters()]}.values())
        optimiser = torch.optim.AdamW(params, lr=self.lr, eps=1e-8, weight_decay=0.0)
        lists = [scored for scored in lists if len(scored.keys) >= 2]
        steps = self.epochs * -(-len(lists) // self.batch_queries)
        schedule = get_linear_schedule_with_warmup(optimiser, int(self.warmup * steps), max(steps, 1))
        q_model.train()
        c_model.train()
        epoch_losses = []
        for _ in range(self.epochs if lists else 0):
            order = rng.permutation(len(lists))
            losses = []
            for start in range(0, len(lists), self.batch_queries):
                loss = self.batch_loss(q_model, c_model, [lists[i] for i in order[start:start + self.batch_queries]],
                                       rng)
                optimiser.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, self.grad_clip)
                optimiser.step()
                schedule.step()
                losses.append(loss.item())
            epoch_losses.append(float(np.mean(losses)))
        q_model.eval()
        c_model.eval()
        return q_model, c_model, epoch_losses


@register("udr")
class UDR(Selector):
    level = "instance"
    needs_loglik = True  # scores candidates by the gold output's log-likelihood

    def __init__(self, k: int = 5, n_train_queries: int = 200, n_candidates: int = 50, bm25_field: str = "output",
                 rounds: int = 3, epochs: int = 10, lr: float = 1.3e-4, batch_queries: int = 16, sample_size: int = 8,
                 top_sample: int = 1, top_k: int = 5, rank_loss_factor: float = 4.0, scale: float = 20.0,
                 warmup: float = 0.1, grad_clip: float = 2.0):
        super().__init__(k)
        self.set_mining(n_train_queries, n_candidates, bm25_field, rounds)
        self.training = UDRTraining(epochs, lr, batch_queries, sample_size, top_sample, top_k, rank_loss_factor,
                                    scale, warmup, grad_clip)
        self.training.validate(self.name)

    def set_mining(self, n_train_queries: int, n_candidates: int, bm25_field: str, rounds: int) -> None:
        """The training queries, BM25 candidates and mining rounds (shared with EPR and DQ-LoRe), validated."""
        for name, value, low in (("n_train_queries", n_train_queries, 1), ("n_candidates", n_candidates, 2),
                                 ("rounds", rounds, 1)):
            if not isinstance(value, int) or value < low:
                raise ConfigError(f"{self.name}: {name} must be an integer >= {low}, got {value!r}")
        if bm25_field not in BM25_FIELDS:
            raise ConfigError(f"{self.name}: bm25_field must be one of {', '.join(BM25_FIELDS)}, got {bm25_field!r}")
        self.n_train_queries, self.n_candidates, self.bm25_field, self.rounds = (n_train_queries, n_candidates,
                                                                                 bm25_field, rounds)

    # ---- fit ------------------------------------------------------------------------------------
    def fit(self, ctx: FitContext) -> UDR:
        self.check_pool(ctx)
        if len(ctx.pool) < 3:
            raise ConfigError(f"{self.name} needs a pool of at least 3 items, got {len(ctx.pool)}")
        self.pool_ = list(ctx.pool)
        self.by_id_ = {it.id: it for it in self.pool_}
        self.lm_scores_: dict[tuple[str, str], float] = {}
        self.budget_hit_ = False
        queries = ctx.rng("udr-queries").sample(self.pool_, min(self.n_train_queries, len(self.pool_)))
        self.candidates_of_: dict[str, list[Item]] = {q.id: self.bm25_candidates(q) for q in queries}
        self.score_new(ctx, queries)
        base = ctx.encoder.trainable_copy()
        self.round_losses_: list[list[float]] = []
        for round_ in range(1, self.rounds + 1):
            if round_ > 1:
                if self.budget_hit_:  # nothing new to learn from: the same lists again
                    self.warn(f"--llm-budget ended the LM scoring: {round_ - 1} of {self.rounds} training rounds "
                              "(re-mining stopped)")
                    break
                self.remine(ctx, queries)
            lists = self.scored_lists(queries)
            if not lists:
                raise FitFailed(f"{self.name}: no training query was scored by the LM before --llm-budget ended, so the "
                                "retriever would be the untuned encoder (KNN); raise the budget")
            self.q_model_, self.c_model_, losses = self.training.train(base, lists, ctx.seed + round_)
            self.round_losses_.append(losses)
        if len(lists) < len(queries):
            self.warn(f"trained on {len(lists)} of {len(queries)} training queries (--llm-budget ended the LM scoring)")
        self.pool_emb_ = encode_texts(self.c_model_, [item_text(it, with_output=True) for it in self.pool_])
        self.summary_ = {"summary": True, "queries_scored": len(lists), "train_queries": len(queries),
                         "candidates_per_query": float(np.mean([len(s.keys) for s in lists])),
                         "rounds": len(self.round_losses_), "epochs": self.training.epochs,
                         "llm_calls": ctx.oracle.calls, "budget_exhausted": self.budget_hit_,
                         "first_loss": self.round_losses_[-1][0], "last_loss": self.round_losses_[-1][-1]}
        return self

    def scale(self) -> dict:
        summary = getattr(self, "summary_", None)
        if summary is None:
            return {}
        steps = self.training.epochs * -(-summary["queries_scored"] // self.training.batch_queries)
        return {"training queries": summary["queries_scored"], "candidates a query": round(summary["candidates_per_query"], 1),
                "rounds": summary["rounds"], "optimiser steps a round": steps}

    def bm25_candidates(self, query: Item) -> list[Item]:
        """Okapi BM25 (rank-bm25) over lowercase word tokens of the chosen field of pool items."""
        if not hasattr(self, "bm25_"):
            self.bm25_ = BM25Okapi([bm25_tokens(self._field(it)) for it in self.pool_])
        return self.candidates_from(query, -self.bm25_.get_scores(bm25_tokens(self._field(query))))

    def _field(self, item: Item) -> str:
        return item.gold_output if self.bm25_field == "output" else item.question

    def candidates_from(self, query: Item, distances: np.ndarray) -> list[Item]:
        """The `n_candidates` nearest pool items, skipping the query itself and repeated questions."""
        seen = {normalise_text(query.question)}
        out: list[Item] = []
        for i in np.argsort(distances, kind="stable"):
            item = self.pool_[i]
            key = normalise_text(item.question)
            if item.id == query.id or key in seen:
                continue
            seen.add(key)
            out.append(item)
            if len(out) == self.n_candidates:
                break
        return out

    def score_new(self, ctx: FitContext, queries: Sequence[Item]) -> None:
        """LM scores of every unscored (query, candidate) pair, one counted oracle call each; stops at the budget."""
        for query in queries:
            new = [c for c in self.candidates_of_[query.id] if (query.id, c.id) not in self.lm_scores_]
            if not new:
                continue
            contexts = [ctx.task.prefix([c]) + ctx.task.format_query(query) for c in new]
            target = " " + query.gold_output  # the query prompt ends with a field label; the target follows
            try:
                values = ctx.oracle.loglik(contexts, [target] * len(new))
            except BudgetExhausted:
                self.budget_hit_ = True
                return
            self.lm_scores_.update({(query.id, c.id): float(v) for c, v in zip(new, values)})

    def scored_lists(self, queries: Sequence[Item]) -> list[ScoredList]:
        lists = []
        for query in queries:
            scored = [c for c in self.candidates_of_[query.id] if (query.id, c.id) in self.lm_scores_]
            if len(scored) >= 2:
                lists.append(ScoredList(self.training_text(query), [c.id for c in scored],
                                        [(item_text(c, with_output=True),) for c in scored],
                                        np.array([self.lm_scores_[(query.id, c.id)] for c in scored])).sorted())
        return lists

    def training_text(self, query: Item) -> str:
        """A training query as the query encoder reads it: its input (DQ-LoRe adds the gold chain of thought)."""
        return item_text(query)

    def remine(self, ctx: FitContext, queries: Sequence[Item]) -> None:
        """UDR's iterative mining: the round's retriever proposes candidates; new pairs are scored and merged."""
        pool_emb = encode_texts(self.c_model_, [item_text(it, with_output=True) for it in self.pool_])
        query_emb = encode_texts(self.q_model_, [item_text(q) for q in queries])
        for query, q in zip(queries, query_emb):
            mined = self.candidates_from(query, -(pool_emb @ q))
            merged = {c.id: c for c in self.candidates_of_[query.id] + mined}
            self.candidates_of_[query.id] = list(merged.values())
        self.score_new(ctx, queries)

    # ---- retrieval ------------------------------------------------------------------------------
    def select(self, query: Item) -> list[Item]:
        sims = self.pool_emb_ @ encode_texts(self.q_model_, [item_text(query)])[0]
        top = np.argsort(-sims, kind="stable")[: self.k]
        return [self.pool_[i] for i in top[::-1]]  # most similar last, next to the query

    def trace(self) -> list[dict]:
        summary = getattr(self, "summary_", None)
        return [summary] if summary else []


@register("udr" + "@dearicl-data")
class UDROnDearIclData(LTRSelector):
    """UDR's bi-encoder ranking arms, trained on the DEARICL run's (arm, query, reward) log (Table 3)."""

    in_all = False

    def __init__(self, k: int = 5, epochs: int = 10, lr: float = 1.3e-4, batch_queries: int = 16,
                 sample_size: int = 8, top_sample: int = 1, top_k: int = 5, rank_loss_factor: float = 4.0,
                 scale: float = 20.0, warmup: float = 0.1, grad_clip: float = 2.0, candidates: str = "dearicl",
                 **bandit):
        super().__init__(k, ltr_data="dearicl", candidates=candidates, **bandit)
        self.training = UDRTraining(epochs, lr, batch_queries, sample_size, top_sample, top_k, rank_loss_factor,
                                    scale, warmup, grad_clip)
        self.training.validate(self.name or "udr@dearicl-data")

    def fit(self, ctx: FitContext) -> "UDROnDearIclData":
        self.candidates_ = self.test_candidates(self.fit_neural(ctx))
        sums, counts = self.surrogate_.reward_sum, self.surrogate_.reward_count  # [arms, queries]
        lists = []
        for v, query in enumerate(ctx.validation):
            arms = np.flatnonzero(counts[:, v] > 0)
            if len(arms) >= 2:
                lists.append(ScoredList(item_text(query), arms.tolist(), [self.arm_texts(a) for a in arms],
                                        sums[arms, v] / counts[arms, v]).sorted())
        self.training_arms_ = int((counts.sum(axis=1) > 0).sum())
        if not lists:
            raise FitFailed(f"{self.name}: no training data: {self.training_arms_} arm(s) in the DEARICL run's log, "
                            "and a list needs two; raise --llm-budget")
        if len(lists) < len(ctx.validation):
            self.warn(f"trained on {len(lists)} of {len(ctx.validation)} validation lists (the others had < 2 arms)")
        self.q_model_, self.c_model_, self.losses_ = self.training.train(ctx.encoder.trainable_copy(), lists, ctx.seed)
        with torch.no_grad():
            self.arm_vectors_ = embed_candidates(self.c_model_, [self.arm_texts(a) for a in self.candidates_]).numpy()
        return self

    def arm_texts(self, arm: int) -> tuple[str, ...]:
        return tuple(item_text(d, with_output=True) for d in self.demos_of(int(arm)))

    def select(self, query: Item) -> list[Item]:
        scores = self.candidate_scores(query, self.candidates_)
        return self.demos_of(int(self.candidates_[int(np.argmax(scores))]))

    def candidate_scores(self, query: Item, candidates: np.ndarray) -> np.ndarray:
        """The trained bi-encoder's similarity of the query to each candidate arm (arms embedded at fit)."""
        row = {int(a): i for i, a in enumerate(self.candidates_)}
        return self.arm_vectors_[[row[int(a)] for a in candidates]] @ encode_texts(self.q_model_, [item_text(query)])[0]

    def trace(self) -> list[dict]:
        trace = super().trace()
        if trace and trace[-1].get("ltr"):
            trace[-1]["loss"] = "udr (lambda-MRR + in-batch CE)"
        return trace
