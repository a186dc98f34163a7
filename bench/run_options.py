"""A run's options as one typed object: `RunOptions`. The command line (its parser is generated from these fields),
a `--config` file and `bench.evaluate(**options)` all build it and check it through the same code
(`RunOptions.from_mapping`, `RunOptions.from_args`, `RunOptions.validate`), and `OUT/run_config.yaml` is its
`to_mapping()`, which `--config` reads back to the same object. Every error is one line (ConfigError)."""
from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from bench.errors import ConfigError
from bench.threads import parse_threads
from bench.tasks.base import CALIBRATIONS, REWARDS, SCORINGS

ALL_TASKS = "gsm8k,aquarat,wmt19"
BACKENDS = ("embedded", "hf", "openai", "ollama", "llamacpp")


# ---- value parsers: a string (a flag's text, a YAML scalar) -> the typed value ---------------------------------
def csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def positive(value: str) -> int:
    n = int(value)
    if n <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return n


def rows_or_auto(value: str) -> int | str:
    """A positive row count, or auto (rows from the free accelerator memory)."""
    return "auto" if value == "auto" else positive(value)


def k_list(value: str) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8] (positive, distinct, ascending)."""
    try:
        values = sorted({positive(v) for v in csv(value)})
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants positive integers separated by commas, got {value!r}") from None
    if not values:
        raise argparse.ArgumentTypeError(f"wants at least one k, got {value!r}")
    return values


def count_or_all(value: str) -> int | None:
    """A positive count, or 'all' (None: every item)."""
    return None if value == "all" else positive(value)


def param(value: str) -> tuple[str, str, object]:
    """'mmr.lam=0.7' -> ('mmr', 'lam', 0.7)."""
    if "=" not in value or "." not in value.split("=", 1)[0]:
        raise argparse.ArgumentTypeError(f"--param wants METHOD.NAME=VALUE, got {value!r}")
    lhs, raw = value.split("=", 1)
    method, name = lhs.split(".", 1)
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError:
        parsed = raw
    return method, name, parsed


def method_params_of(params, where: str) -> dict[str, dict]:
    """Selector parameters as {METHOD (or '*'): {NAME: VALUE}}, from that mapping or from METHOD.NAME=VALUE strings."""
    if isinstance(params, dict):
        if not all(isinstance(v, dict) for v in params.values()):
            raise ConfigError(f"{where}: 'params' must map a method name (or '*') to {{name: value}}")
        return {str(method): dict(values) for method, values in params.items()}
    out: dict[str, dict] = {}
    for pair in params or []:
        try:
            method, name, value = param(str(pair))
        except argparse.ArgumentTypeError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        out.setdefault(method, {})[name] = value
    return out


def method_budgets(values: list[str]) -> dict[str, int]:
    """['lucb-static=1000']: each selector's own cap instead of --llm-budget."""
    budgets = {}
    for value in [values] if isinstance(values, str) else values:  # a config file may give one string
        method, _, count = str(value).partition("=")
        try:
            budgets[method.strip()] = int(count)
            if not method.strip() or budgets[method.strip()] <= 0:
                raise ValueError
        except ValueError:
            raise ConfigError(f"--method-budget wants METHOD=POSITIVE_COUNT, got {value!r}") from None
    return budgets


def run_folders(paths: list[Path]) -> list[Path]:
    """--replay-from: each a run folder (its fits.jsonl and records.jsonl), checked before any model loads."""
    paths = [Path(path) for path in paths]  # a config file gives strings
    for path in paths:
        if not (path / "fits.jsonl").is_file() or not (path / "records.jsonl").is_file():
            raise ConfigError(f"--replay-from {path}: not a run folder (no fits.jsonl and records.jsonl)")
    return list(paths)


def option(default: Any = None, help: str = "", *, parse: Callable | None = None, choices=None, flag: bool = False,
           many: str | None = None, metavar: str | None = None):
    """A field of RunOptions and its command-line option: `parse` converts one string, `many` is 'append' (a
    repeatable flag) or '+' (one flag, several values); a list-valued field's default is copied per instance."""
    meta = {"help": help, "parse": parse, "choices": choices, "flag": flag, "many": many, "metavar": metavar}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class RunOptions:
    """Every option of `python -m bench run` (the same names, in snake_case), typed, with its default."""

    methods: list[str] | None = option(
        None, "comma-separated method names, or 'all' (see `python -m bench list`); without it, a run prints the "
              "plan of the README's demo methods and runs nothing", parse=csv)
    only: list[str] | None = option(
        None, "run just these of --methods now, in this order (expanded names such as pirank@dearicl-data); the "
              "run's method list, budgets and identity stay those of --methods, so a later --resume runs the rest",
        parse=csv, metavar="CELLS")
    tasks: list[str] = option(
        csv(ALL_TASKS), "comma-separated tasks (`python -m bench list`: the paper's gsm8k, aquarat, wmt19; sst2, "
                        "trec, agnews, rules; those of --task-file)", parse=csv)
    task_file: list[Path] = option(
        [], "a task defined in a YAML spec (bench/tasks/spec.py); repeatable; name it in --tasks", parse=Path,
        many="append", metavar="FILE.yaml")
    scoring: str = option(
        "auto", "generate: generate and parse the answer; rank: the label word with the highest log-likelihood "
                "(classification); auto: rank where a task has labels", choices=SCORINGS)
    calibration: str = option(
        "none", "ranked labels: contextual = divide by the probabilities of content-free inputs (Zhao et al. 2021)",
        choices=CALIBRATIONS)
    reward: str = option(
        "auto", "selection reward per item: metric (the task's score), label-prob (the gold label's probability, "
                "ranked labels), bertscore (against the gold output); auto: metric for classification, bertscore "
                "for the others", choices=REWARDS)
    llm: str = option("gemma3-270m", "LLM answering the test items: alias or model name")
    selection_llm: str | None = option(
        None, "LLM behind the reward oracle during selection (default: --llm); the transfer setting")
    selection_backend: str | None = option(None, "override the selection LLM alias's backend", choices=BACKENDS)
    selection_temperature: float | None = option(None, "its temperature (default: --temperature)", parse=float)
    selection_max_new_tokens: int | None = option(None, "its max new tokens (default: --max-new-tokens)",
                                                  parse=positive)
    selections: Path | None = option(
        None, "saved-selection store; give sibling runs the same DIR to replay their selections (default: "
              "OUT/selections)", parse=Path)
    no_selection_reuse: bool = option(False, "always fit, never replay saved selections", flag=True)
    replay_from: list[Path] = option(
        [], "published run folders: replay a selection their records hold (same selection LLM, data, seed, "
            "parameters and selector code) instead of fitting it", parse=Path, many="+", metavar="RUN")
    backend: str | None = option(None, "override the alias's backend", choices=BACKENDS)
    api_base: str | None = option(None, "OpenAI-compatible server URL, e.g. http://localhost:8000/v1")
    openai_api: str | None = option(None, "which OpenAI endpoint to call (sglang: its completions for generations, "
                                    "its native /generate from the continuation on for log-likelihoods, so the "
                                    "radix cache serves the prefix)", choices=("completions", "chat", "sglang"))
    chat_template: str = option(
        "auto", "put each prompt in the model's chat template as the user turn (auto: when it has one)",
        choices=("auto", "on", "off"))
    fewshot_as_multiturn: bool = option(
        False, "demonstrations as alternating user/assistant turns of the chat template (lm-evaluation-harness's "
               "--fewshot_as_multiturn); shared-prefix pulls are kept", flag=True)
    llamacpp_weights: str = option(
        "q8_0", "llamacpp backend: run the GGUF re-encoded as Q8_0 (faster batched kernels on AVX2), or as is",
        choices=("q8_0", "native"))
    llamacpp_ctx: int = option(
        32768, "llamacpp backend: key/value cells shared by a pull's rows (--prefix-batch-size in parallel)",
        parse=positive)
    gguf_file: str | None = option(None, "GGUF file name inside the --llm folder (hf backend)")
    threads: str = option(
        "auto", "CPU threads of torch (model, encoder, training): auto = OMP_NUM_THREADS if set, else every core, "
                "with OpenMP's passive wait so that a run beside another busy process keeps its pace; N pins N "
                "(recorded in results.json)",
        parse=parse_threads, metavar="auto|N")
    batch_size: int = option(4, "prompts per LLM batch", parse=positive)
    prefix_batch_size: int | str = option(
        32, "items of one arm pull decoded together after their shared prefix (hf/embedded); auto: as many as "
            "the free GPU memory holds (on a CPU, as --kv-cache-gib holds)", parse=rows_or_auto, metavar="N|auto")
    kv_cache_gib: float = option(4.0, "memory cap on those batches' key/value caches", parse=float)
    concurrency: int = option(4, "parallel requests to an OpenAI server", parse=positive)
    timeout: float = option(120.0, "seconds per server request", parse=float)
    retries: int = option(3, "retries per server request (the openai SDK: exponential backoff, honours "
                             "Retry-After)", parse=int)
    data_dir: Path | None = option(
        None, "folder laid out like ../shared/data (default: BENCH_DATA_DIR, else ../shared/data beside the "
              "project)", parse=Path)
    data_source: str = option(
        "local", "hub: the bundled files downloaded once from their pinned sources into a cache (online)",
        choices=("local", "hub"))
    n_test: int | None = option(20, "test items per task (seeded subsample), or 'all'", parse=count_or_all)
    n_val: int = option(20, "validation items per task", parse=positive)
    pool_size: int | None = option(None, "subsample the demonstration pool", parse=positive)
    seed: int = option(
        0, "seeds the subsamples, the selectors' randomness and sampling (per call, from its cache key)", parse=int)
    split_seed: int | None = option(
        None, "seeds the data subsamples alone (pool, validation, test items; default: --seed): seeds that vary "
              "the selection over the same items (a reward table's: 0)", parse=int)
    k: int = option(5, "demonstrations per prompt", parse=positive)
    k_sweep: list[int] = option(
        [], "run every selector at each of these k (e.g. 1,2,4,8,16,32): one run folder OUT/k=N each, sharing one "
            "LLM cache (OUT/cache.sqlite), resumable with --resume; then OUT/k-sweep.md and accuracy_vs_k.png. The "
            "longest prompts are checked against the model's context before any model loads", parse=k_list,
        metavar="K,K,...")
    out: Path | None = option(
        None, "run folder (default: runs/<llm>-seed<seed>-<date>-<time>, a new one each time)", parse=Path)
    resume: bool = option(False, "continue the run in --out", flag=True)
    llm_budget: int | None = option(None, "cap on selection-phase LLM calls per selector and task", parse=positive)
    method_budget: list[str] = option(
        [], "this selector's own cap instead of --llm-budget, e.g. lucb-static=1000 (repeatable)", parse=str,
        many="append", metavar="METHOD=N")
    max_new_tokens: int = option(
        1000, "generation cap per call (the paper's 1000; a classification task caps its labels at 8)",
        parse=positive)
    temperature: float = option(0.25, "0 = greedy", parse=float)
    bertscore_model: str = option("auto", "auto | local | hub id | path")
    bertscore_layers: int | None = option(None, "BERTScore layer (num_layers)", parse=int)
    bertscore_rescale: bool = option(
        False, "bert-score's baseline rescaling, (F - b) / (1 - b) clipped at 0 (the local MiniLM's b: "
               "bench/bertscore_baselines/)", flag=True)
    encoder: str = option("auto", "sentence encoder: auto (local MiniLM) | hub id | path")
    embedding_cache: str = option(
        "auto", "embeddings kept across runs: auto (BENCH_CACHE_DIR/embeddings.sqlite) | off | a path")
    cache: Path | None = option(None, "SQLite LLM cache (default OUT/cache.sqlite)", parse=Path)
    cache_from: list[Path] = option(
        [], "a read-only LLM cache asked for answers --cache lacks (another job's, merged by `bench cache merge`); "
            "never written, safe to share over a network filesystem (repeatable)", parse=Path, many="append",
        metavar="FILE")
    prices: Path | None = option(
        None, "YAML price table (model -> {input, output} USD per 1M tokens) for the report's costs", parse=Path)
    ltr_data: list[str] = option(
        ["own"], "LTR selectors' training data: own (sampled arms + negatives), dearicl (the DEARICL run's log, "
                 "the paper's Table 3) or own,dearicl for both", parse=csv)
    plugin: list[str] = option([], "module that registers selectors (repeatable)", parse=str, many="append")
    log_prompts: bool = option(False, "store each item's full prompt in records.jsonl", flag=True)
    no_html: bool = option(False, "write no report.html (the item-by-item viewer, `python -m bench view`) beside "
                                  "report.md", flag=True)
    no_progress: bool = option(False, "no progress bars", flag=True)
    # selector parameters, {METHOD or '*': {NAME: VALUE}}: a file's `params:`, evaluate's `param=`, --param flags
    params: dict[str, dict] = field(default_factory=dict, metadata={"cli": False})

    # ---- the three ways in --------------------------------------------------------------------------------------
    @classmethod
    def from_mapping(cls, data: Mapping, where: str, base: RunOptions | None = None) -> RunOptions:
        """Options given as a mapping (a --config file, bench.evaluate's keyword arguments; keys `n_test` or
        `n-test`; `params` or `param`) over `base` (default: the defaults), converted and checked."""
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        params = dict(base.params) if base is not None else {}
        for key, value in data.items():
            name = str(key).replace("-", "_")
            if name in ("params", "param"):
                for method, given in method_params_of(value, where).items():
                    params[method] = {**params.get(method, {}), **given}
                continue
            spec = known.get(name)
            if spec is None or name == "params":
                options = sorted(n for n in known if n != "params")
                raise ConfigError(f"{where}: unknown option '{key}'; options: {', '.join(options)}")
            values[name] = convert(spec, value, key, where)
        return replace(base or cls(), **values, params=params).validate(where)

    @classmethod
    def from_args(cls, args: argparse.Namespace, params: dict[str, dict] | None = None) -> RunOptions:
        """The parsed command line (its --param flags over `params`, a config file's)."""
        merged = {m: dict(v) for m, v in (params or {}).items()}
        for method, name, value in getattr(args, "param", []) or []:
            merged.setdefault(method, {})[name] = value
        given = {f.name: getattr(args, f.name) for f in fields(cls) if f.metadata.get("cli", True)}
        return cls(**given, params=merged).validate("the command line")

    def validate(self, where: str) -> RunOptions:
        """Checks across fields, or of values a parser cannot see; one line each."""
        for name in ("temperature", "selection_temperature"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 0, got {value}")
        method_budgets(self.method_budget)
        run_folders(self.replay_from)
        for path in self.cache_from:
            if not Path(path).is_file():
                raise ConfigError(f"--cache-from {path}: no such cache file")
        return self

    def to_mapping(self) -> dict:
        """A YAML-ready mapping of every option (`run_config.yaml`); `from_mapping` reads it back to this object."""
        def plain(value):  # paths as strings, for YAML
            return [plain(v) for v in value] if isinstance(value, list) else str(value) if isinstance(value, Path) \
                else value

        out = {f.name: plain(getattr(self, f.name)) for f in fields(self) if f.name not in ("resume", "only", "params")}
        return {**out, "params": {m: dict(v) for m, v in self.params.items()}}


def convert(spec, value, key, where: str):
    """One mapping value -> the field's type, by the same parser and choices as its flag."""
    meta = spec.metadata
    parse, many = meta.get("parse"), meta.get("many")
    try:
        if meta.get("flag"):
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: '{key}' takes true or false, got {value!r}")
        elif many:  # a repeatable option: one value or a list of them
            items = value if isinstance(value, (list, tuple)) else [] if value is None else [value]
            value = [parse(str(v)) if parse else v for v in items]
        elif isinstance(value, (list, tuple)):
            if parse not in (csv, k_list):
                raise ConfigError(f"{where}: '{key}' takes one value, got a list")
            value = parse(",".join(map(str, value))) if value or parse is csv else []  # k_sweep: [] is no sweep
        elif value is not None and parse is not None:
            value = parse(str(value))
    except (argparse.ArgumentTypeError, ValueError) as exc:
        raise ConfigError(f"{where}: bad value for '{key}': {exc}") from None
    choices = meta.get("choices")
    if choices is not None and value is not None and value not in choices:
        raise ConfigError(f"{where}: '{key}' must be one of {', '.join(map(str, choices))}")
    return value


def add_run_options(parser: argparse.ArgumentParser, defaults: RunOptions | None = None) -> None:
    """The run command's options, one per field of RunOptions, with `defaults`' values (a config file's) shown."""
    defaults = defaults or RunOptions()
    for spec in fields(RunOptions):
        meta = spec.metadata
        if not meta.get("cli", True):
            continue
        flag = "--" + spec.name.replace("_", "-")
        default = getattr(defaults, spec.name)
        if meta["flag"]:
            parser.add_argument(flag, action="store_true", default=default, help=meta["help"])
            continue
        kwargs = {"default": default, "help": meta["help"]}
        if meta["parse"] is not None:
            kwargs["type"] = meta["parse"]
        if meta["choices"] is not None:
            kwargs["choices"] = meta["choices"]
        if meta["metavar"] is not None:
            kwargs["metavar"] = meta["metavar"]
        if meta["many"] == "append":
            kwargs["action"] = "append"
            kwargs["default"] = list(default)  # argparse appends to the default list itself
        elif meta["many"] == "+":
            kwargs["nargs"] = "+"
        parser.add_argument(flag, **kwargs)
