"""GiGPO updates on KeyDoor with a scripted actor (no model): per-round advantages, their Datums, GRPO at w = 0."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from trainer_doubles import scripted_components, tiny_config

from tempo_rl.rollout.branches import BranchResult, TokenSequence
from tempo_rl.training.gigpo import GigpoTrainer
from tempo_rl.training.grpo import GrpoTrainer

GROUPS = ("grpo.updates=1", "grpo.games_per_batch=2", "grpo.group_size=4")


def _run(trainer_cls: type, *overrides: str) -> tuple[dict, list, list]:
    cfg = tiny_config('algorithm="gigpo"', *GROUPS, *overrides)
    comps, _sampler, training = scripted_components(cfg, p_right=0.5)
    records: list = []
    metrics = asyncio.run(trainer_cls(cfg, comps, write_trajectories=records.extend).update(0))
    datums = [d for name, payload in training.calls if name == "forward_backward" for d in payload]
    return metrics, records, datums


def _discounted(rewards: list[float], gamma: float) -> float:
    return float(sum(gamma**t * r for t, r in enumerate(rewards)))


def test_gigpo_round_zero_adds_the_start_states_step_advantage() -> None:
    """Every branch of a game starts in the same state, so round 0's advantage is, by hand,
    A_{n,0} = (R_n - mean R) + (R_{n,0} - mean R_{.,0}) with R_{n,0} = sum_t 0.95**t r_t."""
    metrics, records, _ = _run(GigpoTrainer)
    assert len(records) == 8 and {r["phase"] for r in records} == {"gigpo"}
    for game in range(2):
        group = records[game * 4 : (game + 1) * 4]
        returns = np.array([sum(r["rewards"]) for r in group])
        disc = np.array([_discounted(r["rewards"], 0.95) for r in group])
        assert returns.std() > 0  # the scripted expert wins some and loses some: a signal at both levels
        for n, r in enumerate(group):
            assert len(r["advantage"]) == len(r["actions"])
            expected = (returns[n] - returns.mean()) + (disc[n] - disc.mean())
            assert r["advantage"][0] == pytest.approx(expected)
    assert metrics["train/phase"] == 3.0
    assert metrics["gigpo/anchor_groups"] >= 2  # at least the two start states
    assert 0.0 < metrics["gigpo/shared_step_share"] <= 1.0
    assert 0.0 < metrics["gigpo/step_advantage_share"] < 1.0
    json.dumps(metrics)


def test_gigpo_datums_carry_each_turns_advantage() -> None:
    _, records, datums = _run(GigpoTrainer)
    trained = [r for r in records if any(abs(a) > 1e-12 for a in r["advantage"])]
    assert len(datums) == len(trained)
    for datum, record in zip(datums, trained):
        adv = np.asarray(datum.loss_fn_inputs["advantages"])
        # the sampled tokens' advantages, run-length collapsed: one run per turn, in turn order
        values = [float(a) for a in adv[adv != 0]]
        runs = [v for i, v in enumerate(values) if i == 0 or v != values[i - 1]]
        expected = [a for i, a in enumerate(record["advantage"]) if a != 0]
        collapsed = [float(np.float32(v)) for i, v in enumerate(expected) if i == 0 or v != expected[i - 1]]
        assert runs == pytest.approx(collapsed, rel=1e-6)


def test_gigpo_without_its_step_level_is_grpo() -> None:
    """w = 0: the same Datums as GRPO on the same rollouts."""
    _, grpo_records, grpo_datums = _run(GrpoTrainer)
    _, records, datums = _run(GigpoTrainer, "gigpo.step_weight=0.0")
    assert [r["actions"] for r in records] == [r["actions"] for r in grpo_records]
    assert len(datums) == len(grpo_datums) > 0
    for ours, theirs in zip(datums, grpo_datums):
        assert list(ours.model_input) == list(theirs.model_input)
        np.testing.assert_allclose(ours.loss_fn_inputs["advantages"], theirs.loss_fn_inputs["advantages"])


def _branch() -> BranchResult:
    """A 3-round branch whose chat template restarted after round 1: rounds 0-1 in sequence 0, round 2 in 1."""
    b = BranchResult(start_index=0, tokens=[9, 9, 7, 7, 8], prefix_len=2, logprobs=[0.0] * 5, sampled_mask=[])
    b.sampled_mask = [False, False, True, True, False]
    b.earlier = [
        TokenSequence((1, 1, 5, 5, 2, 6, 6), (0.0,) * 7, (False, False, True, True, False, True, True))
    ]
    b.turn_starts, b.turn_seq, b.rounds = [2, 5, 2], [0, 0, 1], 3
    return b


def test_turn_values_follow_the_turns_across_a_template_restart() -> None:
    first, second = _branch().turn_values([0.5, -1.0, 2.0])
    assert first.tolist() == [0.0, 0.0, 0.5, 0.5, 0.5, -1.0, -1.0]
    assert second.tolist() == [0.0, 0.0, 2.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="per_round has 2 numbers for a branch of 3 rounds"):
        _branch().turn_values([0.5, -1.0])
