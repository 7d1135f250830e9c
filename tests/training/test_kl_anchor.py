"""The KL anchor (``kl.coef``) in the trainers: which tokens it trains, its numbers, and its reference policy."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from trainer_doubles import ScriptedSampler, scripted_components, tiny_config

from tempo_rl.training.grpo import GrpoTrainer
from tempo_rl.training.tempo import TempoTrainer


class _Reference(ScriptedSampler):
    """A reference policy that gave every token logprob -1.25: k_t = -0.25 - (-1.25) = 1 nat per token."""

    nominal_logprob = -1.25


def _setup(*overrides: str, reference: bool = True):
    cfg = tiny_config(*overrides)
    comps, sampler, training = scripted_components(cfg, p_right=0.5, undecided=0.5)
    if reference:
        training.reference = _Reference(sampler.tokenizer)
    trajectories: list = []
    trainer = TempoTrainer(cfg, comps, write_trajectories=lambda recs: trajectories.extend(recs))
    return trainer, training, trajectories


def _sent(training, role: str) -> list:
    return [
        d for name, p in training.calls if name == "forward_backward" for d in p if d.tags.get("role") == role
    ]


def _sampled(datum) -> np.ndarray:
    return np.asarray(datum.loss_fn_inputs["logprobs"]) != 0  # context tokens carry logprob 0


CRITIC_ONLY = "tempo.warmup_trains_actor=false"  # the warm-up whose actor waits: the anchor alone trains it


def test_warmup_trains_every_episode_by_the_anchor_alone() -> None:
    trainer, training, trajectories = _setup(
        "tempo.warmup_updates=1", "tempo.td_updates=0", "kl.coef=0.1", CRITIC_ONLY
    )
    metrics = asyncio.run(trainer.warmup_update(0))
    actor = _sent(training, "actor")
    assert len(actor) == len(trajectories) == 8  # 2 games x 4 branches, one sequence each
    for d in actor:
        adv, sampled = np.asarray(d.loss_fn_inputs["advantages"]), _sampled(d)
        assert np.allclose(adv[sampled], -0.1)  # A = 0 in warm-up; -beta * k = -0.1 * 1 nat
        assert np.all(adv[~sampled] == 0.0)
    assert metrics["kl/ref_k1_mean"] == pytest.approx(1.0)
    assert metrics["kl/anchored_tokens"] == sum(int(_sampled(d).sum()) for d in actor)
    assert metrics["train/actor_datums"] == 8
    # the reference was saved once, when it was first needed, and is recorded for a resume
    assert trainer.state.kl_reference == "memory://kl-reference"
    assert [c for c in training.calls if c[0] == "save_state"] == [("save_state", "kl-reference")]


def test_no_anchor_datum_while_the_policy_equals_its_reference() -> None:
    trainer, training, _ = _setup(
        "tempo.warmup_updates=1", "tempo.td_updates=0", "kl.coef=0.1", CRITIC_ONLY, reference=False
    )
    metrics = asyncio.run(trainer.warmup_update(0))
    assert _sent(training, "actor") == []  # k_t = 0 on every token and A = 0: nothing to send
    assert metrics["kl/ref_k1_mean"] == 0.0 and metrics["kl/anchored_tokens"] > 0


def test_warmup_without_the_anchor_stays_critic_only() -> None:
    trainer, training, _ = _setup("tempo.warmup_updates=1", "tempo.td_updates=0", CRITIC_ONLY)
    metrics = asyncio.run(trainer.warmup_update(0))
    assert _sent(training, "actor") == [] and "kl/ref_k1_mean" not in metrics
    assert not [c for c in training.calls if c[0] == "save_state"]


def test_td_advantages_are_the_branch_advantage_minus_beta_k_and_degenerate_groups_get_the_anchor() -> None:
    common = ("tempo.warmup_updates=0", "tempo.td_updates=1", "tempo.fresh_share=1.0")
    plain, plain_training, plain_traj = _setup(*common)
    asyncio.run(plain.td_update(0))
    anchored, training, traj = _setup(*common, "kl.coef=0.1")
    metrics = asyncio.run(anchored.td_update(0))
    assert [r["actions"] for r in traj] == [r["actions"] for r in plain_traj]  # the same rollouts
    advantages = [r["advantage"] for r in traj]
    actor = _sent(training, "actor")
    assert len(actor) == len(traj) == 8  # zero-advantage branches are trained by the anchor too
    for d, a in zip(actor, advantages):
        adv, sampled = np.asarray(d.loss_fn_inputs["advantages"]), _sampled(d)
        assert np.allclose(adv[sampled], a - 0.1)
    assert len(_sent(plain_training, "actor")) == sum(abs(a) > 1e-12 for a in advantages)
    assert metrics["kl/ref_k1_mean"] == pytest.approx(1.0)


def test_grpo_applies_the_anchor_to_every_branch() -> None:
    cfg = tiny_config(
        'algorithm="grpo"', "grpo.updates=1", "grpo.games_per_batch=2", "grpo.group_size=4", "kl.coef=0.2"
    )
    comps, sampler, training = scripted_components(cfg, p_right=0.5)
    training.reference = _Reference(sampler.tokenizer)
    recs: list = []
    metrics = asyncio.run(GrpoTrainer(cfg, comps, write_trajectories=lambda r: recs.extend(r)).update(0))
    actor = _sent(training, "actor")
    assert len(actor) == 8
    for d, r in zip(actor, recs):
        adv, sampled = np.asarray(d.loss_fn_inputs["advantages"]), _sampled(d)
        assert np.allclose(adv[sampled], r["advantage"] - 0.2)
    assert metrics["kl/ref_k1_mean"] == pytest.approx(1.0)


def test_a_resumed_run_rebuilds_the_reference_from_its_saved_state_and_restores_the_current_one() -> None:
    trainer, training, _ = _setup("kl.coef=0.1")
    trainer.state.kl_reference = "memory://kl-reference"  # as a checkpoint written after RL began holds it
    reference = trainer.reference_sampler()
    assert isinstance(reference, _Reference)
    assert training.calls == [
        ("save_state", "kl-resume-current"),
        ("load_state", "memory://kl-reference"),
        ("save_weights", "kl-reference"),
        ("load_state", "memory://kl-resume-current"),
    ]
    assert trainer.reference_sampler() is reference and len(training.calls) == 4  # built once


class _FlakyReference(ScriptedSampler):
    """A reference whose every other call fails (after the client's retries) and the rest answer NaN or 1 nat."""

    nominal_logprob = -1.25

    def __init__(self, tokenizer) -> None:
        super().__init__(tokenizer)
        self.calls = 0

    def compute_logprobs(self, tokens):
        self.calls += 1
        if self.calls % 2:
            raise TimeoutError("reference compute_logprobs timed out")
        if self.calls % 4 == 0:
            return [None] + [float("nan")] * (len(tokens) - 1)
        return super().compute_logprobs(tokens)


def test_the_warmups_grpo_advantages_carry_the_anchor() -> None:
    """A warm-up that trains the actor: each sampled token gets its group's A_n - beta * k (k = 1 nat here)."""
    trainer, training, trajectories = _setup("tempo.warmup_updates=1", "tempo.td_updates=0", "kl.coef=0.1")
    asyncio.run(trainer.warmup_update(0))
    actor = _sent(training, "actor")
    assert len(actor) == len(trajectories) == 8
    for game in range(2):
        group = trajectories[game * 4 : (game + 1) * 4]
        mean = np.mean([r["return"] for r in group])
        for d, r in zip(actor[game * 4 : (game + 1) * 4], group):
            adv, sampled = np.asarray(d.loss_fn_inputs["advantages"]), _sampled(d)
            assert np.allclose(adv[sampled], r["return"] - mean - 0.1)


def test_a_failing_reference_call_drops_that_sequence_only_and_is_counted() -> None:
    trainer, training, trajectories = _setup(
        "tempo.warmup_updates=1", "tempo.td_updates=0", "kl.coef=0.1", CRITIC_ONLY
    )
    training.reference = _FlakyReference(training.reference.tokenizer)
    metrics = asyncio.run(trainer.warmup_update(0))  # the update completes
    actor = _sent(training, "actor")
    assert len(trajectories) == 8 and training.reference.calls == 8
    # calls 1, 3, 5, 7 raise and calls 4, 8 answer NaN: 6 sequences dropped, calls 2 and 6 trained
    assert metrics["kl/reference_failures"] == 6 and len(actor) == 2
    for d in actor:
        adv, sampled = np.asarray(d.loss_fn_inputs["advantages"]), _sampled(d)
        assert np.allclose(adv[sampled], -0.1)
    assert metrics["kl/anchored_tokens"] == sum(int(_sampled(d).sum()) for d in actor)
    assert metrics["kl/ref_k1_mean"] == pytest.approx(1.0)
    # the two kept sequences are trained exactly as with a healthy reference (its 2nd and 6th sequences)
    healthy, healthy_training, _ = _setup(
        "tempo.warmup_updates=1", "tempo.td_updates=0", "kl.coef=0.1", CRITIC_ONLY
    )
    healthy_metrics = asyncio.run(healthy.warmup_update(0))
    assert healthy_metrics["kl/reference_failures"] == 0
    expected = [_sent(healthy_training, "actor")[i] for i in (1, 5)]
    assert [d.model_input for d in actor] == [d.model_input for d in expected]
    for got, want in zip(actor, expected):
        assert np.array_equal(got.loss_fn_inputs["advantages"], want.loss_fn_inputs["advantages"])
