"""TRL's ``GRPOTrainer`` fed with TEMPO-style advantages, on restored ARC-stub states.

Run: ``python examples/signals_in_trl.py --quick`` (needs ``pip install trl``; skipped in CI without it).

TRL computes GRPO advantages from rewards as ``A = R - mean(R)`` over the ``num_generations`` completions
of a prompt when ``scale_rewards="none"``, which is exactly TEMPO's actor advantage (signal 3) if the reward
is the TEMPO branch return (signal 1)::

    R_n = r_n + (1 - terminated_n) * V_hat(endpoint_n)

So the whole integration is a reward function. Here each prompt is a saved ``arc-stub`` state (a snapshot
taken after a few random actions); each completion is one action (a macro-step of H = 1 round, since TRL's
GRPO is single-turn); the reward function restores the state from its snapshot (verified replay), applies the
action, and returns ``branch_returns(r, V_hat, terminated)`` from :mod:`tempo_rl.signals`.

``V_hat`` comes from a stand-in critic that reads the game's hidden state (the chance that a random clicker
still wins). In a real run it is tempo-rl's generative critic (:class:`tempo_rl.critic.GenerativeCritic`),
the same model prompted with the game's source; see ``docs/signals-in-other-frameworks.md``.

The model is a tiny random Llama built in-process with an offline tokenizer (no download), so this runs
anywhere; it shows the wiring, not learning.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from typing import Any

import numpy as np

from tempo_rl.envs import Snapshot, make, restore
from tempo_rl.envs.arc import ArcStubEnv, InvalidActionError, parse_action
from tempo_rl.signals import branch_returns

SPEC = "arc-stub:levels=1,scale=8,max_steps=12"


def start_states(count: int, seed: int = 0) -> list[dict[str, str]]:
    """``count`` saved mid-game states: a prompt (the frame as text) and the snapshot JSON to restore it."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        env = make(SPEC)
        obs = env.reset(seed=i)
        for _ in range(rng.randrange(0, 3)):
            obs = env.step(rng.choice(["ACTION1", "ACTION2", "ACTION3", "ACTION4"])).observation
        prompt = f"{obs.info['task']}\n{obs.text}\nYour next action:"
        rows.append({"prompt": prompt, "snapshot": env.snapshot().to_json()})
    return rows


def stand_in_value(env: Any) -> float:
    """V_hat of a live arc-stub state from its hidden state: a random clicker's chance to still win.

    With t tiles left and l lives, clicking tiles at random wins with probability min(l, t) / t (the key tile
    is among the first l picks). Replace this by the generative critic in real use.
    """
    inner = env.env if hasattr(env, "env") else env  # unwrap the RecordedEnv
    assert isinstance(inner, ArcStubEnv)
    tiles, lives = len(inner.game.tiles), inner.game.lives
    return min(lives, tiles) / tiles if tiles else 0.0


def tempo_reward(
    prompts: list[str], completions: list[str], snapshot: list[str], **kwargs: Any
) -> list[float]:
    """TRL reward function: the TEMPO branch return R_n of each completion (one action, restored state)."""
    rewards, values, terminated = [], [], []
    for text, snap in zip(completions, snapshot):
        env = restore(Snapshot.from_json(snap))  # verified replay of the saved state
        try:
            action = parse_action(text.strip().splitlines()[0] if text.strip() else "").text
        except InvalidActionError:
            action = text  # the env answers invalid text with feedback; it still costs the step
        result = env.step(action)
        rewards.append(result.reward)
        terminated.append(result.terminated)
        values.append(0.0 if result.terminated else stand_in_value(env))
        env.close()
    returns = branch_returns(np.array(rewards), np.array(values), np.array(terminated))
    return [float(r) for r in returns]


def main(argv: list[str] | None = None) -> int:
    """Build a tiny model and tokenizer, a dataset of saved states, and run a few GRPO steps with TRL."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="tiny settings for CI")
    args = parser.parse_args(argv)

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from tempo_rl.backends.local import build_tiny_model, build_tokenizer

    rows = start_states(8 if args.quick else 64)
    corpus = [row["prompt"] for row in rows] + [f"ACTION{n}" for n in range(1, 8)] + ["ACTION6 12 40"]
    tokenizer = build_tokenizer(corpus, vocab_size=512)
    tokenizer.padding_side = "left"
    model = build_tiny_model(len(tokenizer), hidden_size=32, num_layers=1, num_heads=2, max_positions=2048)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id

    steps = 2 if args.quick else 50
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            num_generations=4,  # N branches per saved state
            scale_rewards="none",  # A = R - mean(R): TEMPO's signal 3 (no std division)
            beta=0.0,  # no KL term, as in TEMPO
            per_device_train_batch_size=4,
            max_completion_length=8,
            max_steps=steps,
            learning_rate=1e-3,
            logging_steps=1,
            report_to="none",
            use_cpu=True,
            bf16=False,
            save_strategy="no",
            seed=0,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[tempo_reward],
            args=config,
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
        )
        trainer.train()
        logged = [entry for entry in trainer.state.log_history if "reward" in entry]
    print(
        json.dumps(
            {
                "trained_steps": trainer.state.global_step,
                "reward_mean_first": logged[0]["reward"] if logged else None,
                "reward_mean_last": logged[-1]["reward"] if logged else None,
            }
        )
    )
    return 0 if trainer.state.global_step == steps else 1


if __name__ == "__main__":
    raise SystemExit(main())
