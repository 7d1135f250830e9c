"""``benchmarks/keydoor_probe.py``: its figures by hand, and a probe of a real (tiny) warm start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmark_runs import load_benchmark

probe = load_benchmark("keydoor_probe")


def test_key_report_by_hand() -> None:
    games = [
        ["go on", "take blue", "go on", "take blue", "open door"],  # right keys, won
        ["take blue", "take red", "open door"],  # one wrong key
        ["take blue", "take blue", "open on", "open on"],  # right keys, a broken walk
        ["go on", "go on"],  # no key at all
    ]
    r = probe.key_report(games, [True, False, False, False], [0, 1, 2, 0], "blue")
    assert r["games"] == 4 and r["success"] == 0.25
    assert r["right_key_share"] == pytest.approx(5 / 6)  # 6 takes, 5 of them blue
    assert r["right_keys"] == 0.5 and r["success_given_right_keys"] == 0.5
    assert r["wasted_steps_mean"] == 0.75
    assert r["top_actions"][:2] == [("take blue", 5), ("go on", 4)]
    empty = probe.key_report([], [], [], "blue")
    assert empty["success"] is None and empty["right_key_share"] is None


def test_wasted_where_by_hand() -> None:
    actions = [["go on", "go on", "open door"], ["open door", "take red", "go on"]]
    observations = [
        [
            "You go on. Room 2 of 9. A locked door. You carry blue key. Steps left: 10.",
            "The door is locked. Room 2 of 9. A locked door. You carry blue key. Steps left: 9.",
            "The blue key opens the door. Room 2 of 9. An open door. You carry nothing. Steps left: 8.",
        ],
        [
            "Nothing happens. Room 1 of 9. An empty room. You carry nothing. Steps left: 11.",
            "Nothing happens. Room 1 of 9. An empty room. You carry nothing. Steps left: 10.",
            "You go on. Room 2 of 9. An empty room. You carry nothing. Steps left: 9.",
        ],
    ]
    assert probe.wasted_where(actions, observations) == [
        ("go on -> The door is locked. @ A locked door.", 1),
        ("open door -> Nothing happens. @ An empty room.", 1),
        ("take red -> Nothing happens. @ An empty room.", 1),
    ]


def test_probe_plays_a_tiny_warm_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mech = load_benchmark("mechanism")
    env = mech.QUICK_ENVS["keydoor_rule"]
    tok = mech.build_env_tokenizer(env, mech.QUICK, tmp_path)
    warm = mech.warm_start_task(env, mech.QUICK, 0, tmp_path, tok)
    assert (
        probe.main(
            ["--state", warm["state"], "--seed", "0", "--games", "2", "--work", str(tmp_path), "--quick"]
        )
        == 0
    )
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["games"] == 2 and 0.0 <= line["success"] <= 1.0
    assert sum(n for _, n in line["top_actions"]) > 0
    assert all(" -> " in where and n > 0 for where, n in line["wasted_where"])
    with pytest.raises(SystemExit):
        probe.main(["--state", str(tmp_path / "missing.pt"), "--seed", "0"])
