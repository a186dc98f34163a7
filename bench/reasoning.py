"""Reasoning models' think blocks (DeepSeek-R1 and its distills write `<think>…</think>` before answering):
what the answer is, and where stop strings may cut. Shared by the LLM backends and the tasks."""
from __future__ import annotations

from typing import Sequence

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def after_reasoning(text: str) -> str:
    """What a reasoning model answers after `<think>…</think>`. The opening tag may be missing (chat
    templates often put it in the prompt). A think block left open, as when max tokens cut it, holds no
    answer: ''. Text without think tags is returned as it is."""
    if THINK_CLOSE in text:
        return text.rsplit(THINK_CLOSE, 1)[1].lstrip()  # the answer starts after the block's line break
    if THINK_OPEN in text:
        return ""
    return text


def answer_start(text: str) -> int | None:
    """Where the answer part begins: 0 without think tags, after the last `</think>`, None while a think
    block is still open (a stop string inside it must not end generation)."""
    if THINK_CLOSE in text:
        return text.rindex(THINK_CLOSE) + len(THINK_CLOSE)
    if THINK_OPEN in text:
        return None
    return 0


def stop_in_answer(text: str, stops: Sequence[str]) -> bool:
    """Whether a stop string occurs in the answer part (never inside an open think block)."""
    start = answer_start(text)
    return start is not None and any(stop in text[start:] for stop in stops)


def cut_at_stop(text: str, stops: Sequence[str]) -> str:
    """Cut at the first stop string of the answer part; a think block is kept whole (generation halts at a
    stop string, but the tokens may run past it)."""
    start = answer_start(text)
    if start is None:
        return text
    cut = len(text)
    for stop in stops:
        pos = text.find(stop, start)
        if pos != -1:
            cut = min(cut, pos)
    return text[:cut]
