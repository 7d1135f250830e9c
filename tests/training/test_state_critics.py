"""The oracle and Monte Carlo critics inside TEMPO (scripted actor, no model): wiring, values and costs."""

from __future__ import annotations

import asyncio
import dataclasses
import math

import numpy as np
import pytest
from trainer_doubles import ScriptedSampler, scripted_components, tiny_config, tokenizer_for

from tempo_rl.backends.types import SamplingParams
from tempo_rl.critic import CriticQuery, MonteCarloCritic, OracleCritic
from tempo_rl.envs import make
from tempo_rl.envs.keydoor import KeyDoorEnv
from tempo_rl.envs.workers import EnvWorkerPool
from tempo_rl.rollout import ChatRenderer, RolloutSettings
from tempo_rl.rollout.tool_call import ToolCallParser
from tempo_rl.training.critics import state_critic
from tempo_rl.training.options import TrainerOptions
from tempo_rl.training.tempo import TempoTrainer
from tempo_rl.training.trainer import UpdateTimer

# ---------------------------------------------------------------------------------------------- config


def test_state_critic_builds_the_configured_critic() -> None:
    cfg = tiny_config("tempo.critic=oracle")
    comps, _, _ = scripted_components(cfg)
    noisy = TrainerOptions(oracle_flip_prob=0.25, oracle_noise_sigma=0.1)
    oracle = state_critic(
        cfg, comps.chat, pool=comps.pool, restore_branches=comps.restore_branches, options=noisy
    )
    assert isinstance(oracle, OracleCritic)
    assert (oracle.flip_prob, oracle.sigma, oracle.max_rounds) == (0.25, 0.1, 16)
    exact = state_critic(cfg, comps.chat, pool=comps.pool, restore_branches=comps.restore_branches)
    assert isinstance(exact, OracleCritic) and (exact.flip_prob, exact.sigma) == (0.0, 0.0)
    cfg = tiny_config("tempo.critic=monte_carlo", "tempo.critic_rollouts=3", "env.invalid_action_penalty=0.1")
    mc = state_critic(cfg, comps.chat, pool=comps.pool, restore_branches=comps.restore_branches)
    assert isinstance(mc, MonteCarloCritic)
    assert mc.rollouts == 3
    assert mc.settings.max_rounds == 16 and mc.settings.segment_rounds is None
    assert mc.settings.invalid_action_penalty == 0.1 and mc.settings.sampling.max_tokens == 40
    with pytest.raises(ValueError, match="generative"):
        state_critic(tiny_config(), comps.chat, pool=comps.pool, restore_branches=comps.restore_branches)
    with pytest.raises(ValueError, match="critic"):
        tiny_config("tempo.critic=perfect")
    with pytest.raises(ValueError, match="oracle_flip_prob"):
        TrainerOptions(oracle_flip_prob=2)


# ---------------------------------------------------------------------------------------------- end to end


def _oracle_trainer(
    *overrides: str, options: TrainerOptions | None = None
) -> tuple[TempoTrainer, list, list]:
    cfg = tiny_config("tempo.critic=oracle", *overrides)
    comps, _sampler, _training = scripted_components(cfg, p_right=0.5)
    comps.critic = state_critic(
        cfg, comps.chat, pool=comps.pool, restore_branches=comps.restore_branches, options=options
    )
    trajectories: list = []
    logged: list = []
    trainer = TempoTrainer(
        cfg,
        comps,
        log=lambda step, m: logged.append((step, dict(m))),
        write_trajectories=lambda recs: trajectories.extend(recs),
    )
    return trainer, trajectories, logged


def _oracle_of(actions: list[str], seed: int, steps_left: int) -> float:
    env = KeyDoorEnv(horizon=16, keys=1, colours=2)
    env.reset(seed)
    for action in actions:
        env.step(action)
    value = env.oracle_value(steps_left)
    assert value is not None
    return value


def test_tempo_with_the_oracle_critic_end_to_end() -> None:
    """Two TD updates on the tiny KeyDoor with the oracle critic: every endpoint is valued by V* of the env
    after the branch's 4 actions (1 after the right key, 0 after the wrong one), the start states (V* = 1 at
    reset: the walkthrough fits) have error |1 - G|, nothing is parsed or trained for the critic."""
    trainer, trajectories, logged = _oracle_trainer(
        "tempo.warmup_updates=0", "tempo.td_updates=2", "tempo.fresh_share=0.5"
    )
    trainer.train()
    assert [step for step, _ in logged] == [1, 2]
    first = [r for r in trajectories if r["update"] == 0]
    assert len(first) == 8 and all(r["fresh"] for r in first)
    seeds = [trainer.config.env.train_game(i)[1] for i in range(2)]
    values = []
    for game, seed in enumerate(seeds):
        group = first[game * 4 : (game + 1) * 4]
        for r in group:
            assert r["end_reason"] == "macro_boundary" and len(r["actions"]) == 4
            assert r["endpoint_value"] == _oracle_of(r["actions"], seed, 12)  # T - 4 = 12 steps left
            values.append(r["endpoint_value"])
        g = float(np.mean([r["return"] for r in group]))
        for r in group:
            assert r["advantage"] == pytest.approx(r["return"] - g)
    assert set(values) == {0.0, 1.0}  # the p = 0.5 actor took both keys: the oracle tells them apart
    for _, metrics in logged:
        assert metrics["critic/parse_failure_rate"] == 0.0
        assert metrics["train/critic_datums"] == 0.0  # the oracle is not trained
    m0 = logged[0][1]
    targets = [float(np.mean([r["return"] for r in first[g * 4 : (g + 1) * 4]])) for g in range(2)]
    assert m0["critic/abs_error_mean"] == pytest.approx(np.mean([abs(1.0 - g) for g in targets]))
    assert m0["train/actor_datums"] > 0
    second = [r for r in trajectories if r["update"] == 1]
    assert any(not r["fresh"] for r in second)  # a stored endpoint restored and valued again
    assert all(math.isfinite(r["endpoint_value"]) for r in second if r["end_reason"] == "macro_boundary")


def test_noisy_oracle_in_the_trainer_reproduces_on_the_same_seed() -> None:
    runs = []
    for _ in range(2):
        trainer, trajectories, _ = _oracle_trainer(
            "tempo.warmup_updates=0",
            "tempo.td_updates=1",
            "tempo.fresh_share=1.0",
            options=TrainerOptions(oracle_flip_prob=0.5),
        )
        trainer.train()
        runs.append([r["endpoint_value"] for r in trajectories])
    assert runs[0] == runs[1]
    assert all(v in (0.0, 0.5, 1.0) for v in runs[0])  # E = 2 flipped-or-not binary samples averaged


# ---------------------------------------------------------------------------------------------- Monte Carlo


def _mc(p_right: float, *, rollouts: int = 3, clue_at_key: bool = False, penalty: float = 0.0):
    cfg = tiny_config()
    tokenizer = tokenizer_for(cfg)
    sampler = ScriptedSampler(tokenizer, p_right=p_right)
    settings = RolloutSettings(
        sampling=SamplingParams(max_tokens=40, stop=(tokenizer.eos_token_id,)),
        max_rounds=16,
        max_trajectory_tokens=4000,
        show_remaining_steps=False,
        invalid_action_penalty=penalty,
    )
    critic = MonteCarloCritic(
        ChatRenderer(tokenizer),
        EnvWorkerPool(max_workers=2, step_timeout_s=30),
        ToolCallParser(),
        settings,
        rollouts=rollouts,
    )
    env = make("keydoor", horizon=16, keys=1, colours=2, clue_gap=0, clue_at_key=clue_at_key)
    env.reset(seed=0)  # room 1 clue (red), room 2 key (blue, red), lock at room 10, exit room 11
    return critic, sampler, env


def _value(critic: MonteCarloCritic, sampler: ScriptedSampler, env, k: int = 2, seed: int = 3) -> np.ndarray:
    query = CriticQuery(task="t", history=(), initial_observation="o", snapshot=env.snapshot())
    return asyncio.run(critic.estimate(query, k, sampler, seed=seed)).values


def test_monte_carlo_after_the_right_and_the_wrong_key_with_its_costs() -> None:
    critic, sampler, env = _mc(p_right=1.0)
    env.step("go on")
    env.step("take red")
    assert _value(critic, sampler, env).tolist() == [1.0, 1.0]
    # each rollout from room 2: 8 'go on' to the lock (room 10), 'open door', 'go on' to the exit room, through
    # = 11 steps; round 1 is one request for the 3 rollouts, rounds 2..11 one request each
    assert critic.counters()["critic/mc_env_steps"] == 33.0
    assert (critic.queries, critic.rollouts_played, critic.sample_requests) == (1, 3, 1 + 10 * 3)
    assert critic.sampled_tokens > 0 and critic.prompt_tokens > critic.sampled_tokens

    critic, sampler, env = _mc(p_right=1.0)
    env.step("go on")
    env.step("take blue")  # the exit is unreachable: every rollout runs to T = 16 and returns 0
    assert _value(critic, sampler, env).tolist() == [0.0, 0.0]
    assert critic.env_steps == 3 * 14


def test_monte_carlo_is_the_mean_of_the_rollout_returns() -> None:
    """At the key room with the sign repeated (clue_at_key) and a p = 0.5 actor, V_hat is the fraction of the
    M = 8 rollouts that took the red key (each wins iff it did)."""
    critic, sampler, env = _mc(p_right=0.5, rollouts=8, clue_at_key=True)
    env.step("go on")
    query = CriticQuery(task="t", history=(), initial_observation="o", snapshot=env.snapshot())
    returns = asyncio.run(critic.returns(query, sampler, seed=11))
    assert set(returns.tolist()) == {0.0, 1.0}  # both keys were taken at this seed
    fresh, sampler2, env2 = _mc(p_right=0.5, rollouts=8, clue_at_key=True)
    env2.step("go on")
    values = _value(fresh, sampler2, env2, k=3, seed=11)
    assert values.tolist() == [float(returns.mean())] * 3


def test_monte_carlo_clips_penalised_returns_and_needs_a_snapshot() -> None:
    critic, sampler, env = _mc(p_right=1.0, penalty=0.5)
    env.step("go on")
    env.step("take blue")

    class Garbage(ScriptedSampler):
        def _answer(self, prompt_text: str, rng: np.random.Generator) -> str:
            return "no tool call"

    garbage = Garbage(sampler.tokenizer)
    query = CriticQuery(task="t", history=(), initial_observation="o", snapshot=env.snapshot())
    returns = asyncio.run(critic.returns(query, garbage, seed=1))
    assert returns.tolist() == [-0.5 * 14] * 3  # 14 invalid actions, 0.5 each
    assert _value(critic, garbage, env).tolist() == [0.0, 0.0]  # clipped to [0, R_max]
    with pytest.raises(Exception, match="snapshot"):
        asyncio.run(critic.estimate(CriticQuery(task="t", history=(), initial_observation="o"), 1, sampler))
    with pytest.raises(ValueError, match="rollouts"):
        MonteCarloCritic(critic.chat, critic.pool, critic.parser, critic.settings, rollouts=0)


def test_monte_carlo_continues_the_actors_own_prefix_where_the_trainer_gives_it() -> None:
    """Train game 1: the sign (red) is in room 1, the keys (blue listed first, red) in room 3. From the key room
    the rollouts that continue the actor's own token prefix still read the sign and all win (the p = 1 actor);
    rollouts from a fresh prompt at the same snapshot see no sign, take the first listed key and all lose. The
    trainer's queries carry the prefix, for start states (critic_query) and branch endpoints (endpoint_states,
    endpoint_query)."""
    cfg = tiny_config("tempo.critic=monte_carlo", "tempo.critic_rollouts=4", "tempo.macro_rounds=2")
    comps, sampler, _ = scripted_components(cfg, p_right=1.0)
    critic = state_critic(cfg, comps.chat, pool=comps.pool, restore_branches=comps.restore_branches)
    assert isinstance(critic, MonteCarloCritic)
    comps.critic = critic
    trainer = TempoTrainer(cfg, comps, log=lambda *_: None, write_trajectories=lambda _: None)

    async def values() -> list[list[float]]:
        starts, _ = await trainer.fresh_starts(1, [cfg.env.train_game(1)])
        results, _ = await trainer.play(starts, segment_rounds=2, timer=UpdateTimer())
        branch = results[0][0]
        assert [a for a, _ in branch.history] == ["go on", "go on"]
        assert "Keys here: blue, red" in branch.history[-1][1]
        state = trainer.endpoint_state(starts[0].state, branch, 2)
        assert state is not None
        query = trainer.critic_query(state)
        assert query.actor_start is state and query.snapshot == state.snapshot
        assert trainer.endpoint_states(starts, results) == {(0, 0): state}
        endpoint = trainer.endpoint_query(starts[0].state, branch, state)
        assert endpoint.actor_start is state and endpoint.snapshot == state.snapshot
        fresh = dataclasses.replace(query, actor_start=None)
        # the reset's snapshot with the key room's start: two states
        with pytest.raises(ValueError, match="different states"):
            dataclasses.replace(query, snapshot=starts[0].state.snapshot)
        with pytest.raises(TypeError, match="RolloutStart"):
            dataclasses.replace(query, actor_start="the key room")
        return [(await critic.returns(q, sampler, seed=1)).tolist() for q in (query, endpoint, fresh)]

    own, endpoint, fresh = asyncio.run(values())
    assert own == endpoint == [1.0] * 4
    assert fresh == [0.0] * 4
    assert critic.fresh_prompts == 1 and critic.counters()["critic/mc_fresh_prompts"] == 1.0


LOCAL = """
algorithm = "tempo"

[env]
name = "keydoor"
kwargs = { horizon = 12, keys = 1, colours = 2 }

[backend]
kind = "local"
hidden_size = 32
num_layers = 1
num_heads = 2
vocab_size = 512
max_positions = 2048

[tempo]
critic = "oracle"
max_rounds = 12
macro_rounds = 4
branches = 2
critic_samples = 2
endpoint_samples = 1
states_per_batch = 2
warmup_updates = 0
td_updates = 1

[sampling]
critic_answer = "sampled"
max_tokens = 24
max_trajectory_tokens = 1200
show_remaining_steps = false

[warmstart]
episodes = 0

[kl]
coef = 0.0

[run]
loggers = []
eval_every = 0
"""


def test_build_trainer_runs_tempo_with_the_oracle_on_the_local_backend(tmp_path) -> None:
    pytest.importorskip("torch")
    import json

    from tempo_rl.training.config import load_config
    from tempo_rl.training.run import build_trainer, train_run

    cfg_file = tmp_path / "oracle.toml"
    cfg_file.write_text(LOCAL)
    config = load_config(cfg_file)
    built = build_trainer(config, tmp_path / "built", options=TrainerOptions(oracle_flip_prob=0.1))
    try:
        assert isinstance(built.c.critic, OracleCritic)
        assert (built.c.critic.flip_prob, built.c.critic.max_rounds) == (0.1, 12)
    finally:
        built.close()
    summary = train_run(tmp_path / "run", config, console=False)
    assert summary["updates_done"] == 1
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    td = rows[-1]
    assert td["train/phase"] == 1.0
    assert td["critic/parse_failure_rate"] == 0.0 and td["train/critic_datums"] == 0.0
    assert td["critic/states"] >= 1


def test_a_warm_up_without_critic_datums_trains_nothing_not_even_the_kl_anchor() -> None:
    """The oracle is not trained, so a critic-only warm-up update has no critic Datum, and until a step moves the actor pi
    is pi_ref: the KL anchor adds no Datum either and no optimiser step runs, even when reading the reference
    back rounds in the last digits (measured before the fix: the anchor-only Datums carried that rounding,
    k1 ~ -5e-9, which Adam scaled into full steps: valid tool calls 0.98 -> 0.23 on the main job's warm-up)."""
    trainer, _, logged = _oracle_trainer(
        "tempo.warmup_updates=2", "tempo.td_updates=0", "kl.coef=0.1", "tempo.warmup_trains_actor=false"
    )
    reference = trainer.reference_sampler()

    class Rounded:  # the same weights, read back with float rounding in the last digits
        async def compute_logprobs_async(self, tokens):
            row = await reference.compute_logprobs_async(tokens)
            return [None if x is None else x + 1e-9 for x in row]

    trainer._reference = Rounded()  # type: ignore[assignment]
    version = trainer.state.policy_version
    trainer.train()
    assert [step for step, _ in logged] == [1, 2]
    for _, metrics in logged:
        assert metrics["train/critic_datums"] == 0.0
        assert metrics["train/actor_datums"] == 0.0
        assert metrics["train/optim_steps"] == 0.0
    assert trainer.state.policy_version == version
