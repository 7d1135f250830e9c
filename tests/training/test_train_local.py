"""End to end on the local backend (tiny transformer, offline tokenizer), and resume after SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from tempo_rl.training.checkpoint import CHECKPOINT_DIR, latest_checkpoint, verify_checkpoint
from tempo_rl.training.config import TrainConfig, load_config
from tempo_rl.training.options import TrainerOptions
from tempo_rl.training.run import train_run

REPO = Path(__file__).resolve().parents[2]

TINY_LOCAL = """
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
max_rounds = 12
macro_rounds = 4
branches = 2
critic_samples = 2
endpoint_samples = 1
states_per_batch = 2
warmup_updates = {warmup}
warmup_games_per_batch = 1
td_updates = {td}

[sampling]
critic_answer = "sampled"
max_tokens = 24
critic_max_tokens = 8
critic_max_prompt_tokens = 400
max_trajectory_tokens = 1200
show_remaining_steps = false

[optim]
learning_rate = 1e-3

[warmstart]
episodes = {warmstart}
batch_size = 4

[kl]
coef = 0.0

[run]
loggers = []
checkpoint_every = 1
"""


def _config_text(warmup: int = 1, td: int = 2, warmstart: bool = True) -> str:
    return (
        TINY_LOCAL.replace("{warmup}", str(warmup))
        .replace("{td}", str(td))
        .replace("{warmstart}", "4" if warmstart else "0")
    )


def _tiny_config(tmp_path: Path, overrides: list[str]) -> TrainConfig:
    """The tiny local config (warm start on), written to ``tmp_path`` and loaded with ``overrides``."""
    cfg_file = tmp_path / "tiny.toml"
    cfg_file.write_text(_config_text())
    return load_config(cfg_file, overrides)


def _tiny_trainer(
    tmp_path: Path, overrides: list[str], options: TrainerOptions | None = None
) -> tuple[TrainConfig, Any]:
    """:func:`_tiny_config` and the trainer built from it (run folder ``tmp_path / "run"``)."""
    from tempo_rl.training.run import build_trainer

    config = _tiny_config(tmp_path, overrides)
    return config, build_trainer(config, tmp_path / "run", options=options)


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_warmup_and_td_run_end_to_end(tmp_path: Path) -> None:
    cfg_file = tmp_path / "tiny.toml"
    cfg_file.write_text(_config_text())
    config = load_config(cfg_file)
    run_dir = tmp_path / "run"
    summary = train_run(run_dir, config, console=False)
    for name in ("config.toml", "metrics.jsonl", "trajectories.jsonl", "store.sqlite", "summary.json"):
        assert (run_dir / name).is_file(), name
    records = _metrics(run_dir)
    steps = [r["step"] for r in records]
    assert steps == [0, 1, 2, 3]  # warm start at 0, then 1 warm-up + 2 TD updates
    warm, td1, td2 = records[1], records[2], records[3]
    assert warm["train/phase"] == 0.0 and td1["train/phase"] == 1.0
    assert warm["warmup/boundary_states"] > 0
    assert warm["warmup/stored_states"] > 0  # warm-up states go into the store
    # TD restores stored states (the store was filled by the warm-up) and mixes in fresh starts
    assert td1["td/reused_states"] >= 1 and td1["td/fresh_states"] >= 1
    for key in ("time/sampling_s", "time/env_s", "time/restore_s", "store/size", "td/replay_divergences"):
        assert key in td2
    assert summary["updates_done"] == 3
    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None and ckpt.update == 3
    trajectories = [json.loads(x) for x in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    assert {t["phase"] for t in trajectories} == {"warmup", "td"}


def _run_cli(args: list[str], **kw) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    return subprocess.Popen(
        [sys.executable, "-m", "tempo_rl.cli", "train", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_loses_and_repeats_nothing(tmp_path: Path) -> None:
    cfg_file = tmp_path / "tiny.toml"
    cfg_file.write_text(_config_text(warmup=1, td=4, warmstart=False))
    run_dir = tmp_path / "run"
    proc = _run_cli(["--config", str(cfg_file), "--run-dir", str(run_dir), "--quiet"])
    metrics = run_dir / "metrics.jsonl"
    deadline = time.time() + 240
    # kill while update 3 is running: two updates logged (and checkpointed), the third in flight
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(
                f"training ended before it could be killed:\n{proc.stdout.read() if proc.stdout else ''}"
            )
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("training did not log two updates in time")
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    killed_at = len(_metrics(run_dir))
    ckpt = latest_checkpoint(run_dir)
    # the checkpoint of update 2 may or may not have been written when the kill landed
    assert ckpt is not None and 1 <= ckpt.update <= killed_at

    resumed = _run_cli(["--resume", str(run_dir), "--quiet"])
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out
    records = _metrics(run_dir)
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5], "an update was lost or repeated"
    trajectories = [json.loads(x) for x in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    per_update: dict[int, int] = {}
    for t in trajectories:
        per_update[t["update"]] = per_update.get(t["update"], 0) + 1
    assert sorted(per_update) == [0, 1, 2, 3, 4]
    assert per_update[0] == 2  # warm-up: 1 game x 2 branches, written once
    assert all(n == 4 for u, n in per_update.items() if u > 0)  # TD: 2 starts x 2 branches, written once
    final = latest_checkpoint(run_dir)
    assert final is not None and final.update == 5
    state = final.trainer_state
    assert state["update"] == 5
    # the data cursor counted every fresh game exactly once: 1 warm-up game + one fresh start per TD update
    # (fresh_share 0.25 of 2 states -> at least 1), + top-ups while the store was small
    assert state["fresh_cursor"] >= 5

    # the resumed run is the uninterrupted run, sample for sample: actor actions, critic estimates and every
    # learning metric match (weights, Adam state, RNG, store and data cursor all came back exactly)
    straight_dir = tmp_path / "straight"
    straight = _run_cli(["--config", str(cfg_file), "--run-dir", str(straight_dir), "--quiet"])
    out, _ = straight.communicate(timeout=300)
    assert straight.returncode == 0, out
    assert _learning_metrics(run_dir) == _learning_metrics(straight_dir)
    assert _actions(run_dir) == _actions(straight_dir)


def _learning_metrics(run_dir: Path) -> list[dict[str, object]]:
    """Every logged metric per update except wall-clock timings and the counters that count since the process
    started (``workers/``, ``backend/``, and ``sampling/``: the local sampler's prefill and prefix cache, which
    evaluation's sampling adds to); NaN made comparable."""
    skip_prefix = ("time", "workers/", "backend/", "sampling/")
    skip_suffix = ("_s", "_seconds")
    return [
        {
            k: (round(v, 6) if isinstance(v, float) and v == v else repr(v))
            for k, v in r.items()
            if not k.startswith(skip_prefix) and not k.endswith(skip_suffix)
        }
        for r in _metrics(run_dir)
    ]


def _actions(run_dir: Path) -> list[tuple[int, tuple[str, ...]]]:
    rows = [json.loads(x) for x in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    return sorted((r["update"], tuple(r["actions"])) for r in rows)


def test_warm_start_critic_format_example_leaves_the_answer_prefix_to_the_prompt(tmp_path: Path) -> None:
    import numpy as np

    from tempo_rl.training.warmstart import demonstration_datums

    overrides = ["sampling.critic_max_prompt_tokens=2000"]
    config, trainer = _tiny_trainer(tmp_path, overrides, TrainerOptions(critic_answer_prefix="<value>"))
    tokenizer = trainer.c.chat.tokenizer
    datums = demonstration_datums(trainer, (config.env.spec(), 3), np.random.default_rng(0))
    critic = [d for d in datums if d.tags.get("role") == "critic"]
    assert len(critic) == 1
    tokens = list(critic[0].model_input)  # next-token layout: tokens[i] predicts targets[i]
    targets = np.asarray(critic[0].loss_fn_inputs["target_tokens"])
    weights = np.asarray(critic[0].loss_fn_inputs["weights"])
    first = int(np.flatnonzero(weights)[0])
    assert tokenizer.decode(tokens[first : first + 1]) == "<value>"  # the prompt ends with the prefix
    answer = tokenizer.decode([int(t) for t in targets[weights > 0]], skip_special_tokens=True)
    assert answer.endswith("</value>") and not answer.startswith("<value>")
    assert trainer.c.critic.answer_prefix == "<value>"


def test_warm_start_critic_format_values_are_the_binary_answers(tmp_path: Path) -> None:
    import numpy as np

    from tempo_rl.training.warmstart import demonstration_datums

    config, trainer = _tiny_trainer(
        tmp_path, ["sampling.critic_max_prompt_tokens=2000"], TrainerOptions(critic_answer_prefix="<value>")
    )
    tokenizer = trainer.c.chat.tokenizer
    rng = np.random.default_rng(0)
    seen: set[str] = set()
    for seed in range(20):
        (critic,) = [
            d
            for d in demonstration_datums(trainer, (config.env.spec(), seed), rng)
            if d.tags.get("role") == "critic"
        ]
        targets = np.asarray(critic.loss_fn_inputs["target_tokens"])
        weights = np.asarray(critic.loss_fn_inputs["weights"])
        seen.add(tokenizer.decode([int(t) for t in targets[weights > 0]], skip_special_tokens=True))
    assert seen == {"0</value>", "1</value>"}  # uniform over the two levels: 20 draws hit both


def test_kl_anchor_reference_survives_a_resume_on_the_local_backend(tmp_path: Path) -> None:
    from tempo_rl.training.run import build_trainer

    cfg_file = tmp_path / "tiny.toml"
    cfg_file.write_text(_config_text(warmup=0, td=3))
    # a warm start long enough for valid tool calls, and the oracle's exact values: TD advantages that move
    # the actor (until a step does, pi is pi_ref and the anchor trains nothing)
    config = load_config(
        cfg_file,
        [
            "kl.coef=0.1",
            "tempo.critic=oracle",
            "tempo.branches=4",
            "warmstart.episodes=32",
            "warmstart.epochs=10",
            "warmstart.learning_rate=3e-3",
            "backend.hidden_size=64",
            "backend.num_layers=2",
            "backend.num_heads=4",
            "sampling.max_tokens=32",
        ],
    )
    run_dir = tmp_path / "run"
    train_run(run_dir, config, console=False, max_updates=2)  # warm start + 2 TD updates
    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None and ckpt.update == 2
    ref_path = ckpt.trainer_state["kl_reference"]
    assert ref_path and Path(ref_path).is_file()
    records = _metrics(run_dir)
    assert all("kl/ref_k1_mean" in r for r in records[1:])
    assert records[1]["train/optim_steps"] > 0  # a TD step moved the actor away from the reference
    assert records[2]["kl/ref_k1_mean"] != 0.0  # ... so the anchor now measures a drift

    saved = run_dir / "config.toml"
    resumed_config = load_config(saved, [])
    trainer = _resumed_trainer(resumed_config, run_dir, ckpt)
    probe = list(trainer.c.chat.tokenizer.encode("go on take red open door", add_special_tokens=False))
    current = trainer.c.sampler.compute_logprobs(probe)
    reference = trainer.reference_sampler().compute_logprobs(probe)
    # the reference is the post-warm-start policy, not the current one, and loading it left the current
    # weights in place
    direct = build_trainer(resumed_config, run_dir, resume=True, backend_state=ref_path)
    assert reference == direct.c.sampler.compute_logprobs(probe)
    assert reference != current
    assert trainer.c.training_client.save_weights_and_get_sampling_client().compute_logprobs(probe) == current
    assert not [p for p in run_dir.rglob("*") if "kl-resume-current" in p.name]  # the swap file is gone
    trainer.c.store.close()
    direct.c.store.close()

    summary = train_run(run_dir, resume=True, console=False)
    assert summary["updates_done"] == 3
    assert "kl/ref_k1_mean" in _metrics(run_dir)[-1]


def _resumed_trainer(config: TrainConfig, run_dir: Path, ckpt: Any) -> Any:
    """The trainer of ``run_dir`` as it resumes from checkpoint ``ckpt`` (the critic's own weights included)."""
    from tempo_rl.training.run import build_trainer
    from tempo_rl.training.trainer import TrainerState

    return build_trainer(
        config,
        run_dir,
        resume=True,
        state=TrainerState.from_json(ckpt.trainer_state),
        backend_state=ckpt.backend_state,
        critic_backend_state=ckpt.critic_backend_state,
    )


def _policy_and_critic_logprobs(run_dir: Path, config: TrainConfig) -> tuple[list, list]:
    """The latest checkpoint's actor and critic, each scoring one fixed token sequence."""
    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None and ckpt.critic_backend_state is not None
    assert Path(ckpt.critic_backend_state).is_file() and ckpt.critic_backend_state != ckpt.backend_state
    trainer = _resumed_trainer(config, run_dir, ckpt)
    try:
        probe = list(trainer.c.chat.tokenizer.encode("go on take red open door", add_special_tokens=False))
        return trainer.c.sampler.compute_logprobs(probe), trainer.critic_sampler().compute_logprobs(probe)
    finally:
        trainer.c.store.close()


def _own_critic_config(tmp_path: Path, warmup: int, overrides: list[str]) -> TrainConfig:
    """The tiny config with 1 TD update and a critic of its own, whose answers are scored from their
    probabilities (never unparsable) with room for its prompt: every warm-up state trains the critic."""
    cfg_file = tmp_path / "tiny.toml"
    cfg_file.write_text(_config_text(warmup=warmup, td=1))
    own = [
        'tempo.critic_weights="own"',
        'sampling.critic_answer="expected"',
        "sampling.critic_max_prompt_tokens=1000",
        # no sampled answers to size: the defaults
        "sampling.critic_max_tokens=512",
        "tempo.critic_samples=4",
        "tempo.endpoint_samples=2",
    ]
    return load_config(cfg_file, [*own, *overrides])


def test_a_critic_of_its_own_trains_apart_from_the_actor_and_resumes_exactly(tmp_path: Path) -> None:
    # kl.coef: the anchor must see the policy unmoved by the critic's steps
    config = _own_critic_config(tmp_path, 2, ["kl.coef=0.1"])
    run_dir = tmp_path / "run"
    train_run(run_dir, config, console=False, max_updates=0)  # the warm start, and its checkpoint
    assert not list(tmp_path.rglob("critic-init.pt"))  # the copy's file is gone once loaded
    actor0, critic0 = _policy_and_critic_logprobs(run_dir, config)
    assert critic0 == actor0  # the critic starts as a copy of the warm-started policy
    # the 2 warm-up updates, resumed from that checkpoint
    train_run(run_dir, resume=True, console=False, max_updates=2)
    actor2, critic2 = _policy_and_critic_logprobs(run_dir, config)
    records = _metrics(run_dir)[1:]
    assert [r["train/critic_datums"] > 0 and r["train/optim_steps"] > 0 for r in records] == [True, True]
    assert critic2 != critic0  # the critic's Datums trained its own weights ...
    # ... and not the policy's: warm-up actor Datums carry no advantage, and the policy version stays the
    # anchor's reference version, so the anchor adds none (rounding between two passes would be Adam-scaled)
    assert actor2 == actor0
    summary = train_run(run_dir, resume=True, console=False)  # and the TD update, resumed again
    assert summary["updates_done"] == 3

    straight = tmp_path / "straight"
    train_run(straight, config, console=False)  # the same run without the stops
    assert _policy_and_critic_logprobs(straight, config) == _policy_and_critic_logprobs(run_dir, config)


def test_a_critic_of_its_own_steps_at_its_own_learning_rate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tempo_rl.rollout.datums import make_datum
    from tempo_rl.training.run import build_trainer

    config = _own_critic_config(tmp_path, 1, [])
    trainer = build_trainer(config, tmp_path / "run", options=TrainerOptions(critic_learning_rate=0.25))
    steps: list[tuple[str, float]] = []

    def recording(role: str, step: Any) -> Any:
        def optim_step(params: Any) -> Any:
            steps.append((role, params.learning_rate))
            return step(params)

        return optim_step

    for role, client in (("actor", trainer.c.training_client), ("critic", trainer.c.critic_training_client)):
        monkeypatch.setattr(client, "optim_step", recording(role, client.optim_step))
    tokens = list(trainer.c.chat.tokenizer.encode("go on take red open door", add_special_tokens=False))
    zeros = [0.0] * len(tokens)
    datums = [
        make_datum(tokens, zeros, [0.0, *[1.0] * (len(tokens) - 1)], role=role)
        for role in ("actor", "critic")
    ]
    try:
        trainer.train_step(datums)
    finally:
        trainer.c.store.close()
    # each set of weights takes its own step, at its own step size
    assert sorted(steps) == [("actor", config.optim.learning_rate), ("critic", 0.25)]
    assert config.optim.learning_rate != 0.25


def test_a_critic_of_its_own_gets_the_fault_layer_and_its_own_metrics(tmp_path: Path) -> None:
    from tempo_rl.backends.config import RetryConfig
    from tempo_rl.testing.faults import FaultPlan, FaultRates, faulty_build_trainer

    config = _own_critic_config(tmp_path, 1, [])
    run_dir = tmp_path / "run"
    train_run(run_dir, config, console=False, max_updates=0)  # the warm start, without faults
    # resumed with faults: the first optim_step after it is refused once; it is the critic's (the warm-up
    # trains the critic only), and the retry layer under which it sits applies it exactly once
    plan = FaultPlan(FaultRates(optim_fail=1.0), seed=0, max_faults={"optim_fail": 1})
    fast = RetryConfig(backoff_initial_s=0.001, backoff_max_s=0.01, max_attempts=4)
    with faulty_build_trainer(plan, retry=fast) as built:
        summary = train_run(run_dir, resume=True, console=False)
    (trainer,) = built
    assert summary["updates_done"] == 2 and plan.injected["optim_fail"] == 1
    actor, critic = trainer.c.training_client.stats, trainer.c.critic_training_client.stats
    assert critic.retries == {"optim_step": 1} and not actor.retries
    last = _metrics(run_dir)[-1]
    assert last["critic/backend/retries"] == sum(critic.retries.values())
    assert last["backend/retries"] == sum(actor.retries.values())
    # the critic's own samplers' counters, apart from the actor's (its answers here are scored from their
    # probabilities, which samples nothing: its sampling counters stay at 0 while the actor's grow)
    own_sampling = trainer.c.critic_training_client.sampling_stats.as_metrics()
    assert {k: v for k, v in last.items() if k.startswith("critic/sampling/")} == {
        f"critic/{k}": v for k, v in own_sampling.items()
    }
    assert last["sampling/prefill_tokens"] > last["critic/sampling/prefill_tokens"] == 0


def test_warmup_replay_rehearses_as_many_earlier_examples_as_it_has_new_ones_and_resumes_them(
    tmp_path: Path,
) -> None:
    config = _own_critic_config(tmp_path, 3, ["tempo.warmup_replay=true"])
    run_dir = tmp_path / "run"
    train_run(run_dir, config, console=False, max_updates=2)
    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None and ckpt.update == 2
    # the replay is appended to critic_replay.jsonl, each example once; the checkpoint records its count
    replay_file = run_dir / "critic_replay.jsonl"
    kept = [json.loads(line) for line in replay_file.read_text().splitlines()]
    assert "critic_replay" not in ckpt.trainer_state
    assert ckpt.trainer_state["critic_replay_examples"] == len(kept)
    assert ckpt.offsets["critic_replay.jsonl"] == replay_file.stat().st_size

    def fresh(m: dict) -> float:  # the update's own Monte Carlo examples
        return m["train/critic_datums"] - m["warmup/replayed_datums"]

    first, second = _metrics(run_dir)[1:]
    assert first["warmup/replayed_datums"] == 0.0 and fresh(first) > 0
    # update 2 rehearses as many of update 1's examples as it has new ones (all of them, when it has as many);
    # the replay holds both updates' examples
    assert second["warmup/replayed_datums"] == min(fresh(second), fresh(first))
    assert len(kept) == fresh(first) + fresh(second)
    assert all(set(e) == {"prompt", "completion", "weight"} and e["weight"] > 0 for e in kept)
    with open(
        replay_file, "a"
    ) as fh:  # an example appended after the checkpoint (a run killed before the next)
        fh.write(json.dumps(kept[0]) + "\n")
    summary = train_run(run_dir, resume=True, console=False)  # warm-up update 3 and the TD update
    assert summary["updates_done"] == 4
    third = _metrics(run_dir)[3]
    # restored up to the checkpoint: none lost or added (the file's count is checked below)
    assert third["warmup/replayed_datums"] == min(fresh(third), len(kept))
    td = _metrics(run_dir)[4]
    # TD keeps the replay (every TD update rehearses as many of its examples as it fits bootstrapped ones) and
    # adds nothing to it: its checkpoint rewrites no example
    warmup_end, final = (verify_checkpoint(run_dir / CHECKPOINT_DIR / f"update_{u:06d}") for u in (3, 4))
    assert final.trainer_state["critic_replay_examples"] == warmup_end.trainer_state["critic_replay_examples"]
    assert final.offsets["critic_replay.jsonl"] == warmup_end.offsets["critic_replay.jsonl"]
    replay = [json.loads(line) for line in replay_file.read_text().splitlines()]
    assert len(replay) == final.trainer_state["critic_replay_examples"] and replay[: len(kept)] == kept
    assert td["td/rehearsed_datums"] == td["train/critic_datums"] / 2 > 0

    straight = tmp_path / "straight"
    train_run(straight, config, console=False)  # the same run without the stop
    assert _policy_and_critic_logprobs(straight, config) == _policy_and_critic_logprobs(run_dir, config)


def test_a_checkpoint_with_its_replay_inline_resumes_and_moves_it_to_the_replay_file(tmp_path: Path) -> None:
    """A run checkpointed with the replay inside ``checkpoint.json`` (how tempo-rl kept it before
    ``critic_replay.jsonl``) resumes with every example, and its next checkpoint writes them to the file."""
    config = _own_critic_config(tmp_path, 3, ["tempo.warmup_replay=true"])
    run_dir = tmp_path / "run"
    train_run(run_dir, config, console=False, max_updates=2)
    replay_file = run_dir / "critic_replay.jsonl"
    kept = [json.loads(line) for line in replay_file.read_text().splitlines()]
    for u in (1, 2):  # both kept checkpoints, rewritten in the inline form
        meta_file = run_dir / CHECKPOINT_DIR / f"update_{u:06d}" / "checkpoint.json"
        meta = json.loads(meta_file.read_text())
        count = meta["trainer_state"].pop("critic_replay_examples")
        meta["trainer_state"]["critic_replay"] = kept[:count]
        del meta["offsets"]["critic_replay.jsonl"]
        meta_file.write_text(json.dumps(meta))
    replay_file.unlink()
    train_run(run_dir, resume=True, console=False)  # warm-up update 3 and the TD update
    third = _metrics(run_dir)[3]
    assert third["warmup/replayed_datums"] == min(third["train/critic_datums"] / 2, len(kept))
    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None and ckpt.update == 4 and "critic_replay" not in ckpt.trainer_state
    replay = [json.loads(line) for line in replay_file.read_text().splitlines()]
    assert replay[: len(kept)] == kept and len(replay) == ckpt.trainer_state["critic_replay_examples"] > len(
        kept
    )


def test_warm_start_plays_its_demonstrations_with_warmstart_env_kwargs(tmp_path: Path, monkeypatch) -> None:
    """The demos' games are the training games with ``warmstart.env_kwargs`` merged over ``env.kwargs``: here
    every RL game needs the blue key, while the demos' locks are drawn apart from their signs, so the expert
    they imitate takes red keys too (no key preference to clone)."""
    from tempo_rl.envs.keydoor import KeyDoorEnv
    from tempo_rl.training import warmstart

    overrides = [
        'env.kwargs={horizon=12, keys=1, colours=2, lock_colour="blue"}',
        'warmstart.env_kwargs={lock_colour="independent"}',
        "warmstart.episodes=12",
    ]
    config, trainer = _tiny_trainer(tmp_path, overrides)
    games = []
    real = warmstart.demonstration_datums

    def spy(trainer, game, rng, calls=None):  # type: ignore[no-untyped-def]
        games.append(game)
        return real(trainer, game, rng, calls)

    monkeypatch.setattr(warmstart, "demonstration_datums", spy)
    metrics = warmstart.warm_start(trainer)
    assert metrics["warmstart/optim_steps"] > 0
    assert [seed for _, seed in games] == [config.env.train_game(i)[1] for i in range(12)]
    assert {spec.name for spec, _ in games} == {"keydoor"}
    assert all(
        spec.kwargs == {"horizon": 12, "keys": 1, "colours": 2, "lock_colour": "independent"}
        for spec, _ in games
    )
    takes = set()
    for spec, seed in games:
        env = KeyDoorEnv(**spec.kwargs)
        env.reset(seed)
        takes.update(a for a in env.walkthrough() or () if a.startswith("take "))
    assert takes == {"take red", "take blue"}
    assert config.env.kwargs["lock_colour"] == "blue"  # the RL games are untouched


def test_the_critic_history_window_reaches_the_generative_critic(tmp_path: Path) -> None:
    """``TrainerOptions.critic_history_turns`` is the critic's window; a negative one fails naming it."""
    _config, trainer = _tiny_trainer(tmp_path, [], TrainerOptions(critic_history_turns=1))
    assert trainer.c.critic.history_turns == 1
    with pytest.raises(ValueError, match="critic_history_turns"):
        TrainerOptions(critic_history_turns=-1)
