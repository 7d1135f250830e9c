"""The prefix cache's counters reach a training run's metrics (local backend, tiny TEMPO run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tempo_rl.training.config import load_config
from tempo_rl.training.run import train_run

TINY = """
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
prefix_cache_bytes = BUDGET

[tempo]
max_rounds = 8
macro_rounds = 4
branches = 2
critic_samples = 2
endpoint_samples = 1
states_per_batch = 2
warmup_updates = 1
warmup_games_per_batch = 1
td_updates = 1

[sampling]
critic_answer = "sampled"
max_tokens = 16
critic_max_tokens = 6
critic_max_prompt_tokens = 400
max_trajectory_tokens = 1000
show_remaining_steps = false

[warmstart]
episodes = 0

[kl]
coef = 0.0

[run]
loggers = []
checkpoint_every = 10
eval_every = 0
"""


def _last_metrics(tmp_path: Path, budget: int) -> dict[str, float]:
    cfg_file = tmp_path / f"tiny-{budget}.toml"
    cfg_file.write_text(TINY.replace("BUDGET", str(budget)))
    run_dir = tmp_path / f"run-{budget}"
    train_run(run_dir, load_config(cfg_file), console=False)
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return lines[-1]


@pytest.mark.slow
def test_run_metrics_count_prefix_hits_and_prefill(tmp_path: Path) -> None:
    on = _last_metrics(tmp_path, 64 * 1024 * 1024)
    off = _last_metrics(tmp_path, 0)
    for key in ("sampling/prefix_hit_tokens", "sampling/prefill_tokens", "sampling/prefix_evictions"):
        assert key in on and key in off, key
    # multi-turn episodes: later turns read their history from the cache
    assert on["sampling/prefix_hit_tokens"] > 0
    assert on["sampling/prefix_hit_tokens"] + on["sampling/prefill_tokens"] > on["sampling/prefill_tokens"]
    assert off["sampling/prefix_hit_tokens"] == 0 and off["sampling/prefill_tokens"] > 0
    assert off["sampling/prefix_cache_bytes"] == 0 and off["sampling/prefix_cache_peak_bytes"] == 0
    assert on["sampling/prefix_cache_peak_bytes"] > 0
