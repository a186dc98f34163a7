"""Backend contract of the LLM layer. Backends differ only here; cache and call log wrap them all."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Sequence

PAPER_TEMPERATURE = 0.25
PAPER_MAX_NEW_TOKENS = 1000


@dataclass(frozen=True)
class GenerationParams:
    """Decoding settings; part of every cache key. temperature 0 means greedy."""

    max_new_tokens: int = PAPER_MAX_NEW_TOKENS
    temperature: float = PAPER_TEMPERATURE
    stop: tuple[str, ...] = ()
    seed: int = 0

    def key(self) -> dict:
        return asdict(self)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0


@dataclass
class RawGeneration:
    """What a backend returns for one prompt."""

    text: str
    prompt_tokens: int  # tokens of the prompt as requested
    completion_tokens: int
    prefilled_tokens: int | None = None  # tokens actually run through prefill (< prompt_tokens with prefix reuse)

    def __post_init__(self):
        if self.prefilled_tokens is None:
            self.prefilled_tokens = self.prompt_tokens


@dataclass
class RawLoglik:
    logprob: float  # sum of log-probabilities of the continuation tokens
    n_tokens: int
    prompt_tokens: int = 0


@dataclass
class RawChoices:
    """What a backend returns for one prompt scored against its choices."""

    logliks: list[float]  # per choice, the sum of its tokens' log-probabilities
    prompt_tokens: int
    prefilled_tokens: int


@dataclass
class Generation:
    """One answered call as the rest of the harness sees it."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    prefilled_tokens: int
    latency_s: float  # wall time of this call now (0 when answered from the cache)
    cached: bool
    key: str = field(default="", repr=False)
    compute_s: float = 0.0  # wall time when the answer was first computed (kept in the cache)


class Backend(ABC):
    """A model that can continue prompts and score continuations."""

    #: identity used in cache keys: a hub id, a file hash, a server model name
    model_id: str
    #: how many prompts one `generate` call should get at most
    batch_size: int = 4
    #: how many suffixes one `generate_with_prefix` call should get at most (0: batch_size)
    prefix_batch_size: int = 0

    @abstractmethod
    def generate(self, prompts: Sequence[str], params: GenerationParams, seeds: Sequence[int]) -> list[RawGeneration]:
        """Continue each prompt; `seeds[i]` makes row i's sampling reproducible on its own."""

    @abstractmethod
    def loglik(self, contexts: Sequence[str], continuations: Sequence[str]) -> list[RawLoglik]:
        """Log-probability of each continuation given its context."""

    def generate_with_prefix(self, prefix: str, suffixes: Sequence[str], params: GenerationParams,
                             seeds: Sequence[int]) -> list[RawGeneration]:
        """Continue prefix+suffix for many suffixes. Backends that can reuse the prefix override this."""
        return self.generate([prefix + s for s in suffixes], params, seeds)

    def choice_logliks(self, prefix: str, suffixes: Sequence[str], choices: Sequence[Sequence[str]]
                       ) -> list[RawChoices]:
        """For each suffix, the log-probability of each of its choices (continuations) after prefix + suffix:
        rank classification's label words. Backends that can share the prefix's prefill override this."""
        contexts = [prefix + s for s, row in zip(suffixes, choices) for _ in row]
        scored = iter(self.loglik(contexts, [c for row in choices for c in row]))
        out = []
        for suffix, row in zip(suffixes, choices):
            got = [next(scored) for _ in row]
            out.append(RawChoices([g.logprob for g in got], prompt_tokens=max(g.prompt_tokens for g in got),
                                  prefilled_tokens=sum(g.prompt_tokens for g in got)))
        return out

    def chat_template(self) -> tuple[str, str] | None:
        """(text before, text after) one user message in the model's chat template, the assistant's turn
        opened; None when the model has none. ('', '') means the server applies it (a chat API)."""
        text = self.chat_messages([{"role": "user", "content": CHAT_SENTINEL}])
        return None if text is None else tuple(text.split(CHAT_SENTINEL))  # type: ignore[return-value]

    def chat_messages(self, messages: list[dict]) -> str | None:
        """A conversation in the model's chat template, the assistant's next turn opened (the tokenizer's own
        BOS left out when it adds one itself); None when the model has no template here."""
        return None

    def forget_prefix(self) -> None:
        """Drop a prefix kept from the last call (benchmarks time cold pulls)."""

    def warm(self) -> None:
        """Load weights / open connections up front, so the first call's latency is not load time."""

    def describe(self) -> str:
        return self.model_id

    def runtime(self) -> dict:
        """How the model runs (device, dtype, kernels), once it has; {} where a backend does not say."""
        return {}

    def close(self) -> None:
        pass


CHAT_SENTINEL = "\x00USER\x00"  # where a prompt goes in a rendered template


def common_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists (where two tokenisations part)."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
