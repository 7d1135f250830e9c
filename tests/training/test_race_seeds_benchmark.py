"""``benchmarks/race_seeds.py``: the per-seed record, the spread and the table on hand-made races."""

from __future__ import annotations

from pathlib import Path

from benchmark_runs import load_benchmark

rs = load_benchmark("race_seeds")


def _summary(tempo: float, grpo: float) -> dict[str, object]:
    arm = {"env_steps": [0, 2304, 4610], "tokens": [0, 10, 20]}
    return {
        "race": {
            "tempo": {**arm, "success": [0.1, 0.2, tempo]},
            "grpo": {**arm, "env_steps": [0, 2300, 4620], "success": [0.1, 0.2, grpo]},
            "verdict": "v",
        }
    }


def test_seed_records_spread_and_table_by_hand() -> None:
    finals = {"0": (0.9, 0.5), "1": (0.3, 0.4), "2": (0.6, 0.5)}
    per_seed = {s: rs.seed_record(_summary(t, g), 600.0 + 60 * int(s)) for s, (t, g) in finals.items()}
    assert per_seed["0"]["env_steps"] == 4620 and per_seed["0"]["tempo_tokens"] == 20
    line = rs.headline(per_seed)
    assert line["seeds"] == [0, 1, 2] and line["tempo_ahead"] == 2
    d = line["tempo_minus_grpo"]
    assert (round(d["min"], 6), round(d["median"], 6), round(d["max"], 6)) == (-0.1, 0.1, 0.4)
    assert line["wall_s"] == {"min": 600.0, "median": 660.0, "max": 720.0}
    table = rs.results_table(line).splitlines()
    assert table[2] == "| TEMPO (generative critic) | 0.30 | 0.60 | 0.90 |"
    assert table[4] == "| TEMPO - GRPO (ahead on 2 of 3 seeds) | -0.10 | +0.10 | +0.40 |"
    assert table[5] == "| wall time (minutes) | 10.0 | 11.0 | 12.0 |"


def test_race_command_sets_the_seeds_the_mechanism_benchmark_uses() -> None:
    cmd = rs.race_command(3, Path("runs/x"))
    assert cmd[1:4] == ["-m", "tempo_rl.cli", "race"]
    assert "run.seed=3" in cmd and "backend.seed=3" in cmd and "env.train_seed_start=40000" in cmd


def test_td_signal_reads_the_tempo_runs_td_updates_by_hand(tmp_path: Path) -> None:
    import json

    def td(std: float, mean: float, index: float, reused: int, ended: float) -> dict[str, float]:
        return {
            "train/phase": 1.0,
            "actor/value_target_std": std,
            "actor/value_target_mean": mean,
            "td/macro_index_mean": index,
            "td/reused_states": reused,
            "td/fresh_states": 4 - reused,
            "actor/terminated_rate": ended,
            "actor/max_rounds_rate": ended / 2,
        }

    rows = [
        {"train/phase": 0.0, "actor/value_target_std": 9.0},  # a warm-up update: not TD
        td(0.4, 0.5, 1.0, 2, 0.0),
        td(0.2, 0.5, 0.5, 2, 0.2),
        td(0.1, 0.3, 2.0, 4, 0.0),
        td(0.0, 0.9, 0.0, 0, 0.4),
    ]
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    got = rs.td_signal(path)
    # 4 TD updates: a quarter is 1 update; restored starts 2 + 2 + 4 + 0 = 8 carry index sum 4 + 2 + 8 + 0 = 14
    assert got["td_updates"] == 4
    assert got["target_std_first"] == 0.4 and got["target_std_last"] == 0.0 and got["target_mean_last"] == 0.9
    assert got["stored_macro_index"] == 14 / 8
    assert abs(got["episode_end_share"] - (0.0 + 0.3 + 0.0 + 0.6) / 4) < 1e-12
    path.write_text(json.dumps(rows[0]) + "\n")
    assert rs.td_signal(path) == {
        "td_updates": 0,
        "target_std_first": None,
        "target_std_last": None,
        "target_mean_last": None,
        "stored_macro_index": None,
        "episode_end_share": None,
    }
