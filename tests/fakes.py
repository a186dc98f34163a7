"""Test doubles for the harness: a deterministic backend that records what it was asked."""
from __future__ import annotations

import re
from typing import Callable, Sequence

from bench.llm.base import Backend, GenerationParams, RawGeneration, RawLoglik


def answer_with_demo_count(prompt: str) -> str:
    """A fake 'model' whose answer depends on the prompt: it reports how many demonstrations it saw."""
    # every demonstration and the query carry one "[Explanation]:" (math) or "[Chinese]:" (WMT19)
    shown = max(prompt.count("[Explanation]:"), prompt.count("[Chinese]:")) - 1
    return f" I count.\n[Answer]: {shown}\n[Question]: next"


def varied(prompt: str) -> str:
    """A fake LLM whose quality depends on the demonstrations: reward differs between arms."""
    good = sum(ch in "aeiou" for ch in prompt[-400:]) % 7
    return f" step {'two plus two' if good > 3 else 'banana'}\n[Answer]: {good}\n[Question]: x"


class FakeBackend(Backend):
    def __init__(self, respond: Callable[[str], str] = answer_with_demo_count, model_id: str = "fake-model",
                 batch_size: int = 2, fail_after: int | None = None, exc: type[BaseException] = RuntimeError):
        self.respond = respond
        self.model_id = model_id
        self.batch_size = batch_size
        self.fail_after = fail_after
        self.exc = exc
        self.prompts: list[str] = []
        self.prefix_calls: list[tuple[str, int]] = []

    def _tick(self, n: int) -> None:
        if self.fail_after is not None and len(self.prompts) + n > self.fail_after:
            raise self.exc("fake backend stopped on purpose")

    def generate(self, prompts: Sequence[str], params: GenerationParams, seeds: Sequence[int]) -> list[RawGeneration]:
        self._tick(len(prompts))
        self.prompts.extend(prompts)
        out = []
        for p, seed in zip(prompts, seeds):
            text = self.respond(p)
            if not params.greedy:
                text += f" (sample {seed % 97})"
            for stop in params.stop:
                text = text.split(stop)[0]
            out.append(RawGeneration(text=text, prompt_tokens=len(p.split()), completion_tokens=len(text.split())))
        return out

    def generate_with_prefix(self, prefix, suffixes, params, seeds):
        self.prefix_calls.append((prefix, len(suffixes)))
        return super().generate_with_prefix(prefix, suffixes, params, seeds)

    def loglik(self, contexts: Sequence[str], continuations: Sequence[str]) -> list[RawLoglik]:
        self._tick(len(contexts))
        self.prompts.extend(c + x for c, x in zip(contexts, continuations))
        # longer shared words with the context -> higher score
        return [RawLoglik(logprob=-float(len(set(re.findall(r"\w+", x)) - set(re.findall(r"\w+", c)))) - 0.5,
                          n_tokens=max(1, len(x.split()))) for c, x in zip(contexts, continuations)]


class RulesLearner(Backend):
    """A fake LLM that is an ideal in-context learner of the `rules` task, so every selector's utility is known:
    it answers a query with the code word of a demonstration of the same topic, when the prompt has one, and else
    with the last demonstration's code word (a recency bias: surely wrong, since no demonstration has the query's
    rule). Log-likelihood of a continuation: -0.1 for the word it would answer, -5 for any other; -3 for every
    word without demonstrations; a query itself ("Input: ...", TopK+ConE's score) -1 after a demonstration of its
    topic, else -4. A prompt's utility is thus 1 exactly when it holds a same-rule demonstration
    (the planted answer), whatever the label order."""

    model_id = "rules-learner"
    batch_size = 16

    def __init__(self):
        from bench.tasks.rules import TOPICS

        self.topic_of = {word: topic for topic, words in TOPICS.items() for word in words.split()}
        self.scored = 0

    def _topic(self, text: str) -> str | None:
        topics = {self.topic_of.get(w.strip()) for w in text.split(",")}
        return next(iter(topics)) if len(topics) == 1 else None

    def answer(self, prompt: str) -> str | None:
        """The code word a same-topic demonstration shows, else the last demonstration's; None without any."""
        blocks = [b for b in prompt.split("\n\n") if b.startswith("Input:")]
        demos = [b.split("\n") for b in blocks[:-1] if len(b.split("\n")) >= 2]
        if not blocks or not demos:
            return None
        want = self._topic(blocks[-1].split("\n")[0][len("Input:"):].strip())
        for lines in demos:
            if self._topic(lines[0][len("Input:"):].strip()) == want:
                return lines[1][len("Output:"):].strip()
        return demos[-1][1][len("Output:"):].strip()

    def same_topic_shown(self, context: str, query: str) -> bool:
        """Whether the context holds a demonstration of the query's topic (`query` an "Input: ..." block)."""
        want = self._topic(query.strip().split("\n")[0][len("Input:"):].strip())
        return any(self._topic(b.split("\n")[0][len("Input:"):].strip()) == want
                   for b in context.split("\n\n") if b.startswith("Input:"))

    def loglik(self, contexts, continuations):
        self.scored += len(contexts)
        out = []
        for ctx, cont in zip(contexts, continuations):
            if cont.lstrip().startswith("Input:"):  # a query after demonstrations (TopK+ConE): likelier after its topic
                out.append(RawLoglik(logprob=-1.0 if self.same_topic_shown(ctx, cont) else -4.0, n_tokens=3))
                continue
            known = self.answer(ctx)
            value = -3.0 if known is None else (-0.1 if cont.strip() == known else -5.0)
            out.append(RawLoglik(logprob=value, n_tokens=1))
        return out

    def generate(self, prompts, params, seeds):
        return [RawGeneration(text=" " + (self.answer(p) or "unknown"), prompt_tokens=len(p.split()),
                              completion_tokens=1) for p in prompts]
