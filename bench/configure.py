"""A run's options (RunOptions) made into the runner's RunConfig: the one path of the CLI, a config file, a sweep's
cells and bench.evaluate."""
from __future__ import annotations

import os
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from bench.errors import ConfigError
from bench.options import default_data_dir
from bench.run_options import RunOptions, method_budgets, run_folders


def default_out(options: RunOptions) -> Path:
    """runs/<llm>-seed<seed>-<time>: a second run never collides with the first."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # every process must name the same folder
        raise ConfigError("a run of several processes needs --out DIR")
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{options.llm.replace('/', '_')}-seed{options.seed}-{stamp}"


def run_config(options: RunOptions, command: str = ""):
    """The RunConfig of a run's options (the CLI's, a config file's and bench.evaluate's one path)."""
    from bench.llm import GenerationParams, LLMSpec
    from bench.metrics import BertScoreConfig
    from bench.runner import RunConfig

    method_params = {m: dict(v) for m, v in options.params.items()}
    if options.data_dir is not None and not Path(options.data_dir).is_dir():  # even when no task reads data
        raise ConfigError(f"--data-dir {options.data_dir}: no such folder")
    data_dir = options.data_dir or default_data_dir()
    out = options.out or default_out(options)
    llm = LLMSpec(name=options.llm, backend=options.backend, api_base=options.api_base, api=options.openai_api,
                  gguf_file=options.gguf_file, batch_size=options.batch_size,
                  prefix_batch_size=options.prefix_batch_size, kv_cache_gib=options.kv_cache_gib,
                  concurrency=options.concurrency, timeout_s=options.timeout, retries=options.retries,
                  chat_template=options.chat_template, fewshot_as_multiturn=options.fewshot_as_multiturn,
                  llamacpp_weights=options.llamacpp_weights, llamacpp_ctx=options.llamacpp_ctx)
    generation = GenerationParams(max_new_tokens=options.max_new_tokens, temperature=options.temperature,
                                  seed=options.seed)
    selection_llm = None
    if options.selection_llm or options.selection_backend:
        selection_llm = replace(llm, name=options.selection_llm or options.llm, backend=options.selection_backend)
    selection_generation = None
    if options.selection_temperature is not None or options.selection_max_new_tokens is not None:
        selection_generation = replace(
            generation, temperature=generation.temperature if options.selection_temperature is None
            else options.selection_temperature,
            max_new_tokens=options.selection_max_new_tokens or generation.max_new_tokens)
    return RunConfig(
        methods=options.methods, only=options.only, tasks=options.tasks, out=out, data_dir=data_dir,
        data_source=options.data_source, llm=llm, n_test=options.n_test, n_val=options.n_val,
        pool_size=options.pool_size, seed=options.seed, split_seed=options.split_seed, k=options.k, resume=options.resume,
        llm_budget=options.llm_budget, method_budgets=method_budgets(options.method_budget), generation=generation,
        method_params=method_params, bertscore=BertScoreConfig(options.bertscore_model, options.bertscore_layers,
                                                               rescale=options.bertscore_rescale),
        encoder=options.encoder, embedding_cache=options.embedding_cache, cache_path=options.cache,
        cache_from=[Path(p) for p in options.cache_from],
        plugins=options.plugin, progress=not options.no_progress,
        threads=options.threads,
        ltr_data=tuple(options.ltr_data), selection_llm=selection_llm, selection_generation=selection_generation,
        selections=options.selections, reuse_selections=not options.no_selection_reuse, prices=options.prices,
        replay_from=run_folders(options.replay_from),
        log_prompts=options.log_prompts, html=not options.no_html, options=options.to_mapping(), command=command,
        task_files=[Path(p) for p in options.task_file], scoring=options.scoring, calibration=options.calibration,
        reward=options.reward)
