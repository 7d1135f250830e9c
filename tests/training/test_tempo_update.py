"""TEMPO updates on KeyDoor with a scripted actor and an oracle critic (no model): the maths and the data flow."""

from __future__ import annotations

import asyncio
import json
import math

import numpy as np
import pytest
from trainer_doubles import ScriptedSampler, scripted_components, tiny_config

from tempo_rl.rollout.branches import INVALID_ACTION
from tempo_rl.training.grpo import GrpoTrainer
from tempo_rl.training.metrics import critic_metrics
from tempo_rl.training.run import locked_restore_branches
from tempo_rl.training.tempo import TempoTrainer


def _records(records: list) -> list:
    return records


def _trainer(cfg, **kw):
    comps, sampler, training = scripted_components(cfg, **kw)
    trajectories: list = []
    logged: list = []
    trainer = TempoTrainer(
        cfg,
        comps,
        log=lambda step, m: logged.append((step, dict(m))),
        write_trajectories=lambda recs: trajectories.extend(recs),
    )
    return trainer, sampler, training, trajectories, logged


def _datums(training, role):
    out = []
    for name, payload in training.calls:
        if name == "forward_backward":
            out.extend(d for d in payload if d.tags.get("role") == role)
    return out


def test_td_update_signals_datums_and_store():
    cfg = tiny_config("tempo.warmup_updates=0", "tempo.td_updates=1", "tempo.fresh_share=1.0")
    trainer, _sampler, training, trajectories, _ = _trainer(cfg, p_right=0.5, undecided=0.5)
    metrics = asyncio.run(trainer.td_update(0))

    # 2 fresh starts x 4 branches, H = 4 rounds each (the exit is further than 4 rooms)
    assert metrics["td/fresh_states"] == 2.0 and metrics["td/reused_states"] == 0.0
    assert len(trajectories) == 8
    n_actor = 0
    targets = []
    for game in range(2):
        group = trajectories[game * 4 : (game + 1) * 4]
        returns = [r["return"] for r in group]
        g = float(np.mean(returns))
        targets.append(g)
        for r in group:
            assert len(r["actions"]) == 4 and r["end_reason"] == "macro_boundary"
            assert r["return"] == r["endpoint_value"]  # r_n = 0 inside the segment: R_n = V_hat_n
            assert r["advantage"] == pytest.approx(r["return"] - g)  # A_n = R_n - G
            n_actor += abs(r["advantage"]) > 1e-12
    assert len(_datums(training, "actor")) == n_actor == metrics["train/actor_datums"]
    # the oracle values every start state (no key taken yet) at 0.5: |0.5 - G| averaged over the 2 starts
    assert metrics["critic/abs_error_mean"] == pytest.approx(np.mean([abs(0.5 - g) for g in targets]))
    assert metrics["actor/value_target_mean"] == pytest.approx(np.mean(targets))
    # at most one optimiser step, after every forward_backward
    names = [c[0] for c in training.calls]
    assert names.count("optim_step") == (1 if metrics["train/batch_size"] > 0 else 0)
    if "optim_step" in names:
        assert names.index("optim_step") > max(i for i, n in enumerate(names) if n == "forward_backward")
    # endpoints in the store: depth 4, macro index 1, sampled by policy version 0, prefixes extend the start
    assert metrics["td/new_endpoints"] == len(trainer.c.store) >= 1
    for state in trainer.c.store.sample(len(trainer.c.store), np.random.default_rng(0)):
        assert state.snapshot.round_index == 4
        assert state.macro_index == 1
        assert state.policy_version == 0
        assert len(state.history) == 4
        # the sampled actions' logprobs (-0.25 per token) are summed per span
        assert state.spans and all(s.logprob_sum == -0.25 * (s.end - s.start) for s in state.spans)


def test_substeps_split_the_batch_into_minibatch_optimiser_steps():
    cfg = tiny_config(
        "tempo.warmup_updates=0",
        "tempo.td_updates=1",
        "tempo.fresh_share=1.0",
        "optim.substeps=3",
        "optim.chunk_datums=2",
    )
    trainer, _sampler, training, _trajectories, _ = _trainer(cfg, p_right=0.5, undecided=0.5)
    metrics = asyncio.run(trainer.td_update(0))
    batch = int(metrics["train/batch_size"])
    assert batch >= 3  # the oracle critic's K samples differ from the start states' targets
    assert metrics["train/optim_steps"] == 3.0
    names = [c[0] for c in training.calls if c[0] in ("forward_backward", "optim_step")]
    # 3 minibatches of round-robin datums (sizes differ by at most 1), each chunked by 2 then one optim_step
    sizes = [len(range(s, batch, 3)) for s in range(3)]
    expected: list[str] = []
    for size in sizes:
        expected += ["forward_backward"] * -(-size // 2) + ["optim_step"]
    assert names == expected
    sent = [d for name, payload in training.calls if name == "forward_backward" for d in payload]
    assert len(sent) == batch and len({id(d) for d in sent}) == batch  # every datum exactly once
    roles = [
        d.tags.get("role") for name, payload in training.calls if name == "forward_backward" for d in payload
    ]
    assert roles.count("actor") == metrics["train/actor_datums"]
    assert trainer.state.policy_version == 1  # one new sampler per update, however many steps


def test_substeps_never_exceed_the_datums():
    cfg = tiny_config(
        "tempo.warmup_updates=0", "tempo.td_updates=1", "tempo.fresh_share=1.0", "optim.substeps=1000"
    )
    trainer, _sampler, training, _trajectories, _ = _trainer(cfg, p_right=0.5, undecided=0.5)
    metrics = asyncio.run(trainer.td_update(0))
    steps = [c for c in training.calls if c[0] == "optim_step"]
    assert len(steps) == metrics["train/optim_steps"] == metrics["train/batch_size"] > 0
    assert all(len(payload) == 1 for name, payload in training.calls if name == "forward_backward")


def test_td_update_from_stored_state_has_hand_computed_advantages():
    # first update stores endpoints at the key room; the second restores them and branches on the key choice
    cfg = tiny_config(
        "tempo.warmup_updates=0", "tempo.td_updates=2", "tempo.fresh_share=0.5", "tempo.states_per_batch=2"
    )
    trainer, _sampler, training, trajectories, _ = _trainer(cfg, p_right=0.5, undecided=0.5)
    asyncio.run(trainer.td_update(0))
    n_before = len(trajectories)
    metrics = asyncio.run(trainer.td_update(1))
    recs = trajectories[n_before:]
    assert metrics["td/reused_states"] == 1.0 and metrics["td/fresh_states"] == 1.0
    stored_recs = [r for r in recs if not r["fresh"]]
    assert len(stored_recs) == 4
    assert {r["start_round"] for r in stored_recs} == {4}  # restored at the stored depth
    assert metrics["td/macro_index_mean"] == pytest.approx(0.5)  # one start at macro 1, one fresh at 0
    returns = [r["return"] for r in stored_recs]
    g = float(np.mean(returns))
    for r in stored_recs:
        expected_r = sum(r["rewards"]) + (0.0 if r["end_reason"] == "terminated" else r["endpoint_value"])
        assert r["return"] == pytest.approx(expected_r)
        assert r["advantage"] == pytest.approx(r["return"] - g)
    for d in _datums(training, "actor"):
        a = d.loss_fn_inputs["advantages"]
        lp = d.loss_fn_inputs["logprobs"]
        assert np.any(a != 0)
        assert np.all((a == 0) | (lp == np.float32(-0.25)))  # advantages only on sampled tokens
    assert metrics["td/reused_states_total"] == 1.0


def test_unparsed_endpoints_are_dropped_or_substituted():
    cfg = tiny_config("tempo.warmup_updates=0", "tempo.td_updates=1", "tempo.fresh_share=1.0")
    trainer, *_ = _trainer(cfg, garbage=True)
    metrics = asyncio.run(trainer.td_update(0))
    assert metrics["critic/endpoint_parse_failure_rate"] == 1.0
    assert metrics["actor/dropped_branches"] == 8.0
    assert math.isnan(metrics["actor/return_mean"])

    cfg2 = tiny_config(
        "tempo.warmup_updates=0",
        "tempo.td_updates=1",
        "tempo.fresh_share=1.0",
        "tempo.unparsed_endpoint=0.25",
    )
    trainer2, *_ = _trainer(cfg2, garbage=True)
    metrics2 = asyncio.run(trainer2.td_update(0))
    assert metrics2["actor/dropped_branches"] == 0.0
    assert metrics2["actor/return_mean"] == pytest.approx(0.25)
    assert metrics2["critic/parse_failure_rate"] == 1.0


def test_warmup_update_uses_monte_carlo_targets_and_fills_the_store():
    cfg = tiny_config("tempo.warmup_updates=1", "tempo.td_updates=0", "tempo.warmup_states_per_episode=2")
    trainer, _sampler, training, trajectories, _ = _trainer(cfg, p_right=0.5, undecided=0.5)
    metrics = asyncio.run(trainer.warmup_update(0))
    assert len(trajectories) == 8  # 2 games x 4 branches, full episodes
    for rec in trajectories:
        assert rec["end_reason"] in ("terminated", "max_rounds")
        assert rec["return"] == (1.0 if rec["won"] else 0.0)
    # per episode at most 2 of the states at rounds 4, 8, 12 before its end, each against that episode's
    # return (reward only at the exit: 1 if it won); per game its start state once, against the mean return
    # of its 4 branches
    targets: list[float] = []
    for game in range(2):
        group = trajectories[game * 4 : (game + 1) * 4]
        for rec in group:
            targets += [rec["return"]] * min(2, len(range(4, len(rec["actions"]), 4)))
        targets.append(float(np.mean([rec["return"] for rec in group])))
    assert metrics["warmup/boundary_states"] == len(targets)
    assert metrics["target/mc_return_mean"] == pytest.approx(np.mean(targets))
    assert metrics["warmup/stored_states"] >= 1  # warm-up states also go into the store
    assert metrics["warmup/success_rate"] == pytest.approx(np.mean([r["won"] for r in trajectories]))
    # the actor trains on the same episodes with each group's GRPO advantages, A_n = R_n - mean(R)
    expected = []
    for game in range(2):
        returns = [rec["return"] for rec in trajectories[game * 4 : (game + 1) * 4]]
        expected += [r - np.mean(returns) for r in returns if r != np.mean(returns)]
    actor = _datums(training, "actor")
    sent = [
        float(d.loss_fn_inputs["advantages"][np.flatnonzero(d.loss_fn_inputs["advantages"])[0]])
        for d in actor
    ]
    assert len(expected) > 0 and sent == pytest.approx(expected)


def test_warmup_actor_advantages_by_hand():
    """Two games of 3 branches: returns (1, 0, 0) and (1, 1, 1); the second group is degenerate; an errored
    branch is dropped before centring; with the actor frozen every advantage is 0."""
    from tempo_rl.rollout.branches import BranchResult
    from tempo_rl.training.tempo import warmup_actor_advantages

    def branch(reward: float, end: str = "terminated") -> BranchResult:
        b = BranchResult(start_index=0, tokens=[], prefix_len=0, logprobs=[], sampled_mask=[])
        b.rewards, b.end_reason = [0.0, reward], end  # type: ignore[assignment]
        return b

    rows = [[branch(1.0), branch(0.0), branch(0.0), branch(1.0, "error")], [branch(1.0)] * 3]
    played, adv, degenerate = warmup_actor_advantages(rows, True)
    assert len(played) == 6 and degenerate == 0.5
    assert adv == pytest.approx([2 / 3, -1 / 3, -1 / 3, 0.0, 0.0, 0.0])
    assert warmup_actor_advantages(rows, False)[1] == [0.0] * 6


def test_the_gate_hands_over_when_its_reading_crosses_the_threshold_and_never_after_the_cap():
    from tempo_rl.training.tempo import handover_reason, window_reading

    t = tiny_config("tempo.warmup_updates=5", "tempo.handover_corr=0.5", "tempo.handover_window=2").tempo
    readings = [0.2, None, 0.45, 0.56, 0.7]
    # the windows' means after each update: undefined, undefined (a None), undefined, 0.505, 0.63
    means = [window_reading(readings[: i + 1], 2) for i in range(5)]
    assert all(np.isnan(means[:3])) and means[3:] == pytest.approx([0.505, 0.63])
    assert [handover_reason(i + 1, m, t) for i, m in enumerate(means)] == [None, None, None, "gate", "gate"]
    # 0.4999 never reaches 0.5: the cap hands over after update 5, and never later
    assert [handover_reason(d, 0.4999, t) for d in (4, 5, 6)] == [None, "cap", "cap"]
    off = t.model_copy(update={"warmup_updates": 3, "handover_corr": None})
    assert [handover_reason(d, 1.0, off) for d in (1, 2, 3)] == [None, None, "cap"]


def test_tempo_runs_its_td_updates_after_an_early_hand_over():
    # any defined reading passes -1: the gate hands over after the first warm-up update
    cfg = tiny_config(
        "tempo.warmup_updates=4", "tempo.td_updates=1", "tempo.handover_window=1", "tempo.handover_corr=-1.0"
    )
    trainer, _s, _t, _traj, logged = _trainer(cfg, p_right=0.5, undecided=0.5)
    trainer.train()
    phases = [m["train/phase"] for _, m in logged]
    assert phases == [0.0, 1.0] and trainer.state.handover_update == 1
    assert logged[0][1]["tempo/handover"] == 1.0 and logged[0][1]["tempo/handover_at_cap"] == 0.0


def test_warmup_states_every_round_go_to_the_critic_and_every_h_to_the_store():
    cfg = tiny_config(
        "tempo.warmup_updates=1", "tempo.td_updates=0", 'tempo.warmup_states_per_episode="every_round"'
    )
    trainer, _sampler, _training, trajectories, _ = _trainer(cfg, p_right=0.5, undecided=0.5)
    metrics = asyncio.run(trainer.warmup_update(0))
    episodes = [len(rec["actions"]) for rec in trajectories]
    # the critic: every round 1 .. rounds - 1 of each episode, plus each of the 2 games' start state
    assert metrics["warmup/boundary_states"] == sum(n - 1 for n in episodes) + 2
    assert [m["round"] for m in trajectories[0]["boundaries"]] == list(range(1, episodes[0]))
    # the store: only the macro-step boundaries, rounds 4, 8, 12 before each episode's end (H = 4), as without
    # a stride (distinct states; a store refuses a duplicate)
    assert 1 <= metrics["warmup/stored_states"] <= sum(len(range(4, n, 4)) for n in episodes)
    assert len(trainer.c.store) == metrics["warmup/stored_states"]
    stored = [trainer.c.store.get(i) for i in trainer.c.store.ids()]
    assert all(s.snapshot.round_index % 4 == 0 for s in stored)


def test_warmup_substeps_apply_to_warmup_updates_only():
    cfg = tiny_config(
        "tempo.warmup_updates=1",
        "tempo.td_updates=1",
        "tempo.fresh_share=1.0",
        "tempo.warmup_substeps=3",
        "optim.substeps=2",
        "kl.coef=0.1",  # the anchor trains the warm-up's episodes: 8 actor Datums to split
    )
    trainer, sampler, training, _trajectories, _ = _trainer(cfg, p_right=0.5, undecided=0.5)

    class _Reference(ScriptedSampler):
        nominal_logprob = -1.25  # differs from the sampler's -0.25: every sampled token is anchored

    training.reference = _Reference(sampler.tokenizer)
    warm = asyncio.run(trainer.warmup_update(0))
    assert warm["train/batch_size"] >= 8
    assert warm["train/optim_steps"] == 3.0
    assert [c[0] for c in training.calls].count("optim_step") == 3
    td = asyncio.run(trainer.td_update(1))
    assert td["train/batch_size"] >= 2
    assert td["train/optim_steps"] == 2.0  # TD keeps optim.substeps
    assert [c[0] for c in training.calls].count("optim_step") == 5
    assert trainer.state.policy_version == 2  # one new sampler per update, however many steps


def test_td_critic_samples_that_agree_carry_no_gradient():
    # the oracle answers 0.5 for every start state, all K samples alike: centred over K, those groups carry nothing
    cfg = tiny_config("tempo.warmup_updates=0", "tempo.td_updates=1", "tempo.fresh_share=1.0")
    trainer, _sampler, training, trajectories, _ = _trainer(cfg, p_right=0.5, undecided=0.5)
    warm = asyncio.run(trainer.warmup_update(0))
    assert warm["train/critic_datums"] == 0.0 and warm["critic/degenerate_group_rate"] == 1.0
    trajectories.clear()
    training.calls.clear()
    metrics = asyncio.run(trainer.td_update(1))
    assert _datums(training, "critic") == [] and metrics["critic/degenerate_group_rate"] == 1.0


def test_critic_metrics_definitions():
    from tempo_rl.critic.base import CriticEstimates

    ests = [
        CriticEstimates(values=np.array([0.5, np.nan, 0.45, 0.9]), samples=()),
        CriticEstimates(values=np.array([0.0, 0.2, np.nan, np.nan]), samples=(), prompt_too_long=True),
    ]
    m = critic_metrics(ests, [0.45, 0.0])
    # |errors| over parsed samples: 0.05, 0.0, 0.45, 0.0, 0.2 -> mean 0.14
    assert m["critic/abs_error_mean"] == pytest.approx(0.14)
    assert m["critic/parse_failure_rate"] == pytest.approx(3 / 8)
    assert m["critic/prompt_too_long_rate"] == pytest.approx(0.5)
    assert m["critic/mean_estimate_mean"] == pytest.approx((0.6166666 + 0.1) / 2, rel=1e-5)
    assert m["critic/value_corr"] == pytest.approx(1.0)  # two states: perfectly ordered


def test_grpo_update_centres_episode_returns():
    cfg = tiny_config('algorithm="grpo"', "grpo.updates=1", "grpo.games_per_batch=2", "grpo.group_size=4")
    comps, _sampler, _training = scripted_components(cfg, p_right=0.5)
    recs: list = []
    trainer = GrpoTrainer(cfg, comps, write_trajectories=lambda r: recs.extend(r))
    metrics = asyncio.run(trainer.update(0))
    assert len(recs) == 8
    for game in range(2):
        group = recs[game * 4 : (game + 1) * 4]
        mean = np.mean([r["return"] for r in group])
        for r in group:
            assert r["advantage"] == pytest.approx(r["return"] - mean)
    assert metrics["grpo/success_rate"] == pytest.approx(np.mean([r["won"] for r in recs]))
    assert INVALID_ACTION not in {a for r in recs for a in r["actions"]}
    json.dumps(metrics)


def test_replay_divergence_quarantines_the_state_and_the_update_goes_on():
    import dataclasses

    cfg = tiny_config("tempo.warmup_updates=0", "tempo.td_updates=2", "tempo.fresh_share=0.5")
    trainer, _sampler, _training, _trajectories, _ = _trainer(cfg)
    asyncio.run(trainer.td_update(0))
    store = trainer.c.store
    good = store.sample(1, np.random.default_rng(0))[0]
    digests = list(good.snapshot.observation_digests)
    digests[2] = "0" * 32  # the recorded observation after action 2 no longer matches what the env replays
    broken_snapshot = good.snapshot.model_copy(update={"observation_digests": tuple(digests)})
    broken = dataclasses.replace(good, id="broken-state", snapshot=broken_snapshot)
    for state_id in list(store.ids()):
        store.quarantine(state_id, "test: keep only the broken state")
    assert store.add(broken) and len(store) == 1
    # force a replay without the fork cache (a cached fork would not re-verify the old steps)
    trainer.c.restore_branches = lambda snap, n: locked_restore_branches(snap, n, None)
    metrics = asyncio.run(trainer.td_update(1))
    assert metrics["td/replay_divergences"] == 1.0
    assert metrics["td/reused_states"] == 0.0 and metrics["td/fresh_states"] >= 1.0  # the update went on
    assert "broken-state" not in store.ids()
    assert any(q.state.id == "broken-state" for q in store.quarantined())


def test_branches_at_the_episode_step_limit_are_valued_zero():
    """T = H: every branch ends at the episode limit. Nothing follows (no critic query, value 0)."""
    base = ("tempo.warmup_updates=0", "tempo.td_updates=1", "tempo.fresh_share=1.0")
    limit = ("tempo.max_rounds=4", "tempo.macro_rounds=4")
    trainer, _s, _t, trajectories, _ = _trainer(tiny_config(*base, *limit), garbage=True)
    metrics = asyncio.run(trainer.td_update(0))
    assert {r["end_reason"] for r in trajectories} == {"max_rounds"}
    assert math.isnan(metrics["critic/endpoint_parse_failure_rate"])  # no endpoint was sent to the critic
    assert metrics["actor/dropped_branches"] == 0.0
    assert all(r["return"] == sum(r["rewards"]) for r in trajectories)  # R_n = r_n
    assert metrics["td/new_endpoints"] == 0.0  # an exhausted episode is never a start state


def test_a_fresh_game_that_fails_to_start_is_dropped_and_counted():
    """An env crash while building/resetting a fresh game drops that start only; the update goes on."""
    import dataclasses

    cfg = tiny_config("tempo.warmup_updates=0", "tempo.td_updates=1", "tempo.fresh_share=1.0")
    trainer, _s, _t, trajectories, _ = _trainer(cfg, p_right=0.5, undecided=0.5)
    make_env = trainer.c.make_env
    calls = {"n": 0}

    def flaky_make_env(spec, seed):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected: the env process died during reset")
        return make_env(spec, seed)

    trainer.c = dataclasses.replace(trainer.c, make_env=flaky_make_env)
    metrics = asyncio.run(trainer.td_update(0))
    assert metrics["td/fresh_states"] == 1.0  # 2 fresh games asked for, 1 started
    assert len(trajectories) == 4  # its 4 branches were rolled out and trained on
    assert trainer.reliability_metrics()["starts/fresh_start_failures"] == 1.0


class _Fumbler(ScriptedSampler):
    """The noisy expert, but a quarter of its answers are unreadable."""

    def _answer(self, prompt_text: str, rng) -> str:
        answer = super()._answer(prompt_text, rng)
        if "value estimator" not in prompt_text and rng.random() < 0.25:
            return "I would rather go on"
        return answer


def test_grpo_returns_carry_the_reference_invalid_action_penalty():
    """The reference's chapter-8 reward 1[won] - 0.1 * invalid actions, centred within each group."""
    cfg = tiny_config(
        'algorithm="grpo"',
        "grpo.updates=1",
        "grpo.games_per_batch=2",
        "grpo.group_size=4",
        "env.invalid_action_penalty=0.1",
    )
    comps, sampler, _training = scripted_components(cfg, p_right=0.5)
    comps.sampler = _Fumbler(sampler.tokenizer, p_right=0.5)
    recs: list = []
    asyncio.run(GrpoTrainer(cfg, comps, write_trajectories=lambda r: recs.extend(r)).update(0))
    invalid = [r["actions"].count(INVALID_ACTION) for r in recs]
    assert sum(invalid) > 0 and [r["invalid_actions"] for r in recs] == invalid
    for r, n in zip(recs, invalid):
        assert r["return"] == pytest.approx(float(r["won"]) - 0.1 * n)
    for game in range(2):
        group = recs[game * 4 : (game + 1) * 4]
        mean = np.mean([r["return"] for r in group])
        for r in group:
            assert r["advantage"] == pytest.approx(r["return"] - mean)


def test_td_returns_carry_the_invalid_action_penalty():
    """R_n = r_n + V_hat_n, with r_n = -p * (invalid actions of the segment) here (no win within H = 4)."""
    cfg = tiny_config(
        "tempo.warmup_updates=0",
        "tempo.td_updates=1",
        "tempo.fresh_share=1.0",
        "env.invalid_action_penalty=0.25",
    )
    trainer, sampler, _training, trajectories, _ = _trainer(cfg, p_right=0.5, undecided=0.5)
    trainer.c.sampler = _Fumbler(sampler.tokenizer, p_right=0.5, undecided=0.5)
    asyncio.run(trainer.td_update(0))
    invalid = [r["actions"].count(INVALID_ACTION) for r in trajectories]
    assert len(trajectories) == 8 and sum(invalid) > 0
    for r, n in zip(trajectories, invalid):
        assert r["invalid_actions"] == n and sum(r["rewards"]) == pytest.approx(-0.25 * n)
        assert r["return"] == pytest.approx(-0.25 * n + r["endpoint_value"])


def test_a_trainer_keeps_one_event_loop_and_closes_it_cleanly_even_from_inside_another_loop():
    import gc
    import sys

    cfg = tiny_config("tempo.warmup_updates=0", "tempo.td_updates=1")
    trainer, *_ = _trainer(cfg)

    async def loop_id() -> int:
        return id(asyncio.get_running_loop())

    assert trainer.run_async(loop_id()) == trainer.run_async(loop_id())  # one loop for the trainer's life
    unraisable: list = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append

    async def drop_it() -> None:  # the trainer is collected while another loop runs
        nonlocal trainer
        del trainer
        gc.collect()

    try:
        asyncio.run(drop_it())
    finally:
        sys.unraisablehook = old_hook
    assert not unraisable, [u.exc_value for u in unraisable]


def test_a_fresh_game_whose_build_hangs_is_dropped_at_the_step_deadline_and_counted():
    import time

    cfg = tiny_config("workers.step_timeout_s=0.2")
    trainer, *_ = _trainer(cfg)
    build = trainer.c.make_env
    hung = {"n": 0}

    def slow_first(spec, seed):
        if hung["n"] == 0:
            hung["n"] += 1
            time.sleep(1.5)  # hangs past the 0.2 s deadline
        return build(spec, seed)

    trainer.c.make_env = slow_first

    async def start_two() -> tuple:
        t0 = time.perf_counter()
        out = await trainer.fresh_starts(2, [trainer.next_fresh_game(), trainer.next_fresh_game()])
        return (*out, time.perf_counter() - t0)

    starts, failed, seconds = asyncio.run(start_two())
    assert failed == 1 and len(starts) == 1 and trainer.fresh_start_failures == 1
    assert seconds < 1.2  # the update did not wait for the hung build
    trainer.close_envs(starts)


def _answered(values_drawn, logprobs=((-0.2,), (-1.7,))):
    """Estimates of a critic reading its value from two answers ('0', '1'), with its K draws ``values_drawn``."""
    from tempo_rl.backends.types import SampledSequence
    from tempo_rl.critic.base import CriticEstimates, CriticSample

    answers = tuple(
        CriticSample(
            prompt_tokens=(5, 6, 7),
            sequence=SampledSequence(tokens=(10 + i,), logprobs=lps, text=f"{i}</value>", stop_reason="stop"),
            value=float(i),
        )
        for i, lps in enumerate(logprobs)
    )
    q1 = math.exp(logprobs[1][0]) / (math.exp(logprobs[0][0]) + math.exp(logprobs[1][0]))
    return CriticEstimates(
        values=np.asarray(values_drawn, dtype=np.float64),
        samples=tuple(answers[int(v)] for v in values_drawn),
        expectation=q1,
        answers=answers,
    )


@pytest.mark.parametrize("td", [False, True])
def test_a_critic_reading_its_answers_is_trained_by_the_log_loss_even_when_its_draws_agree(td):
    from tempo_rl.critic.base import CriticEstimates
    from tempo_rl.training.tempo import critic_records

    weight = 1.0  # the log-loss is trained at weight 1 in the warm-up and in TD
    cfg = tiny_config()
    trainer, _sampler, training, *_ = _trainer(cfg)
    # all K = 4 draws say 0: centred rewards on the draws would be 0 (no gradient), the log-loss is not; the
    # third state's prompt did not fit (no answers, no samples) and trains nothing
    too_long = CriticEstimates(values=np.full(4, np.nan), samples=(), prompt_too_long=True)
    estimates = [_answered([0, 0, 0, 0]), _answered([1, 0, 1, 1]), too_long]
    targets = [0.3, 1.0, 0.5]
    datums, degenerate = trainer.critic_datums_of(estimates, targets, td=td)
    assert degenerate == 0.0
    # cross-entropy Datums: prompt (5, 6, 7) as context, the answer token weighted by w_i(G) x the TD weight
    assert all(set(d.loss_fn_inputs) == {"target_tokens", "weights"} for d in datums)
    assert [d.model_input for d in datums] == [(5, 6, 7)] * 3
    assert [int(d.loss_fn_inputs["target_tokens"][-1]) for d in datums] == [10, 11, 11]
    # w(0.3) = (0.7, 0.3) on the answers '0' (token 10) and '1' (token 11); w(1.0) = (0, 1): one Datum
    assert [d.loss_fn_inputs["weights"][:2].tolist() for d in datums] == [[0, 0]] * 3
    assert [float(d.loss_fn_inputs["weights"][2]) for d in datums] == pytest.approx(
        [0.7 * weight, 0.3 * weight, 1.0 * weight]
    )
    assert all(d.tags.get("role") == "critic" for d in datums)
    records = critic_records(estimates, targets, cfg.tempo, centred=True, weight=weight)
    assert [r["degenerate"] for r in records[:2]] == [False, False] and all(r["trained"] for r in records[:2])
    assert not records[2]["trained"] and "answers" not in records[2]
    assert [a["weight"] for a in records[0]["answers"]] == pytest.approx([0.7 * weight, 0.3 * weight])
    assert {s["advantage"] for r in records for s in r["samples"]} == {0.0}  # the draws train nothing

    # one optimiser step: the policy-gradient Datums under optim.loss_fn, the log-loss ones under cross-entropy
    from tempo_rl.rollout.datums import completion_datum

    actor = completion_datum((1, 2), (3,), (-0.5,), 0.25, role="actor")
    training.calls.clear()
    metrics = trainer.train_step([datums[0], actor, datums[1]], substeps=1)
    assert training.losses[-2:] == ["importance_sampling", "cross_entropy"]
    fb = [payload for name, payload in training.calls if name == "forward_backward"]
    assert fb == [[actor], [datums[0], datums[1]]]
    assert [name for name, _ in training.calls].count("optim_step") == 1
    assert metrics["train/loss_tokens"] == 3.0  # one advantage and two weights


def test_td_rehearses_as_many_monte_carlo_examples_as_it_fits_bootstrapped_ones():
    cfg = tiny_config("tempo.warmup_updates=0", "tempo.td_updates=1", "tempo.fresh_share=1.0")
    trainer, *_ = _trainer(cfg, p_right=0.5, undecided=0.5)
    replay = [{"prompt": [5, 6, i], "completion": [10 + i], "weight": 0.1 * (i + 1)} for i in range(5)]
    trainer.state.critic_replay = list(replay)
    drawn = trainer.rehearsal_examples(3)
    # 3 distinct examples of the replay, each a cross-entropy Datum on its answer at its own weight
    picked = [int(e["prompt"][-1]) for e in drawn]
    assert len(set(picked)) == 3 and all(0 <= i < 5 for i in picked)
    for i in picked:
        d = trainer.critic_example_datum(replay[i])
        assert d.tags.get("role") == "critic" and int(d.loss_fn_inputs["target_tokens"][-1]) == 10 + i
        assert float(d.loss_fn_inputs["weights"][-1]) == pytest.approx(0.1 * (i + 1))
    state = trainer.rng.bit_generator.state
    # a replay of at most n examples is rehearsed whole, in order, and draws nothing from the trainer's RNG
    assert trainer.rehearsal_examples(9) == trainer.rehearsal_examples(5) == replay
    assert trainer.rng.bit_generator.state == state
    assert trainer.rehearsal_examples(0) == []
    trainer.state.critic_replay = []
    assert trainer.rehearsal_examples(3) == []

    # a TD update whose critic fits 2 bootstrapped Datums (the scripted oracle's K draws agree and would fit
    # none) rehearses 2 of the replay's examples in the same optimiser step
    from tempo_rl.rollout.datums import sft_datum

    bootstrapped = [sft_datum([1, 2], [10], weight=w, role="critic") for w in (0.4, 0.6)]
    trainer.critic_datums_of = lambda estimates, targets, td: (list(bootstrapped), 0.0)
    trainer.state.critic_replay = list(replay)
    metrics = asyncio.run(trainer.td_update(0))
    assert metrics["td/rehearsed_datums"] == 2.0 and metrics["train/critic_datums"] == 4.0
    assert trainer.state.critic_replay == replay  # TD keeps the replay: later updates rehearse it too
