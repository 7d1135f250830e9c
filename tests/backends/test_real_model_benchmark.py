"""``benchmarks/real_model.py --quick`` on a tiny checkpoint prints its one JSON line: the job's peak memory
against the weights, throughput against the bandwidth bound, and a profile."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
from benchmark_runs import run_benchmark


@pytest.mark.slow
@pytest.mark.alfworld
def test_real_model_benchmark_quick_on_a_tiny_checkpoint(tokenizer: Any, tmp_path: Path) -> None:
    pytest.importorskip("alfworld")
    pytest.importorskip("peft")
    from tempo_rl.backends.local import build_tiny_model

    ckpt = tmp_path / "tiny"
    build_tiny_model(len(tokenizer), hidden_size=32, num_layers=1, num_heads=2).save_pretrained(ckpt)
    tokenizer.save_pretrained(ckpt)
    figures = run_benchmark("real_model.py", "--quick", "--model-path", str(ckpt), "--device", "cpu")
    assert figures["benchmark"] == "real_model" and figures["device"] == "cpu"
    assert figures["job_updates"] == 2 and figures["job_sampling_rows_max"] >= 1
    assert figures["peak_rss_bytes"] > figures["base_rss_bytes"] > 0
    assert figures["bfloat16_weight_bytes"] < figures["weight_bytes"]  # the base weights in bfloat16
    assert figures["copy_bandwidth_bytes_per_s"] > 0 and figures["activation_bytes"] >= 0
    for dtype in ("float32", "bfloat16"):
        for b in (1, 8):
            assert figures[f"{dtype}_decode_tokens_per_s_b{b}"] > 0
            assert figures[f"{dtype}_trained_tokens_per_s_b{b}"] > 0
            bound = figures[f"{dtype}_decode_bound_tokens_per_s_b{b}"]
            ratio = figures[f"{dtype}_decode_of_bound_b{b}"]
            assert ratio == pytest.approx(figures[f"{dtype}_decode_tokens_per_s_b{b}"] / bound, rel=1e-2)
            products = figures[f"{dtype}_products_tokens_per_s_b{b}"]
            assert products > 0
            assert figures[f"{dtype}_products_of_bound_b{b}"] == pytest.approx(products / bound, rel=1e-2)
            assert figures[f"{dtype}_decode_of_products_b{b}"] == pytest.approx(
                figures[f"{dtype}_decode_tokens_per_s_b{b}"] / products, rel=1e-2
            )
    assert figures["job_live_snapshots_max"] <= 2  # LoRA: only adapters are ever copied
    assert len(figures["profile_decode_top"]) >= 5 and isinstance(figures["peak_within_target"], bool)
