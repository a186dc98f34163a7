"""Task contract: where items come from, how a prompt is built, how an output is judged.

A selector never builds prompts or parses answers itself; the task does.
"""
from __future__ import annotations

import csv
import json
import random
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from bench.errors import ConfigError, DataError
from bench.items import Item
from bench.reasoning import THINK_CLOSE, THINK_OPEN, after_reasoning  # noqa: F401 (re-exported)

SCORINGS = ("auto", "generate", "rank")  # auto: rank for tasks with labels, else generate
CALIBRATIONS = ("none", "contextual")  # contextual: Zhao et al. 2021, content-free inputs
REWARDS = ("auto", "metric", "label-prob", "bertscore")  # what a selector's pull returns per item
ANSWERING_DEFAULTS = {"scoring": "auto", "calibration": "none", "reward": "auto"}

MATH_INSTRUCTION = (
    "You are a helpful, respectful and honest assistant helping to solve math word problems or tasks "
    "requiring reasoning or math. Follow given examples and solve the problems in step by step manner."
)


@dataclass(frozen=True)
class SplitSpec:
    """Files of one task inside a data folder laid out like ``../shared/data``."""

    folder: str
    pool: str
    validation: str | None  # None: carve validation out of the pool file (GSM8K has no dev split)
    test: str


@dataclass(frozen=True)
class Splits:
    pool: list[Item]
    validation: list[Item]
    test: list[Item]


def normalise_text(text: str) -> str:
    return " ".join(text.lower().split())


def _json_rows(path: Path):
    """(line number, row) of a JSON Lines file."""
    with path.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{line_no}: not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}:{line_no}: expected a JSON object, got {type(row).__name__}")
            yield line_no, row


def _csv_rows(path: Path):
    """(line number, row) of a CSV file with a header line; the number is the data row's line in the file."""
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        if not reader.fieldnames:
            raise DataError(f"{path}: no header line")
        for row in reader:
            if None in row or None in row.values():
                raise DataError(f"{path}:{reader.line_num}: {len(reader.fieldnames)} columns expected")
            yield reader.line_num, row


def read_rows(path: Path, parse_row: Callable[[dict, str], Item], split: str) -> list[Item]:
    """Read a JSON Lines file (any suffix but .csv) or a CSV file with a header line; a malformed row raises
    DataError naming file and line."""
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    items = []
    for line_no, row in (_csv_rows(path) if path.suffix.lower() == ".csv" else _json_rows(path)):
        try:
            item = parse_row(row, f"{path.parent.name}/{path.name}:{line_no}")
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{path}:{line_no}: malformed row ({exc})") from None
        items.append(_with_split(item, split))
    if not items:
        raise DataError(f"{path}: no rows")
    return items


def _with_split(item: Item, split: str) -> Item:
    return Item(item.id, item.question, item.answer, item.rationale, item.options, split, item.meta)


def require_str(row: dict, key: str) -> str:
    if key not in row:
        raise KeyError(f"missing field '{key}'")
    value = row[key]
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"field '{key}' must be a non-empty string")
    return value


class Task(ABC):
    """One benchmark task. Subclasses give files, row parsing, prompt pieces and extraction."""

    name: str
    metric_name: str
    metric_label: str = ""  # how tables name the metric (e.g. "EM"); default: metric_name
    spec: SplitSpec
    instruction: str
    lang: str = "en"  # language of gold outputs, for BERTScore
    stop: tuple[str, ...] = ("[Question]",)
    description: str = ""  # one line for `bench list`
    #: classification tasks: each class's answer (its label word in demonstrations), in a fixed order; () otherwise
    labels: tuple[str, ...] = ()
    max_new_tokens: int | None = None  # a cap on generated tokens for this task (a label needs a few)
    # how items are answered and rewarded (configure): set per run, part of the run's identity
    scoring: str = "generate"
    calibration: str = "none"
    reward: str = "bertscore"

    def __init__(self, bertscore=None):
        self.bertscore = bertscore

    def configure(self, scoring: str = "auto", calibration: str = "none", reward: str = "auto") -> "Task":
        """Set how items are answered (generate-and-parse, or rank the labels by log-likelihood), the
        calibration of ranked labels, and the selection reward; a setting the task cannot take is a ConfigError."""
        if scoring not in SCORINGS or calibration not in CALIBRATIONS or reward not in REWARDS:
            raise ConfigError(f"scoring must be one of {', '.join(SCORINGS)}, calibration one of "
                              f"{', '.join(CALIBRATIONS)}, reward one of {', '.join(REWARDS)}")
        mode = ("rank" if self.labels else "generate") if scoring == "auto" else scoring
        if mode == "rank" and not self.labels:
            raise ConfigError(f"--scoring rank ranks label words, and task '{self.name}' has no labels")
        if calibration != "none" and mode != "rank":
            raise ConfigError(f"--calibration {calibration} calibrates ranked labels: task '{self.name}' is "
                              "scored by generation (use --scoring rank)")
        if reward == "auto":  # correctness is what accuracy averages: the pilot found the label's probability weaker
            reward = "metric" if self.labels else "bertscore"
        if reward == "label-prob" and mode != "rank":
            raise ConfigError(f"--reward label-prob needs ranked labels: task '{self.name}' is scored by generation")
        self.scoring, self.calibration, self.reward = mode, calibration, reward
        return self

    def settings(self) -> dict:
        """How this task was answered and rewarded (results and the run's identity)."""
        return {"scoring": self.scoring, "calibration": self.calibration, "reward": self.reward}

    # ---- data -------------------------------------------------------------------------------
    @abstractmethod
    def parse_row(self, row: dict, row_id: str) -> Item: ...

    def data_folder(self, data_dir: Path | None, source: str = "local") -> Path:
        """The folder holding this task's files: DATA_DIR/<spec.folder>, or the pinned files fetched into a cache
        folder (source "hub", bench/data.py), so hub runs see exactly the bundled splits."""
        if source == "hub":
            from bench.data import MANIFEST, hub_data_dir

            if self.name not in MANIFEST:
                raise DataError(f"task '{self.name}' has no pinned sources for --data-source hub; use --data-dir")
            data_dir = hub_data_dir([self.name])
        if data_dir is None:
            raise DataError("no data folder: pass --data-dir or set BENCH_DATA_DIR")
        folder = Path(data_dir) / self.spec.folder
        if not folder.is_dir():
            raise DataError(f"data folder for task '{self.name}' not found: {folder}{data_dir_hint(Path(data_dir), self.spec.folder)}")
        return folder

    def read_splits(self, folder: Path) -> tuple[list[Item], list[Item] | None, list[Item]]:
        """(pool, validation or None to carve it from the pool, test): every row of the task's files."""
        validation = None
        if self.spec.validation is not None:
            validation = read_rows(folder / self.spec.validation, self.parse_row, "validation")
        return (read_rows(folder / self.spec.pool, self.parse_row, "pool"), validation,
                read_rows(folder / self.spec.test, self.parse_row, "test"))

    def load_splits(self, data_dir: Path | None, *, n_test: int | None, n_val: int, pool_size: int | None,
                    seed: int, source: str = "local") -> Splits:
        """Load, de-duplicate against test, and subsample the three splits reproducibly."""
        pool_all, val_all, test_all = self.read_splits(self.data_folder(data_dir, source))
        return self.subsample(pool_all, val_all, test_all, n_test=n_test, n_val=n_val, pool_size=pool_size, seed=seed)

    def subsample(self, pool_all: list[Item], val_all: list[Item] | None, test_all: list[Item], *,
                  n_test: int | None, n_val: int, pool_size: int | None, seed: int) -> Splits:
        """The run's splits from every row: seeded subsamples, validation carved from the pool when the task has
        none, and no test or validation question left in the pool."""
        if val_all is None:
            pool_all, val_all = self.carve_validation(pool_all, seed=0)
        for option, n, have in (("--n-test", n_test, test_all), ("--n-val", n_val, val_all)):
            if n is not None and n > len(have):  # caught with the data, before any model loads
                raise ConfigError(f"{option} {n} is more than task '{self.name}' has ({len(have)} "
                                  f"{'test' if option == '--n-test' else 'validation'} items)"
                                  + ("; use --n-test all" if option == "--n-test" else ""))
        rng = random.Random(seed)
        test = _subsample(test_all, n_test, rng)
        val = _subsample(val_all, n_val, rng)
        # A test (or validation) question never appears as a demonstration, even if a file repeats it.
        held_out = {normalise_text(it.question) for it in test_all} | {normalise_text(it.question) for it in val}
        pool = [it for it in pool_all if normalise_text(it.question) not in held_out]
        pool = _subsample(pool, pool_size, rng)
        return Splits(pool=pool, validation=val, test=test)

    @staticmethod
    def carve_validation(items: list[Item], seed: int, share: float = 0.3) -> tuple[list[Item], list[Item]]:
        """CASE's 70/30 split of the training file: the 30 % part is where validation items come from."""
        order = list(range(len(items)))
        random.Random(seed).shuffle(order)
        cut = int(len(items) * (1 - share))
        pool = [items[i] for i in sorted(order[:cut])]
        val = [_with_split(items[i], "validation") for i in sorted(order[cut:])]
        return pool, val

    # ---- prompts ----------------------------------------------------------------------------
    @abstractmethod
    def format_demo(self, item: Item) -> str: ...

    @abstractmethod
    def format_query(self, item: Item) -> str: ...

    def prefix(self, demos: Sequence[Item]) -> str:
        """Instruction plus demonstrations: the part shared by every item of one arm pull."""
        blocks = ([self.instruction] if self.instruction else []) + [self.format_demo(d) for d in demos]
        return "\n\n".join(blocks) + "\n\n" if blocks else ""

    def render(self, demos: Sequence[Item], item: Item) -> str:
        return self.prefix(demos) + self.format_query(item)

    # ---- judging ----------------------------------------------------------------------------
    def truncate(self, output: str) -> str:
        """The answer part of a continuation: what follows a reasoning model's think block, then `cut`."""
        return self.cut(after_reasoning(output))

    def cut(self, output: str) -> str:
        """Cut at the first stop string (a base model goes on writing exemplars)."""
        cut = len(output)
        for stop in self.stop:
            pos = output.find(stop)
            if pos != -1:
                cut = min(cut, pos)
        return output[:cut].strip()

    @abstractmethod
    def extract(self, output: str) -> str: ...

    @abstractmethod
    def score(self, predictions: Sequence[str], items: Sequence[Item], outputs: Sequence[str]) -> list[float]:
        """Final metric per item (exact match or BERTScore F1)."""

    def reward_reference(self, item: Item) -> str:
        """Text the selection reward compares the LLM output with (gold rationale + answer)."""
        return item.gold_output

    def extra_metrics(self, outputs: Sequence[str], items: Sequence[Item]) -> dict[str, list[float]]:
        return {}

    def option_ranking(self) -> "Task | None":
        """A multiple-choice task's way to rank its options by log-likelihood (its prompts and `option_words`);
        None for a task without options."""
        return None


def data_dir_hint(data_dir: Path, task_folder: str) -> str:
    """'; did you mean ...' where the task's folder sits one level below or above the data folder given."""
    for guess in [data_dir / "data", *sorted(p for p in data_dir.glob("*") if p.is_dir())] if data_dir.is_dir() else []:
        if (guess / task_folder).is_dir():
            return f" (did you mean --data-dir {guess}?)"
    if data_dir.name == task_folder or (data_dir.parent / task_folder).is_dir():
        return f" (did you mean --data-dir {data_dir.parent}? it holds one folder per task)"
    return ""


def _subsample(items: list[Item], n: int | None, rng: random.Random) -> list[Item]:
    if n is None or n >= len(items):
        return list(items)
    if n <= 0:
        raise ConfigError(f"subsample size must be positive, got {n}")
    keep = sorted(rng.sample(range(len(items)), n))
    return [items[i] for i in keep]


NUMBER = re.compile(r"-?\$?\s?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def iter_numbers(text: str) -> Iterable[str]:
    return (m.group(0) for m in NUMBER.finditer(text.replace("\u2212", "-")))
