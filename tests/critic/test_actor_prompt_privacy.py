"""No actor prompt ever contains privileged text, for every built-in environment.

For each registered built-in env, a fresh start is built the way the trainer builds it (the env's privileged
information, prefixed with a unique canary, travels in the start state for the critic), two branches play a
macro-step with the trainer's episode runner, and a second macro-step continues from a stored endpoint (the TD
path, token prefix included). Every prompt the actor's sampler receives is decoded and must contain neither
the canary nor any fragment of the privileged text that the env does not also show publicly. A positive
control checks that the critic's prompt of the same state does contain the canary.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from tempo_rl.backends.types import SampledSequence, SampleResult, SamplingParams
from tempo_rl.critic import CriticQuery, GenerativeCritic
from tempo_rl.envs import EnvSpec, available, make, restore_branches
from tempo_rl.rollout.tool_call import ToolCallParser, format_tool_call

REPO = Path(__file__).resolve().parents[2]
ALFWORLD_GAMES = REPO / "tests" / "data" / "alfworld" / "json_2.1.1"  # real games vendored into the repo


def _alfworld_kwargs() -> dict[str, Any]:
    pytest.importorskip("alfworld", reason="needs the alfworld extra")
    games = sorted(ALFWORLD_GAMES.glob("valid_seen/*/*/game.tw-pddl"))
    assert games, f"the vendored ALFWorld games are missing from {ALFWORLD_GAMES}"
    return {"game_file": str(games[0])}


def _textworld_kwargs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pytest.importorskip("textworld", reason="needs the alfworld extra (TextWorld)")
    import textworld
    import textworld.generator

    options = textworld.GameOptions()
    options.seeds = 1
    options.nb_rooms = 3
    options.nb_objects = 5
    options.quest_length = 3
    options.path = str(tmp_path_factory.mktemp("tw") / "g1.z8")
    return {"path": str(textworld.generator.compile_game(textworld.generator.make_game(options), options))}


def _gymnasium_kwargs() -> dict[str, Any]:
    pytest.importorskip("gymnasium", reason="needs the gymnasium extra")
    return {"id": "FrozenLake-v1"}


#: How to build each built-in env offline. A newly registered built-in env must be added here.
BUILDERS: dict[str, Any] = {
    "keydoor": lambda _: {},
    "crossings": lambda _: {"state_note": True},
    "knights": lambda _: {},
    "arc-stub": lambda _: {},
    "gymnasium": lambda _: _gymnasium_kwargs(),
    "alfworld": lambda _: _alfworld_kwargs(),
    "textworld": _textworld_kwargs,
    "arc": None,  # the ARC-AGI-3 toolkit needs Python >= 3.12 and local game files; arc-stub covers it
}
#: Envs with a costly reset: one branch per segment instead of two (the prompt path is the same).
SLOW = {"alfworld", "textworld"}


class RecordingSampler:
    """Calls the first listed action (else ``look``) and keeps the decoded text of every prompt it gets."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.prompts: list[str] = []

    async def sample_async(self, prompt: list[int], num_samples: int, params: SamplingParams) -> SampleResult:
        text = self.tokenizer.decode(list(prompt), skip_special_tokens=False)
        self.prompts.append(text)
        listed = re.findall(r"Actions: ([^|\n<]+)", text)
        action = listed[-1].strip() if listed else "look"
        reply = format_tool_call(action, "env_step")
        tokens = (*self.tokenizer.encode(reply, add_special_tokens=False), self.tokenizer.eos_token_id)
        return SampleResult(
            sequences=(SampledSequence(tokens=tokens, logprobs=(0.0,) * len(tokens), text=reply),)
            * num_samples
        )


@pytest.fixture(scope="module")
def chat() -> Any:
    pytest.importorskip("transformers", reason="needs the local extra for the offline tokenizer")
    from tempo_rl.backends.local.tokenizer import build_tokenizer
    from tempo_rl.rollout.renderer import ChatRenderer

    return ChatRenderer(build_tokenizer(["go on", "look", "place a1", "move down"], vocab_size=600))


def test_every_registered_env_is_covered() -> None:
    missing = sorted(set(available()) - set(BUILDERS))
    assert not missing, f"add the built-in env(s) {missing} to BUILDERS in {__file__}"


def _fragments(privileged: str) -> list[str]:
    return [f.strip() for f in re.split(r"[.;:\n]", privileged) if len(f.strip()) >= 20]


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(BUILDERS)]
)
def test_no_actor_prompt_contains_privileged_text(
    name: str, chat: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from tempo_rl.envs.workers import EnvWorkerPool
    from tempo_rl.rollout.branches import RolloutSettings, run_branches
    from tempo_rl.rollout.renderer import PromptWindow
    from tempo_rl.training.types import StoredState

    builder = BUILDERS[name]
    if builder is None:
        pytest.skip(f"{name!r} cannot be built offline on this Python; see BUILDERS")
    spec = EnvSpec(name=name, kwargs=builder(tmp_path_factory))
    env = make(spec)
    opening = env.reset(0)
    real = env.privileged_info() or ""
    canary = f"CANARY-{uuid.uuid4().hex}"
    privileged = f"{canary} {real}"
    snapshot = env.snapshot()
    start = StoredState.at_reset(
        snapshot,
        game_id=f"{name}:0",
        task=str(opening.info.get("task", "")),
        policy_version=0,
        privileged_info=privileged,
    )
    n = 1 if name in SLOW else 2
    envs = [env, *restore_branches(snapshot, n - 1)] if n > 1 else [env]
    sampler = RecordingSampler(chat.tokenizer)
    settings = RolloutSettings(
        sampling=SamplingParams(max_tokens=64), max_rounds=8, segment_rounds=3, max_trajectory_tokens=100_000
    )
    public = [opening.text, *(opening.admissible_actions or ())]
    with EnvWorkerPool(max_workers=2, step_timeout_s=60) as pool:
        (row,), _ = asyncio.run(
            run_branches(
                [start],
                [envs],
                sampler=sampler,
                chat=chat,
                settings=settings,
                pool=pool,
                parser=ToolCallParser(),
            )
        )
        continuing = [b for b in row if b.end_reason == "macro_boundary"]
        if continuing:  # the TD path: continue from a stored endpoint and its token prefix
            b = continuing[0]
            endpoint = start.child(
                b.snapshot,
                token_prefix=b.tokens,
                prompt=PromptWindow.of(b.prompt),
                spans=(),
                policy_version=0,
                macro_steps=1,
            )
            asyncio.run(
                run_branches(
                    [endpoint],
                    [restore_branches(b.snapshot, n)],
                    sampler=sampler,
                    chat=chat,
                    settings=settings,
                    pool=pool,
                    parser=ToolCallParser(),
                )
            )
        for b in row:
            for obs in b.observations:
                public += [obs.text, *(obs.admissible_actions or ())]
    for e in envs:
        e.close()

    assert sampler.prompts, "the actor was never prompted"
    leaks = [f for f in [canary, *_fragments(real)] if not any(f in p for p in public)]
    for prompt in sampler.prompts:
        for fragment in leaks:
            assert fragment not in prompt, f"{name}: privileged text {fragment!r} reached an actor prompt"

    # positive control: the same detection finds the canary in the critic's prompt of that state
    critic = GenerativeCritic(chat, SamplingParams(max_tokens=8), max_prompt_tokens=1_000_000)
    query = CriticQuery(
        task=start.task, history=(), initial_observation=opening.text, privileged_info=privileged
    )
    critic_prompt = chat.tokenizer.decode(
        list(critic.prompt_tokens(query)[0] or ()), skip_special_tokens=False
    )
    assert canary in critic_prompt
    assert all(f in critic_prompt for f in _fragments(real))
