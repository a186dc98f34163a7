"""`--k-sweep 1,2,4,...`: every selector at several k in one command, one standard run folder per k (OUT/k=N,
resumable) and one LLM cache shared by them; every k is checked (names, data, k <= pool, the longest prompt against
the model's context) before any model loads."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from bench.errors import ConfigError
from bench.llm.registry import context_window


def sweep_folder(out: Path, k: int) -> Path:
    return out / f"k={k}"


def sweep_options(options, out: Path) -> list:
    """The RunOptions of each k: its own folder (resumed when it exists and --resume is given), one shared cache."""
    cache = options.cache or out / "cache.sqlite"
    return [replace(options, k=k, k_sweep=[], out=sweep_folder(out, k), cache=cache,
                    resume=options.resume and (sweep_folder(out, k) / "config.json").is_file())
            for k in options.k_sweep]


def longest_prompt(task, splits, k: int, count: Callable[[str], int]) -> int:
    """Tokens of a k-shot prompt built from the k longest demonstrations of the pool (by characters) and the
    longest test input: what the run's largest prompt can reach, whichever demonstrations a selector picks."""
    pool = sorted(splits.pool, key=lambda d: len(task.prefix([d])), reverse=True)[:k]
    query = max(splits.test or splits.validation, key=lambda q: len(task.format_query(q)))
    return count(task.render(pool, query))


def check_context(runner, ks: list[int], count: Callable[[str], int], counted: str) -> str:
    """ConfigError when some k's longest prompt and its answer exceed the model's context; else a line saying what
    was checked."""
    cfg = runner.cfg
    window = context_window(cfg.llm)
    if window is None:
        return f"context not checked: '{cfg.llm.name}' is no alias with a known context window"
    worst = 0
    for task in runner.tasks:
        splits = runner.splits[task.name]
        answer = 0 if task.scoring == "rank" else min(cfg.generation.max_new_tokens,
                                                      task.max_new_tokens or cfg.generation.max_new_tokens)
        need = {k: longest_prompt(task, splits, k, count) + answer for k in ks}
        over = [k for k in ks if need[k] > window]
        if over:
            fits = [k for k in ks if need[k] <= window]
            raise ConfigError(f"--k-sweep: k={over[0]} prompts of {task.name} reach ~{need[over[0]]} tokens with the "
                              f"answer ({counted}), over {cfg.llm.name}'s {window}-token context; the k that fit: "
                              f"{','.join(map(str, fits)) or 'none'}")
        worst = max(worst, *need.values())
    return f"context checked: the longest prompt with its answer ~{worst} of {cfg.llm.name}'s {window} tokens"
