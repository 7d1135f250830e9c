"""``tempo-rl report``: the records it reads (as the trainer writes them) and the data it extracts, pinned."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from report_runs import killed_copy, records, scripted_run_dir

from tempo_rl.backends.types import SampledSequence
from tempo_rl.cli import main
from tempo_rl.critic.base import CriticEstimates, CriticSample
from tempo_rl.critic.parse import ValueStatus
from tempo_rl.training.config import TempoConfig
from tempo_rl.training.report import (
    _script_json,
    quarantined_states,
    read_jsonl,
    render_report,
    report_data,
    run_status,
)
from tempo_rl.training.rundir import RunLock
from tempo_rl.training.tempo import critic_records

pytest.importorskip("plotly")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scripted_run_dir(tmp_path_factory.mktemp("report") / "run")


# ------------------------------------------------------------------------------------ what the trainer records


def _estimates(values: list[float], texts: list[str]) -> CriticEstimates:
    samples = tuple(
        CriticSample(
            prompt_tokens=(1, 2),
            sequence=SampledSequence(tokens=(3,), logprobs=(-0.5,), text=t),
            value=v,
            status=ValueStatus.OK if math.isfinite(v) else ValueStatus.MISSING,
        )
        for v, t in zip(values, texts)
    )
    return CriticEstimates(values=np.asarray(values, dtype=np.float64), samples=samples)


def test_critic_records_hold_text_value_reward_and_advantage() -> None:
    est = _estimates([0.2, 0.6, math.nan], ["<value>0.2</value>", "think <value>0.6</value>", "no idea"])
    tempo = TempoConfig(r_max=1.0, error="l1")
    [rec] = critic_records([est], [0.5], tempo, centred=True, weight=2.0)
    # rewards -|V - G| / R_max: -0.3, -0.1, and the failure reward -1 for the unparsed one; mean -1.4 / 3
    assert rec["target"] == 0.5
    assert [s["text"] for s in rec["samples"]] == [
        "<value>0.2</value>",
        "think <value>0.6</value>",
        "no idea",
    ]
    assert [s["status"] for s in rec["samples"]] == ["ok", "ok", "missing"]
    assert rec["samples"][0]["value"] == 0.2 and math.isnan(rec["samples"][2]["value"])
    assert [s["reward"] for s in rec["samples"]] == pytest.approx([-0.3, -0.1, -1.0])
    mean = (-0.3 - 0.1 - 1.0) / 3
    assert [s["advantage"] for s in rec["samples"]] == pytest.approx(
        [2 * (-0.3 - mean), 2 * (-0.1 - mean), 2 * (-1.0 - mean)]
    )
    assert rec["degenerate"] is False and rec["trained"] is True
    [same] = critic_records([_estimates([0.5, 0.5], ["a", "b"])], [1.0], tempo)
    assert same["degenerate"] is True and same["trained"] is False
    assert [s["advantage"] for s in same["samples"]] == [0.0, 0.0]


def test_td_records_carry_turns_the_start_and_its_critic_samples(run_dir: Path) -> None:
    recs = [r for r in records(run_dir) if r["phase"] == "td"]
    assert len(recs) == 3 * 2 * 4  # 3 TD updates x 2 starts x N = 4
    for r in recs:
        assert len(r["observations"]) == len(r["actions"]) == len(r["invalid_turns"]) == len(r["rewards"])
        assert sum(r["invalid_turns"]) == r["invalid_actions"]
        assert r["policy_version"] is not None and r["start_policy_version"] is not None
        assert ("start" in r) == (r["branch"] == 0)
    # update 2's fresh start: R_n = r_n + V_hat_n, G = mean R_n, A_n = R_n - G, and the critic's target is G
    group = [r for r in recs if r["update"] == 2 and r["fresh"]]
    assert [r["branch"] for r in group] == [0, 1, 2, 3]
    assert [r["return"] for r in group] == [1.0, 1.0, 0.0, 0.0]
    assert [r["advantage"] for r in group] == [0.5, 0.5, -0.5, -0.5]
    start = group[0]["start"]
    assert start["critic"]["target"] == 0.5
    assert [s["value"] for s in start["critic"]["samples"]] == [0.5] * 4
    assert all("<value>" in s["text"] for s in start["critic"]["samples"])
    assert start["task"] and start["observation"]


def test_warmup_records_carry_boundary_states_with_mc_targets_and_critic_samples(run_dir: Path) -> None:
    recs = [r for r in records(run_dir) if r["phase"] == "warmup"]
    assert len(recs) == 2 * 4
    marks = [m for r in recs for m in r["boundaries"]]
    assert marks, "the warm-up chose boundary states"
    for r in recs:
        for m in r["boundaries"]:
            # G_t = sum of the rewards from round t on; the critic's samples are graded against it
            assert m["target"] == pytest.approx(sum(r["rewards"][m["round"] :]))
            assert m["critic"]["target"] == m["target"]
            assert len(m["critic"]["samples"]) == 4
    for game in {r["game_id"] for r in recs}:
        episodes = [r for r in recs if r["game_id"] == game]
        start = episodes[0]["start"]
        assert start["critic"]["target"] == pytest.approx(np.mean([r["return"] for r in episodes]))


# ------------------------------------------------------------------------------------ what the report extracts


def _write(path: Path, rows: list[Any], tail: str = "") -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)


def _td(update: int, branch: int, **kw: Any) -> dict[str, Any]:
    rec = {
        "update": update,
        "phase": "td",
        "game_id": "g1",
        "start_id": "s1",
        "start_round": 4,
        "start_macro_index": 1,
        "start_policy_version": 2,
        "policy_version": 3,
        "fresh": False,
        "branch": branch,
        "actions": ["a", "b"],
        "observations": ["o1", "o2"],
        "invalid_turns": [False, True],
        "rewards": [0.25, 0.5],
        "invalid_actions": 1,
        "end_reason": "macro_boundary",
        "won": False,
        "return": 1.25,
        "endpoint_value": 0.5,
        "advantage": 0.125,
        "kept": True,
        "error": None,
    }
    rec.update(kw)
    return rec


def test_report_data_groups_starts_and_computes_r_n(tmp_path: Path) -> None:
    start = {"task": "t", "history_actions": ["x"], "observation": "o0", "parent_id": None, "critic": None}
    rows = [
        _td(1, 0, start=start),
        _td(1, 1, rewards=[0.0, 1.0], endpoint_value=float("nan"), advantage=-0.125),
        _td(1, 0, start_id="s2", game_id="g2", fresh=True, start=start),
    ]
    _write(tmp_path / "trajectories.jsonl", rows)
    _write(tmp_path / "metrics.jsonl", [{"step": 2, "time": 1.0, "store/size": 7.0, "other": 1.0}])
    data = report_data(tmp_path)
    assert data["games"] == ["g1", "g2"]
    [update] = data["updates"]
    assert update["update"] == 1 and update["phase"] == "td"
    assert update["metrics"] == {"store/size": 7.0}  # the update's own step (u + 1), listed keys only
    s1, s2 = update["starts"]
    assert (s1["start_id"], s1["start_round"], s1["start_macro_index"]) == ("s1", 4, 1)
    assert (s1["start_policy_version"], s1["policy_version"], s1["fresh"]) == (2, 3, False)
    assert [b["r"] for b in s1["branches"]] == [0.75, 1.0]  # r_n = the segment's summed reward
    assert s1["branches"][1]["endpoint_value"] is None  # NaN is not JSON: null
    assert s1["branches"][1]["advantage"] == -0.125
    assert s1["branches"][0]["invalid_turns"] == [False, True]
    assert s2["game_id"] == "g2" and len(s2["branches"]) == 1
    json.dumps(data, allow_nan=False)  # strict JSON throughout


def test_a_torn_last_line_is_skipped_and_marks_the_run_partial(tmp_path: Path, run_dir: Path) -> None:
    killed = killed_copy(run_dir, tmp_path / "killed")
    whole = read_jsonl(run_dir / "trajectories.jsonl")
    cut = read_jsonl(killed / "trajectories.jsonl")
    assert not whole.torn and cut.torn
    assert cut.records == whole.records[:-1]
    data = report_data(killed)
    assert data["run"]["partial"] is True
    reasons = " ".join(data["run"]["reasons"])
    assert "no summary.json" in reasons
    assert "3 of the 4 updates" in reasons
    assert "trajectories.jsonl was cut" in reasons
    assert data["run"]["records"] == len(whole.records) - 1
    assert render_report(killed)  # the page is still written


def test_a_damaged_middle_line_is_an_error_naming_the_line(tmp_path: Path) -> None:
    (tmp_path / "trajectories.jsonl").write_text('{"update": 0}\n{"upd\n{"update": 1}\n')
    with pytest.raises(ValueError, match=r"trajectories.jsonl:2 is not valid JSON"):
        read_jsonl(tmp_path / "trajectories.jsonl")


def test_run_status_complete_running_and_stopped(tmp_path: Path, run_dir: Path) -> None:
    metrics = read_jsonl(run_dir / "metrics.jsonl").records
    done = run_status(run_dir, metrics)
    assert (done.partial, done.updates_on_disk, done.updates_total) == (False, 4, 4)
    lock = RunLock(run_dir).acquire()  # a live writer holds the lock
    try:
        running = run_status(run_dir, metrics)
    finally:
        lock.release()
    assert running.partial and running.running_pid is not None
    assert "still training" in running.reasons[0]
    assert not run_status(run_dir, metrics).partial  # released: complete again
    stopped = run_status(run_dir, metrics[:2])  # steps 1 and 2
    assert stopped.partial and stopped.reasons == ("2 of the 4 updates the config asks for are on disk",)


def test_quarantined_states_are_placed_under_the_update_that_quarantined_them(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "store"))
    from storetest_helpers import state

    from tempo_rl.training.store import StateStore

    store = StateStore(tmp_path / "store.sqlite")
    a, b = state([1, 2], game="g1", version=3, macro=2), state([3], game="g2")
    store.add(a)
    store.add(b)
    store.quarantine(a.id, "ReplayDivergenceError: step 2", diff="- expected\n+ actual")
    store.close()
    [q], note = quarantined_states(tmp_path)
    assert note is None
    assert (q["id"], q["game_id"], q["policy_version"], q["macro_index"]) == (a.id, "g1", 3, 2)
    assert q["reason"] == "ReplayDivergenceError: step 2" and q["diff"] == "- expected\n+ actual"
    t = q["quarantined_at"]
    # update u is logged at step u + 1: the first step logged at or after the quarantine is the update's
    _write(
        tmp_path / "metrics.jsonl", [{"step": s, "time": t + d} for s, d in ((1, -5.0), (2, 1.0), (3, 9.0))]
    )
    data = report_data(tmp_path)
    assert [(u["update"], [x["id"] for x in u["quarantined"]]) for u in data["updates"]] == [(1, [a.id])]
    _write(tmp_path / "metrics.jsonl", [{"step": 1, "time": t - 5.0}])  # killed during the next update
    data = report_data(tmp_path)
    assert data["updates"] == [] and [x["id"] for x in data["quarantined_unplaced"]] == [a.id]


def test_script_json_cannot_close_the_script_element() -> None:
    text = _script_json({"obs": "</script><script>alert(1)</script><!-- & \u2028"})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"obs": "</script><script>alert(1)</script><!-- & \u2028"}


def test_the_page_embeds_plotly_and_the_data_and_needs_no_network(run_dir: Path) -> None:
    html = render_report(run_dir)
    assert html.count('<script type="application/json" id="report-data">') == 1
    start = html.index('id="report-data">') + len('id="report-data">')
    data = json.loads(html[start : html.index("</script>", start)])
    assert data == report_data(run_dir)
    assert "Plotly.newPlot" in html and "plotly.js v" in html.lower()  # the bundle itself, inline
    assert html.count("Plotly.newPlot") >= 8  # one chart per panel with data
    assert not re.search(r"<script[^>]*\bsrc=", html)  # every script is inline
    markup = re.sub(r"<script[^>]*>.*?</script>", "", html, flags=re.S)  # the page outside its scripts
    assert not re.search(r"(src|href)=[\"']?(https?:)?//", markup)  # nothing is fetched from a server


def test_cli_writes_the_report_and_refuses_a_non_run(run_dir: Path, tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "r.html"
    assert main(["report", str(run_dir), "--out", str(out)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert str(out) in capsys.readouterr().out
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "no such folder" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(empty)]) == 2
    assert "neither metrics.jsonl nor trajectories.jsonl" in capsys.readouterr().err


def test_grpo_records_group_by_game(tmp_path: Path) -> None:
    def grpo(game: str, ret: float, adv: float) -> dict[str, Any]:
        return {"update": 0, "phase": "grpo", "game_id": game, "actions": ["a"], "rewards": [ret],
                "invalid_actions": 0, "end_reason": "terminated", "won": ret > 0, "return": ret,
                "advantage": adv}  # fmt: skip

    _write(
        tmp_path / "trajectories.jsonl", [grpo("g1", 1.0, 0.5), grpo("g1", 0.0, -0.5), grpo("g2", 0.0, 0.0)]
    )
    [update] = report_data(tmp_path)["updates"]
    assert update["phase"] == "grpo"
    assert [(s["game_id"], [b["advantage"] for b in s["branches"]]) for s in update["starts"]] == [
        ("g1", [0.5, -0.5]),
        ("g2", [0.0]),
    ]
