"""The generative critic's constrained / expected answers: the level grid, the restricted distribution over the
valid answers, the exact expectation, and that every constrained answer parses whatever the model's scores."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo_rl.backends.types import SamplingParams
from tempo_rl.critic import (
    CriticEstimates,
    CriticQuery,
    GenerativeCritic,
    ValueStatus,
    classify_value,
    endpoint_value,
    expected_value,
    format_level,
    level_values,
    restricted_probs,
)
from tempo_rl.critic.levels import two_hot

PARAMS = SamplingParams(max_tokens=6)
PROMPT = (1, 2, 3)


class CharTokenizer:
    """One token per character (its code point); the chat template renders every chat as ``PROMPT``."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) for c in text]

    def apply_chat_template(self, messages: object, **kw: object) -> list[int]:
        return list(PROMPT)


class TableScorer:
    """``compute_logprobs_async``: each token's logprob is ``table[token]`` (``default`` for the others), the
    same whatever precedes it; records every scored sequence. Never samples."""

    def __init__(self, table: Mapping[int, float], default: float = math.log(0.5)) -> None:
        self.table = dict(table)
        self.default = default
        self.scored: list[list[int]] = []

    async def compute_logprobs_async(self, tokens: Sequence[int]) -> list[float | None]:
        self.scored.append(list(tokens))
        return [None, *(self.table.get(int(t), self.default) for t in tokens[1:])]

    async def sample_async(self, *args: object) -> object:
        raise AssertionError("a constrained critic never samples free text")


def query(r_max: float = 1.0) -> CriticQuery:
    return CriticQuery(task="find the key", history=(), initial_observation="a hall", r_max=r_max)


def critic(answer: str, levels: int = 2, prefix: str = "<value>") -> GenerativeCritic:
    return GenerativeCritic(
        CharTokenizer(),
        PARAMS,
        max_prompt_tokens=100,
        answer_prefix=prefix,
        answer=answer,  # type: ignore[arg-type]
        levels=levels,
    )


# ------------------------------------------------------------------------------------------ levels, hand numbers


def test_level_grid_and_its_texts() -> None:
    assert level_values(2) == (0.0, 1.0)
    assert level_values(5, r_max=2.0) == (0.0, 0.5, 1.0, 1.5, 2.0)
    assert [format_level(v, 2) for v in level_values(2)] == ["0", "1"]
    assert [format_level(v, 2, 3.0) for v in level_values(2, 3.0)] == ["0", "3"]
    assert [format_level(v, 11) for v in level_values(11)][:3] == ["0.0", "0.1", "0.2"]
    assert [format_level(v, 5) for v in level_values(5)] == ["0.00", "0.25", "0.50", "0.75", "1.00"]
    for bad in (1, 102, 2.0, True):
        with pytest.raises(ValueError, match=r"levels must be an int in \[2, 101\]"):
            level_values(bad)  # type: ignore[arg-type]


def test_restricted_probs_and_expectation_by_hand() -> None:
    # p = 0.05, 0.15, 0.30 over the answers 0, 0.5, 1 (the other 0.5 of the mass is off the answer set)
    lp = [math.log(0.05), math.log(0.15), math.log(0.30)]
    np.testing.assert_allclose(restricted_probs(lp), [0.1, 0.3, 0.6], rtol=1e-12)
    assert expected_value(lp, [0.0, 0.5, 1.0]) == pytest.approx(0.3 * 0.5 + 0.6, abs=1e-12)  # 0.75
    # a model that has moved almost all its mass away from the answers still reads: exp(-1000) underflows
    np.testing.assert_allclose(
        restricted_probs([-1000.0, -1001.0]), [1 / (1 + math.e**-1), 1 / (1 + math.e)], rtol=1e-12
    )
    assert restricted_probs([-math.inf, -3.0]).tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="all logprobs are -inf"):
        restricted_probs([-math.inf, -math.inf])
    with pytest.raises(ValueError, match="finite or -inf"):
        restricted_probs([math.nan, 0.0])
    with pytest.raises(ValueError, match="2 answer logprobs but 3 values"):
        expected_value([0.0, 0.0], [0.0, 0.5, 1.0])


# ------------------------------------------------------------------------------------------ the critic


def test_constrained_critic_scores_each_answer_and_draws_from_the_restricted_distribution() -> None:
    # '0' has p = 0.2, '1' has p = 0.6, every other token 0.5: q = (0.25, 0.75), V = 0.75
    scorer = TableScorer({ord("0"): math.log(0.2), ord("1"): math.log(0.6)})
    est = asyncio.run(critic("expected").estimate(query(), 4000, scorer, seed=7))
    answers = [list(map(ord, "0</value>")), list(map(ord, "1</value>"))]
    prompt = [*PROMPT, *map(ord, "<value>")]
    assert sorted(scorer.scored) == sorted([[*prompt, *a] for a in answers])  # one scoring per answer
    assert est.expectation == pytest.approx(0.75, abs=1e-12)
    assert endpoint_value(est) == est.expectation  # the bootstrap reads the expectation, not the draws
    assert est.parse_failures == 0 and {s.status for s in est.samples} == {ValueStatus.OK}
    assert abs(float(est.values.mean()) - 0.75) < 0.03  # 4000 draws: 4.4 standard errors
    one = next(s for s in est.samples if s.value == 1.0)
    assert one.sequence.text == "1</value>" and one.prompt_tokens == (*PROMPT, *map(ord, "<value>"))
    # the unrestricted per-token logprobs, which the learner computes on the same weights (ratio 1)
    assert one.sequence.logprobs == pytest.approx((math.log(0.6), *[math.log(0.5)] * 8))
    again = asyncio.run(critic("expected").estimate(query(), 4000, scorer, seed=7))
    np.testing.assert_array_equal(again.values, est.values)  # seeded


def test_expected_answers_carry_every_scored_answer_for_the_log_loss() -> None:
    scorer = TableScorer({ord("0"): math.log(0.2), ord("1"): math.log(0.6)})
    est = asyncio.run(critic("expected", levels=3).estimate(query(), 2, scorer, seed=3))
    assert [a.sequence.text for a in est.answers] == ["0.0</value>", "0.5</value>", "1.0</value>"]
    assert [a.value for a in est.answers] == [0.0, 0.5, 1.0]
    assert all(a.prompt_tokens == (*PROMPT, *map(ord, "<value>")) for a in est.answers)
    # "0.5</value>": "0" (0.2), then 10 characters at 0.5; the unrestricted per-token logprobs of each answer
    assert est.answers[1].sequence.logprobs == pytest.approx((math.log(0.2), *[math.log(0.5)] * 10))
    assert est.answers[2].sequence.logprobs[0] == pytest.approx(math.log(0.6))


def test_two_hot_by_hand() -> None:
    assert two_hot(0.3, 2).tolist() == pytest.approx([0.7, 0.3])
    assert two_hot(0.6, 5).tolist() == pytest.approx([0.0, 0.0, 0.6, 0.4, 0.0])  # 0.6 = 2.4 quarters
    assert two_hot(1.5, 3, r_max=2.0).tolist() == pytest.approx([0.0, 0.5, 0.5])
    assert two_hot(1.0, 2).tolist() == [0.0, 1.0] and two_hot(0.0, 4).tolist() == [1.0, 0.0, 0.0, 0.0]
    assert two_hot(-0.2, 2).tolist() == [1.0, 0.0] and two_hot(1.3, 2).tolist() == [0.0, 1.0]  # clipped
    with pytest.raises(ValueError, match="the target must be finite"):
        two_hot(math.nan, 2)


@settings(max_examples=200)
@given(g=st.floats(-0.5, 2.5), levels=st.integers(2, 21), r_max=st.sampled_from([1.0, 2.0, 0.5]))
def test_two_hot_is_a_distribution_on_two_neighbours_whose_mean_is_the_clipped_target(
    g: float, levels: int, r_max: float
) -> None:
    w = two_hot(g, levels, r_max)
    assert (w >= 0).all() and w.sum() == pytest.approx(1.0, abs=1e-12)
    assert float(np.dot(w, level_values(levels, r_max))) == pytest.approx(min(max(g, 0.0), r_max), abs=1e-9)
    support = np.flatnonzero(w > 1e-12)
    assert support.size <= 2 and (support.size < 2 or support[1] == support[0] + 1)


def test_constrained_mode_has_no_expectation_and_bootstraps_from_the_draws() -> None:
    scorer = TableScorer({ord("0"): math.log(0.2), ord("1"): math.log(0.6)})
    est = asyncio.run(critic("constrained").estimate(query(), 3, scorer, seed=1))
    assert est.expectation is None and est.answers == ()
    assert endpoint_value(est) == pytest.approx(float(est.values.mean()))
    assert set(est.values.tolist()) <= {0.0, 1.0}


def test_answers_stay_readable_when_the_model_puts_no_mass_on_them() -> None:
    # the collapsed model of the main job: the answer tokens have logprob -200 and -199
    scorer = TableScorer({ord("0"): -200.0, ord("1"): -199.0}, default=-50.0)
    est = asyncio.run(critic("expected").estimate(query(), 8, scorer, seed=0))
    assert est.parse_failures == 0
    assert est.expectation == pytest.approx(math.e / (1 + math.e), rel=1e-12)


def test_bad_settings_fail_with_clear_messages() -> None:
    with pytest.raises(ValueError, match="answer must be one of"):
        critic("greedy")
    with pytest.raises(ValueError, match="levels must be an int"):
        critic("expected", levels=1)
    with pytest.raises(TypeError, match="answer='expected' needs a renderer that can encode text"):
        GenerativeCritic(lambda m: [1], PARAMS, max_prompt_tokens=10, answer="expected")

    class Collapsing(CharTokenizer):
        def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
            return [5]

    same = GenerativeCritic(Collapsing(), PARAMS, max_prompt_tokens=10, answer="constrained")
    with pytest.raises(ValueError, match="encode to the same tokens"):
        asyncio.run(same.estimate(query(), 2, TableScorer({}), seed=0))


def test_the_config_keeps_remote_backends_sampled() -> None:
    from tempo_rl.training.config import ConfigError, TrainConfig, validate_config

    local = validate_config({"sampling": {"critic_answer": "expected"}})
    assert isinstance(local, TrainConfig) and local.sampling.critic_answer == "expected"
    with pytest.raises(
        ConfigError, match=r"keeps the sampled answer: set sampling\.critic_answer = .sampled."
    ):
        validate_config(
            {"backend": {"kind": "pytrio", "base_model": "m"}, "sampling": {"critic_answer": "constrained"}}
        )


def test_critic_metrics_read_the_expectation() -> None:
    from tempo_rl.training.metrics import critic_metrics

    # two states, K = 2: expectations 0.75 (target 1) and 0.5 (target 0); the draws are ignored
    a = CriticEstimates(values=np.array([0.0, 0.0]), samples=(), expectation=0.75)
    b = CriticEstimates(values=np.array([1.0, 1.0]), samples=(), expectation=0.5)
    m = critic_metrics([a, b], [1.0, 0.0])
    assert m["critic/abs_error_mean"] == pytest.approx((0.25 + 0.5) / 2)
    assert m["critic/mean_estimate_mean"] == pytest.approx(0.625)
    assert m["critic/value_corr"] == pytest.approx(1.0)
    assert m["critic/parse_failure_rate"] == 0.0
    with pytest.raises(ValueError, match="expectation must be finite"):
        CriticEstimates(values=np.array([0.0]), samples=(), expectation=math.nan)


# ------------------------------------------------------------------------------------------ property


@settings(max_examples=40)
@given(
    levels=st.integers(min_value=2, max_value=101),
    r_max=st.sampled_from([1.0, 0.5, 2.0, 3.0, 10.0, 100.0]),
    prefix=st.sampled_from(["", "<value>", "<val", "Answer: ", "<value>0"]),
    logprobs=st.lists(st.floats(min_value=-1e4, max_value=0.0), min_size=1, max_size=16),
    k=st.integers(min_value=1, max_value=8),
    seed=st.integers(min_value=0, max_value=2**31 - 2),
)
def test_every_constrained_answer_parses_to_its_level(
    levels: int, r_max: float, prefix: str, logprobs: list[float], k: int, seed: int
) -> None:
    """Whatever the model's scores (any logprobs, here per character class), every sample is a valid answer
    that the strict parser reads back, unclipped, as the grid level it stands for."""
    table = {ord(c): logprobs[i % len(logprobs)] for i, c in enumerate("0123456789.<>/valuer")}
    est = asyncio.run(
        critic("expected", levels=levels, prefix=prefix).estimate(
            query(r_max), k, TableScorer(table), seed=seed
        )
    )
    grid = level_values(levels, r_max)
    assert est.parse_failures == 0 and len(est.samples) == k
    for sample in est.samples:
        read = classify_value(prefix + sample.sequence.text, r_max)
        assert read.status is ValueStatus.OK and read.value == sample.value  # the value it writes
        assert any(abs(sample.value - v) <= 5e-5 for v in grid)  # a grid level, to the 4 decimals written
    assert est.expectation is not None and 0.0 <= est.expectation <= r_max + 1e-9


class SharedScorer(TableScorer):
    """A :class:`TableScorer` that also scores a whole answer grid after one prompt
    (``score_continuations_async``, the local backend's shared prefill)."""

    def __init__(self, table: Mapping[int, float], default: float = math.log(0.5)) -> None:
        super().__init__(table, default)
        self.shared: list[tuple[list[int], list[list[int]]]] = []

    async def score_continuations_async(
        self, prompt: Sequence[int], continuations: Sequence[Sequence[int]]
    ) -> list[list[float]]:
        self.shared.append((list(prompt), [list(c) for c in continuations]))
        return [[self.table.get(int(t), self.default) for t in c] for c in continuations]


def test_a_shared_prompt_scorer_scores_the_grid_in_one_call_with_the_same_result() -> None:
    table = {ord("0"): math.log(0.2), ord("1"): math.log(0.6)}
    shared, single = SharedScorer(table), TableScorer(table)
    est = asyncio.run(critic("expected").estimate(query(), 8, shared, seed=7))
    ref = asyncio.run(critic("expected").estimate(query(), 8, single, seed=7))
    prompt = [*PROMPT, *map(ord, "<value>")]
    assert shared.scored == [] and shared.shared == [
        (prompt, [list(map(ord, "0</value>")), list(map(ord, "1</value>"))])
    ]
    assert est.expectation == ref.expectation == pytest.approx(0.75, abs=1e-12)
    np.testing.assert_array_equal(est.values, ref.values)
    assert [a.sequence.logprobs for a in est.answers] == [a.sequence.logprobs for a in ref.answers]
