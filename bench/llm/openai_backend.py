"""Any OpenAI-compatible server: the OpenAI API, vLLM, ollama, llama.cpp's server, SGLang.

`api="sglang"` generates through SGLang's OpenAI-compatible completions and scores log-likelihoods through its
native `/generate` with `logprob_start_len`: SGLang's completions endpoint computes prompt log-probabilities from
the first token (`logprob_start_len` 0 when echo and logprobs are asked), which keeps its radix cache from serving
the shared demonstrations; starting the scored span at the continuation lets it reuse them.
"""
from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from bench.errors import LLMError
from bench.llm.base import Backend, GenerationParams, RawGeneration, RawLoglik, common_length
from bench.reasoning import cut_at_stop


OPENAI_APIS = ("completions", "chat", "sglang")


class OpenAIBackend(Backend):
    """Completions API for raw prompts (base models), chat API for chat-only models.

    Requests run concurrently (bounded), so servers with prefix caching see a pull's shared prefix
    back to back. Retries are the openai SDK's (`max_retries`: exponential backoff with jitter, honouring
    Retry-After, on connection errors, timeouts, 408/409/429 and 5xx); what is left becomes one LLMError
    that says how many attempts were sent.

    A reasoning model's stop strings are applied here, not by the server: the server would cut a think
    block that happens to contain one.
    """

    def __init__(self, model: str, *, api_base: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 api: str = "completions", concurrency: int = 4, timeout_s: float = 120.0, retries: int = 3,
                 reasoning: bool = False):
        from openai import OpenAI

        if api not in OPENAI_APIS:
            raise LLMError(f"unknown OpenAI api '{api}' ({', '.join(OPENAI_APIS)})")
        self.model = model
        self.api = api
        self.api_base = api_base or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        self.model_id = f"openai:{model}@{self.api_base}:{api}"
        self.batch_size = max(1, concurrency)
        self.retries = retries
        self.reasoning = reasoning
        key = os.environ.get(api_key_env) or "not-needed"  # local servers accept any key
        self.client = OpenAI(base_url=self.api_base, api_key=key, timeout=timeout_s, max_retries=retries)
        self.pool = ThreadPoolExecutor(max_workers=self.batch_size)

    def _attempts(self, exc: Exception) -> int:
        """Requests the SDK sent before giving up: every retry for what it retries (connection errors and
        timeouts, 408, 409, 429, 5xx; the SDK's documented rule), one for any other error."""
        from openai import APIConnectionError  # APITimeoutError is one too

        status = getattr(exc, "status_code", None)
        retried = isinstance(exc, APIConnectionError) or (status is not None and (status in (408, 409, 429)
                                                                                   or status >= 500))
        return self.retries + 1 if retried else 1

    def _with_retries(self, fn):
        try:
            return fn()
        except Exception as exc:  # openai raises APIConnectionError, APITimeoutError, APIStatusError
            attempts = self._attempts(exc)
            lines = str(exc).strip().splitlines()
            detail = lines[0] if lines else type(exc).__name__
            raise LLMError(f"LLM server {self.api_base} failed after {attempts} attempt{'s' * (attempts != 1)}: "
                           f"{type(exc).__name__}: {detail}") from None

    def _one(self, prompt: str, params: GenerationParams, seed: int) -> RawGeneration:
        common = dict(model=self.model, max_tokens=params.max_new_tokens, temperature=params.temperature,
                      seed=seed, stop=None if self.reasoning else list(params.stop)[:4] or None)
        if self.api == "chat":
            resp = self._with_retries(lambda: self.client.chat.completions.create(
                messages=[{"role": "user", "content": prompt}], **common))
            text = resp.choices[0].message.content or ""
        else:
            resp = self._with_retries(lambda: self.client.completions.create(prompt=prompt, **common))
            text = resp.choices[0].text or ""
        if self.reasoning:
            text = cut_at_stop(text, params.stop)
        usage = resp.usage
        prompt_tokens = usage.prompt_tokens if usage else 0
        cached = 0
        details = getattr(usage, "prompt_tokens_details", None) if usage else None
        if details is not None and getattr(details, "cached_tokens", None):
            cached = details.cached_tokens
        return RawGeneration(text=text, prompt_tokens=prompt_tokens,
                             completion_tokens=usage.completion_tokens if usage else 0,
                             prefilled_tokens=max(0, prompt_tokens - cached))

    def chat_template(self) -> tuple[str, str] | None:
        return ("", "") if self.api == "chat" else None  # the chat API applies the server's template

    def generate(self, prompts: Sequence[str], params: GenerationParams, seeds: Sequence[int]) -> list[RawGeneration]:
        return list(self.pool.map(lambda a: self._one(*a), [(p, params, s) for p, s in zip(prompts, seeds)]))

    def loglik(self, contexts: Sequence[str], continuations: Sequence[str]) -> list[RawLoglik]:
        if self.api == "chat":
            raise LLMError(f"{self.model}: log-likelihoods need the completions API (echo + logprobs)")
        score = self._score_native if self.api == "sglang" else self._score
        return list(self.pool.map(lambda a: score(*a), zip(contexts, continuations)))

    def _post(self, path: str, body: dict):
        """A JSON POST to one of SGLang's own endpoints (a path under the base URL, or a whole URL), through the
        SDK's client: its authentication, timeout and retries."""
        return self._with_retries(lambda: self.client.post(path, body=body, cast_to=object))

    @functools.lru_cache(maxsize=1024)  # noqa: B019 (one backend a run) ranked labels share their context
    def _context_tokens(self, context: str) -> tuple[int, ...]:
        return tuple(self._tokens(context))

    def _tokens(self, text: str) -> list[int]:
        got = self._post("/tokenize", {"model": self.model, "prompt": text})
        ids = got.get("tokens") if isinstance(got, dict) else None
        if not isinstance(ids, list):
            raise LLMError(f"server {self.api_base}/tokenize returned no token ids (not SGLang?)")
        return [int(i) for i in ids]

    def _score_native(self, context: str, continuation: str) -> RawLoglik:
        """SGLang: the whole text's tokens, scored from the first token that is not the context's own (the one
        straddling the boundary counts for the continuation, as on the echo path), so the radix cache can serve
        everything before it. SGLang gives the token at `logprob_start_len` no value (the logits there predict the
        next one), and older versions start their list one token later; asked from one token before, the list's
        last entries are the continuation's in either case, checked by their token ids."""
        context_ids, ids = self._context_tokens(context), self._tokens(context + continuation)
        start = common_length(context_ids, ids)
        if start >= len(ids):
            raise LLMError(f"loglik: continuation {continuation[:40]!r} adds no token to the context")
        root = self.api_base.removesuffix("/").removesuffix("/v1")  # the native API is beside /v1
        got = self._post(f"{root}/generate", {"input_ids": ids, "return_logprob": True,
                                              "logprob_start_len": max(start - 1, 0),
                                              "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}})
        scored = (got.get("meta_info") or {}).get("input_token_logprobs") if isinstance(got, dict) else None
        if not scored or len(scored) < len(ids) - start:
            raise LLMError(f"server {root}/generate returned too few input_token_logprobs for the continuation "
                           f"(return_logprob unsupported?)")
        tail = scored[len(scored) - (len(ids) - start):]  # the continuation's tokens, the straddling one first
        if any(len(entry) > 1 and entry[1] is not None and int(entry[1]) != token
               for entry, token in zip(tail, ids[start:])):
            raise LLMError(f"server {root}/generate scored other tokens than the continuation's")
        values = [entry[0] for entry in tail if entry[0] is not None]
        if not values:
            raise LLMError(f"loglik: continuation {continuation[:40]!r} has no scored tokens in the server's answer")
        return RawLoglik(logprob=float(sum(values)), n_tokens=len(values), prompt_tokens=len(ids))

    def _score(self, context: str, continuation: str) -> RawLoglik:
        # echo=True returns the prompt's tokens with logprobs (OpenAI legacy, vLLM, llama.cpp's server);
        # max_tokens=1, not 0: llama.cpp's server reads 0 as "generate until the context is full".
        resp = self._with_retries(lambda: self.client.completions.create(
            model=self.model, prompt=context + continuation, max_tokens=1, temperature=0.0, echo=True, logprobs=1))
        choice = resp.choices[0]
        lp = choice.logprobs
        if lp is None or not lp.token_logprobs or not lp.text_offset:
            raise LLMError(f"server {self.api_base} returned no prompt logprobs (echo=True unsupported?)")
        start, end = len(context), len(context) + len(continuation)
        # text_offset is each token's start in the echoed text; a token ends where the next one starts.
        ends = list(lp.text_offset[1:]) + [len(choice.text or "")]
        total, n = 0.0, 0
        for offset, stop, value in zip(lp.text_offset, ends, lp.token_logprobs):
            inside = start <= offset < end  # the generated token starts at `end`, so it is left out
            # "is " + "Paris" tokenizes as "is", " Paris": the token straddling the boundary carries the continuation
            straddles = offset < start < stop
            if (inside or straddles) and value is not None:  # the very first prompt token has no logprob
                total += value
                n += 1
        if n == 0:
            raise LLMError(f"loglik: continuation {continuation[:40]!r} has no scored tokens in the server's answer")
        return RawLoglik(logprob=total, n_tokens=n, prompt_tokens=resp.usage.prompt_tokens if resp.usage else 0)

    def close(self) -> None:
        self.pool.shutdown(wait=False)
        self.client.close()  # the HTTP connection pool, or its sockets linger until garbage collection
