"""A real pretrained model end to end, offline: SmolLM2-135M-Instruct trains with TEMPO on real ALFWorld games.

The model comes from the cache (``tempo-rl model fetch smollm2``; CI fetches it before the tests, and
``TEMPO_REQUIRE_REAL_MODEL=1`` makes a missing model a failure instead of a skip). Its prompts are rendered with
its own ChatML template, its tool calls are parsed from its own text (it is not trained to make them: nearly all
are invalid, and counted so), its critic's ``<value>`` is parsed from its own output (prefilled with
``<value>``: some of its answers parse). Whether an RL update of such an untrained model gets non-zero
advantages is up to its samples, so the losses are also checked directly: the warm start's cross-entropy on
the model's own tokenization of an expert demo, and one importance-sampling step that must raise the logprob of
a completion with a positive advantage. One run with LoRA (rank 8: warm start, a warm-up update and a TD
update; only the adapter moves), a shorter one with full fine-tuning (a warm-up update, then the
importance-sampling step moves the model's own weights). Measured wall time of both on 2 shared CPU cores: see docs/real-model.md.
"""

from __future__ import annotations

import gc
import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("alfworld")

from tempo_rl.training.config import load_config
from tempo_rl.training.options import TrainerOptions
from tempo_rl.training.run import train_run

REPO = Path(__file__).resolve().parents[2]
GAMES = REPO / "tests" / "data" / "alfworld" / "json_2.1.1" / "valid_seen"

CONFIG = """
algorithm = "tempo"

[env]
name = "alfworld"
kwargs = {{ max_steps = {T} }}
games_dir = "{games}"
eval_games_dir = "{games}"

[backend]
kind = "local"
model_path = "{model}"
lora_rank = {lora}
prefix_cache_bytes = 268435456

[tempo]
max_rounds = {T}
macro_rounds = 2
branches = 2
critic_samples = 4
endpoint_samples = 1
states_per_batch = 1
warmup_updates = 1
warmup_games_per_batch = 1
td_updates = {td}

[sampling]
max_tokens = 32            # one tool call is ~30 tokens in this tokenizer (its tags are not single tokens)
critic_answer = "sampled"
critic_max_tokens = 8      # "0.5</value>" is 6 tokens
critic_max_prompt_tokens = 1500
max_trajectory_tokens = 3000

[warmstart]                 # one noisy expert demo (cross-entropy) + one critic answer-format example
expert = "walkthrough"
episodes = {warmstart}
batch_size = 2
learning_rate = 1e-4

[optim]
learning_rate = 1e-4

[kl]
coef = 0.0

[run]
loggers = []
eval_episodes = 1
checkpoint_every = 1
"""


def _run(
    tmp_path: Path, model: Path, *, lora: int, td: int, T: int, warmstart: bool
) -> tuple[Path, list[dict[str, Any]]]:
    gc.collect()  # the previous run's models (weights, Adam moments, sampler snapshots) go first
    games = tmp_path / "games"
    if not games.exists():  # one short real game (look_at_obj_in_light), copied: runs write nothing beside it
        src = sorted(p for p in GAMES.iterdir() if p.name.startswith("look_at_obj_in_light"))[0]
        shutil.copytree(src, games / src.name)
    cfg_file = tmp_path / f"lora{lora}.toml"
    text = CONFIG.format(games=games, model=model, lora=lora, td=td, T=T, warmstart=1 if warmstart else 0)
    cfg_file.write_text(text)
    run_dir = tmp_path / f"run-lora{lora}"
    summary = train_run(
        run_dir, load_config(cfg_file), console=False, options=TrainerOptions(critic_answer_prefix="<value>")
    )
    assert summary["updates_done"] == 1 + td
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert [m["step"] for m in metrics] == list(range(0 if warmstart else 1, 2 + td))  # warm start: step 0
    return run_dir, metrics


def _weights(run_dir: Path) -> dict[str, Any]:
    import torch

    from tempo_rl.training.checkpoint import latest_checkpoint

    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None and ckpt.backend_state is not None
    state_file = Path(ckpt.backend_state)
    assert state_file.is_relative_to(run_dir)  # the backend states live in the run, not in the cwd
    return torch.load(state_file, map_location="cpu", weights_only=True)["model"]


def _original(model: Path, name: str) -> Any:
    from safetensors import safe_open

    with safe_open(str(model / "model.safetensors"), framework="pt") as f:
        return f.get_tensor(name)


def _check_warm_start(start: dict[str, Any]) -> None:
    # the warm start trained on the model's own tokenization of the demo (cross-entropy)
    assert start["warmstart/datums"] == 2 and start["warmstart/optim_steps"] == 1
    assert math.isfinite(start["warmstart/loss_first"]) and start["warmstart/loss_first"] > 0


def _check_updates(updates: list[dict[str, Any]]) -> None:
    warm = updates[0]
    assert warm["train/phase"] == 0.0
    for m in updates:
        # the real template never rewrites history: every turn extended its prompt token for token
        assert m["rollout/template_restarts"] == 0.0
        # tool calls were parsed from the model's own text (an untrained model rarely makes a valid one)
        assert 0.0 <= m["rollout/valid_tool_call_rate"] <= 1.0
        assert m["train/tokens"] == 0 or (math.isfinite(m["train/loss"]) and m["train/optim_steps"] >= 1)
    # the critic's <value> was parsed from its own output: some answers parse
    assert 0.0 <= warm["critic/parse_failure_rate"] < 1.0


def _importance_sampling_step(run_dir: Path, model: Path, lora: int) -> Any:
    """The RL loss on the real model, deterministically: a sampled completion with a positive advantage
    becomes more likely after one importance-sampling step (whatever the run's own advantages were).
    Returns the trained model."""
    from tempo_rl.backends import AdamParams, LocalBackendConfig, SamplingParams
    from tempo_rl.backends.factory import create_local_clients
    from tempo_rl.rollout.datums import completion_datum
    from tempo_rl.rollout.renderer import ChatRenderer

    gc.collect()
    cfg = LocalBackendConfig(model_path=str(model), lora_rank=lora, state_dir=str(run_dir / "is"))
    training, sampler = create_local_clients(cfg)
    tok = training.get_tokenizer()
    prompt = list(ChatRenderer(tok).start([{"role": "user", "content": "Go to desk 1."}]).tokens)
    seq = sampler.sample(prompt, 1, SamplingParams(max_tokens=6, seed=0)).sequences[0]
    before = sum(sampler.compute_logprobs(prompt + list(seq.tokens))[len(prompt) :])
    del sampler
    datum = completion_datum(prompt, list(seq.tokens), list(seq.logprobs), 1.0, vocab_size=len(tok))
    out = training.forward_backward([datum], "importance_sampling")
    assert math.isfinite(out.loss) and out.loss < 0  # -sum(ratio * A) with ratio ~ 1, A = 1
    training.optim_step(AdamParams(learning_rate=1e-3))
    after_sampler = training.save_weights_and_get_sampling_client()
    after = sum(after_sampler.compute_logprobs(prompt + list(seq.tokens))[len(prompt) :])
    assert after > before
    return training.model


@pytest.mark.slow
@pytest.mark.timeout(1500)  # ~4 min of CPU; a loaded machine stretches the wall time
def test_smollm2_tempo_on_alfworld_with_lora_then_full_fine_tuning(
    tmp_path: Path, real_model_dir: Path
) -> None:
    # LoRA: warm start, a warm-up update and a TD update; only the adapter moves
    run_dir, metrics = _run(tmp_path, real_model_dir, lora=8, td=1, T=4, warmstart=True)
    _check_warm_start(metrics[0])
    _check_updates(metrics[1:])
    td = metrics[2]
    assert td["train/phase"] == 1.0 and td["td/fresh_states"] + td["td/reused_states"] >= 1
    weights = _weights(run_dir)
    lora_b = [v for k, v in weights.items() if "lora_B" in k]
    assert lora_b and any(bool(v.abs().sum() > 0) for v in lora_b)  # B starts at 0: the adapter trained
    name = "model.layers.0.mlp.down_proj.weight"
    original = _original(real_model_dir, name)
    assert bool(
        (weights["base_model.model." + name.replace(".weight", ".base_layer.weight")] == original).all()
    )
    del weights
    _importance_sampling_step(run_dir, real_model_dir, lora=8)

    # full fine-tuning, shorter: a warm-up update (T = 2), then one importance-sampling step moves the
    # model's own weights
    run_dir, metrics = _run(tmp_path, real_model_dir, lora=0, td=0, T=2, warmstart=False)
    _check_updates(metrics)
    model = _importance_sampling_step(run_dir, real_model_dir, lora=0)
    assert not bool((model.get_parameter(name).detach() == original).all())
