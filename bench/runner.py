"""The one evaluation path: task -> selector.fit -> selector.select -> LLM -> metric -> record.

Resume: records are appended per batch and LLM answers cached per batch, so a killed run restarted
with the same --out skips finished items and answers every earlier call from the cache.
"""
from __future__ import annotations

import copy
import json
import shutil
import time
from datetime import datetime, timezone
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any


from bench.answering import answer
from bench.cells import CELL_KEYS, describe_diff, methods_with_rows, set_aside
from bench.distributed import Dist
from bench.embedding_cache import resolve as resolve_embedding_cache
from bench.encoder import Encoder
from bench.errors import BenchError, BudgetExhausted, ConfigError, FitFailed, unknown_name
from bench.items import Item
from bench.log import LOG, Progress, run_log
from bench.provenance import environment
from bench.llm import CallCache, CallLog, CallScope, GenerationParams, LLMClient, LLMSpec, make_backend
from bench.llm.cache import text_hash
from bench.llm.registry import check_chat_template, provides_loglik, resolve
from bench.metrics import BertScore, BertScoreConfig
from bench.oracle import RewardOracle
from bench.records import RECORD_CHARS, FitSummary, ItemRecord, append_jsonl, read_fits, read_records
from bench.selections import ReplaySelector, SelectionStore, published_selection, selection_key
from reports.costs import PriceTable
from bench.tasks import Task, load_task_file, make_task, task_fingerprint
from bench.tasks.base import ANSWERING_DEFAULTS
from bench.threads import apply as apply_threads, choose as choose_threads
from bench.reasoning import THINK_CLOSE, THINK_OPEN
from methods.ltr_base import DEARICL_DATA, LTR_DATA
from methods.base import FitContext, accepted_params, available, code_version, create, load_plugin

RECORDS = "records.jsonl"
CALLS = "calls.jsonl"
FITS = "fits.jsonl"
RESULTS = "results.json"
CONFIG = "config.json"
RUN_CONFIG = "run_config.yaml"  # the resolved options; `--config` takes it back


@dataclass
class RunConfig:
    methods: list[str]
    tasks: list[str]
    llm: LLMSpec
    out: Path
    data_dir: Path | None = None
    data_source: str = "local"
    n_test: int | None = 20
    n_val: int = 20
    pool_size: int | None = None
    seed: int = 0
    split_seed: int | None = None  # seeds the data subsamples alone (None: `seed`); selections still use `seed`
    k: int = 5
    resume: bool = False
    llm_budget: int | None = None
    method_budgets: dict[str, int] = field(default_factory=dict)  # a selector's own cap instead of llm_budget
    only: list[str] | None = None  # the cells of `methods` to run now, in this order (None: all of them)
    generation: GenerationParams = field(default_factory=GenerationParams)
    method_params: dict[str, dict] = field(default_factory=dict)
    bertscore: BertScoreConfig = field(default_factory=BertScoreConfig)
    encoder: str = "auto"
    embedding_cache: str = "auto"  # --embedding-cache: bench/embedding_cache.py
    cache_path: Path | None = None
    cache_from: list[Path] = field(default_factory=list)  # read-only caches asked for what cache_path lacks
    plugins: list[str] = field(default_factory=list)
    progress: bool = True
    threads: str = "auto"  # --threads: bench/threads.py
    ltr_data: tuple[str, ...] = ("own",)  # training data of the LTR selectors: own pulls and/or DEARICL's log
    selection_llm: LLMSpec | None = None  # the LLM behind the reward oracle (None: the same as `llm`)
    selection_generation: GenerationParams | None = None  # its decoding settings (None: `generation`)
    selections: Path | None = None  # saved-selection store (None: OUT/../selections)
    reuse_selections: bool = True
    replay_from: list[Path] = field(default_factory=list)  # published run folders whose records can be replayed
    prices: Path | None = None  # price table for the report's token costs
    options: dict = field(default_factory=dict)  # the resolved command-line options (written as run_config.yaml)
    command: str = ""  # the command line that started the run (results.json's meta)
    log_prompts: bool = False  # store each item's full prompt in records.jsonl
    html: bool = True  # report.html (reports/viewer.py) beside report.md; --no-html: none
    selectors: dict = field(default_factory=dict)  # name -> Selector instance (bench.evaluate); never replayed
    llm_backend: Any = None  # a backend object answering for `llm` (bench.evaluate), instead of make_backend
    task_files: list[Path] = field(default_factory=list)  # YAML task specs (--task-file), registered before use
    scoring: str = "auto"  # how items are answered: generate, rank (label words), auto (rank where labels exist)
    calibration: str = "none"  # ranked labels: none or contextual (Zhao et al. 2021)
    reward: str = "auto"  # selection reward: metric, label-prob, bertscore, auto (Task.configure)

    @property
    def oracle_llm(self) -> LLMSpec:
        return self.selection_llm or self.llm

    @property
    def oracle_generation(self) -> GenerationParams:
        return self.selection_generation or self.generation

    def budget_for(self, method: str) -> int | None:
        """The cap on this selector's selection calls: its own (--method-budget) or the run's (--llm-budget)."""
        return self.method_budgets.get(method, self.llm_budget)

    def _selection_inputs(self) -> dict:
        """Settings every selection depends on: data, seed, budget, the oracle's LLM and scoring."""
        # answering settings away from their defaults only: runs made before they existed keep their identity
        answering = {name: value for name, value in (("scoring", self.scoring), ("calibration", self.calibration),
                                                     ("reward", self.reward)) if value != ANSWERING_DEFAULTS[name]}
        return {"data_dir": str(self.data_dir), "data_source": self.data_source, "n_test": self.n_test,
                "n_val": self.n_val, "pool_size": self.pool_size, "seed": self.seed, "k": self.k,
                "llm_budget": self.llm_budget, "selection_llm": self.oracle_llm.identity(),
                "selection_generation": asdict(self.oracle_generation), "bertscore": asdict(self.bertscore),
                "encoder": self.encoder, **answering,
                **({"split_seed": self.split_seed} if self.split_seed is not None else {})}  # older runs: none

    def identity(self) -> dict:
        """The run's settings as config.json records them (not the method list: methods can be added). --resume
        must match all but CELL_KEYS, a selector's own parameters and cap: Runner.cell_settings checks those
        per selector."""
        own_caps = {"method_budgets": self.method_budgets} if self.method_budgets else {}  # older runs have none
        return {"tasks": self.tasks, "llm": self.llm.identity(), "generation": asdict(self.generation),
                "method_params": self.method_params, **self._selection_inputs(), **own_caps}

    def selection_identity(self, method: str, task: str, params: dict) -> dict:
        """What one selection depends on: never the LLM that answers the test items. A task from a spec adds
        the spec's hash: an edited spec is another task."""
        spec = task_fingerprint(task)
        return {"method": method, "task": task, "params": params, **self._selection_inputs(),
                "llm_budget": self.budget_for(method), **({"task_spec": spec} if spec else {})}


def _short(value, width: int = 60) -> str:
    """A setting's value for a one-line message."""
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= width else text[:width - 1] + "…"


def expand_methods(methods: list[str], ltr_data: tuple[str, ...] = ("own",), instances: set[str] = frozenset()
                   ) -> list[str]:
    """Method names to run: `all` in the paper's table order; LTR selectors per --ltr-data source.
    `instances` are names of given Selector objects (bench.evaluate), not looked up in the registry."""
    from methods.zoo import PAPER_ORDER

    known = available()
    if methods == ["all"]:
        rank = {name: i for i, name in enumerate(PAPER_ORDER)}
        methods = sorted((n for n, cls in known.items() if cls.in_all), key=lambda n: (rank.get(n, len(rank)), n))
    for name in methods:
        if name not in known and name not in instances:
            raise unknown_name("method", name, sorted(known))
    unknown = [d for d in ltr_data if d not in LTR_DATA]
    if unknown or not ltr_data:
        raise ConfigError(f"--ltr-data takes {' and/or '.join(LTR_DATA)}, got '{','.join(ltr_data)}'")
    out: list[str] = []
    for name in methods:
        variant = name + DEARICL_DATA
        if variant in known and not name.endswith(DEARICL_DATA):  # an LTR selector: one run per data source
            out += ([name] if "own" in ltr_data else []) + ([variant] if "dearicl" in ltr_data else [])
        else:
            out.append(name)
    return list(dict.fromkeys(out))


class Runner:
    def __init__(self, config: RunConfig, dist: Dist | None = None, check_out: bool = True):
        self.cfg = config
        self.dist = dist or Dist()
        for module in config.plugins:
            load_plugin(module)
        self.methods = expand_methods(config.methods, config.ltr_data, instances=set(config.selectors))
        stray = sorted(set(config.method_budgets) - set(self.methods))
        if stray:
            raise ConfigError(f"--method-budget names {', '.join(stray)}, which this run does not run "
                              f"(methods: {', '.join(self.methods)})")
        # --only: a run's methods (and so its identity and budgets) stay whole, but a session runs some cells now
        self.now = self.methods if config.only is None else list(dict.fromkeys(config.only))
        outside = [name for name in self.now if name not in self.methods]
        if outside:
            raise ConfigError(f"--only names {', '.join(outside)}, which --methods does not include "
                              f"(methods: {', '.join(self.methods)})")
        for path in config.task_files:
            load_task_file(path)
        # names and answering settings are checked before anything heavy
        self.tasks = [make_task(t).configure(config.scoring, config.calibration, config.reward) for t in config.tasks]
        if config.llm_backend is None:
            resolve(config.llm)  # validates the LLM names and backends
        named = [] if config.llm_backend is not None else [config.llm]  # a backend object is taken as it is
        if config.llm_backend is None or config.selection_llm is not None:
            resolve(config.oracle_llm)
            named.append(config.oracle_llm)
        for spec in named:
            check_chat_template(spec)
        self.prices = PriceTable.load(config.prices) if config.prices else None  # a bad file fails before any work
        known = available()
        for name in config.method_params:
            if name != "*" and name not in known:
                raise unknown_name("method", name, sorted(known))
        scores, why_not = provides_loglik(config.oracle_llm) if config.llm_backend is None else (True, "")
        ranked = [t.name for t in self.tasks if t.scoring == "rank"]
        for spec in named if ranked else []:
            able, why = provides_loglik(spec)
            if not able:
                raise ConfigError(f"--scoring rank ({', '.join(ranked)}) scores label words by log-likelihood, which "
                                  f"'{spec.name}' cannot give here: {why}; use --scoring generate")
        for name in self.methods:
            selector = self._selector(name)  # parameter names and values checked up front
            for task in self.tasks:
                selector.check_task(task)
            if selector.needs_loglik and not scores:
                raise ConfigError(f"{name} needs log-likelihoods, which the selection LLM "
                                  f"'{config.oracle_llm.name}' cannot give here: {why_not}")
        self.out = Path(config.out)
        # an occupied --out fails here, before anything is written (a --dry-run writes nothing and skips it)
        self.cells: dict[str, dict] = {}  # method -> the settings its cells in --out were run with
        self._oracles: dict[tuple[str, str], RewardOracle] = {}  # (method, task) -> its fit's oracle
        self.superseded: dict[str, dict] = {}  # methods whose cells --resume redoes (their settings changed)
        self.changed: dict[str, str] = {}  # method -> how its settings differ from those its cells were run with
        self.run_methods = self._check_out() if check_out else self.methods
        # the data is read now, so that a bad --data-dir or split fails before any model loads
        self.splits = {task.name: task.load_splits(config.data_dir, n_test=config.n_test, n_val=config.n_val,
                                                   pool_size=config.pool_size,
                                                   seed=config.seed if config.split_seed is None else config.split_seed,
                                                   source=config.data_source) for task in self.tasks}
        for name in self.methods:  # what each selector needs of the splits (k <= pool), still before any model
            selector = self._selector(name)
            for task in self.tasks:
                splits = self.splits[task.name]
                selector.check_splits(task, len(splits.pool), len(splits.validation))

    def _selector(self, method: str):
        """A fresh selector: a copy of a given instance, or one made from the registry with its parameters."""
        if method in self.cfg.selectors:
            return copy.deepcopy(self.cfg.selectors[method])
        return create(method, self.params_for(method))

    def params_for(self, method: str, method_params: dict | None = None) -> dict:
        """k, then `*.NAME` settings the selector accepts, then its own `METHOD.NAME` settings."""
        if method in self.cfg.selectors:
            return {"k": self.cfg.selectors[method].k}
        method_params = self.cfg.method_params if method_params is None else method_params
        accepted = set(accepted_params(available()[method]))
        shared = {k: v for k, v in method_params.get("*", {}).items() if k in accepted}
        return {"k": self.cfg.k, **shared, **method_params.get(method, {})}

    def cell_settings(self, method: str) -> dict:
        """What this method's cells depend on beyond the run's identity (config.json's "cells")."""
        return {"params": self.params_for(method), "budget": self.cfg.budget_for(method)}

    def _previous_cells(self, previous: dict) -> dict[str, dict]:
        """The settings each method's cells were run with; a config.json written before "cells" kept them in
        its identity, for every method of the run."""
        if "cells" in previous:
            return previous["cells"]
        old = previous.get("identity", {})
        budgets, cells = old.get("method_budgets", {}), {}
        for method in previous.get("methods", []):
            if method in available() and method not in self.cfg.selectors:
                cells[method] = {"params": self.params_for(method, old.get("method_params", {})),
                                 "budget": budgets.get(method, old.get("llm_budget"))}
        return cells

    # ---- setup --------------------------------------------------------------------------------
    def _check_out(self) -> list[str]:
        """The methods config.json will list; refuses an occupied --out without --resume, or a changed run."""
        cfg_path = self.out / CONFIG
        if not cfg_path.exists():
            return self.methods
        if not self.cfg.resume:
            raise ConfigError(f"{self.out} already holds a run; pass --resume to continue it, or choose another --out "
                              "(a regression check reruns afresh: remove the folder first, as --resume would only "
                              "reprint the old results)")
        previous = json.loads(cfg_path.read_text())
        identity = {k: v for k, v in json.loads(json.dumps(self.cfg.identity())).items() if k not in CELL_KEYS}
        shared = {k: v for k, v in previous.get("identity", {}).items() if k not in CELL_KEYS}
        if shared != identity:  # as it reads back from disk
            diff = [f"{k}: {_short(shared.get(k))} there, {_short(identity.get(k))} now"
                    for k in sorted(set(identity) | set(shared)) if shared.get(k) != identity.get(k)]
            raise ConfigError(f"--resume: settings differ from the run in {self.out} ({'; '.join(diff)}); "
                              f"`--resume --out {self.out}` alone resumes with its own settings")
        self.cells = self._previous_cells(previous)
        ran = methods_with_rows(self.out)
        for method in self.methods:
            before, now = self.cells.get(method), json.loads(json.dumps(self.cell_settings(method)))
            if method not in ran or before is None or before == now:
                continue
            self.changed[method] = describe_diff(before, now)
            if method in self.now:  # redone: the run sets its old rows aside first
                self.superseded[method] = before
        return list(dict.fromkeys(previous.get("methods", []) + self.methods))

    def _write_out_config(self) -> None:
        """Written once the models have loaded: a run that failed to start leaves no config.json behind."""
        if self.dist.is_main:
            identity = json.loads(json.dumps(self.cfg.identity()))
            # the settings of the cells run now; the others keep those they were run with
            self.cells.update({m: self.cell_settings(m) for m in self.now if m not in self.cfg.selectors})
            (self.out / CONFIG).write_text(json.dumps({"identity": identity, "methods": self.run_methods,
                                                       "cells": self.cells, "task_info": self.task_info()}, indent=2))
            if self.cfg.options:
                import yaml

                (self.out / RUN_CONFIG).write_text(yaml.safe_dump(self.cfg.options, sort_keys=False), encoding="utf-8")

    def task_info(self) -> dict[str, dict]:
        """What reports need of each task without its code (a task file may be gone): metric, labels, answering."""
        return {t.name: {"metric": t.metric_name, "metric_label": t.metric_label or t.metric_name, "lang": t.lang,
                         "labels": list(t.labels), **t.settings()} for t in self.tasks}

    def _clients(self) -> tuple[LLMClient, LLMClient]:
        """(inference client, selection client): one client when both LLMs and decodings are the same.
        They share the cache (keys carry the model id and decoding) and the call log."""
        cache = CallCache(self.cfg.cache_path or self.out / "cache.sqlite", read_from=self.cfg.cache_from)
        name = CALLS if self.dist.world == 1 else f"calls.rank{self.dist.rank}.jsonl"
        log = CallLog(self.out / name, rank=self.dist.rank)
        client = LLMClient(self.cfg.llm_backend or make_backend(self.cfg.llm), cache, log, self.cfg.generation,
                           self.cfg.llm.chat_template, self.cfg.llm.fewshot_as_multiturn)
        cfg = self.cfg
        same_model = cfg.oracle_llm.identity() == cfg.llm.identity()
        if same_model and cfg.oracle_generation == cfg.generation:
            return client, client
        backend = client.backend if same_model else make_backend(cfg.oracle_llm)
        return client, LLMClient(backend, cache, log, cfg.oracle_generation, cfg.oracle_llm.chat_template,
                                 cfg.oracle_llm.fewshot_as_multiturn)

    # ---- the run ------------------------------------------------------------------------------
    def run(self) -> dict:
        created = self.dist.is_main and not self.out.exists()
        if self.dist.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
        self.dist.barrier()
        if not self.dist.is_main:
            return self._run()
        try:
            with run_log(self.out):
                return self._run()
        except BaseException:
            if created and not self._answered_any():  # nothing worth keeping: the corrected command can use --out
                shutil.rmtree(self.out, ignore_errors=True)
                LOG.info("removed %s: the run failed before any LLM answer was cached", self.out)
            raise

    def _answered_any(self) -> bool:
        """Whether this run's cache holds an LLM answer (an answer is kept, and --resume can reuse it)."""
        client = getattr(self, "client", None)
        if client is not None and client.cache is not None:
            return len(client.cache) > 0
        path = self.out / "cache.sqlite"
        if not path.exists():
            return False
        import sqlite3

        try:  # the file and its table exist as soon as the cache opens; an answer is a row
            with sqlite3.connect(str(path)) as conn:
                return conn.execute("SELECT 1 FROM calls LIMIT 1").fetchone() is not None
        except sqlite3.Error:
            return True  # unreadable: keep it

    def _supersede(self) -> None:
        """Cells whose settings changed: redone when run now (old rows set aside), else kept and named."""
        for method, how in self.changed.items():
            if method not in self.superseded:
                LOG.warning("--resume: %s's settings differ from those its cells were run with (%s); this run does "
                            "not run it, so its results stay those of the old settings", method, how)
        if self.superseded:
            dest = set_aside(self.out, self.superseded)
            for method in self.superseded:
                self.cells.pop(method)
                LOG.warning("--resume: %s's settings changed since its cells were run (%s): they are run again; "
                            "the old rows are in %s", method, self.changed[method], dest)

    def _run(self) -> dict:
        began = time.perf_counter()
        self.threads = choose_threads(self.cfg.threads)  # before the encoder and the model load
        apply_threads(self.threads)
        if self.dist.is_main:  # before the call log opens calls.jsonl; the other ranks read records after a barrier
            self._supersede()
        started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.bertscore = BertScore(self.cfg.bertscore)
        for task in self.tasks:
            task.bertscore = self.bertscore
        self.encoder = Encoder(self.cfg.encoder, cache=resolve_embedding_cache(self.cfg.embedding_cache))
        if not self.dist.is_main:
            self.dist.barrier()  # rank 0 creates the cache file first
        self.client, self.selection_client = self._clients()
        if self.dist.is_main and self.dist.world > 1:
            self.dist.barrier()
        self.client.backend.warm()
        chat = [c.wrap != ("", "") for c in (self.client, self.selection_client)]  # --chat-template on fails here
        LOG.info("LLM %s loaded in %.1f s%s%s", self.client.backend.describe(), time.perf_counter() - began,
                 "" if self.selection_client is self.client else
                 f"; selection LLM {self.selection_client.backend.describe()}",
                 "; prompts in the chat template" if chat[0] else "")
        self._write_out_config()
        if self.superseded and self.dist.is_main:  # results.json and the report without the cells set aside
            self._write_results(started)
        self.store = SelectionStore(self.cfg.selections or self.out / "selections")
        records_path = self.out / (RECORDS if self.dist.world == 1 else f"records.rank{self.dist.rank}.jsonl")
        # One snapshot after the setup barrier: every rank takes the same skip decisions from it.
        done = {(r.method, r.task, r.item_id) for r in self._all_records()}
        self.fits_at_start = read_fits(self.out / FITS)
        try:
            with Progress(len(self.tasks) * len(self.now), "runs", self.cfg.progress and self.dist.is_main,
                          unit="method x task", leave=True) as overall:
                for task in self.tasks:
                    splits = self.splits[task.name]
                    LOG.info("task %s: %d pool, %d validation, %d test items", task.name, len(splits.pool),
                             len(splits.validation), len(splits.test))
                    for method in self.now:
                        self._run_one(task, splits, method, done, records_path)
                        overall.update()
        finally:
            self.client.log.close()
        self.dist.barrier()
        if not self.dist.is_main:
            return {}
        self._merge_ranks()
        return self._write_results(started)

    def _write_results(self, started: str) -> dict:
        from reports.results import build_results, write_results
        from reports.render import write_report

        meta = {"command": self.cfg.command, "options": self.cfg.options, **environment(),
                "threads": self.threads.as_dict(), "started": started,
                "llm_runtime": self.client.backend.runtime(),
                "embedding_cache": {"path": str(self.encoder.cache_path) if self.encoder.cache_path else None,
                                    "texts_served": self.encoder.from_cache},
                "finished": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        results = build_results(self.out, bertscore=self.bertscore, encoder=self.encoder.name,
                                llm=self.client.backend.describe(),
                                selection_llm=self.selection_client.backend.describe(), meta=meta)
        write_results(self.out, results)
        write_report(self.out, prices=self.prices)
        if self.cfg.html:
            from reports.viewer import write_run_html

            write_run_html(self.out)
        return results

    def _run_one(self, task: Task, splits, method: str, done: set, records_path: Path) -> None:
        test_ids = {it.id for it in splits.test}
        fits = self.fits_at_start
        if (method, task.name) in fits and all((method, task.name, it.id) in done for it in splits.test):
            return
        todo = [it for i, it in enumerate(splits.test)
                if i % self.dist.world == self.dist.rank and (method, task.name, it.id) not in done]
        params = self.params_for(method)
        selector = self._selector(method)
        key = selection_key({**self.cfg.selection_identity(method, task.name, params),
                             "code": code_version(type(selector))})
        # an instance's settings are not in the key: it is always fitted, and its selections are not saved
        reuse = self.cfg.reuse_selections and method not in self.cfg.selectors
        saved, source = (self.store.load(key), self.store.root) if reuse else (None, None)
        if reuse and self.cfg.replay_from and not self._covers(saved, splits.test):
            found = published_selection(self.cfg.replay_from, key, method, task.name, splits.pool)
            saved, source = (found[:2], found[2]) if found else (None, None)
        if self._covers(saved, splits.test):
            # the same selection LLM, data, seed and parameters chose these before: no selection call
            original, demos = saved
            selector = ReplaySelector(selector, demos)
            summary = replace(FitSummary(**original), selection_seconds=0.0, selection_calls=0,
                              reused_from=str(source), selection_key=key)
            LOG.info("%s on %s: replayed %d selections from %s (no selection call)", method, task.name,
                     len(splits.test), source)
            if self.dist.is_main and (method, task.name) not in fits:
                append_jsonl(self.out / FITS, [summary])
        else:
            # Rank 0 fits first and fills the cache; the others then fit on cache hits alone.
            if not self.dist.is_main:
                self.dist.barrier()
            summary = replace(self._fit(task, splits, selector), selection_key=key if reuse else "")
            if self.dist.is_main:
                if (method, task.name) not in fits or fits[(method, task.name)].error:
                    append_jsonl(self.out / FITS, [summary])
                if self.dist.world > 1:
                    self.dist.barrier()
        if summary.error:
            return  # the row reports the failure; the other methods still run
        try:
            picked = self._infer(task, selector, todo, test_ids, records_path)
        except FitFailed as exc:  # a per-query selector that could not select (e.g. out of budget)
            if self.dist.is_main:
                append_jsonl(self.out / FITS, [replace(summary, error=str(exc))])
            return
        late = self._after_inference(summary, selector)  # a per-query selector's budget or warnings at select time
        if late is not None and self.dist.is_main:
            append_jsonl(self.out / FITS, [late])
            summary = late
        if picked and reuse and not isinstance(selector, ReplaySelector):
            meta = {"method": method, "task": task.name, "selection_llm": self.selection_client.backend.describe()}
            self.store.save(key, meta, asdict(summary), picked, rank=self.dist.rank)

    def _after_inference(self, summary: FitSummary, selector) -> FitSummary | None:
        """The fit summary again when a per-query selector (TopK+ConE, MDL) ran out of budget or warned while
        selecting: its row must say so, as a fit's does."""
        oracle = self._oracles.get((summary.method, summary.task))
        late = [w for w in selector.fit_warnings if w not in summary.warnings]
        exhausted = oracle is not None and oracle.budget_exhausted and not summary.budget_exhausted
        if not late and not exhausted:
            return None
        warnings = list(summary.warnings) + late
        if exhausted:
            warnings.insert(0, f"stopped at its budget of {summary.budget} selection calls while selecting per "
                               "query, and used what it had")
        return replace(summary, warnings=warnings, budget_exhausted=summary.budget_exhausted or exhausted)

    @staticmethod
    def _covers(saved, test) -> bool:
        """A saved selection answers this run only if it has demonstrations for every test item."""
        return saved is not None and all(it.id in saved[1] for it in test)

    def _fit(self, task: Task, splits, selector) -> FitSummary:
        budget = self.cfg.budget_for(selector.name)
        cap = (f"--method-budget {selector.name}={budget}" if selector.name in self.cfg.method_budgets
               else f"--llm-budget {budget}")
        oracle = RewardOracle(self.selection_client, task, selector.name, self.bertscore, budget=budget)
        self._oracles[(selector.name, task.name)] = oracle  # read again after inference (_after_inference)
        ctx = FitContext(task=task, pool=splits.pool, validation=splits.validation, encoder=self.encoder,
                         oracle=oracle, seed=self.cfg.seed, k=selector.k, budget=budget)
        LOG.info("fit %s on %s%s", selector.name, task.name,
                 f" (budget {budget} selection calls)" if budget else "")
        bound = selector.capped_call_bound(len(splits.validation), len(splits.test), budget)
        bar = Progress(bound or None, f"fit {selector.name}/{task.name}", self.cfg.progress and self.dist.is_main,
                       unit="selection calls")
        oracle.on_calls = bar.set
        began, embedded = time.perf_counter(), self.encoder.seconds
        self.encoder.account()  # the fit's own embedding time, whatever an earlier method left in the memo
        error = ""
        try:
            selector.fit(ctx)
        except BudgetExhausted:
            raise ConfigError(f"{selector.name} on {task.name} hit {cap} and "
                              "could not recover (the selector did not handle its budget)") from None
        except FitFailed as exc:
            error = str(exc)
        finally:
            bar.close()
        # as if it ran alone: the embeddings another method computed first are charged at what they took (the first
        # load of the encoder model stays with the method that loaded it)
        reused = self.encoder.reused_seconds
        seconds = time.perf_counter() - began + reused
        warnings = selector.fit_warnings
        if oracle.budget_exhausted:
            warnings.insert(0, f"stopped at {cap} after {oracle.calls} selection "
                               "calls and used what it had")
        stop = next((row["stopped_by"] for row in reversed(selector.trace() or []) if isinstance(row, dict)
                     and "stopped_by" in row), None)
        LOG.info("fit %s on %s: %d selection calls%s%s in %.1f s%s%s", selector.name, task.name, oracle.calls,
                 f" of {budget}" if budget else "", f", stopped by {stop}" if stop else "", seconds,
                 f" ({reused:.1f} s of it embeddings made before, charged at what they took; {seconds - reused:.1f} s "
                 "now)" if reused >= 1 else "",
                 f"; FAILED: {error}" if error else (f"; {len(warnings)} warning(s)" if warnings else ""))
        return FitSummary(method=selector.name, task=task.name, level=selector.level,
                          group=selector.table_group or selector.level,
                          selection_seconds=round(seconds, 3), selection_calls=oracle.calls,
                          budget=budget, budget_exhausted=oracle.budget_exhausted,
                          trace=selector.trace(), warnings=warnings, error=error,
                          llm_seconds=round(oracle.llm_seconds, 3),
                          embedding_seconds=round(self.encoder.seconds - embedded + reused, 3),
                          embedding_reused_seconds=round(reused, 3), scale=selector.scale())

    def _infer(self, task: Task, selector, items: list[Item], test_ids: set[str],
               records_path: Path) -> dict[str, list[Item]]:
        """Answer the items; returns the demonstrations chosen for each (saved for reuse)."""
        picked: dict[str, list[Item]] = {}
        if not items:
            return picked
        scope = CallScope(method=selector.name, task=task.name, phase="inference")
        backend = self.client.backend
        # a task-level selector gives every item the same prefix: decode more of them after it at once
        step = max(1, (backend.prefix_batch_size or backend.batch_size) if selector.level == "task"
                   else backend.batch_size)
        LOG.info("inference %s on %s: %d items", selector.name, task.name, len(items))
        # counted in LLM calls as they are answered, batch by batch (a calibrated task adds its content-free calls)
        with Progress(len(items), f"inference {selector.name}/{task.name}", self.cfg.progress and self.dist.is_main,
                      unit="calls") as bar:
            for start in range(0, len(items), step):
                chunk = items[start:start + step]
                demos, select_s, infos = [], [], []
                for item in chunk:
                    began = time.perf_counter()
                    chosen = selector.select(item)
                    select_s.append(time.perf_counter() - began)
                    infos.append(selector.select_info())
                    leaked = [d.id for d in chosen if d.id in test_ids]
                    if leaked:
                        raise BenchError(f"{selector.name} chose test items as demonstrations: "
                                         f"{', '.join(leaked)}")
                    demos.append(chosen)
                prompts = [self.client.render(task, d, it) for d, it in zip(demos, chunk)]
                if task.scoring == "rank" and task.calibration == "contextual":
                    bar.grow(len(task.content_free_items()) * len({tuple(d.id for d in ds) for ds in demos}))
                self.client.progress = bar.update  # only while answering: not a per-query selector's pulls
                try:
                    got = answer(self.client, task, demos, chunk, scope=scope)
                finally:
                    self.client.progress = None
                gens = got.gens
                rows = []
                for i, item in enumerate(chunk):
                    rows.append(ItemRecord(
                        method=selector.name, task=task.name, item_id=item.id, demo_ids=[d.id for d in demos[i]],
                        prompt_hash=text_hash(prompts[i]), output=got.outputs[i], prediction=got.predictions[i],
                        gold=item.answer, score=float(got.scores[i]),
                        latency_s=round(select_s[i] + gens[i].compute_s, 4),
                        select_s=round(select_s[i], 6), extra={k: v[i] for k, v in got.extras.items()},
                        label_probs=got.label_probs[i] if got.label_probs else {},
                        llm=self.client.backend.model_id, selection_llm=self.selection_client.backend.model_id,
                        query=item.question[:RECORD_CHARS],
                        demo_questions=[d.question[:RECORD_CHARS] for d in demos[i]],
                        select_info=infos[i], prompt=prompts[i] if self.cfg.log_prompts else "",
                        full_output=gens[i].text if THINK_CLOSE in gens[i].text or THINK_OPEN in gens[i].text
                        else ""))
                append_jsonl(records_path, rows)
                picked.update({item.id: demos[i] for i, item in enumerate(chunk)})
        return picked

    # ---- merging ------------------------------------------------------------------------------
    def _all_records(self) -> list[ItemRecord]:
        records = read_records(self.out / RECORDS)
        for path in sorted(self.out.glob("records.rank*.jsonl")):
            records += read_records(path)
        return records

    def _merge_ranks(self) -> None:
        """Fold per-rank records and call logs into the single files (idempotent)."""
        rank_records = sorted(self.out.glob("records.rank*.jsonl"))
        if rank_records:
            have = {(r.method, r.task, r.item_id) for r in read_records(self.out / RECORDS)}
            new = []
            for path in rank_records:
                for rec in read_records(path):
                    if (rec.method, rec.task, rec.item_id) not in have:
                        have.add((rec.method, rec.task, rec.item_id))
                        new.append(rec)
            append_jsonl(self.out / RECORDS, new)
            for path in rank_records:
                path.unlink()
        rank_calls = sorted(self.out.glob("calls.rank*.jsonl"))
        if rank_calls:
            with (self.out / CALLS).open("a", encoding="utf-8") as merged:
                for path in rank_calls:
                    merged.write(path.read_text(encoding="utf-8"))
                    path.unlink()
