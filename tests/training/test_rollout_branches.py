"""N-branch rollouts: exact token prefixes, end-reason priority, invalid tool calls, env faults, shared requests."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

import pytest
from trainer_doubles import ScriptedSampler, scripted_components, tiny_config

from tempo_rl.backends.types import SampleResult, SamplingParams
from tempo_rl.rollout.branches import INVALID_ACTION, RolloutSettings, run_branches
from tempo_rl.rollout.renderer import ChatRenderer
from tempo_rl.rollout.tool_call import format_tool_call
from tempo_rl.training.tempo import TempoTrainer


def _setup(*overrides: str, sampler_cls=ScriptedSampler, **kw):
    cfg = tiny_config(*overrides)
    comps, sampler, _ = scripted_components(cfg, **kw)
    if sampler_cls is not ScriptedSampler:
        sampler = sampler_cls(sampler.tokenizer)
        comps.sampler = sampler
    comps.chat = ChatRenderer(comps.chat.tokenizer, check=True)  # every extension checked against a re-render
    return cfg, comps, sampler, TempoTrainer(cfg, comps)


def _play(trainer, n_starts: int, n: int, settings: RolloutSettings, starts=None):
    async def go():
        ss = starts or [await trainer.fresh_start(n) for _ in range(n_starts)]
        try:
            return ss, await trainer.rollout(ss, settings)
        finally:
            trainer.close_envs(ss)

    return asyncio.run(go())


class RecordingSampler(ScriptedSampler):
    def __init__(self, tokenizer):
        super().__init__(tokenizer, p_right=1.0)
        self.answers: list[tuple[int, ...]] = []

    def sample(self, prompt: Sequence[int], num_samples: int, params: SamplingParams) -> SampleResult:
        out = super().sample(prompt, num_samples, params)
        self.answers.extend(s.tokens for s in out.sequences)
        return out


def test_prompts_extend_by_appending_exact_sampled_tokens() -> None:
    _cfg, comps, sampler, trainer = _setup(sampler_cls=RecordingSampler)
    settings = trainer.rollout_settings(segment_rounds=4)
    _starts, (results, stats) = _play(trainer, 1, 2, settings)
    assert stats.template_restarts == 0 and stats.env_errors == 0
    for branch in results[0]:
        assert branch.end_reason == "macro_boundary" and branch.rounds == 4
        # the opening prompt, then per turn: exactly the sampled tokens, then context
        assert branch.tokens[: branch.prefix_len] == list(comps.chat.start(branch.prompt.messages[:2]).tokens)
        for r, start in enumerate(branch.turn_starts):
            end = start
            while end < len(branch.tokens) and branch.sampled_mask[end]:
                end += 1
            assert tuple(branch.tokens[start:end]) in sampler.answers
            assert all(lp == -0.25 for lp in branch.logprobs[start:end])
            assert not any(branch.sampled_mask[: branch.prefix_len])
            assert r < branch.rounds
        # the whole sequence equals a full render of the conversation
        full = comps.chat.render_text(branch.prompt.messages, True)
        assert comps.chat.tokenizer.decode(branch.tokens, skip_special_tokens=False) == full


def test_first_round_shares_one_request_per_start() -> None:
    _cfg, _comps, sampler, trainer = _setup()
    settings = trainer.rollout_settings(segment_rounds=2)
    _play(trainer, 2, 4, settings)
    first_round = [r for r in sampler.requests if r[1] == 4]
    assert len(first_round) == 2  # one request of num_samples=4 per start
    assert sum(n for _, n in sampler.requests) == 2 * 4 * 2  # 2 starts x 4 branches x 2 rounds


def test_end_reason_priority_max_rounds_over_macro_boundary() -> None:
    # T = 16 = 4 H: a segment that reaches round 16 at its 4th round ends as max_rounds (bootstrap, not stored)
    _cfg, _comps, _sampler, trainer = _setup("tempo.max_rounds=16", "tempo.macro_rounds=4")
    full = trainer.rollout_settings(segment_rounds=None)
    _, (results, _) = _play(trainer, 1, 2, full)
    for b in results[0]:
        assert b.end_reason in ("terminated", "max_rounds")
        if b.end_reason == "max_rounds":
            assert b.round_index == 16 and b.truncated and not b.terminated
        else:
            assert b.won and b.rewards[-1] == 1.0


def test_token_budget_ends_branches_before_sampling() -> None:
    _cfg, _comps, _sampler, trainer = _setup("sampling.max_trajectory_tokens=300", "sampling.max_tokens=40")
    settings = trainer.rollout_settings(segment_rounds=None)
    _, (results, _) = _play(trainer, 1, 2, settings)
    for b in results[0]:
        assert b.end_reason == "token_budget"
        assert not b.truncated and not b.terminated
        assert len(b.tokens) + 40 > 300


class Babbler(ScriptedSampler):
    """Never produces a valid tool call."""

    def _answer(self, prompt_text: str, rng) -> str:
        return "I think I should go on"


def test_invalid_tool_calls_consume_a_step_and_are_counted() -> None:
    _cfg, _comps, _sampler, trainer = _setup(sampler_cls=Babbler)
    settings = trainer.rollout_settings(segment_rounds=3)
    _, (results, stats) = _play(trainer, 1, 2, settings)
    assert stats.turns == 6 and stats.valid_tool_calls == 0
    for b in results[0]:
        assert b.actions == [INVALID_ACTION] * 3 and b.rounds == 3
        assert b.end_reason == "macro_boundary"
        assert "[invalid tool call" in b.prompt.messages[-1]["content"]


class CrashingEnv:
    def __init__(self, env, crash_at: int):
        self.env, self.crash_at, self.n = env, crash_at, 0

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, action):
        self.n += 1
        if self.n >= self.crash_at:
            raise RuntimeError("simulated env crash")
        return self.env.step(action)


def test_env_crash_drops_that_branch_only() -> None:
    _cfg, _comps, _sampler, trainer = _setup()

    async def go():
        start = await trainer.fresh_start(3)
        start.envs[1] = CrashingEnv(start.envs[1], crash_at=2)
        try:
            return await trainer.rollout([start], trainer.rollout_settings(segment_rounds=4))
        finally:
            trainer.close_envs([start])

    results, stats = asyncio.run(go())
    reasons = [b.end_reason for b in results[0]]
    assert reasons[1] == "error" and "simulated env crash" in (results[0][1].error or "")
    assert reasons[0] == reasons[2] == "macro_boundary"
    assert stats.env_errors == 1


def test_run_branches_checks_its_arguments() -> None:
    _cfg, comps, sampler, trainer = _setup()
    with pytest.raises(ValueError, match="one group per start"):
        asyncio.run(
            run_branches(
                [object()],
                [],
                sampler=sampler,
                chat=comps.chat,
                settings=trainer.rollout_settings(segment_rounds=1),
                pool=comps.pool,
                parser=comps.parser,
            )
        )
    bad = dataclasses.replace(trainer.rollout_settings(segment_rounds=1), invalid_action_penalty=-0.1)
    with pytest.raises(ValueError, match="invalid_action_penalty must be a finite number >= 0"):
        asyncio.run(
            run_branches(
                [],
                [],
                sampler=sampler,
                chat=comps.chat,
                settings=bad,
                pool=comps.pool,
                parser=comps.parser,
            )
        )


class ThreeKinds(ScriptedSampler):
    """Turn 1 a valid admissible call, turn 2 an unreadable one, turn 3 a readable but inadmissible one."""

    def _answer(self, prompt_text: str, rng) -> str:
        turn = prompt_text.count("Actions: ")
        return {1: format_tool_call("go on"), 2: "I think I should go on"}.get(
            turn, format_tool_call("dance")
        )


@pytest.mark.parametrize("penalty", [0.0, 0.1, 0.25])
def test_invalid_action_penalty_charges_unreadable_and_inadmissible_actions(penalty: float) -> None:
    _cfg, _comps, _sampler, trainer = _setup(f"env.invalid_action_penalty={penalty}", sampler_cls=ThreeKinds)
    settings = trainer.rollout_settings(segment_rounds=3)
    assert settings.invalid_action_penalty == penalty
    _, (results, stats) = _play(trainer, 1, 2, settings)
    for b in results[0]:
        assert b.actions == ["go on", INVALID_ACTION, "dance"]
        assert b.invalid_actions == 2
        assert b.rewards == [0.0, -penalty, -penalty]
        assert b.segment_reward == pytest.approx(-2 * penalty)
    assert stats.valid_tool_calls == 4 and stats.admissible_actions == 2


@pytest.mark.parametrize("value", ["-0.1", "inf", "nan"])
def test_invalid_action_penalty_must_be_a_finite_non_negative_number(value: str) -> None:
    from tempo_rl.training.config import ConfigError

    with pytest.raises(ConfigError, match=r"env\.invalid_action_penalty"):
        tiny_config(f"env.invalid_action_penalty={value}")
