"""LLM layer: backends, cache, call log and the accounting client."""
from bench.llm.base import Backend, Generation, GenerationParams, RawChoices, RawGeneration, RawLoglik
from bench.llm.cache import CallCache
from bench.llm.calllog import CallLog, CallScope
from bench.llm.client import LLMClient
from bench.llm.registry import ALIASES, LLMSpec, make_backend

__all__ = ["ALIASES", "Backend", "CallCache", "CallLog", "CallScope", "Generation", "GenerationParams",
           "LLMClient", "LLMSpec", "RawChoices", "RawGeneration", "RawLoglik", "make_backend"]
