"""`--dry-run`: what a run will cost, from the validated configuration alone (no model is loaded).

Per method x task: LLM calls (inference: one per test item, exact; selection: the selector's own bound,
capped by --llm-budget, or 'unbounded'), prompt and completion tokens (the rendered prompts counted with the model's
tokenizer where one is at hand without loading the model: an embedded model's tokenizer converted by an earlier run,
an hf model's in the local cache; otherwise characters / 4, and the plan says which; completions between the gold
answers' length and --max-new-tokens, or the task's own cap; none for ranked labels) and a
time estimate from prefill and decode rates. Cache hits, which make reruns and shared pulls free, are ignored:
every number is an estimate of the first run, and the selection and token columns are upper bounds where marked.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tabulate import tabulate

# measured on the embedded model (Gemma 3 270M, 2 CPU cores, `bench perf` P3): batched decode, suffix prefill
DEFAULT_DECODE_TPS = 85.0
DEFAULT_PREFILL_TPS = 180.0
# the (model, backend) pairs whose speed was measured here: any other model's time is unknown, not scaled from these
MEASURED_RATES = {("gemma3-270m", "embedded"): (DEFAULT_PREFILL_TPS, DEFAULT_DECODE_TPS)}


def rates_for(spec, prefill: float | None, decode: float | None) -> tuple[float, float, str] | None:
    """(prefill, decode tokens/s, where they come from): the user's, else a measurement of this model and backend,
    else None (the time is unknown: a 270M model's speed says nothing of a 3B model's)."""
    from bench.llm.registry import resolve

    if prefill and decode:
        return prefill, decode, "given"
    backend, _model = resolve(spec)
    measured = MEASURED_RATES.get((spec.name, backend))
    if measured is None:
        return None
    return prefill or measured[0], decode or measured[1], f"measured: {spec.name} on 2 CPU cores"
CHARS_PER_TOKEN = 4.0


@dataclass
class PlanRow:
    method: str
    task: str
    selection_calls: int | None  # None: unbounded (no --llm-budget and no bound of the selector's own)
    selection_exact: bool
    inference_calls: int
    prompt_tokens: int  # per call, mean
    completion_low: int  # per call: the gold solutions' mean length
    completion_high: int  # per call: --max-new-tokens

    @property
    def calls_high(self) -> int | None:
        return None if self.selection_calls is None else self.selection_calls + self.inference_calls

    def seconds(self, prefill_tps: float, decode_tps: float, completion: int | None = None) -> float | None:
        """At `completion` tokens per call (default: --max-new-tokens)."""
        calls = self.calls_high
        if calls is None:
            return None
        tokens = self.completion_high if completion is None else completion
        return calls * (self.prompt_tokens / prefill_tps + tokens / decode_tps)


def characters_over_4(text: str) -> int:
    return int(len(text) / CHARS_PER_TOKEN) + 1


def token_counter(spec) -> tuple[Callable[[str], int], str]:
    """(count, what counts): the model's tokenizer if it is at hand without loading the model (an embedded model's,
    converted by an earlier run; an hf model's in the local cache), else characters / 4."""
    from bench.llm.registry import resolve

    try:
        backend, model = resolve(spec)
        if backend == "embedded":
            from bench.llm.embedded import cache_root

            found = sorted(cache_root().glob(f"{model}-*/tokenizer_config.json"), key=lambda p: p.stat().st_mtime)
            source = str(found[-1].parent) if found else None
        else:
            source = model if backend == "hf" else None
        if source is None:
            return characters_over_4, "characters / 4 (no tokenizer at hand)"
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(source, local_files_only=True)
    except Exception:  # noqa: BLE001 - any failure to find a tokenizer offline means the estimate
        return characters_over_4, "characters / 4 (no tokenizer at hand)"
    return (lambda text: len(tok(text)["input_ids"])), f"counted with {spec.name}'s tokenizer"


def task_token_profile(task, splits, k: int, limit: int = 50,
                       count: Callable[[str], int] = characters_over_4) -> tuple[int, int]:
    """(mean prompt tokens with k demonstrations, mean gold-answer tokens) over up to `limit` test items."""
    items = splits.test[:limit] or splits.validation[:limit]
    demos = splits.pool[:k]
    prompt = sum(count(task.render(demos, item)) for item in items) / max(len(items), 1)
    answer = sum(count(item.gold_output) for item in items) / max(len(items), 1)  # worked solutions
    return round(prompt), round(answer)


def plan(runner, count: Callable[[str], int] = characters_over_4) -> list[PlanRow]:
    cfg = runner.cfg
    rows = []
    for task in runner.tasks:
        splits = runner.splits[task.name]
        # ranked labels generate nothing (one pass per item); a generated label stops within the task's cap
        high = 0 if task.scoring == "rank" else min(cfg.generation.max_new_tokens,
                                                    task.max_new_tokens or cfg.generation.max_new_tokens)
        profiles: dict[int, tuple[int, int]] = {}  # demonstrations per prompt -> token profile
        for method in runner.now:  # --only: the cells this command would run
            selector = runner._selector(method)
            k = selector.demos_per_prompt()
            if k not in profiles:
                profiles[k] = task_token_profile(task, splits, k, count=count)
            prompt, answer = profiles[k]
            n_val, n_test = len(splits.validation), len(splits.test)
            bound = selector.capped_call_bound(n_val, n_test, cfg.budget_for(method))
            exact = selector.selection_call_bound(n_val, n_test) == 0
            rows.append(PlanRow(method, task.name, bound, exact, n_test, prompt, min(answer, high), high))
    return rows


def embedding_cache_line(runner) -> str:
    """What the persistent embedding cache holds of this run's texts (the inputs of every split, and the pool's
    demonstrations with their outputs), read without loading the encoder."""
    from bench.embedding_cache import EmbeddingCache, encoder_identity, resolve
    from bench.encoder import item_text

    path = resolve(runner.cfg.embedding_cache)
    if path is None:
        return "Embedding cache: off (every text is embedded this run)."
    if not path.is_file():
        return f"Embedding cache: {path} (empty: this run embeds its texts and keeps them)."
    from bench.metrics import local_encoder_path

    model = runner.cfg.encoder if runner.cfg.encoder != "auto" else (local_encoder_path() or "auto")
    texts = set()
    for splits in runner.splits.values():
        for items in (splits.pool, splits.validation, splits.test):
            texts.update(item_text(it) for it in items)
        texts.update(item_text(it, with_output=True) for it in splits.pool)
    cache = EmbeddingCache(path, encoder_identity(model))
    try:
        held = cache.count(sorted(texts))
    finally:
        cache.close()
    return (f"Embedding cache: {path}: {held:,} of this run's {len(texts):,} texts (inputs, and the pool's with "
            f"outputs) are embedded already; a selector embeds the rest once.")


def _count(value: int | None, exact: bool = True) -> str:
    if value is None:
        return "unbounded"
    return f"{value:,}" if exact else f"≤ {value:,}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unbounded"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _span(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "unbounded"
    return _duration(high) if _duration(low) == _duration(high) else f"{_duration(low)}–{_duration(high)}"


def render_plan(rows: list[PlanRow], llm: str, prefill_tps: float | None, decode_tps: float | None,
                counted: str = "characters / 4 (no tokenizer at hand)") -> str:
    """The plan's table and totals; with no rates (a model whose speed was never measured here), time is unknown."""
    known = prefill_tps is not None and decode_tps is not None

    def time(r: PlanRow) -> str:
        if not known:
            return "unknown"
        return _span(r.seconds(prefill_tps, decode_tps, r.completion_low), r.seconds(prefill_tps, decode_tps))

    body = []
    for r in rows:
        calls = r.calls_high
        bound = "" if r.selection_exact else "≤ "
        body.append([r.method, r.task, _count(r.selection_calls, r.selection_exact), f"{r.inference_calls:,}",
                     "unbounded" if calls is None else f"{bound}{calls * r.prompt_tokens:,}",
                     "unbounded" if calls is None else f"{calls * r.completion_low:,}–{calls * r.completion_high:,}",
                     time(r)])
    bounded = [r for r in rows if r.calls_high is not None]
    unbounded = sorted({r.method for r in rows if r.calls_high is None})
    if known:
        low = sum(r.seconds(prefill_tps, decode_tps, r.completion_low) for r in bounded)
        total_time = _span(low, sum(r.seconds(prefill_tps, decode_tps) for r in bounded))
        speed = (f"Time at {prefill_tps:g} prefill and {decode_tps:g} decode tokens/s (the defaults are Gemma 3 270M "
                 "on 2 CPU cores: pass --tokens-per-second and --prefill-tokens-per-second for your model and "
                 "hardware), from completions as long as the gold solutions to --max-new-tokens.")
    else:
        total_time = "time unknown"
        speed = (f"Time: unknown, no speed of {llm} was measured here (the embedded 270M model's does not carry "
                 "over to another model): pass --tokens-per-second and --prefill-tokens-per-second, or measure them "
                 f"with `python -m bench perf --llm {llm}`.")
    lines = [f"Plan for {llm} (dry run: nothing loaded, nothing written). Estimates of a first run, cache hits "
             f"ignored. {speed} Tokens: {counted}.", "",
             tabulate(body, headers=["method", "task", "selection calls", "inference calls", "prompt tokens",
                                     "completion tokens", "time"], tablefmt="github", disable_numparse=True), "",
             f"total (bounded rows): {sum(r.calls_high for r in bounded):,} LLM calls, {total_time}"]
    if unbounded:
        lines.append(f"unbounded: {', '.join(unbounded)} stop by their own rule; pass --llm-budget N to bound them")
    return "\n".join(lines)
