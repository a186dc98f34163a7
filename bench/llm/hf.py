"""transformers backend (+ accelerate for device placement): any hub id or local folder, GGUF too."""
from __future__ import annotations

import functools
import os
from typing import Sequence

from bench.errors import LLMError
from bench.llm.base import Backend, GenerationParams, RawChoices, RawGeneration, RawLoglik, common_length
from bench.reasoning import answer_start, cut_at_stop


class RowSeededGumbel:
    """Logits processor for sampling at a temperature, one torch.Generator per row.

    Gumbel-max: argmax(logits / T + Gumbel noise) is a draw from softmax(logits / T). Seeding each
    row by its call's key makes a sample independent of batch composition, so a resumed run, a
    different batch size or another process all reproduce the same outputs.
    """

    def __init__(self, seeds: Sequence[int], temperature: float, device):
        import torch

        self.temperature = temperature
        self.generators = []
        for seed in seeds:
            gen = torch.Generator(device="cpu")
            gen.manual_seed(int(seed))
            self.generators.append(gen)
        self.device = device

    def keep_rows(self, rows: Sequence[int]) -> None:
        """Rows that finished left the batch: the others keep their own streams."""
        self.generators = [self.generators[i] for i in rows]

    def __call__(self, input_ids, scores):
        import torch

        noise = torch.stack([
            -torch.log(-torch.log(torch.rand(scores.shape[-1], generator=g).clamp_(1e-20, 1.0)))
            for g in self.generators
        ]).to(scores.device, scores.dtype)
        return scores / self.temperature + noise


HASH_TOP = 64  # candidates per row of the GPU sampler: at T = 0.25 a token p times as likely as the top weighs p^4


def _mix64(x):
    """splitmix64's finaliser on int64 tensors (logical shifts by masking: torch's >> is arithmetic)."""
    x = x ^ ((x >> 30) & 0x3FFFFFFFF)
    x = x * -4658895280553007687  # 0xbf58476d1ce4e5b9 as a signed int64; products wrap
    x = x ^ ((x >> 27) & 0x1FFFFFFFFF)
    x = x * -7723592293110705685  # 0x94d049bb133111eb
    return x ^ ((x >> 31) & 0x1FFFFFFFF)


class HashedGumbel:
    """Logits processor for sampling at a temperature on a GPU: the whole batch in a few kernels.

    RowSeededGumbel draws a vocabulary of noise per row from a CPU generator, one row at a time: on a GPU batch
    of hundreds of rows that costs more than the model. Here the noise of (row seed, step, token id) is a
    counter-based hash, computed for the batch at once, and only each row's HASH_TOP most likely tokens take
    part (Gumbel-max over them: an exact draw from softmax(logits / T) restricted to those tokens; at the paper's
    T = 0.25 the tail's tempered weight is the fourth power of its probability ratio, at T = 1 it is not small). Still
    independent of batch composition and order, as RowSeededGumbel; but its draws are not RowSeededGumbel's,
    so a cache records which sampler answered (bench/reward_table.py writes it into a table's meta).
    """

    def __init__(self, seeds: Sequence[int], temperature: float, device, top: int = HASH_TOP):
        import torch

        self.temperature, self.top = temperature, top
        self.seeds = _mix64(torch.tensor([int(s) & 0x7FFFFFFFFFFFFFFF for s in seeds], dtype=torch.int64,
                                         device=device))
        self.step = 0  # tokens generated so far: the same for every live row of a batch

    def keep_rows(self, rows: Sequence[int]) -> None:
        import torch

        self.seeds = self.seeds[torch.tensor(list(rows), dtype=torch.long, device=self.seeds.device)]

    def __call__(self, input_ids, scores):
        import torch

        values, tokens = scores.topk(min(self.top, scores.shape[-1]), dim=-1)
        bits = _mix64(self.seeds[:, None] ^ _mix64(tokens + (self.step << 32)))
        uniform = ((bits & 0xFFFFFF).double() + 0.5) / 2**24  # 24 bits, never 0 or 1
        noise = -torch.log(-torch.log(uniform))
        self.step += 1
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(-1, tokens, (values.double() / self.temperature + noise).to(scores.dtype))


SAMPLERS = ("auto", "row-seeded", "hashed")
ATTENTIONS = ("auto", "sdpa", "eager")
KERNEL_CHECKS = ("auto", "always", "never")  # auto: on a GPU; always: also on a CPU (tests); never: off
KERNEL_TOLERANCE = 0.01  # nats between batched and single-row log-likelihoods (float noise is ~1e-3)
AUTO_ROWS_CAP = 4096  # --prefix-batch-size auto: at most this many rows, as many as the free memory holds
DECODE_CHUNK = 16  # new tokens between the points where finished rows leave a shared-prefix batch


class OutsideReasoning:
    """A stopping criterion that ignores stop strings inside an open think block: a reasoning model's
    thoughts may well contain "Question:" before it answers. Rows are decoded only when the wrapped
    criterion fires, so plain models pay nothing."""

    def __init__(self, criterion, tokenizer):
        self.criterion, self.tokenizer = criterion, tokenizer
        self.prompt_width = 0  # set per generate call: columns before the first new token

    def __call__(self, input_ids, scores, **kwargs):
        done = self.criterion(input_ids, scores, **kwargs)
        for row in done.nonzero().flatten().tolist():
            if not self.confirms(input_ids[row, max(0, self.prompt_width - 8):self.prompt_width].tolist(),
                                 input_ids[row, self.prompt_width:].tolist()):
                done[row] = False
        return done

    def confirms(self, prompt_tail: list[int], new_ids: list[int]) -> bool:
        """Whether a stop match after these new tokens ends the row: not inside an open think block (a chat
        template may open the block in the prompt: DeepSeek-R1's ends with "<think>\n")."""
        opened = self.tokenizer.decode(prompt_tail, skip_special_tokens=False)
        return answer_start(opened + self.tokenizer.decode(new_ids, skip_special_tokens=True)) is not None


class HFBackend(Backend):
    def __init__(self, model: str, *, gguf_file: str | None = None, revision: str | None = None,
                 batch_size: int = 4, dtype: str = "auto", model_id: str | None = None, threads: int | None = None,
                 share_prefix: bool = True, prefix_batch_size: int | str = 32, kv_cache_gib: float = 4.0,
                 sampler: str = "auto", attention: str = "auto", kernel_check: str = "auto"):
        if sampler not in SAMPLERS:
            raise LLMError(f"sampler must be one of {', '.join(SAMPLERS)}, got {sampler!r}")
        if attention not in ATTENTIONS:
            raise LLMError(f"attention must be one of {', '.join(ATTENTIONS)}, got {attention!r}")
        # transformers' attention kernel: "auto" lets it choose (SDPA); "eager" avoids torch's CUDA memory-efficient
        # SDPA kernel, whose wrong outputs on some strided/masked inputs (pytorch#191937, fixed after torch 2.12)
        # match the SST-2 table's GPU fault
        self.attention = attention
        if kernel_check not in KERNEL_CHECKS:
            raise LLMError(f"kernel_check must be one of {', '.join(KERNEL_CHECKS)}, got {kernel_check!r}")
        self.kernel_check = kernel_check  # the first batch of each path is checked against single rows (on a GPU)
        self.kernel_checks: dict[str, dict] = {}  # path -> what its check found (the run's metadata)
        self.source = model
        self.sampler = sampler  # auto: hashed on a GPU, row-seeded on a CPU
        self.gguf_file = gguf_file
        self.revision = revision
        self.batch_size = batch_size
        self.dtype = dtype
        self.model_id = model_id or (f"{model}::{gguf_file}" if gguf_file else model)
        self.threads = threads
        self.share_prefix = share_prefix  # reuse the prefilled prefix in generate_with_prefix
        # suffixes decoded together after one shared prefix; auto: as many as the free memory holds
        self.rows_from_memory = prefix_batch_size == "auto"
        self.prefix_batch_size = AUTO_ROWS_CAP if self.rows_from_memory else prefix_batch_size
        self.kv_cache_gib = kv_cache_gib  # memory cap on those batches' key/value caches (a CPU's, or not auto)
        self.decode_chunk = DECODE_CHUNK
        self.rows_left_early = 0  # rows that finished and left a batch before max tokens (a counter for tests)
        self.last_decode = None  # the last shared-prefix decode's DecodeStats (steps, host syncs)
        self._last_prefix = None
        self._stops: dict = {}
        self._model = None
        self._tok = None

    # ---- loading ------------------------------------------------------------------------------
    def _load(self):
        if self._model is not None:
            return
        import torch
        from accelerate import PartialState
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # "Loading weights" bars on every load
        if self.threads:
            torch.set_num_threads(self.threads)
        state = PartialState(cpu=not torch.cuda.is_available())
        device = state.device
        if not self.gguf_file:
            from bench.llm.weights import cached_snapshot, warn_large_on_cpu

            warn_large_on_cpu(self.model_id, cached_snapshot(self.source), device.type == "cpu")
        dtype = {"auto": torch.float32 if device.type == "cpu" else torch.bfloat16,
                 "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[self.dtype]
        kwargs = {"revision": self.revision} if self.revision else {}
        if self.gguf_file:
            kwargs["gguf_file"] = self.gguf_file
        if self.attention != "auto":
            kwargs["attn_implementation"] = self.attention
        try:
            tok = AutoTokenizer.from_pretrained(self.source, **{k: v for k, v in kwargs.items()
                                                                 if k != "attn_implementation"})
            model = AutoModelForCausalLM.from_pretrained(self.source, dtype=dtype, **kwargs)
        except OSError as exc:
            offline = " (offline: HF_HUB_OFFLINE=1, only local folders load)" if os.environ.get("HF_HUB_OFFLINE") else ""
            raise LLMError(f"could not load model '{self.source}'{offline}: {str(exc).splitlines()[0]}") from None
        tok.padding_side = "left"  # decoder-only: pad on the left so every row ends at the same column
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        model.to(device).eval()
        self._model, self._tok, self.device = model, tok, device

    def sampler_class(self):
        """The logits processor that samples at a temperature (see `sampler`)."""
        on_gpu = getattr(getattr(self, "device", None), "type", "cpu") == "cuda"  # known once loaded
        hashed = self.sampler == "hashed" or (self.sampler == "auto" and on_gpu)
        return HashedGumbel if hashed else RowSeededGumbel

    def warm(self) -> None:
        self._load()

    def chat_messages(self, messages: list[dict]) -> str | None:
        tok = self.tokenizer
        if not tok.chat_template:
            return None
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        # a tokenizer that adds BOS itself would otherwise see it twice (Llama 3's template writes it too)
        if tok.bos_token and text.startswith(tok.bos_token) and tok("x")["input_ids"][:1] == [tok.bos_token_id]:
            text = text[len(tok.bos_token):]
        return text

    @property
    def tokenizer(self):
        self._load()
        return self._tok

    @property
    def model(self):
        self._load()
        return self._model

    # ---- calls --------------------------------------------------------------------------------
    def _generate_kwargs(self, params: GenerationParams, seeds: Sequence[int], prompt_width: int) -> dict:
        tok = self.tokenizer
        kwargs = dict(max_new_tokens=params.max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id,
                      num_beams=1, top_p=None, top_k=None, temperature=None)
        if params.stop:
            from transformers import StoppingCriteriaList

            criterion = self._stop_criteria(params.stop)
            criterion.prompt_width = prompt_width
            kwargs["stopping_criteria"] = StoppingCriteriaList([criterion])
        if not params.greedy:
            from transformers import LogitsProcessorList

            sampler = self.sampler_class()(seeds, params.temperature, self.device)
            kwargs["logits_processor"] = LogitsProcessorList([sampler])
        return kwargs

    def _stop_criteria(self, stops: tuple[str, ...]):
        """One StopStringCriteria per stop-string set: building it scans the whole vocabulary
        (262k tokens for Gemma 3), which `stop_strings=` would redo on every generate call."""
        if stops not in self._stops:
            from transformers import StopStringCriteria

            self._stops[stops] = OutsideReasoning(StopStringCriteria(self.tokenizer, list(stops)), self.tokenizer)
        return self._stops[stops]

    def _decode(self, new_tokens, params: GenerationParams) -> list[tuple[str, int]]:
        """(text cut at the stop strings, completion tokens) per row; early-stopped rows are padded."""
        tok = self.tokenizer
        out = []
        for row in new_tokens.tolist():
            n = len(row)
            while n and row[n - 1] == tok.pad_token_id:
                n -= 1
            out.append((cut_at_stop(tok.decode(row[:n], skip_special_tokens=True), params.stop), n))
        return out

    def generate(self, prompts: Sequence[str], params: GenerationParams, seeds: Sequence[int]) -> list[RawGeneration]:
        import torch

        tok, model = self.tokenizer, self.model
        enc = tok(list(prompts), return_tensors="pt", padding=True).to(self.device)
        with torch.inference_mode():
            out = model.generate(**enc, **self._generate_kwargs(params, seeds, enc["input_ids"].shape[1]))
        prompt_lens = enc["attention_mask"].sum(dim=1).tolist()
        return [RawGeneration(text=text, prompt_tokens=int(n_prompt), completion_tokens=n)
                for (text, n), n_prompt in zip(self._decode(out[:, enc["input_ids"].shape[1]:], params), prompt_lens)]

    def generate_with_prefix(self, prefix: str, suffixes: Sequence[str], params: GenerationParams,
                             seeds: Sequence[int]) -> list[RawGeneration]:
        if suffixes and self._kernel_unchecked("generation"):
            self._check_kernel("generation", lambda: self._generation_disagreements(prefix, suffixes))
        return self._generate_with_prefix(prefix, suffixes, params, seeds)

    def _generate_with_prefix(self, prefix: str, suffixes: Sequence[str], params: GenerationParams,
                              seeds: Sequence[int]) -> list[RawGeneration]:
        """Prefill the shared prefix once, then decode the suffixes together in left-padded batches.

        The suffixes (all but their last tokens) are prefilled together, in one forward pass after a batch
        copy of the prefix's key/value cache; the rows are then right-aligned into one batch cache, so every
        row keeps its own token positions and sliding-window neighbourhood, and greedy outputs equal
        one-call-at-a-time generation. The shared part is the prefix's tokens up to the first place where any row's own
        tokenisation of prefix + suffix departs from them; the rest of each row is its suffix.
        """
        from bench.llm.decoding import plain_generation_config

        # a model whose generation config adds logits processors (a repetition penalty...) decodes one call at a time
        if not self.share_prefix or not suffixes or not plain_generation_config(self.model.generation_config):
            return Backend.generate_with_prefix(self, prefix, suffixes, params, seeds)
        tok = self.tokenizer
        full_ids = [tok(prefix + suffix)["input_ids"] for suffix in suffixes]
        # the tokens every row shares: the prefix's own tokens up to where a row's tokenisation departs
        # (a Llama-style BPE splits the prefix's trailing "\n\n" differently before a suffix)
        prefix_ids = tok(prefix)["input_ids"]
        prefix_ids = prefix_ids[:min(common_length(prefix_ids, ids) for ids in full_ids)]
        results: list[RawGeneration | None] = [None] * len(suffixes)
        shared: list[tuple[int, list[int]]] = []
        plain = []
        for i, ids in enumerate(full_ids):
            if prefix_ids and len(ids) > len(prefix_ids):
                shared.append((i, ids[len(prefix_ids):]))
            else:
                plain.append(i)
        if shared:
            prefix_cache, prefix_charge = self._prefix_cache(prefix_ids)
            if not _plain_layers(prefix_cache):  # a cache layout _right_aligned does not know: no reuse
                plain, shared, step = list(range(len(suffixes))), [], 1
            else:
                longest = len(prefix_ids) + max(len(s) for _, s in shared) + params.max_new_tokens
                step = self._rows_per_batch(prefix_cache, longest)
            for start in range(0, len(shared), step):
                chunk = shared[start:start + step]
                texts = self._decode_after_prefix(prefix_cache, prefix_ids, [s for _, s in chunk], params,
                                                  [seeds[i] for i, _ in chunk])
                for (i, suffix_ids), (text, n) in zip(chunk, texts):
                    # a prefix prefilled by this call is charged to the first row that used it
                    results[i] = RawGeneration(text=text, prompt_tokens=len(prefix_ids) + len(suffix_ids),
                                               completion_tokens=n, prefilled_tokens=len(suffix_ids) + prefix_charge)
                    prefix_charge = 0
        if plain:
            for i, gen in zip(plain, self.generate([prefix + suffixes[i] for i in plain], params,
                                                   [seeds[i] for i in plain])):
                results[i] = gen
        return results

    def forget_prefix(self) -> None:
        self._last_prefix = None

    def _prefix_cache(self, prefix_ids: list[int]):
        """(key/value cache of the prefix, tokens prefilled now): the last prefix is kept for the next call."""
        import torch

        key = tuple(prefix_ids)
        if self._last_prefix is not None and self._last_prefix[0] == key:
            return self._last_prefix[1], 0
        with torch.inference_mode():
            # logits of the last position only: a vocabulary-wide output for every prefix token is wasted work
            cache = self.model(torch.tensor([prefix_ids], device=self.device), use_cache=True,
                               logits_to_keep=1).past_key_values
        self._last_prefix = (key, cache)
        return cache, len(prefix_ids)

    def _rows_per_batch(self, prefix_cache, length: int) -> int:
        """Rows decoded together: prefix_batch_size, capped so the row and batch caches (and, on a GPU, each row's
        float32 logits) fit the memory budget (see _memory_budget)."""
        row_bytes = 0
        for layer in prefix_cache.layers:
            k = layer.keys
            width = min(length, layer.sliding_window) if layer.is_sliding else length
            row_bytes += 2 * k.shape[1] * k.shape[3] * k.element_size() * width
        budget, logits = self._memory_budget()
        fits = int(budget // (2 * row_bytes + logits))  # row caches and the batch cache coexist
        return max(1, min(self.prefix_batch_size, fits))

    def _memory_budget(self) -> tuple[float, int]:
        """(bytes the batch may use, bytes per row besides its caches). With --prefix-batch-size auto on a GPU: 85%
        of the memory free now (torch's unused reserve included), and three float32 vocabulary rows per row (logits, a sampler's scores and noise);
        else kv_cache_gib for the caches alone."""
        if self.rows_from_memory and getattr(self.device, "type", "cpu") == "cuda":
            import torch

            free, _total = torch.cuda.mem_get_info(self.device)
            free += torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)  # torch's own
            return 0.85 * free, 3 * 4 * self.model.config.get_text_config().vocab_size
        return self.kv_cache_gib * 2**30, 0

    def _decode_after_prefix(self, prefix_cache, prefix_ids: list[int], suffix_ids: list[list[int]],
                             params: GenerationParams, seeds: Sequence[int]) -> list[tuple[str, int]]:
        import torch

        batch_cache = self._prefill_suffixes(prefix_cache, [ids[:-1] for ids in suffix_ids])
        lengths = [len(prefix_ids) + len(ids) for ids in suffix_ids]
        width = max(lengths)
        _reserve(batch_cache, width + params.max_new_tokens)
        input_ids = torch.full((len(suffix_ids), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(suffix_ids), width), dtype=torch.long)
        for row, (ids, n) in enumerate(zip(suffix_ids, lengths)):
            input_ids[row, width - n:] = torch.tensor(prefix_ids + ids)
            mask[row, width - n:] = 1
        return self._decode_in_chunks(input_ids.to(self.device), mask.to(self.device), batch_cache, params, seeds)

    def _prefill_suffixes(self, prefix_cache, heads: list[list[int]]):
        """The batch cache after each row's suffix head (all but its last token, which generate feeds).

        Rows of similar length are prefilled together, one forward pass per group: the heads are right-padded
        after a batch copy of the prefix cache, so each real token sits at its own position and, attention
        being causal, never sees the padding after it. The rows are then right-aligned (see _right_aligned)
        to end at the same column.
        """
        import torch

        placed: list = [None] * len(heads)  # per row: (padded group cache, its row there, padding after it)
        for group in _length_groups([len(h) for h in heads]):
            longest = max(len(heads[i]) for i in group)
            cache = self._batch_copy(prefix_cache, len(group))
            if longest:
                ids = torch.full((len(group), longest), self.tokenizer.pad_token_id, dtype=torch.long)
                for row, i in enumerate(group):
                    ids[row, :len(heads[i])] = torch.tensor(heads[i], dtype=torch.long)
                with torch.inference_mode():
                    self.model(ids.to(self.device), past_key_values=cache, use_cache=True, logits_to_keep=1)
            for row, i in enumerate(group):
                placed[i] = (cache, row, longest - len(heads[i]))
        length = prefix_cache.get_seq_length() + max(len(h) for h in heads)
        return _right_aligned(placed, length, self.model.config)

    def _batch_copy(self, prefix_cache, rows: int):
        """A cache of `rows` rows, each a view of the prefix's key/value cache."""
        from transformers.cache_utils import DynamicCache

        cache = DynamicCache(config=self.model.config)
        for layer, prefix_layer in zip(cache.layers, prefix_cache.layers):
            keys = prefix_layer.keys.expand(rows, -1, -1, -1)
            values = prefix_layer.values.expand(rows, -1, -1, -1)
            layer.lazy_initialization(keys, values)
            layer.keys, layer.values = keys, values
            if layer.is_sliding:
                layer.cumulative_length = prefix_layer.cumulative_length
                layer.record_past = True  # keep every column: shorter rows need ones a window would drop
        return cache

    def choice_logliks(self, prefix: str, suffixes: Sequence[str], choices: Sequence[Sequence[str]]
                       ) -> list[RawChoices]:
        if suffixes and self._kernel_unchecked("loglik"):
            self._check_kernel("loglik", lambda: self._loglik_disagreements(prefix, suffixes, choices))
        return self._choice_logliks(prefix, suffixes, choices)

    # ---- the attention kernel's check ----------------------------------------------------------
    def _kernel_unchecked(self, path: str) -> bool:
        if self.kernel_check == "never" or path in self.kernel_checks:
            return False
        self._load()
        return self.kernel_check == "always" or self.device.type == "cuda"

    def _check_kernel(self, path: str, disagreements) -> None:
        """The first batch of a path (generation, log-likelihoods) against one row at a time, before its answers
        count. Why: torch's CUDA memory-efficient SDPA kernel answered some batched rows wrong (pytorch#191937: the
        SST-2 table's fault), and transformers picks that kernel by default. On a disagreement the model switches
        to eager attention with a warning, and the check runs again; a disagreement there too is an LLMError."""
        kernel = self.model.config._attn_implementation
        probed, wrong = disagreements()
        record = {"kernel": kernel, "probed_rows": probed, "disagreed": len(wrong)}
        if wrong and kernel != "eager":
            from bench.log import LOG

            LOG.warning("%s: the %s attention kernel's batched answers differ from one row at a time on %d of %d "
                        "probed rows (rows %s); falling back to eager attention", path, kernel, len(wrong), probed,
                        wrong[:8])
            self.model.set_attn_implementation("eager")
            self.attention = "eager"
            self.forget_prefix()
            probed, wrong = disagreements()
            record.update(fallback="eager", disagreed_after_fallback=len(wrong))
            self.kernel_checks = {}  # every path's earlier check was of the other kernel
        if wrong:
            raise LLMError(f"{path}: the batched path disagrees with one row at a time on {len(wrong)} of {probed} "
                           f"probed rows under {self.model.config._attn_implementation} attention: its answers would "
                           "be wrong (kernel_check='never' skips this check)")
        self.kernel_checks[path] = record

    def _probe_rows(self, prefix: str, suffixes: Sequence[str], most: int = 4) -> list[int]:
        """One row of each suffix length in tokens (the SST-2 fault struck every row of one length), at most `most`."""
        first: dict[int, int] = {}
        for i, suffix in enumerate(suffixes):
            first.setdefault(len(self.tokenizer(prefix + suffix)["input_ids"]), i)
        return sorted(first.values())[:most]

    def _generation_disagreements(self, prefix: str, suffixes: Sequence[str], tokens: int = 4):
        """(rows probed, rows whose first `tokens` greedy tokens differ between the batch and generate() alone)."""
        greedy = GenerationParams(max_new_tokens=tokens, temperature=0.0, stop=())
        batch = list(suffixes[:self.prefix_batch_size])
        together = self._generate_with_prefix(prefix, batch, greedy, [0] * len(batch))
        probe = self._probe_rows(prefix, batch)
        wrong = [i for i in probe if self.generate([prefix + batch[i]], greedy, [0])[0].text != together[i].text]
        return len(probe), wrong

    def _loglik_disagreements(self, prefix: str, suffixes: Sequence[str], choices: Sequence[Sequence[str]]):
        """(rows probed, rows with a choice whose batched log-likelihood is KERNEL_TOLERANCE off its single-row one)."""
        batch = list(suffixes[:self.prefix_batch_size])
        together = self._choice_logliks(prefix, batch, choices[:len(batch)])
        probe = self._probe_rows(prefix, batch)
        wrong = [i for i in probe
                 if any(abs(self.loglik([prefix + batch[i]], [choice])[0].logprob - got) > KERNEL_TOLERANCE
                        for choice, got in zip(choices[i], together[i].logliks))]
        return len(probe), wrong

    def runtime(self) -> dict:
        """How the model ran: device, weights' dtype, attention kernel, the kernel checks (a run's metadata)."""
        if self._model is None:
            return {}
        return {"device": str(self.device), "dtype": str(self._model.dtype).replace("torch.", ""),
                "attention": self._model.config._attn_implementation, "kernel_checks": self.kernel_checks}

    def _choice_logliks(self, prefix: str, suffixes: Sequence[str], choices: Sequence[Sequence[str]]
                        ) -> list[RawChoices]:
        """The prefix is prefilled once; each suffix is run once after a batch copy of its cache, and every
        one-token choice is read off its last position (a label word is mostly one token); a longer choice
        adds a row of the suffix followed by the choice. Contexts and choices are tokenised apart, as `loglik`
        does, so both give the same numbers."""
        import torch

        tok = self.tokenizer
        full = [tok(prefix + s)["input_ids"] for s in suffixes]
        prefix_ids = tok(prefix)["input_ids"]
        prefix_ids = prefix_ids[:min(common_length(prefix_ids, ids) for ids in full)] if self.share_prefix else []
        if not prefix_ids or any(len(ids) <= len(prefix_ids) for ids in full):
            return Backend.choice_logliks(self, prefix, suffixes, choices)
        prefix_cache, charge = self._prefix_cache(prefix_ids)
        if not _plain_layers(prefix_cache):
            return Backend.choice_logliks(self, prefix, suffixes, choices)
        # rows: (item, tokens after the prefix, [(position in the row, target token, choice)])
        rows: list[tuple[int, list[int], list[tuple[int, int, int]]]] = []
        scores = [[0.0] * len(row) for row in choices]
        prefilled = [0] * len(suffixes)
        for i, (ids, row_choices) in enumerate(zip(full, choices)):
            head = ids[len(prefix_ids):]
            targets = [tok(c, add_special_tokens=False)["input_ids"] for c in row_choices]
            if not all(targets):
                raise LLMError("choice_logliks: an empty choice")
            if sum(len(t) > 1 for t in targets) > 1:  # several longer choices (AquaRAT's options): one head pass
                scores[i], prefilled[i] = self._choices_after_head(prefix_cache, head, targets)
                continue
            singles = [(len(head) - 1, t[0], j) for j, t in enumerate(targets) if len(t) == 1]
            if singles:
                rows.append((i, head, singles))
            rows += [(i, head + t[:-1], [(len(head) - 1 + n, t[n], j) for n in range(len(t))])
                     for j, t in enumerate(targets) if len(t) > 1]
        for group in _length_groups([len(r[1]) for r in rows]):
            for start in range(0, len(group), 8):  # 8 rows' logits at a few positions: a bounded output layer
                part = group[start:start + 8]
                longest = max(len(rows[r][1]) for r in part)
                ids = torch.full((len(part), longest), self.tokenizer.pad_token_id, dtype=torch.long)
                for n, r in enumerate(part):
                    ids[n, :len(rows[r][1])] = torch.tensor(rows[r][1], dtype=torch.long)
                wanted = [(n, p, target) for n, r in enumerate(part) for p, target, _ in rows[r][2]]
                with torch.inference_mode():
                    hidden = self._decoder(ids.to(self.device), past_key_values=self._batch_copy(
                        prefix_cache, len(part)), use_cache=True).last_hidden_state
                    at = torch.tensor([[n, p] for n, p, _ in wanted], device=self.device)
                    logprobs = iter(self._target_logprobs(hidden[at[:, 0], at[:, 1]],
                                                          torch.tensor([t for _, _, t in wanted], device=self.device)))
                for r in part:
                    item, head, targets = rows[r]
                    for _, _, j in targets:
                        scores[item][j] += float(next(logprobs))
                    prefilled[item] += len(head)
        prefilled[0] += charge  # a prefix prefilled by this call is charged to the first row
        return [RawChoices(s, prompt_tokens=len(ids), prefilled_tokens=p) for s, ids, p in zip(scores, full, prefilled)]

    def _choices_after_head(self, prefix_cache, head: list[int], targets: list[list[int]]) -> tuple[list[float], int]:
        """One item's choices when several are longer than a token: its head runs once after the prefix, and the
        choices' remaining tokens run as rows after a batch copy of that cache, instead of one row of head and
        choice each (five AquaRAT options re-ran their question five times: half a table build). Returns the
        choices' summed log-likelihoods and the tokens prefilled."""
        import torch

        item_cache = self._batch_copy(prefix_cache, 1)
        with torch.inference_mode():
            last = self._decoder(torch.tensor([head], device=self.device), past_key_values=item_cache,
                                 use_cache=True).last_hidden_state[0, -1]
            scores = self._target_logprobs(last.expand(len(targets), -1),
                                           torch.tensor([t[0] for t in targets], device=self.device))
            longer = [j for j, t in enumerate(targets) if len(t) > 1]
            width = max(len(targets[j]) - 1 for j in longer)
            ids = torch.full((len(longer), width), self.tokenizer.pad_token_id, dtype=torch.long)
            for row, j in enumerate(longer):  # right-padded: causal attention keeps the padding out of real tokens
                ids[row, :len(targets[j]) - 1] = torch.tensor(targets[j][:-1], dtype=torch.long)
            hidden = self._decoder(ids.to(self.device), past_key_values=self._batch_copy(item_cache, len(longer)),
                                   use_cache=True).last_hidden_state
            wanted = [(row, n - 1, targets[j][n]) for row, j in enumerate(longer) for n in range(1, len(targets[j]))]
            at = torch.tensor([[row, p] for row, p, _ in wanted], device=self.device)
            rest = self._target_logprobs(hidden[at[:, 0], at[:, 1]],
                                         torch.tensor([t for _, _, t in wanted], device=self.device))
        for (row, _, _), value in zip(wanted, rest):
            scores[longer[row]] += value
        return scores, len(head) + sum(len(targets[j]) - 1 for j in longer)

    @property
    def _decoder(self):
        """The model without its output layer: choice_logliks applies that layer only at the scored positions."""
        return self.model.get_decoder()

    def _target_logprobs(self, hidden, targets, rows: int = 256):
        """log p(target) at each hidden state: the output layer (and a final soft-cap, as Gemma's forward applies
        it) on those states only, in blocks of `rows` (a 262k-word vocabulary makes 1 MB of logits a row), and
        logit(target) - logsumexp(logits) in float32, with no log-softmax over the whole vocabulary written."""
        import torch

        head = self.model.get_output_embeddings()
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        out = []
        for start in range(0, len(hidden), rows):
            logits = head(hidden[start:start + rows])
            if cap is not None:
                logits = torch.tanh(logits / cap) * cap
            logits = logits.float()
            part = targets[start:start + rows]
            out.append(logits.gather(1, part[:, None])[:, 0] - torch.logsumexp(logits, dim=-1))
        return torch.cat(out).tolist() if out else []

    def _decode_in_chunks(self, input_ids, mask, cache, params: GenerationParams,
                          seeds: Sequence[int]) -> list[tuple[str, int]]:
        """The rows decoded together (bench/llm/decoding.py); every `decode_chunk` new tokens the rows that
        finished (end of sequence, a stop string, max tokens) leave the batch and its cache, so the batch does not
        decode until its longest row ends. Outputs equal one generate() call per row."""
        import torch

        from bench.llm.decoding import DecodeStats, decode

        criterion = self._stop_criteria(params.stop) if params.stop else None
        noise = None if params.greedy else self.sampler_class()(seeds, params.temperature, self.device)
        stats = DecodeStats()
        rows = decode(self.model, input_ids, mask, cache, max_new_tokens=params.max_new_tokens,
                      end_ids=self._end_ids(), pad_id=self.tokenizer.pad_token_id, noise=noise,
                      stop=criterion.criterion if criterion is not None else None,
                      confirm_stop=criterion.confirms if criterion is not None else None,
                      chunk=self.decode_chunk, stats=stats)
        self.rows_left_early += stats.rows_left_early
        self.last_decode = stats
        pad = self.tokenizer.pad_token_id
        padded = torch.full((len(rows), max(1, max(len(r) for r in rows))), pad, dtype=torch.long)
        for i, tokens in enumerate(rows):
            padded[i, :len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        return self._decode(padded, params)

    def _end_ids(self) -> set[int]:
        """Token ids that end a row: the generation config's end-of-sequence ids."""
        eos = self.model.generation_config.eos_token_id
        return set(eos if isinstance(eos, list) else [eos] if eos is not None else [])

    def loglik(self, contexts: Sequence[str], continuations: Sequence[str]) -> list[RawLoglik]:
        import torch

        tok, model = self.tokenizer, self.model
        rows = []
        for ctx, cont in zip(contexts, continuations):
            ctx_ids = tok(ctx)["input_ids"]
            cont_ids = tok(cont, add_special_tokens=False)["input_ids"]
            if not cont_ids:
                raise LLMError("loglik: empty continuation")
            rows.append((ctx_ids, cont_ids))
        width = max(len(c) + len(x) for c, x in rows)
        pad = tok.pad_token_id
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (c, x) in enumerate(rows):
            seq = c + x
            ids[i, width - len(seq):] = torch.tensor(seq)
            mask[i, width - len(seq):] = 1
        keep = max(len(x) for _, x in rows) + 1  # the output layer only where a continuation token is predicted
        with torch.inference_mode():
            logits = model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                           logits_to_keep=keep).logits.float()
        logprobs = torch.log_softmax(logits, dim=-1)  # [rows, keep, vocab]: positions width-keep .. width-1
        out = []
        for i, (c, x) in enumerate(rows):
            n = len(x)
            # the token at position p is predicted by logits at p-1: positions width-n-1 .. width-2
            positions = torch.arange(keep - n - 1, keep - 1)
            targets = ids[i, width - n:].to(logprobs.device)
            total = logprobs[i, positions.to(logprobs.device), targets].sum().item()
            out.append(RawLoglik(logprob=total, n_tokens=n, prompt_tokens=len(c) + n))
        return out


def _plain_layers(cache) -> bool:
    """Whether every layer is a plain or sliding-window dynamic layer (the layouts _right_aligned knows)."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    return all(type(layer) in (DynamicLayer, DynamicSlidingWindowLayer) for layer in cache.layers)


def _reserve(cache, capacity: int) -> None:
    """Give every full-attention layer of a batch cache a buffer for `capacity` columns, so each decode step
    writes its column in place instead of torch.cat copying the whole cache (a fifth of a SmolLM2 pull's
    time). Values are the same; only where they are stored changes."""
    from transformers.cache_utils import DynamicLayer

    preallocated = _preallocated_layer_class()
    for layer in cache.layers:
        if type(layer) is DynamicLayer:
            layer.__class__ = preallocated
            layer.reserve(capacity)


@functools.cache
def _preallocated_layer_class():
    from transformers.cache_utils import DynamicLayer

    class PreallocatedLayer(DynamicLayer):
        def reserve(self, capacity: int) -> None:
            batch, heads, used, dim = self.keys.shape
            self._k = self.keys.new_zeros((batch, heads, max(capacity, used), dim))
            self._v = self.values.new_zeros((batch, heads, max(capacity, used), self.values.shape[-1]))
            self._k[:, :, :used], self._v[:, :, :used] = self.keys, self.values
            self._used = used
            self.keys, self.values = self._k[:, :, :used], self._v[:, :, :used]

        def batch_select_indices(self, indices) -> None:
            self._k, self._v = self._k[indices], self._v[indices]
            self.keys, self.values = self._k[:, :, :self._used], self._v[:, :, :self._used]

        def update(self, key_states, value_states, *args, **kwargs):
            end = self._used + key_states.shape[-2]
            if end > self._k.shape[-2]:  # past the reservation: grow as DynamicLayer does
                self.__class__ = DynamicLayer
                return DynamicLayer.update(self, key_states, value_states, *args, **kwargs)
            self._k[:, :, self._used:end] = key_states
            self._v[:, :, self._used:end] = value_states
            self._used = end
            self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]
            return self.keys, self.values

    return PreallocatedLayer


def _length_groups(lengths: list[int], slack: float = 1.2) -> list[list[int]]:
    """Row indices grouped by length, shortest first, so that a group padded to its longest row holds at most
    `slack` times its real tokens: GSM8K questions vary up to 4x in length, and one padded batch doubled the
    prefill's tokens."""
    groups: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        group = groups[-1] if groups else None
        if group and lengths[i] * (len(group) + 1) <= slack * (sum(lengths[j] for j in group) + lengths[i]):
            group.append(i)
        else:
            groups.append([i])
    return groups


def _right_aligned(placed, length: int, config):
    """One batch cache with every row ending at column `length`. Row i is row placed[i][1] of cache
    placed[i][0], followed there by placed[i][2] padding columns, which are dropped; the row is moved right,
    left-padded with zeros (masked by the attention mask). A sliding-window layer keeps each row's last
    window-1 columns, exactly what the row's own layer would keep, and counts `length` tokens seen.
    """
    from transformers.cache_utils import DynamicCache

    batch = DynamicCache(config=config)
    for index, layer in enumerate(batch.layers):
        first = placed[0][0].layers[index]
        width = min(length, first.sliding_window - 1) if first.is_sliding else length
        shape = (len(placed), first.keys.shape[1], width, first.keys.shape[-1])
        keys = first.keys.new_zeros(shape)
        values = first.values.new_zeros(shape[:-1] + (first.values.shape[-1],))
        for row, (cache, source_row, padding) in enumerate(placed):
            source = cache.layers[index]
            end = source.keys.shape[-2] - padding
            take = min(width, end)
            keys[row, :, width - take:] = source.keys[source_row, :, end - take:end]
            values[row, :, width - take:] = source.values[source_row, :, end - take:end]
        layer.lazy_initialization(keys, values)
        layer.keys, layer.values = keys, values
        if layer.is_sliding:
            layer.cumulative_length = length
    return batch
