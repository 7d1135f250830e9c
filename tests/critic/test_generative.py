"""The generative critic: one K-sample request, strict parsing, middle-out truncation, endpoint values."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo_rl.backends.types import SampledSequence, SampleResult, SamplingParams
from tempo_rl.critic import (
    CriticEstimates,
    CriticQuery,
    GenerativeCritic,
    ValueStatus,
    bootstrap_value,
    build_critic_messages,
    endpoint_value,
    status_counts,
)
from tempo_rl.critic.prompt import condense_history, kept_turns, shown_turns


def word_renderer(messages: Sequence[dict[str, str]]) -> list[int]:
    """A toy chat renderer: one token per whitespace-separated word, plus role markers."""
    tokens: list[int] = []
    for message in messages:
        tokens.append(1 if message["role"] == "system" else 2)
        tokens.extend(3 + (sum(map(ord, word)) % 997) for word in message["content"].split())
    tokens.append(0)  # generation prompt
    return tokens


class ScriptedSampler:
    """Returns the scripted completions and records every request."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = list(texts)
        self.calls: list[tuple[list[int], int, SamplingParams]] = []

    async def sample_async(
        self, prompt: Sequence[int], num_samples: int, params: SamplingParams
    ) -> SampleResult:
        self.calls.append((list(prompt), num_samples, params))
        seqs = tuple(
            SampledSequence(tokens=(7, 8), logprobs=(-0.1, -0.2), text=self.texts[i % len(self.texts)])
            for i in range(num_samples)
        )
        return SampleResult(sequences=seqs)


PARAMS = SamplingParams(max_tokens=32)


def make_query(n_turns: int = 3, **kw: object) -> CriticQuery:
    history = tuple((f"go to room {i}", f"You arrive at room {i}. It is dark here.") for i in range(n_turns))
    args: dict[str, object] = {
        "task": "find the key",
        "history": history,
        "initial_observation": "You are in the hall.",
        "privileged_info": "WALKTHROUGH: go to room 2, take key",
        "remaining_steps": 7,
    }
    args.update(kw)
    return CriticQuery(**args)  # type: ignore[arg-type]


def test_k_samples_in_one_request_parsed_strictly() -> None:
    sampler = ScriptedSampler(["<value>0.2</value>", "no idea", "<value>1.5</value>", "<value>0.6</value>"])
    critic = GenerativeCritic(word_renderer, PARAMS, max_prompt_tokens=10_000)
    est = asyncio.run(critic.estimate(make_query(), 4, sampler))
    assert len(sampler.calls) == 1 and sampler.calls[0][1] == 4 and sampler.calls[0][2] is PARAMS
    np.testing.assert_array_equal(est.values[[0, 2, 3]], [0.2, 1.0, 0.6])
    assert math.isnan(est.values[1])
    assert [s.status for s in est.samples] == [
        ValueStatus.OK,
        ValueStatus.MISSING,
        ValueStatus.CLIPPED,
        ValueStatus.OK,
    ]
    assert est.parse_failures == 1 and not est.prompt_too_long and est.omitted_turns == 0
    assert all(s.prompt_tokens == tuple(sampler.calls[0][0]) for s in est.samples)
    assert est.samples[0].sequence.logprobs == (-0.1, -0.2)
    assert endpoint_value(est) == pytest.approx((0.2 + 1.0 + 0.6) / 3)
    assert status_counts(est)[ValueStatus.CLIPPED] == 1


def test_a_seed_seeds_the_request_and_nothing_else() -> None:
    sampler = ScriptedSampler(["<value>0.5</value>"] * 2)
    critic = GenerativeCritic(word_renderer, PARAMS, max_prompt_tokens=10_000)
    asyncio.run(critic.estimate(make_query(), 2, sampler, seed=1234))
    sent = sampler.calls[0][2]
    assert sent.seed == 1234 and PARAMS.seed != 1234
    assert dataclasses.replace(sent, seed=PARAMS.seed) == PARAMS  # temperature, budget and stops untouched
    assert critic.sampling_params is PARAMS  # the critic's own settings are not mutated


def test_r_max_is_configurable_and_in_the_prompt() -> None:
    sampler = ScriptedSampler(["<value>1.5</value>", "<value>7</value>"])
    critic = GenerativeCritic(word_renderer, PARAMS, max_prompt_tokens=10_000)
    query = make_query(r_max=2.0)
    est = asyncio.run(critic.estimate(query, 2, sampler))
    np.testing.assert_array_equal(est.values, [1.5, 2.0])
    system, user = build_critic_messages(query)
    assert "between 0 and 2" in system["content"] and "(0 to 2)" in user["content"]


def test_prompt_holds_task_history_privileged_info_and_budget() -> None:
    system, user = build_critic_messages(make_query())
    assert system["role"] == "system" and user["role"] == "user"
    text = user["content"]
    for needle in [
        "find the key",
        "You are in the hall.",
        "WALKTHROUGH: go to room 2",
        "Step 3. Actor: go to room 2",
        "Environment: You arrive at room 2.",
        "Steps left before the episode is cut off: 7",
    ]:
        assert needle in text
    assert "Steps left" not in build_critic_messages(make_query(remaining_steps=None))[1]["content"]


@pytest.mark.parametrize(
    ("n", "omitted", "expected"), [(10, 0, (3, 7)), (10, 4, (2, 4)), (10, 10, (0, 0)), (1, 0, (0, 1))]
)
def test_kept_turns_prefers_recent_turns(n: int, omitted: int, expected: tuple[int, int]) -> None:
    assert kept_turns(n, omitted) == expected


def test_over_budget_prompt_omits_the_fewest_middle_turns() -> None:
    query = make_query(n_turns=30)
    critic = GenerativeCritic(word_renderer, PARAMS, max_prompt_tokens=250)
    full = word_renderer(critic.messages(query, 0))
    assert len(full) > 250
    sampler = ScriptedSampler(["<value>0.5</value>"])
    est = asyncio.run(critic.estimate(query, 3, sampler))
    m = est.omitted_turns
    assert est.prompt_too_long and 0 < m < 30
    assert len(sampler.calls[0][0]) <= 250
    assert len(word_renderer(critic.messages(query, m - 1))) > 250  # minimal
    user = critic.messages(query, m)[1]["content"]
    head, _ = kept_turns(30, m)
    assert "Step 1. Actor: go to room 0" in user and "Step 30. Actor: go to room 29" in user
    assert f"[... steps {head + 1}-{head + m} omitted" in user
    np.testing.assert_array_equal(est.values, [0.5, 0.5, 0.5])


def test_a_history_window_shows_the_last_turns_and_names_the_hidden_ones() -> None:
    """``history_turns = 2`` of 5 turns: the initial situation, a line for steps 1-3, then steps 4 and 5; the
    rest of the prompt is the full prompt's."""
    query = make_query(n_turns=5, privileged_state="The lamp is lit.")
    critic = GenerativeCritic(word_renderer, PARAMS, max_prompt_tokens=10_000, history_turns=2)
    user = critic.messages(query)[1]["content"]
    full = GenerativeCritic(word_renderer, PARAMS, max_prompt_tokens=10_000).messages(query)[1]["content"]
    assert "Initial situation:" in user and "[... steps 1-3 not shown ...]" in user
    assert (
        "Step 3." not in user
        and "Step 4. Actor: go to room 3" in user
        and "Step 5. Actor: go to room 4" in user
    )
    assert "Now (hidden from the agent): The lamp is lit." in user
    kept = [line for line in full.splitlines() if not line.startswith(("Step 1.", "Step 2.", "Step 3."))]
    hidden = {
        "Environment: You arrive at room 0. It is dark here.",
        "Environment: You arrive at room 1. It is dark here.",
        "Environment: You arrive at room 2. It is dark here.",
    }
    assert [line for line in user.splitlines() if line != "[... steps 1-3 not shown ...]"] == [
        line for line in kept if line not in hidden
    ]
    # a window at least as long as the history, and None, change nothing
    for turns in (5, 9, None):
        assert (
            GenerativeCritic(word_renderer, PARAMS, 10_000, history_turns=turns).messages(query)[1]["content"]
            == full
        )
    with pytest.raises(ValueError, match="history_turns must be >= 0"):
        GenerativeCritic(word_renderer, PARAMS, 10_000, history_turns=-1)


def test_the_prompt_budget_omits_middle_turns_of_the_window_only() -> None:
    """30 turns, a window of 12, a budget between the window's empty and full prompts: the omitted turns are
    counted within the window, and the steps named stay the episode's."""
    query = make_query(n_turns=30)
    probe = GenerativeCritic(word_renderer, PARAMS, max_prompt_tokens=10_000, history_turns=12)
    full, empty = (len(word_renderer(probe.messages(query, m))) for m in (0, 12))
    budget = (full + empty) // 2
    critic = GenerativeCritic(word_renderer, PARAMS, max_prompt_tokens=budget, history_turns=12)
    sampler = ScriptedSampler(["<value>0.5</value>"])
    est = asyncio.run(critic.estimate(query, 2, sampler))
    m = est.omitted_turns
    assert est.prompt_too_long and 0 < m < 12 and len(sampler.calls[0][0]) <= budget
    assert len(word_renderer(critic.messages(query, m - 1))) > budget  # minimal
    user = critic.messages(query, m)[1]["content"]
    head, _ = kept_turns(12, m)
    assert "[... steps 1-18 not shown ...]" in user and "Step 18." not in user
    assert f"[... steps {18 + head + 1}-{18 + head + m} omitted to fit the prompt budget ...]" in user
    assert f"Step {18 + head + 1}." not in user and "Step 30. Actor: go to room 29" in user


def test_nothing_fits_means_nan_values_and_no_request() -> None:
    critic = GenerativeCritic(word_renderer, PARAMS, max_prompt_tokens=5)
    sampler = ScriptedSampler(["<value>0.5</value>"])
    est = asyncio.run(critic.estimate(make_query(), 4, sampler))
    assert sampler.calls == [] and est.prompt_too_long and est.samples == ()
    assert est.values.shape == (4,) and np.isnan(est.values).all()
    assert math.isnan(endpoint_value(est))  # never silently 0


def test_bootstrap_value_terminated_is_zero_and_truncated_needs_estimates() -> None:
    est = CriticEstimates(values=np.array([0.4, np.nan, 0.8]), samples=())
    assert bootstrap_value(True, est) == 0.0 and bootstrap_value(True, None) == 0.0
    assert bootstrap_value(False, est) == pytest.approx(0.6)
    with pytest.raises(ValueError, match="truncated endpoint needs critic estimates"):
        bootstrap_value(False, None)


def test_renderer_object_and_hf_style_tokenizer_are_accepted() -> None:
    class Renderer:
        def render_generation_prompt(self, messages: list[dict[str, str]]) -> list[int]:
            return [5] * len(messages)

    class HFLike:
        def apply_chat_template(self, messages: list[dict[str, str]], **kw: object) -> dict[str, list[int]]:
            assert kw == {"add_generation_prompt": True, "tokenize": True}
            return {"input_ids": [9, 9, 9]}

    for renderer, expected in [(Renderer(), (5, 5)), (HFLike(), (9, 9, 9))]:
        critic = GenerativeCritic(renderer, PARAMS, max_prompt_tokens=100)
        assert critic.prompt_tokens(make_query()) == (expected, 0)
    with pytest.raises(TypeError, match="renderer must be a tempo_rl ChatRenderer"):
        GenerativeCritic(42, PARAMS, max_prompt_tokens=100)


def test_bad_inputs_fail_with_clear_messages() -> None:
    with pytest.raises(ValueError, match="r_max must be a finite number > 0"):
        make_query(r_max=0.0)
    with pytest.raises(TypeError, match=r"history\[0\] must be an \(action, observation\) pair"):
        make_query(history=(("only action",),))
    with pytest.raises(ValueError, match="remaining_steps must be >= 0"):
        make_query(remaining_steps=-1)
    critic = GenerativeCritic(word_renderer, PARAMS, max_prompt_tokens=100)
    with pytest.raises(ValueError, match=r"k .* must be >= 1"):
        asyncio.run(critic.estimate(make_query(), 0, ScriptedSampler(["x"])))


def test_with_tempo_rl_chat_renderer_and_offline_tokenizer() -> None:
    pytest.importorskip(
        "transformers", reason="needs the local extra (transformers) for the offline tokenizer"
    )
    from tempo_rl.backends.local.tokenizer import build_tokenizer
    from tempo_rl.rollout.renderer import ChatRenderer

    tokenizer = build_tokenizer(["find the key", "go to room", "<value>0.5</value>"], vocab_size=400)
    critic = GenerativeCritic(ChatRenderer(tokenizer), PARAMS, max_prompt_tokens=100_000)
    query = make_query()
    tokens, omitted = critic.prompt_tokens(query)
    assert omitted == 0 and tokens is not None
    text = tokenizer.decode(list(tokens), skip_special_tokens=False)
    assert "WALKTHROUGH: go to room 2, take key" in text and text.rstrip().endswith("assistant")
    est = asyncio.run(critic.estimate(query, 2, ScriptedSampler(["<value>0.75</value>"])))
    np.testing.assert_array_equal(est.values, [0.75, 0.75])


def test_answer_prefix_ends_the_prompt_and_is_read_before_the_completion() -> None:
    class CharTokenizer:  # one token per character, no special tokens
        def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
            assert add_special_tokens is False
            return [ord(c) for c in text]

        def apply_chat_template(self, messages: list[dict[str, str]], **kw: object) -> list[int]:
            return [1, 2, 3]

    sampler = ScriptedSampler(["0.25</value>", " 0.5 </value> <value>0.75</value>", "</value>", "0.6"])
    critic = GenerativeCritic(CharTokenizer(), PARAMS, max_prompt_tokens=10, answer_prefix="<value>")
    est = asyncio.run(critic.estimate(make_query(), 4, sampler))
    prompt = (1, 2, 3, *map(ord, "<value>"))
    assert tuple(sampler.calls[0][0]) == prompt and all(s.prompt_tokens == prompt for s in est.samples)
    np.testing.assert_array_equal(est.values[:2], [0.25, 0.75])  # read as "<value>" + completion
    assert [s.status for s in est.samples[2:]] == [ValueStatus.MALFORMED, ValueStatus.MISSING]
    # the prefix counts against the prompt budget: 3 + 7 = 10 tokens fit, 9 do not
    tight = GenerativeCritic(CharTokenizer(), PARAMS, max_prompt_tokens=9, answer_prefix="<value>")
    assert critic.prompt_tokens(make_query(0)) == (prompt, 0) and tight.prompt_tokens(make_query(0)) == (
        None,
        0,
    )
    with pytest.raises(TypeError, match="answer_prefix='<value>' needs a renderer that can encode text"):
        GenerativeCritic(word_renderer, PARAMS, max_prompt_tokens=100, answer_prefix="<value>")


@settings(max_examples=200)
@given(n=st.integers(0, 12), window=st.one_of(st.none(), st.integers(0, 14)), data=st.data())
def test_a_window_shows_the_last_turns_in_order_with_every_hidden_step_named(
    n: int, window: int | None, data: st.DataObject
) -> None:
    """Any history, window and omission: the Step lines shown are the window's last turns minus the omitted middle
    ones, numbered as in the episode, and the hidden and omitted steps are named by exactly the lines that say so."""
    history = [(f"act {i}", f"obs {i}") for i in range(n)]
    shown = shown_turns(n, window)
    omitted = data.draw(st.integers(0, shown))
    text = condense_history("start", history, omitted, history_turns=window)
    steps = [
        int(line.split(".")[0].removeprefix("Step ")) for line in text.splitlines() if line.startswith("Step")
    ]
    start = n - shown
    head, tail = kept_turns(shown, omitted)
    assert steps == [start + i + 1 for i in range(head)] + list(range(n - tail + 1, n + 1))
    assert (f"[... steps 1-{start} not shown ...]" in text) == (start > 0)
    assert ("omitted to fit the prompt budget" in text) == (omitted > 0)
    if omitted:  # the gap names the steps between the kept head and tail
        assert f"[... steps {start + head + 1}-{start + head + omitted} omitted" in text
        assert start + head + omitted == n - tail
    if window is None or window >= n:
        assert text == condense_history("start", history, omitted)
