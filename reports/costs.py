"""Token totals and their cost: a price table per model, in USD per 1M input / output tokens.

    # prices.yaml  (no price is built in: write what your provider charges)
    gpt-4o-mini: {input: 0.15, output: 0.60}
    gemma3-270m: {input: 0, output: 0}

A key matches a model id exactly, or as its prefix (``gemma3-270m`` matches
``gemma3-270m-q4_k_m@...``). Input tokens are the prompt tokens requested, as providers bill them.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


from bench.errors import ConfigError
from bench.yamlfile import read_mapping


@dataclass(frozen=True)
class Price:
    input_per_m: float
    output_per_m: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input_per_m + completion_tokens * self.output_per_m) / 1e6


class PriceTable:
    def __init__(self, prices: dict[str, Price], source: str = ""):
        self.prices = prices
        self.source = source

    @classmethod
    def load(cls, path: Path) -> "PriceTable":
        data = read_mapping(path, "price file")
        prices = {}
        for model, row in data.items():
            if not isinstance(row, dict) or not {"input", "output"} <= set(row):
                raise ConfigError(f"{path}: model '{model}' needs 'input' and 'output' (USD per 1M tokens)")
            try:
                prices[str(model)] = Price(float(row["input"]), float(row["output"]))
            except (TypeError, ValueError):
                raise ConfigError(f"{path}: prices of '{model}' must be numbers") from None
        return cls(prices, str(path))

    def for_model(self, model: str) -> Price | None:
        if model in self.prices:
            return self.prices[model]
        matches = [key for key in self.prices if model.startswith(key)]
        return self.prices[max(matches, key=len)] if matches else None


def token_totals(calls: list[dict]) -> dict[tuple[str, str, str, str], dict[str, int]]:
    """(method, task, phase, model) -> summed tokens of the calls actually computed (not cache hits)."""
    totals: dict[tuple[str, str, str, str], dict[str, int]] = {}
    for call in calls:
        if call["cached"]:
            continue
        row = totals.setdefault((call["method"], call["task"], call["phase"], call["model"]),
                                {"calls": 0, "prompt_tokens": 0, "prefilled_tokens": 0, "completion_tokens": 0})
        row["calls"] += 1
        for key in ("prompt_tokens", "prefilled_tokens", "completion_tokens"):
            row[key] += int(call[key])
    return totals


def token_table(calls: list[dict], prices: PriceTable | None = None, fmt: str = "github") -> str:
    from reports.tables import table

    rows = []
    for (method, task, phase, model), t in sorted(token_totals(calls).items()):
        price = prices.for_model(model) if prices else None
        cost = "" if prices is None else ("no price" if price is None
                                          else f"{price.cost(t['prompt_tokens'], t['completion_tokens']):.6f}")
        rows.append([method, task, phase, model, t["calls"], t["prompt_tokens"], t["prefilled_tokens"],
                     t["completion_tokens"]] + ([cost] if prices else []))
    headers = ["Method", "Task", "Phase", "Model", "Calls", "Prompt tokens", "Prefilled", "Completion tokens"]
    return table(rows, headers + (["Cost (USD)"] if prices else []), fmt)
