"""The one path to an LLM: cache lookup, batching, call accounting, error wrapping.

Every backend is wrapped the same way, so cache, calls.jsonl and budgets behave identically for
transformers, OpenAI-compatible servers and the embedded model.
"""
from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Callable, Sequence

from bench.errors import BenchError, ConfigError, LLMError
from bench.items import Item
from bench.llm.base import CHAT_SENTINEL, Backend, Generation, GenerationParams, RawGeneration
from bench.llm.cache import CallCache, call_key
from bench.llm.calllog import CallLog, CallRecord, CallScope
from bench.llm.registry import chat_wrap
from bench.reasoning import THINK_OPEN, answer_start


def multiturn_messages(task, demos: Sequence[Item]) -> list[dict]:
    """Demonstrations as alternating chat turns (lm-evaluation-harness's --fewshot_as_multiturn): each one's query
    part as a user turn and the rest (rationale, answer) as the assistant's; the task's instruction opens the first
    user turn; the last user turn holds CHAT_SENTINEL, where each item's query goes."""
    messages: list[dict] = []
    lead = task.instruction + "\n\n" if task.instruction else ""
    for demo in demos:
        shown, asked = task.format_demo(demo), task.format_query(demo)
        if not shown.startswith(asked):
            raise ConfigError(f"--fewshot-as-multiturn: task '{task.name}' writes a demonstration that does not start "
                              "with its query format, so it cannot be split into a user and an assistant turn")
        messages += [{"role": "user", "content": lead + asked}, {"role": "assistant", "content": shown[len(asked):].strip()}]
        lead = ""
    return messages + [{"role": "user", "content": lead + CHAT_SENTINEL}]


def row_seed(key: str) -> int:
    """A per-call seed from its cache key: sampling does not depend on batch composition or order."""
    return int(key[:8], 16)


class LLMClient:
    def __init__(self, backend: Backend, cache: CallCache | None = None, log: CallLog | None = None,
                 params: GenerationParams = GenerationParams(), chat_template: str = "off", multiturn: bool = False):
        self.backend = backend
        self.multiturn = multiturn  # demonstrations as chat turns (needs the model's chat template)
        self.cache = cache
        self.log = log or CallLog(None)
        self.params = params
        self.chat_template = chat_template
        self._wrap: tuple[str, str] | None = None
        self._opens_think = False
        self.progress: Callable[[int], None] | None = None  # told how many calls were answered, batch by batch
        self.answered = {"here": 0, "cache": 0}  # distinct calls answered by the backend, and read from the cache

    # ---- prompts ------------------------------------------------------------------------------
    @property
    def wrap(self) -> tuple[str, str]:
        """(head, tail) of the chat template around every generation prompt; ('', '') for raw prompts.
        Log-likelihood contexts stay raw: LENS and UDR score continuations as language-model text."""
        if self._wrap is None:
            self._wrap = chat_wrap(self.backend, self.chat_template)
            # a template that opens the think block itself: the block's tag goes back in front of each output
            self._opens_think = answer_start(self._wrap[1]) is None
        return self._wrap

    def _with_open_think(self, gens: list[Generation]) -> list[Generation]:
        if not self._opens_think:
            return gens
        return [replace(g, text=THINK_OPEN + g.text) for g in gens]

    def frame(self, task, demos: Sequence[Item]) -> tuple[str, str]:
        """(prefix, tail) around each item's query: the shared part of an arm pull (template head, instruction,
        demonstrations) and the template's end of the user turn. With `multiturn` the demonstrations are chat turns."""
        if not self.multiturn:
            head, tail = self.wrap
            return head + task.prefix(demos), tail
        if self.chat_template == "off":
            raise ConfigError("--fewshot-as-multiturn needs the model's chat template (not --chat-template off)")
        text = self.backend.chat_messages(multiturn_messages(task, demos))
        if text is None:
            raise ConfigError(f"--fewshot-as-multiturn: {self.backend.model_id} has no chat template here")
        prefix, tail = text.split(CHAT_SENTINEL)
        return prefix, tail

    def render(self, task, demos: Sequence[Item], item: Item) -> str:
        """The prompt the model sees for one item: the paper's prompt, as the user turn of a chat model (or, with
        `multiturn`, the demonstrations as turns of their own)."""
        prefix, tail = self.frame(task, demos)
        return prefix + task.format_query(item) + tail

    # ---- keys ---------------------------------------------------------------------------------
    def params_for(self, task) -> GenerationParams:
        """The run's decoding settings with the task's stop strings, and its cap on new tokens (a label needs few)."""
        cap = task.max_new_tokens or self.params.max_new_tokens
        return replace(self.params, stop=tuple(task.stop), max_new_tokens=min(self.params.max_new_tokens, cap))

    def generate_key(self, prompt: str, params: GenerationParams, sample_index: int) -> str:
        # Greedy decoding is deterministic: every sample index is the same call.
        index = 0 if params.greedy else sample_index
        return call_key("generate", self.backend.model_id, {"prompt": prompt, "params": params.key(), "sample": index})

    def loglik_key(self, context: str, continuation: str) -> str:
        return call_key("loglik", self.backend.model_id, {"context": context, "continuation": continuation})

    def evaluate_keys(self, task, demos: Sequence[Item], items: Sequence[Item], params: GenerationParams,
                      sample_indices: Sequence[int]) -> tuple[str, list[str], list[str]]:
        """(shared prefix, per-item suffixes, cache keys) of one arm pull."""
        prefix, tail = self.frame(task, demos)  # the template's head joins the shared prefix, its tail each suffix
        suffixes = [task.format_query(it) + tail for it in items]
        keys = [self.generate_key(prefix + s, params, i) for s, i in zip(suffixes, sample_indices)]
        return prefix, suffixes, keys

    def classify_keys(self, task, demos: Sequence[Item], items: Sequence[Item],
                      words: Sequence[Sequence[str]] | None = None) -> tuple[str, list[str], list[list[str]], list[str]]:
        """(shared prefix, per-item suffixes, per-item continuations, cache keys) of scoring continuations after
        each item's prompt: the task's label words, or each item's own `words`. A continuation starts with a space
        unless the prompt ends in whitespace (a chat template's assistant turn)."""
        prefix, tail = self.frame(task, demos)
        suffixes = [task.format_query(it) + tail for it in items]
        words = [task.choice_words()] * len(items) if words is None else words
        choices = [[w if (prefix + s)[-1:].isspace() else " " + w for w in row] for s, row in zip(suffixes, words)]
        keys = [call_key("classify", self.backend.model_id, {"prompt": prefix + s, "choices": c})
                for s, c in zip(suffixes, choices)]
        return prefix, suffixes, choices, keys

    # ---- calls --------------------------------------------------------------------------------
    def generate(self, prompts: Sequence[str], *, scope: CallScope, params: GenerationParams | None = None,
                 sample_indices: Sequence[int] | None = None, rendered: bool = False) -> list[Generation]:
        """Free generation; each prompt goes in the chat template's user turn unless it is `rendered` already
        (`render`: a whole few-shot prompt, its demonstrations perhaps chat turns)."""
        params = params or self.params
        head, tail = ("", "") if rendered else self.wrap
        prompts = [head + p + tail for p in prompts]
        indices = list(sample_indices) if sample_indices is not None else [0] * len(prompts)
        keys = [self.generate_key(p, params, i) for p, i in zip(prompts, indices)]

        def run(rows: list[int]) -> list[RawGeneration]:
            return self.backend.generate([prompts[r] for r in rows], params, [row_seed(keys[r]) for r in rows])

        return self._with_open_think(self._answer(keys, indices, run, scope, "generate"))

    def evaluate(self, task, demos: Sequence[Item], items: Sequence[Item], *, scope: CallScope,
                 params: GenerationParams | None = None, sample_indices: Sequence[int] | None = None) -> list[Generation]:
        """One arm pull: the same demonstrations on many items, sharing the prompt prefix."""
        params = params or self.params_for(task)
        indices = list(sample_indices) if sample_indices is not None else [0] * len(items)
        prefix, suffixes, keys = self.evaluate_keys(task, demos, items, params, indices)

        def run(rows: list[int]) -> list[RawGeneration]:
            return self.backend.generate_with_prefix(prefix, [suffixes[r] for r in rows], params,
                                                     [row_seed(keys[r]) for r in rows])

        return self._with_open_think(self._answer(keys, indices, run, scope, "generate",
                                                  step=self.backend.prefix_batch_size or self.backend.batch_size))

    def classify(self, task, demos: Sequence[Item], items: Sequence[Item], *, scope: CallScope,
                 words: Sequence[Sequence[str]] | None = None) -> tuple[list[list[float]], list[Generation]]:
        """Rank classification: per item, the log-likelihood of each of `task.choice_words()` (or of its own
        `words`) after its prompt (one call per item, the prefix shared), with the calls' accounting."""
        prefix, suffixes, choices, keys = self.classify_keys(task, demos, items, words)

        def run(rows: list[int]) -> list[RawGeneration]:
            scored = self.backend.choice_logliks(prefix, [suffixes[r] for r in rows], [choices[r] for r in rows])
            # Stored in the generation shape: text carries the log-likelihoods.
            return [RawGeneration(text=json.dumps(s.logliks), prompt_tokens=s.prompt_tokens, completion_tokens=0,
                                  prefilled_tokens=s.prefilled_tokens) for s in scored]

        gens = self._answer(keys, [0] * len(keys), run, scope, "classify",
                            step=self.backend.prefix_batch_size or self.backend.batch_size)
        return [json.loads(g.text) for g in gens], gens

    def loglik(self, contexts: Sequence[str], continuations: Sequence[str], *, scope: CallScope) -> list[float]:
        keys = [self.loglik_key(c, x) for c, x in zip(contexts, continuations)]

        def run(rows: list[int]) -> list[RawGeneration]:
            scored = self.backend.loglik([contexts[r] for r in rows], [continuations[r] for r in rows])
            # Stored in the generation shape: text carries the log-probability.
            return [RawGeneration(text=repr(s.logprob), prompt_tokens=s.prompt_tokens or s.n_tokens,
                                  completion_tokens=0) for s in scored]

        return [float(g.text) for g in self._answer(keys, [0] * len(keys), run, scope, "loglik")]

    # ---- machinery ----------------------------------------------------------------------------
    def _answer(self, keys: list[str], indices: list[int], run: Callable[[list[int]], list[RawGeneration]],
                scope: CallScope, kind: str, step: int | None = None) -> list[Generation]:
        results: dict[str, Generation] = {}
        hits = self.cache.get_many(sorted(set(keys))) if self.cache is not None else {}
        for key, value in hits.items():
            results[key] = Generation(value["text"], value["prompt_tokens"], value["completion_tokens"], 0,
                                      0.0, True, key, value.get("latency_s", 0.0))
        first_row_of: dict[str, int] = {}
        for row, key in enumerate(keys):
            if key not in results:
                first_row_of.setdefault(key, row)
        misses = list(first_row_of.values())
        self.answered["here"] += len(misses)
        self.answered["cache"] += len(hits)
        if self.progress is not None and len(keys) > len(misses):
            self.progress(len(keys) - len(misses))  # cached, or asked twice in this call
        log_rows: list[CallRecord] = []
        step = max(1, step or self.backend.batch_size)
        for start in range(0, len(misses), step):
            rows = misses[start:start + step]
            began = time.perf_counter()
            try:
                raw = run(rows)
            except BenchError:
                raise
            except Exception as exc:  # a backend crash becomes one clear line; answered calls are kept
                raise LLMError(f"{self.backend.model_id}: {type(exc).__name__}: {exc}") from exc
            latency = (time.perf_counter() - began) / len(rows)
            fresh = {}
            for row, gen in zip(rows, raw):
                key = keys[row]
                results[key] = Generation(gen.text, gen.prompt_tokens, gen.completion_tokens,
                                          gen.prefilled_tokens or 0, latency, False, key, latency)
                fresh[key] = {"text": gen.text, "prompt_tokens": gen.prompt_tokens,
                              "completion_tokens": gen.completion_tokens, "latency_s": latency}
                log_rows.append(self._record(scope, kind, results[key], indices[row]))
            if self.cache is not None:
                self.cache.put_many(fresh)
            self.log.write(log_rows)
            log_rows = []
            if self.progress is not None:
                self.progress(len(rows))
        # Cached answers and in-call duplicates are logged too, marked cached.
        fresh_keys = {keys[r] for r in misses}
        seen: set[str] = set()
        for row, key in enumerate(keys):
            if key in fresh_keys and key not in seen:
                seen.add(key)
                continue
            cached = replace(results[key], cached=True, latency_s=0.0, prefilled_tokens=0)
            log_rows.append(self._record(scope, kind, cached, indices[row]))
        self.log.write(log_rows)
        out = []
        seen = set()
        for key in keys:
            gen = results[key]
            out.append(gen if key not in seen or gen.cached else replace(gen, cached=True, latency_s=0.0))
            seen.add(key)
        return out

    def _record(self, scope: CallScope, kind: str, gen: Generation, sample_index: int) -> CallRecord:
        return CallRecord(ts=time.time(), method=scope.method, task=scope.task, phase=scope.phase, kind=kind,
                          model=self.backend.model_id, key=gen.key, prompt_tokens=gen.prompt_tokens,
                          prefilled_tokens=gen.prefilled_tokens, completion_tokens=gen.completion_tokens,
                          latency_s=round(gen.latency_s, 6), cached=gen.cached, sample_index=sample_index)
