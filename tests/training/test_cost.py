"""The ``cost/*`` metrics: tokens processed (prefill + sampled + trained) and env steps, cumulative per run."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from trainer_doubles import ScriptedSampler, scripted_components, tiny_config

from tempo_rl.backends.types import SampledSequence, SampleResult, SamplingParams
from tempo_rl.critic.base import CriticEstimates, CriticSample
from tempo_rl.rollout.branches import RolloutStats
from tempo_rl.rollout.datums import make_datum
from tempo_rl.training.cost import CostLedger
from tempo_rl.training.critics import state_critic
from tempo_rl.training.grpo import GrpoTrainer
from tempo_rl.training.tempo import TempoTrainer
from tempo_rl.training.trainer import TrainerState

COST_KEYS = {
    "cost/prefill_tokens",
    "cost/sampled_tokens",
    "cost/trained_tokens",
    "cost/tokens",
    "cost/env_steps",
}


def _estimates(prompt_len: int, completions: Sequence[int]) -> CriticEstimates:
    samples = tuple(
        CriticSample(
            prompt_tokens=tuple(range(prompt_len)),
            sequence=SampledSequence(tokens=tuple(range(n)), logprobs=(-0.1,) * n, text="x"),
            value=0.5,
        )
        for n in completions
    )
    return CriticEstimates(values=np.full(len(samples), 0.5), samples=samples)


def test_the_ledger_adds_what_each_call_sends_by_hand() -> None:
    ledger = CostLedger()
    # a rollout: 3 requests whose prompts sum to 100 tokens, 12 sampled tokens, 5 env steps
    ledger.add_rollout(RolloutStats(prompt_tokens=100, sampled_tokens=12, turns=5))
    # two critic requests: 40-token prompt x K=3 samples of 2, 2, 3 tokens; 30-token prompt x 1 sample of 4;
    # an estimate with no samples (prompt too long) sent nothing
    ledger.add_estimates([_estimates(40, [2, 2, 3]), _estimates(30, [4]), _estimates(10, [])])
    # two Datums of 7 and 5 tokens: model_input has 6 and 4
    ledger.add_datums(
        [make_datum(list(range(7)), [0.0] * 7, [1.0] * 7), make_datum([1] * 5, [0.0] * 5, [0.5] * 5)]
    )
    ledger.add_logprob_calls([9, 11])  # prefix correction / KL reference: forward passes over 9 and 11 tokens
    # a Monte Carlo critic's own rollouts between two readings
    before = {"prefill_tokens": 50, "sampled_tokens": 6, "env_steps": 4, "queries": 1, "rollouts": 2}
    after = {"prefill_tokens": 80, "sampled_tokens": 10, "env_steps": 7, "queries": 2, "rollouts": 4}
    ledger.add_critic_work(before, after)
    ledger.add_rollout(RolloutStats(prompt_tokens=1000, sampled_tokens=100, turns=50), evaluation=True)

    prefill = 100 + 40 + 30 + 9 + 11 + 30  # 220
    sampled = 12 + 7 + 4 + 4  # 27
    trained = 6 + 4
    assert ledger.metrics(critic=True) == {
        "cost/prefill_tokens": prefill,
        "cost/sampled_tokens": sampled,
        "cost/trained_tokens": trained,
        "cost/tokens": prefill + sampled + trained,
        "cost/env_steps": 5 + 3,
        "eval/cost_tokens": 1100,  # kept apart: in no other figure
        "eval/cost_env_steps": 50,
        "critic/mc_queries": 1,
        "critic/mc_rollouts": 2,
        "critic/mc_env_steps": 3,
        "critic/mc_prefill_tokens": 30,
        "critic/mc_sampled_tokens": 4,
    }
    assert set(ledger.metrics()) == COST_KEYS | {"eval/cost_tokens", "eval/cost_env_steps"}
    assert set(CostLedger(prefill_tokens=3).metrics()) == COST_KEYS  # nothing evaluated yet
    assert CostLedger.from_json(json.loads(json.dumps(ledger.to_json()))) == ledger
    assert CostLedger.from_json(None) == CostLedger() == CostLedger.from_json({})


def test_bad_counters_are_refused_with_their_names() -> None:
    with pytest.raises(ValueError, match="went down"):
        CostLedger().add_critic_work(
            {"prefill_tokens": 5, "sampled_tokens": 0, "env_steps": 0, "queries": 0, "rollouts": 0},
            {"prefill_tokens": 4, "sampled_tokens": 0, "env_steps": 0, "queries": 0, "rollouts": 0},
        )
    with pytest.raises(ValueError, match="unknown cost counters"):
        CostLedger.from_json({"prefill_tokens": 1, "tokens_typo": 2})


class _CountingSampler(ScriptedSampler):
    """The scripted sampler, also logging the sampled lengths and every ``compute_logprobs`` call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sampled: list[int] = []
        self.logprob_calls: list[int] = []

    def sample(self, prompt: Sequence[int], num_samples: int, params: SamplingParams) -> SampleResult:
        result = super().sample(prompt, num_samples, params)
        self.sampled.extend(len(s.tokens) for s in result.sequences)
        return result

    def compute_logprobs(self, tokens: Sequence[int]) -> list[float | None]:
        self.logprob_calls.append(len(tokens))
        return super().compute_logprobs(tokens)


def _counting(cfg: Any) -> tuple[Any, _CountingSampler, Any]:
    comps, plain, training = scripted_components(cfg, p_right=0.5, undecided=0.5)
    sampler = _CountingSampler(plain.tokenizer, p_right=0.5, undecided=0.5)
    comps.sampler = sampler
    training.sampler = sampler
    return comps, sampler, training


def _trained(training: Any) -> int:
    return sum(len(d.model_input) for name, p in training.calls if name == "forward_backward" for d in p)


@pytest.mark.parametrize("algorithm", ["tempo", "grpo"])
def test_every_update_reports_what_the_backend_was_sent(algorithm: str) -> None:
    """Each update's cumulative cost/* equals the totals of what the sampler and training client received:
    the prompts of every sample request (actor and critic), every compute_logprobs call (prefix correction and
    the KL reference), the sampled tokens and the Datums' model inputs; env steps = the rollouts' turns."""
    common = ("run.eval_every=0", "kl.coef=0.1", "run.seed=3")
    if algorithm == "tempo":
        cfg = tiny_config(
            "tempo.warmup_updates=1", "tempo.td_updates=3", "tempo.prefix_correction='ratio'", *common
        )
        cls: Any = TempoTrainer
    else:
        cfg = tiny_config("algorithm='grpo'", "grpo.updates=2", *common)
        cls = GrpoTrainer
    comps, sampler, training = _counting(cfg)
    logged: list[dict[str, float]] = []
    trainer = cls(cfg, comps, log=lambda step, m: logged.append(dict(m)))
    turns = 0
    for _ in range(trainer.total_updates()):
        trainer.train(max_updates=1)
        m = logged[-1]
        turns += int(m["rollout/turns"])
        assert set(m) >= COST_KEYS
        assert m["cost/prefill_tokens"] == sum(n for n, _ in sampler.requests) + sum(sampler.logprob_calls)
        assert m["cost/sampled_tokens"] == sum(sampler.sampled)
        assert m["cost/trained_tokens"] == _trained(training)
        assert (
            m["cost/tokens"] == m["cost/prefill_tokens"] + m["cost/sampled_tokens"] + m["cost/trained_tokens"]
        )
        assert m["cost/env_steps"] == turns
        assert "eval/cost_tokens" not in m and "eval/cost_env_steps" not in m  # nothing was evaluated
    assert sampler.logprob_calls  # the KL reference (and, for TEMPO, the prefix correction) was asked
    assert logged[-1]["cost/trained_tokens"] > 0


def test_evaluation_is_counted_apart() -> None:
    cfg = tiny_config("algorithm='grpo'", "grpo.updates=2", "run.eval_every=1", "run.eval_episodes=2")
    comps, sampler, _training = _counting(cfg)
    logged: list[dict[str, float]] = []
    trainer = GrpoTrainer(cfg, comps, log=lambda step, m: logged.append(dict(m)))
    trainer.train(max_updates=1)
    train_prefill = logged[-1]["cost/prefill_tokens"]
    n_requests = len(sampler.requests)
    eval_tokens = logged[-1]["eval/cost_tokens"]
    assert eval_tokens > 0 and logged[-1]["eval/cost_env_steps"] > 0
    asyncio.run(trainer.evaluate(2))
    extra = sampler.requests[n_requests:]  # the evaluation's requests only
    assert trainer.cost.eval_prefill_tokens + trainer.cost.eval_sampled_tokens == eval_tokens + sum(
        n for n, _ in extra
    ) + sum(sampler.sampled[-sum(k for _, k in extra) :])
    assert trainer.cost.prefill_tokens == train_prefill  # training figures did not move
    trainer.train(max_updates=1)
    # what was sent, less what evaluation sent, is the training prefill
    assert (
        logged[-1]["cost/prefill_tokens"]
        == sum(n for n, _ in sampler.requests) - trainer.cost.eval_prefill_tokens
    )


def test_the_monte_carlo_critic_counts_in_its_run() -> None:
    cfg = tiny_config(
        "tempo.critic='monte_carlo'",
        "tempo.critic_rollouts=2",
        "tempo.warmup_updates=0",
        "tempo.td_updates=2",
        "tempo.endpoint_samples=1",
        "run.eval_every=0",
    )
    comps, sampler, _training = _counting(cfg)
    comps.critic = state_critic(cfg, comps.chat, pool=comps.pool, restore_branches=comps.restore_branches)
    logged: list[dict[str, float]] = []
    trainer = TempoTrainer(cfg, comps, log=lambda step, m: logged.append(dict(m)))
    trainer.train()
    m = logged[-1]
    turns = sum(int(r["rollout/turns"]) for r in logged)
    critic = comps.critic
    assert m["critic/mc_env_steps"] == critic.env_steps > 0
    assert m["critic/mc_queries"] == critic.queries and m["critic/mc_rollouts"] == critic.rollouts_played
    assert m["critic/mc_prefill_tokens"] == critic.prompt_tokens
    assert m["critic/mc_sampled_tokens"] == critic.sampled_tokens
    assert m["cost/env_steps"] == turns + critic.env_steps  # the critic's rollouts are in the run's budget
    assert m["cost/prefill_tokens"] == sum(n for n, _ in sampler.requests) + sum(sampler.logprob_calls)
    assert m["cost/sampled_tokens"] == sum(sampler.sampled)


def test_a_resumed_run_keeps_counting_from_its_checkpointed_totals() -> None:
    overrides = ("tempo.warmup_updates=1", "tempo.td_updates=3", "run.eval_every=2", "run.eval_episodes=2")
    cfg = tiny_config(*overrides)
    whole: list[dict[str, float]] = []
    comps, _, _ = scripted_components(cfg, p_right=0.5, undecided=0.5)
    TempoTrainer(cfg, comps, log=lambda step, m: whole.append(dict(m))).train()

    parts: list[dict[str, float]] = []
    comps, _, _ = scripted_components(cfg, p_right=0.5, undecided=0.5)
    first = TempoTrainer(cfg, comps, log=lambda step, m: parts.append(dict(m)))
    first.train(max_updates=2)
    saved = json.loads(json.dumps(first.state.to_json()))  # what checkpoint.json holds
    assert saved["cost"]["prefill_tokens"] == parts[-1]["cost/prefill_tokens"] > 0
    # a new process: fresh components (the store carries over, as a checkpoint restores it)
    comps2, _, _ = scripted_components(cfg, p_right=0.5, undecided=0.5)
    comps2.store = comps.store
    resumed = TempoTrainer(
        cfg, comps2, state=TrainerState.from_json(saved), log=lambda s, m: parts.append(dict(m))
    )
    resumed.train()
    assert len(parts) == len(whole)
    for key in COST_KEYS | {"eval/cost_tokens", "eval/cost_env_steps"}:
        assert [p.get(key) for p in parts] == [w.get(key) for w in whole], key
    assert whole[-1]["eval/cost_env_steps"] > 0
