"""The counted reward oracle: the only way a selector reaches the LLM during `fit`."""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from bench.answering import answer, answer_keys, rewards as reward_of
from bench.errors import BudgetExhausted
from bench.items import Item
from bench.llm.calllog import CallScope
from bench.llm.client import LLMClient
from bench.metrics import BertScore


@dataclass
class Pull:
    """One arm pull: demonstrations evaluated on items, with per-item rewards."""

    demo_ids: tuple[str, ...]
    item_ids: tuple[str, ...]
    rewards: tuple[float, ...]


class RewardOracle:
    """Evaluates demonstrations on items and returns the task's rewards in [0, 1] (BERTScore F1 against the gold
    output, the task's metric, or the gold label's probability: Task.configure); enforces the call budget.

    The budget counts distinct LLM calls this fit has asked for (those a cold cache would have to
    answer). Counting distinct requests rather than cache misses keeps a resumed run on exactly the
    path of an uninterrupted one: it stops at the same pull.
    """

    def __init__(self, client: LLMClient, task, method: str, bertscore: BertScore, budget: int | None = None):
        self.client = client
        self.task = task
        self.scope = CallScope(method=method, task=task.name, phase="selection")
        self.bertscore = bertscore
        self.budget = budget
        self._requested: set[str] = set()
        self._pulls_of: Counter = Counter()
        self.history: list[Pull] = []
        self.budget_exhausted = False
        self.parent: RewardOracle | None = None
        self.llm_seconds = 0.0  # wall time inside LLM calls (reward scoring is not counted)
        self.on_calls = None  # called with the call count once a pull is answered (the fit's progress bar)

    def child(self, budget: int | None) -> "RewardOracle":
        """A sub-oracle with its own budget (e.g. per test query) whose calls also count here.

        Its repeated-pull counters start afresh, so a per-query run re-uses cached answers of the
        same (arm, item, sample) from earlier queries, as independent runs over one cache would.
        """
        kid = RewardOracle(self.client, self.task, self.scope.method, self.bertscore, budget=budget)
        kid.parent = self
        kid.history = self.history
        return kid

    @property
    def calls(self) -> int:
        return len(self._requested)

    @property
    def remaining(self) -> int | None:
        return None if self.budget is None else self.budget - len(self._requested)

    def _charge(self, keys: Sequence[str]) -> None:
        new = set(keys) - self._requested
        if self.budget is not None and len(self._requested) + len(new) > self.budget:
            self.budget_exhausted = True
            raise BudgetExhausted(f"{self.scope.method}/{self.scope.task}: budget of {self.budget} calls reached")
        if self.parent is not None:
            self.parent._charge(keys)  # the run-level budget binds per-query runs too
        self._requested |= new

    def _answered(self) -> None:
        """Tell the fit's progress bar, once the calls just charged are answered."""
        if self.on_calls is not None:
            self.on_calls(len(self._requested))
        if self.parent is not None:
            self.parent._answered()

    def pull(self, demos: Sequence[Item], items: Sequence[Item]) -> np.ndarray:
        """Rewards of one arm on each item (one LLM call per item, bench/answering.py: the task's reward);
        repeated pulls draw new samples (ranked labels are deterministic: a repeat costs nothing)."""
        demo_ids = tuple(d.id for d in demos)
        indices = [self._pulls_of[(demo_ids, it.id)] for it in items]
        params = self.client.params_for(self.task)
        self._charge(answer_keys(self.client, self.task, demos, items, params, indices))
        began = time.perf_counter()
        answers = answer(self.client, self.task, [demos] * len(items), items, scope=self.scope, params=params,
                         sample_indices=indices)
        self._add_llm_seconds(time.perf_counter() - began)
        rewards = reward_of(self.task, answers, items, self.bertscore)
        self._answered()
        for it in items:
            self._pulls_of[(demo_ids, it.id)] += 1
        self.history.append(Pull(demo_ids, tuple(it.id for it in items), tuple(float(r) for r in rewards)))
        return rewards

    def _add_llm_seconds(self, seconds: float) -> None:
        self.llm_seconds += seconds
        if self.parent is not None:
            self.parent._add_llm_seconds(seconds)

    def loglik(self, contexts: Sequence[str], continuations: Sequence[str]) -> list[float]:
        """Scores for selectors that need log-likelihoods (LENS, UDR); counted like pulls."""
        self._charge([self.client.loglik_key(c, x) for c, x in zip(contexts, continuations)])
        scores = self.client.loglik(contexts, continuations, scope=self.scope)
        self._answered()
        return scores

    def generate(self, shown: Sequence[tuple[Sequence[Item], Item]]) -> list[str]:
        """Free generation for selectors that write text (BRIDGE's rationales): each (demonstrations, item) prompted
        as the run prompts its test items (chat template, demonstrations as turns); counted."""
        params = self.client.params_for(self.task)
        prompts = [self.client.render(self.task, demos, item) for demos, item in shown]
        keys = [self.client.generate_key(p, params, 0) for p in prompts]
        self._charge(keys)
        texts = [g.text for g in self.client.generate(prompts, scope=self.scope, params=params, rendered=True)]
        self._answered()
        return texts
