"""Benchmark: how much training the main job's tiny model needs to learn KeyDoor's key choice, in isolation.

The offline main job's eval failures are all wrong key choices (see ``docs/results.md``). This benchmark asks
whether the local model *can* learn that one decision, and from how many examples, with no env loop and no
critic around it. Each example is a real actor context up to the decisive token: the chat the actor reads when
it has written ``...<parameter=action>take`` in the key room (rendered by the trainer's own renderer and
tokenizer), and the target is the colour token the sign showed. Held-out games measure greedy accuracy.

Arms (the same fresh model for each, the main job's width/depth/heads and tokenizer):

* ``sft``: cross-entropy on the colour token, batch 4 x ``--games-per-step`` (16), Adam lr 3e-3 (the warm
  start's rate).
* ``rl_<lr>``: first 60 supervised steps on *random* colours (the model then names a colour but ignores the
  sign: greedy accuracy 0.5), then REINFORCE on the sampled colour token: ``--games-per-step`` (4) games x 4
  samples per step, reward 1 for the right colour, advantage = reward - group mean (the actor signal of GRPO
  and of a TEMPO macro-step whose endpoint value is exact).

Prints ONE JSON line: per arm, the first step whose held-out greedy accuracy reaches 0.9 (``null`` if none)
and the final accuracy, plus the examples (labelled or sampled) seen by then, and what the arm costs the rest
of the actor: ``walk_accuracy_start`` / ``_final``, the teacher-forced greedy accuracy on every other tool-call
token of 64 held-out expert walkthroughs (1.0 for a warm-started actor that walks; near 0 for a fresh model),
before and after the arm's training. ``--layout main`` uses the main
job's env (the sign a random number of rooms before the key room); ``--layout adjacent`` puts the sign in the
room before the key room (``clue_gap = 0``, ``lock_gap = 0``); ``--layout clue_at_key`` also repeats it in the
key room's own observation (``clue_at_key = true``). ``--quick``: fewer games and steps (a smoke run).

``--role critic`` asks the same of the *critic*: each example is the generative critic's real prompt (task,
privileged layout, condensed history, rendered by ``GenerativeCritic.prompt_tokens`` as in the trainer) of the
state right after the first ``open door`` of a walkthrough whose key choice was random, followed by
``<value>``; the target is the value's first digit, ``1`` when the door opened (the exit is reachable), ``0``
when it stayed locked. The RL arms' reward, 1 for the right digit, is the Brier critic reward
``-(V - G)^2`` shifted by 1 for V, G in {0, 1}; centring makes the two identical. ``--games-per-step G``
(default 4) sets how many states (RL: x 4 samples) or examples / 4 (supervised) one optimiser step sees.

``--init-state PATH --tokenizer DIR`` starts every arm from a trainer's saved local backend state instead of a
fresh model (e.g. ``RUN/backend_states/kl-reference.pt``, the weights right after a run's supervised warm
start, with ``RUN/tokenizer``; pass that run's ``--hidden-size`` / ``--num-layers``); the RL arms then skip
their random-colour steps. It asks whether RL can move the decision from where the trainer's warm start left it.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Sequence
from typing import Any

from tempo_rl.training.run import DEFAULT_CONFIG

_ADJACENT: dict[str, Any] = {"horizon": 16, "keys": 1, "colours": 2, "clue_gap": 0, "lock_gap": 0}
LAYOUTS: dict[str, dict[str, Any]] = {
    "main": {"horizon": 16, "keys": 1, "colours": 2},
    "adjacent": _ADJACENT,
    "clue_at_key": {**_ADJACENT, "clue_at_key": True},
}

Example = tuple[list[int], int]  # (context token ids, the right colour's token id)


def critic_examples(kwargs: dict[str, Any], seeds: Sequence[int], tokenizer: Any) -> list[Example]:
    """The critic's prompt right after the first ``open door`` (random key choice), up to ``<value>``; the
    target is the token ``1`` (door opened) or ``0`` (it stayed locked)."""
    from tempo_rl.backends.types import SamplingParams
    from tempo_rl.critic.base import CriticQuery
    from tempo_rl.critic.generative import GenerativeCritic
    from tempo_rl.envs.keydoor import COLOURS, KeyDoorEnv
    from tempo_rl.rollout.renderer import ChatRenderer

    # the trainer's own prompt builder, ending with the answer prefix (sampling.critic_answer_prefix); the
    # budget is never reached (the prompts are ~470 tokens)
    critic = GenerativeCritic(
        ChatRenderer(tokenizer),
        SamplingParams(max_tokens=1),
        max_prompt_tokens=10**6,
        answer_prefix="<value>",
    )
    digits = {v: tokenizer.encode(v, add_special_tokens=False)[0] for v in ("0", "1")}
    out: list[Example] = []
    for seed in seeds:
        rng = random.Random(seed)
        env = KeyDoorEnv(**kwargs)
        obs = env.reset(seed)
        history: list[tuple[str, str]] = []
        opened = False
        for action in env.walkthrough() or ():
            if action.startswith("take "):
                action = "take " + rng.choice(COLOURS[: kwargs["colours"]])
            result = env.step(action)
            history.append((action, result.observation.text))
            if action == "open door":
                opened = "opens the door" in result.observation.text
                break
        query = CriticQuery(
            task=str(obs.info.get("task", "")),
            history=history,
            initial_observation=obs.text,
            privileged_info=env.privileged_info(),
        )
        prompt, _omitted = critic.prompt_tokens(query)
        assert prompt is not None  # an unbounded budget always fits
        out.append((list(prompt), digits["1" if opened else "0"]))
    return out


#: ``actor_demo`` mask values: context (no loss), a tool-call token of the walk, the key choice's colour token.
CONTEXT, WALK, COLOUR = 0, 1, 2


def actor_demo(kwargs: dict[str, Any], seed: int, tokenizer: Any) -> tuple[list[int], list[int]]:
    """The actor's whole token sequence of the expert walkthrough of game ``seed`` as the trainer renders it
    (``state.tokens == prompt + completion + appended`` after every turn), with a mask of the same length:
    ``WALK`` on every token of every tool call and its EOS except the key choice's colour, ``COLOUR`` on that
    token, ``CONTEXT`` elsewhere."""
    from tempo_rl.envs.keydoor import KeyDoorEnv
    from tempo_rl.rollout.prompts import OBSERVATION_ROLE, build_actor_messages, format_observation
    from tempo_rl.rollout.renderer import ChatRenderer
    from tempo_rl.rollout.tool_call import format_tool_call

    chat = ChatRenderer(tokenizer)
    env = KeyDoorEnv(**kwargs)
    obs = env.reset(seed)
    state = chat.start(build_actor_messages(obs, tool_name="env_step", remaining_steps=None))
    tokens = list(state.tokens)
    mask = [CONTEXT] * len(tokens)
    for action in env.walkthrough() or ():
        call = [*tokenizer.encode(format_tool_call(action, "env_step"), add_special_tokens=False)]
        call.append(tokenizer.eos_token_id)
        call_mask = [WALK] * len(call)
        if action.startswith("take "):
            call_mask[call.index(tokenizer.encode(" " + action.split()[1], add_special_tokens=False)[0])] = (
                COLOUR
            )
        result = env.step(action)
        text = format_observation(result.observation, remaining_steps=None)
        ext = chat.extend(state, call, [{"role": OBSERVATION_ROLE, "content": text}])
        if ext.restarted:
            raise RuntimeError(
                f"the chat template restarted the history ({ext.reason}); this benchmark needs one"
            )
        tokens += [*call, *ext.appended]
        mask += [*call_mask, *[CONTEXT] * len(ext.appended)]
        state = ext.state
        if result.terminated or result.truncated:
            break
    return tokens, mask


def examples(kwargs: dict[str, Any], seeds: Sequence[int], tokenizer: Any) -> list[Example]:
    """The actor's context at the key choice, up to and including ``take`` (every earlier turn with its tool
    call, as in the trainer), and the right colour token."""
    out: list[Example] = []
    for seed in seeds:
        tokens, mask = actor_demo(kwargs, seed, tokenizer)
        cut = mask.index(COLOUR)
        out.append((tokens[:cut], tokens[cut]))
    return out


def walk_accuracy(model: Any, demos: Sequence[tuple[list[int], list[int]]]) -> float:
    """Teacher-forced greedy accuracy of ``model`` on the ``WALK`` tokens of ``demos`` (see :func:`actor_demo`):
    the share of the walkthroughs' tool-call tokens, the key colour excluded, that are the model's argmax given
    the true sequence before them. 1.0 for a warm-started actor that walks; it measures what a decision-only
    update costs the rest of the actor's behaviour."""
    import torch

    right = total = 0
    with torch.no_grad():
        for tokens, mask in demos:
            ids = torch.tensor([tokens])
            logits = model(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                position_ids=torch.arange(len(tokens))[None],
            ).logits[0, :-1]
            walk = torch.tensor(mask[1:]) == WALK
            right += int((logits.argmax(-1) == ids[0, 1:])[walk].sum())
            total += int(walk.sum())
    return right / total if total else math.nan


def arm_learning_rate(arm: str) -> float:
    """``"sft"`` -> 3e-3; ``"rl_<lr>"`` -> ``lr`` (a positive float). Raises ValueError naming the fix."""
    if arm == "sft":
        return 3e-3
    try:
        lr = float(arm.removeprefix("rl_")) if arm.startswith("rl_") else math.nan
    except ValueError:
        lr = math.nan
    if not lr > 0:
        raise ValueError(f"unknown arm {arm!r}: use 'sft' or 'rl_<learning rate>', e.g. rl_1e-3")
    return lr


def run_arm(
    arm: str,
    train: list[Example],
    test: list[Example],
    backend: Any,
    vocab: int,
    steps: int,
    games_per_step: int = 4,
    init_state: str | None = None,
    demos: Sequence[tuple[list[int], list[int]]] = (),
) -> dict[str, Any]:
    """Train a fresh model with one arm; return the first step reaching 0.9 held-out accuracy and the final one,
    and the :func:`walk_accuracy` on ``demos`` after the arm's start (and random-colour steps) and at its end."""
    import torch

    from tempo_rl.backends.local.model import build_tiny_model

    model = build_tiny_model(
        vocab,
        hidden_size=backend.hidden_size,
        num_layers=backend.num_layers,
        num_heads=backend.num_heads,
        max_positions=4096,
    )
    if init_state is not None:
        try:
            model.load_state_dict(torch.load(init_state, map_location="cpu", weights_only=True)["model"])
        except (RuntimeError, KeyError) as exc:
            raise SystemExit(
                f"--init-state {init_state}: not a local backend state of this model size ({exc}); pass a "
                "save_state file of the run with its --hidden-size / --num-layers and --tokenizer"
            ) from None
        model.eval()
    colours = sorted({target for _, target in train})
    rng = random.Random(0)

    def last_logits(batch: Sequence[Example]) -> torch.Tensor:
        width = max(len(ctx) for ctx, _ in batch)
        ids = torch.zeros(len(batch), width, dtype=torch.long)
        mask = torch.zeros(len(batch), width, dtype=torch.long)
        for j, (ctx, _) in enumerate(batch):  # left padding, positions count real tokens only
            ids[j, width - len(ctx) :] = torch.tensor(ctx)
            mask[j, width - len(ctx) :] = 1
        positions = (mask.cumsum(1) - 1).clamp(min=0)
        return model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1]

    def accuracy() -> float:
        with torch.no_grad():
            predicted = last_logits(test).argmax(-1).tolist()
        return sum(p == t for p, (_, t) in zip(predicted, test)) / len(test)

    def adam(lr: float) -> torch.optim.Optimizer:
        return torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.95), eps=1e-12)

    def step(opt: torch.optim.Optimizer, loss: torch.Tensor) -> None:
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    if arm != "sft" and init_state is None:  # name a colour, but a random one
        opt = adam(3e-3)
        for _ in range(60):
            batch = rng.sample(train, 16)
            step(
                opt,
                torch.nn.functional.cross_entropy(
                    last_logits(batch), torch.tensor([rng.choice(colours) for _ in batch])
                ),
            )
    start_accuracy = accuracy()
    walk_start = walk_accuracy(model, demos) if demos else None
    lr = arm_learning_rate(arm)
    opt = adam(lr)
    reached: int | None = None
    per_step = 4 * games_per_step
    for n in range(1, steps + 1):
        if arm == "sft":
            batch = rng.sample(train, per_step)
            loss = torch.nn.functional.cross_entropy(last_logits(batch), torch.tensor([t for _, t in batch]))
        else:
            games = rng.sample(train, games_per_step)
            batch = [g for g in games for _ in range(4)]
            logp = torch.log_softmax(last_logits(batch), -1)
            with torch.no_grad():
                sampled = torch.multinomial(logp.exp(), 1).squeeze(1)
                reward = torch.tensor([float(int(a) == t) for a, (_, t) in zip(sampled, batch)])
                reward = reward.view(games_per_step, 4)
                advantage = (reward - reward.mean(1, keepdim=True)).view(-1)
            loss = -(advantage * logp[torch.arange(len(batch)), sampled]).sum()
        step(opt, loss)
        if n % 10 == 0 and reached is None and accuracy() >= 0.9:
            reached = n
    return {
        "lr": lr,
        "start_accuracy": round(start_accuracy, 3),
        "final_accuracy": round(accuracy(), 3),
        "steps_to_0.9": reached,
        "examples_to_0.9": None if reached is None else reached * per_step,
        "steps": steps,
        "walk_accuracy_start": None if walk_start is None else round(walk_start, 3),
        "walk_accuracy_final": round(walk_accuracy(model, demos), 3) if demos else None,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--layout", choices=sorted(LAYOUTS), default="adjacent")
    parser.add_argument("--steps", type=int, default=200, help="training steps per arm")
    parser.add_argument("--arms", default="sft,rl_2e-4,rl_1e-3")
    parser.add_argument(
        "--role", choices=("actor", "critic"), default="actor", help="whose decision to learn"
    )
    parser.add_argument(
        "--games-per-step", type=int, default=4, help="states per optimiser step (RL: x 4 samples)"
    )
    parser.add_argument("--hidden-size", type=int, default=None, help="model width (default: the main job's)")
    parser.add_argument("--num-layers", type=int, default=None, help="model depth (default: the main job's)")
    parser.add_argument("--quick", action="store_true", help="100 games, 10 steps per arm (a smoke run)")
    parser.add_argument(
        "--init-state", default=None, help="start from this saved local backend state (needs --tokenizer)"
    )
    parser.add_argument("--tokenizer", default=None, help="the tokenizer directory of --init-state's run")
    args = parser.parse_args(argv)
    if (args.init_state is None) != (args.tokenizer is None):
        parser.error("--init-state and --tokenizer go together: a run's backend state and its RUN/tokenizer")
    try:
        for arm in args.arms.split(","):
            arm_learning_rate(arm)
    except ValueError as exc:
        parser.error(f"--arms: {exc}")
    if args.games_per_step < 1:
        parser.error(f"--games-per-step must be >= 1, got {args.games_per_step}")
    import torch

    from tempo_rl.backends.local.tokenizer import build_tokenizer
    from tempo_rl.training.config import load_config
    from tempo_rl.training.run import env_corpus

    torch.set_num_threads(1)
    torch.manual_seed(0)
    kwargs = LAYOUTS[args.layout]
    overrides = [f"env.kwargs.{k}={json.dumps(v)}" for k, v in kwargs.items()]  # TOML: true, not True
    overrides += [
        f"backend.{k}={v}"
        for k, v in (("hidden_size", args.hidden_size), ("num_layers", args.num_layers))
        if v
    ]
    cfg = load_config(DEFAULT_CONFIG, overrides)
    backend = cfg.backend
    if args.tokenizer is not None:
        from tempo_rl.backends.local.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(args.tokenizer)
    else:
        tokenizer = build_tokenizer(env_corpus(cfg), vocab_size=backend.vocab_size)
    n_train, steps = (100, 10) if args.quick else (2000, args.steps)
    make = critic_examples if args.role == "critic" else examples
    train = make(kwargs, range(n_train), tokenizer)
    test = make(kwargs, range(10**6, 10**6 + (50 if args.quick else 200)), tokenizer)
    demos = [
        actor_demo(kwargs, seed, tokenizer)
        for seed in range(2 * 10**6, 2 * 10**6 + (8 if args.quick else 64))
    ]
    t0 = time.perf_counter()
    arms = {
        arm: run_arm(
            arm, train, test, backend, len(tokenizer), steps, args.games_per_step, args.init_state, demos
        )
        for arm in args.arms.split(",")
    }
    figures = {
        "benchmark": "key_choice",
        "quick": args.quick,
        "role": args.role,
        "layout": args.layout,
        "games_per_step": args.games_per_step,
        "hidden_size": backend.hidden_size,
        "num_layers": backend.num_layers,
        "init_state": args.init_state,
        "train_games": n_train,
        "context_tokens_mean": round(sum(len(c) for c, _ in train) / len(train), 1),
        "arms": arms,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
