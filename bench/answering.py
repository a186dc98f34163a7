"""Answering items: the one path from (demonstrations, items) to outputs, predictions, per-item scores and the
selection reward, for both ways a task is answered (Task.configure): generate and parse, or rank the label
words by log-likelihood (contextually calibrated or not). The runner's inference and the reward oracle's pulls
both go through here, so a selector is rewarded the way its test items are scored.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from bench.items import Item
from bench.llm.base import Generation, GenerationParams
from bench.llm.calllog import CallScope
from bench.llm.client import LLMClient


@dataclass
class Answers:
    outputs: list[str]  # the answer part of each generation; ranked: the chosen label word
    predictions: list[str]
    scores: list[float]  # the task's metric per item
    extras: dict[str, list[float]]  # secondary metrics per item (chrF)
    gens: list[Generation]  # the call that answered each item (latency, tokens, full text)
    label_probs: list[dict[str, float]] | None = None  # ranked: each label's (calibrated) probability


def answer_keys(client: LLMClient, task, demos: Sequence[Item], items: Sequence[Item], params: GenerationParams,
                sample_indices: Sequence[int]) -> list[str]:
    """Cache keys of the calls that answer `items` after `demos`: what a selection budget charges."""
    if task.scoring == "rank":
        keys = client.classify_keys(task, demos, items)[3]
        if task.calibration == "contextual":
            keys += client.classify_keys(task, demos, task.content_free_items())[3]
        return keys
    return client.evaluate_keys(task, demos, items, params, sample_indices)[2]


def answer(client: LLMClient, task, demos: Sequence[Sequence[Item]], items: Sequence[Item], *, scope: CallScope,
           params: GenerationParams | None = None, sample_indices: Sequence[int] | None = None) -> Answers:
    """Answer each item after its own demonstrations. Items that share demonstrations go to the LLM together
    (their prefix is prefilled once); either way the cache keys are the same."""
    gens, label_probs = ask(client, task, demos, items, scope=scope, params=params, sample_indices=sample_indices)
    if label_probs is not None:
        outputs = predictions = [max(p, key=p.get) for p in label_probs]
    else:
        outputs = [task.truncate(g.text) for g in gens]
        predictions = [task.extract(o) for o in outputs]
    return Answers(outputs, predictions, task.score(predictions, items, outputs), task.extra_metrics(outputs, items),
                   gens, label_probs)


def ask(client: LLMClient, task, demos: Sequence[Sequence[Item]], items: Sequence[Item], *, scope: CallScope,
        params: GenerationParams | None = None, sample_indices: Sequence[int] | None = None
        ) -> tuple[list[Generation], list[dict[str, float]] | None]:
    """The LLM calls of `answer` and nothing after them (no metric, so no scorer is loaded): each item's call, and
    for ranked answers each label's (calibrated) probability. A GPU box fills a cache this way (reward tables)."""
    params = params or client.params_for(task)
    indices = list(sample_indices) if sample_indices is not None else [0] * len(items)
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, chosen in enumerate(demos):
        groups.setdefault(tuple(d.id for d in chosen), []).append(i)
    gens: list = [None] * len(items)
    if task.scoring == "rank":
        probs: list = [None] * len(items)
        for rows in groups.values():
            shown = demos[rows[0]]
            logliks, answered = client.classify(task, shown, [items[i] for i in rows], scope=scope)
            free = (client.classify(task, shown, task.content_free_items(), scope=scope)[0]
                    if task.calibration == "contextual" else None)
            for i, ll, gen in zip(rows, logliks, answered):
                probs[i], gens[i] = task.label_probs(ll, free), gen
        return gens, [dict(zip(task.labels, map(float, p))) for p in probs]
    alone = [rows[0] for rows in groups.values() if len(rows) == 1]
    answered = client.generate([client.render(task, demos[i], items[i]) for i in alone], scope=scope, params=params,
                               sample_indices=[indices[i] for i in alone], rendered=True)
    for i, gen in zip(alone, answered):
        gens[i] = gen
    for rows in groups.values():
        if len(rows) > 1:
            answered = client.evaluate(task, demos[rows[0]], [items[i] for i in rows], scope=scope, params=params,
                                       sample_indices=[indices[i] for i in rows])
            for i, gen in zip(rows, answered):
                gens[i] = gen
    return gens, None


def rewards(task, answers: Answers, items: Sequence[Item], bertscore) -> np.ndarray:
    """The selection reward per item (Task.configure's `reward`): the gold label's probability, the task's metric,
    or BERTScore F1 of the output against the gold rationale and answer."""
    if task.reward == "label-prob":
        values = [probs[it.answer] for probs, it in zip(answers.label_probs, items)]
    elif task.reward == "metric":
        values = answers.scores
    else:
        values = bertscore.f1(answers.outputs, [task.reward_reference(it) for it in items], lang=task.lang)
    return np.asarray(values, dtype=np.float64)
