"""Critic-only text about a state (``Observation.privileged_state``): knights' conflict note, hidden from the actor,
shown to the critic at the state it describes (start, warm-up boundary, TD endpoint, restored state)."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from typing import Any

import numpy as np
from trainer_doubles import scripted_components, tiny_config

from tempo_rl.critic.base import CriticQuery
from tempo_rl.critic.prompt import build_critic_messages
from tempo_rl.envs.core import Observation
from tempo_rl.envs.knights import KnightsEnv, knight_attacks, square_name
from tempo_rl.rollout.prompts import build_actor_messages, format_observation
from tempo_rl.testing.policies import ScriptedPolicy

NOW = "Now (hidden from the agent): "


def test_knights_names_the_pairs_that_conflict_now() -> None:
    env = KnightsEnv(size=5, preplaced=2, place=3, max_steps=16, feedback="final")
    opening = env.reset(0)
    assert "Fixed: a2 e4." in opening.text  # the instance these figures are computed on
    assert opening.privileged_state == "No two pieces conflict."
    notes = [env.step(a).observation for a in ("place a1", "place b3", "place c1", "remove b3")]
    # a1-b3: dx 1, dy 2; a2-c1: dx 2, dy 1; b3-c1: dx 1, dy 2 (a1-a2, a1-c1 are not a knight's move apart)
    assert [o.privileged_state for o in notes] == [
        "No two pieces conflict.",
        "Pieces a1 b3 conflict.",
        "Pieces a1 b3, a2 c1, b3 c1 conflict.",
        "Pieces a2 c1 conflict.",
    ]
    for obs in notes:  # the rule stays hidden from the actor
        assert "Pieces" not in obs.text and "No two pieces conflict" not in obs.text


def test_actor_prompts_never_show_it_and_the_critic_sees_it_after_the_interaction() -> None:
    canary = "CANARY-state-note"
    obs = Observation(
        text="Fixed: a2. Placed: none.", admissible_actions=("place a1",), privileged_state=canary
    )
    actor = build_actor_messages(obs, tool_name="act", remaining_steps=3)
    assert all(canary not in m["content"] for m in actor)
    assert canary not in format_observation(obs, remaining_steps=3)

    query = CriticQuery(
        task="Place 1 more piece.",
        history=(("place a1", "Placed a1."),),
        initial_observation="Fixed: a2.",
        privileged_info="One solution: place a1.",
    )
    plain = build_critic_messages(query)[1]["content"]
    noted = build_critic_messages(dataclasses.replace(query, privileged_state=canary))[1]["content"]
    line = f"{NOW}{canary}"
    # the note is its own part, between the interaction and the request for a value; nothing else changes
    assert noted.replace(f"\n\n{line}", "") == plain
    assert noted.index("Interaction so far") < noted.index(line) < noted.index("Estimate the value")


class RecordingPolicy(ScriptedPolicy):
    """:class:`ScriptedPolicy` (a random listed action, a random value) that keeps every critic prompt."""

    def __init__(self, tokenizer: Any) -> None:
        super().__init__(tokenizer)
        self.critic_prompts: list[str] = []

    def _answer(self, prompt_text: str, rng: np.random.Generator) -> str:
        if "value estimator" in prompt_text:
            self.critic_prompts.append(prompt_text)
        return super()._answer(prompt_text, rng)


def _expected_note(prompt: str) -> str:
    """The conflict note of the board in the last observation a critic prompt shows."""
    boards = re.findall(r"Fixed: ([a-e0-9 ]+|none)\. Placed: ([a-e0-9 ]+|none)\.", prompt)
    assert boards, prompt
    fixed, placed = boards[-1]
    names = sorted(n for n in (fixed + " " + placed).split() if n != "none")
    squares = sorted((ord(n[0]) - ord("a"), int(n[1:]) - 1) for n in names)
    pairs = [(a, b) for i, a in enumerate(squares) for b in squares[i + 1 :] if knight_attacks(a, b)]
    if not pairs:
        return "No two pieces conflict."
    return "Pieces " + ", ".join(f"{square_name(a)} {square_name(b)}" for a, b in pairs) + " conflict."


def test_every_critic_prompt_of_a_knights_run_shows_the_note_of_its_own_state() -> None:
    from tempo_rl.training.tempo import TempoTrainer

    cfg = tiny_config(
        "env.name=knights",
        'env.kwargs={size=5, preplaced=2, place=3, max_steps=16, feedback="final"}',
        "tempo.warmup_updates=1",
        "tempo.td_updates=2",
        'tempo.warmup_states_per_episode="every_round"',
        "tempo.fresh_share=0.5",
        "tempo.macro_rounds=2",
    )
    comps, _sampler, training = scripted_components(cfg)
    policy = RecordingPolicy(comps.chat.tokenizer)
    training.sampler = policy
    trainer = TempoTrainer(cfg, dataclasses.replace(comps, sampler=policy))
    asyncio.run(trainer.warmup_update(0))
    warmup = len(policy.critic_prompts)
    for step in (1, 2):
        metrics = asyncio.run(trainer.td_update(step))
    assert metrics["td/reused_states"] >= 1  # restored states from the store were valued too
    assert warmup >= 10 and len(policy.critic_prompts) > warmup
    conflicted = 0
    for prompt in policy.critic_prompts:
        note = _expected_note(prompt)
        assert f"{NOW}{note}" in prompt, prompt[-600:]
        conflicted += note.startswith("Pieces")
    assert conflicted >= 1  # the random actor made conflicts: both kinds of note were checked
