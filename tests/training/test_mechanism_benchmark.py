"""``benchmarks/mechanism.py``: its summary figures on hand-made curves, and the ``--quick`` smoke run (one JSON
line, results.json, the PNG, every arm at the same env-step budget, a second call served from its cache)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from benchmark_runs import REPO, load_benchmark, run_benchmark

mech = load_benchmark("mechanism")


def test_auc_tokens_and_standard_errors_by_hand() -> None:
    # success 0 at step 0, 0.5 at step 50, 1.0 at step 100 (tokens 0, 1000, 3000)
    curve = [(0, 0, 0.0), (50, 1000, 0.5), (100, 3000, 1.0)]
    # the 41-point grid over [0, 100] of a straight line 0 -> 1: the mean is 0.5
    assert mech.success_auc(curve, 100) == pytest.approx(0.5)
    # held flat past the last point: over [0, 200] the line covers half the grid, then 1.0
    grid = np.linspace(0, 200, 41)
    assert mech.success_auc(curve, 200) == pytest.approx(float(np.mean(np.minimum(grid / 100, 1.0))))
    assert mech.tokens_to_reach(curve, 0.5) == 1000.0
    assert mech.tokens_to_reach(curve, 0.6) == 3000.0
    assert mech.tokens_to_reach(curve, 0.0) == 0.0
    assert mech.tokens_to_reach(curve, 1.01) is None
    m, se, n = mech.mean_se([0.1, 0.3, None, math.nan, 0.5])
    assert (m, n) == (pytest.approx(0.3), 3)
    assert se == pytest.approx(0.2 / math.sqrt(3))  # sd = 0.2 (ddof 1)
    assert mech.mean_se([0.4]) == (0.4, None, 1)
    assert mech.mean_se([]) == (None, None, 0)


def test_summary_pairs_the_oracle_with_grpo_per_seed() -> None:
    scale = mech.QUICK
    budget = scale.budget_steps

    def run(final: float, tokens: int) -> dict:
        return {
            "curve": [(0, 0, 0.0), (budget, tokens, final)],
            "updates": [{"env_steps": float(budget), "actor/degenerate_group_rate": 0.5}],
            "time_s": {},
            "wall_s": 10.0,
            "tokens": tokens,
        }

    # per seed: GRPO ends at 0.2 / 0.4 / 0.0, the oracle at 0.6 / 0.4 / 0.2 (AUC = final / 2 on a line from 0)
    runs = {
        "keydoor": {
            "grpo": {0: run(0.2, 100), 1: run(0.4, 100), 2: run(0.0, 100)},
            "oracle": {0: run(0.6, 50), 1: run(0.4, 50), 2: run(0.2, 50)},
        }
    }
    summary = mech.summarize(runs, scale)["keydoor"]
    diff = summary["auc_oracle_minus_grpo"]
    assert diff["per_seed"] == pytest.approx([0.2, 0.0, 0.1])
    assert diff["mean"] == pytest.approx(0.1) and diff["se"] == pytest.approx(0.1 / math.sqrt(3))
    assert diff["seeds_positive"] == 2 and diff["n"] == 3
    assert diff["above_2se"] is False  # 0.1 < 2 x 0.0577
    oracle = summary["arms"]["oracle"]
    assert oracle["success_final"][0] == pytest.approx(0.4)
    # GRPO's final success per seed, 0.2 / 0.4, is reached by the oracle at its last point (50 tokens) on
    # seeds 0 and 1; on seed 2 GRPO stays at its start (0 -> 0): no gain to reach, so None, not 0 tokens
    assert oracle["tokens_to_grpo_final_per_seed"] == [50.0, 50.0, None]
    assert oracle["seeds_reaching_grpo_final"] == 2
    assert oracle["tokens_to_grpo_final"] == 50.0


def test_the_generative_arms_warmup_figures_are_its_last_warmup_updates_and_its_probe() -> None:
    budget = mech.QUICK.budget_steps

    def run(corrs: list[float | None], probe: dict | None) -> dict:
        warm = [
            {
                "train/phase": 0.0,
                "critic/abs_error_mean": 0.5,
                **({"critic/value_corr": c} if c is not None else {}),
            }
            for c in corrs
        ]
        td = [{"train/phase": 1.0, "critic/value_corr": 0.99}]
        return {
            "curve": [(0, 0, 0.0), (budget, 10, 0.5)],
            "updates": warm + td,
            "time_s": {},
            "wall_s": 1.0,
            "tokens": 10,
            **({"warmup_probe": probe} if probe else {}),
        }

    probe = {
        "states": 160,
        "corr_v_return": 0.66,
        "corr_v_vpi": 0.71,
        "ceiling_vpi_return": 0.69,
        "mean_v": 0.1,
    }
    runs = {"keydoor": {"generative": {0: run([0.2, 0.8], probe), 1: run([0.3, 0.5, None], None)}}}
    arm = mech.summarize(runs, mech.QUICK)["keydoor"]["arms"]["generative"]
    # seed 1's last warm-up batch had no defined correlation: None, not its update 2's 0.5 (nor TD's 0.99)
    assert arm["warmup_value_corr_last_per_seed"] == [0.8, None]
    # the probe's figures as recorded: one the record lacks (made before it existed) stays out, of the line too
    assert arm["warmup_probe_per_seed"] == [probe, None]
    line = mech.headline({"keydoor": mech.summarize(runs, mech.QUICK)["keydoor"]}, mech.QUICK, 1.0, {})
    assert "keydoor/generative/warmup_probe_corr_v_vpi_corrected" not in line
    assert line["keydoor/generative/warmup_value_corr_last"] == [0.8, None]
    assert line["keydoor/generative/warmup_probe_corr_v_vpi"] == [0.71, None]
    assert line["keydoor/generative/warmup_probe_ceiling_vpi_return"] == [0.69, None]


def test_the_time_estimate_extrapolates_measured_arms_by_hand() -> None:
    runs = {
        "keydoor": {
            "grpo": {0: {"cpu_s": 100.0, "wall_s": 400.0}, 1: {"cpu_s": 120.0, "wall_s": 500.0}},
            "oracle": {0: {"cpu_s": 80.0, "wall_s": 300.0}},
        }
    }
    warm = {"keydoor/0": {"cpu_s": 30.0, "seconds": 90.0}}
    plan = [("keydoor", s, a) for s in (0, 1, 2) for a in ("grpo", "oracle", "mc")] + [("knights", 0, "grpo")]
    est = mech.estimate(plan, runs, warm, 2)
    # 3 seeds x (grpo 110 + oracle 80 + mc at the mean of the measured arms, (110 + 80) / 2 = 95) + 3 x 30
    assert est["per_env"]["keydoor"]["task_cpu_s"] == 3 * (110 + 80 + 95) + 3 * 30
    assert est["task_cpu_s"] == 945.0 and est["wall_s_at_jobs_from_cpu"] == 472.5
    assert est["task_wall_s"] == 3 * (450 + 300 + 375) + 3 * 90
    assert est["unmeasured_envs"] == ["knights"] and est["measured_tasks"] == 3
    assert mech.json_safe({"a": [math.nan, 1.0], "b": math.inf}) == {"a": [None, 1.0], "b": None}


def test_every_arm_of_an_env_gets_the_same_model_and_env_but_its_own_critic(tmp_path: Path) -> None:
    env = mech.ENVS["keydoor"]
    assert env.max_rounds >= 48 and env.max_rounds // env.macro_rounds >= 6 and env.kwargs["keys"] >= 2
    cfgs = {
        arm: mech.make_config(env, mech.FULL, 0, arm, tmp_path / arm, tmp_path / "tok") for arm in env.arms
    }
    assert cfgs["grpo"].algorithm == "grpo" and cfgs["gigpo"].algorithm == "gigpo"
    assert {a: c.tempo.critic for a, c in cfgs.items() if a not in ("grpo", "gigpo")} == {
        "oracle": "oracle",
        "oracle_pc": "oracle",
        "oracle_flip10": "oracle",
        "oracle_flip30": "oracle",
        "mc": "monte_carlo",
        "generative": "generative",
        "generative_critic_only": "generative",
    }
    options = {arm: mech.make_options(env, arm) for arm in env.arms}
    assert options["oracle_flip30"].oracle_flip_prob == 0.3 and options["oracle"].oracle_flip_prob == 0.0
    assert (
        cfgs["oracle_pc"].tempo.prefix_correction == "clipped"
        and cfgs["oracle"].tempo.prefix_correction == "off"
    )
    assert cfgs["generative"].tempo.warmup_updates > 0 and cfgs["oracle"].tempo.warmup_updates == 0
    # the generative critic's design (benchmarks/critic_warmup.py): its own weights, every round of the warm-up
    # a critic state, the warm-up's examples replayed; no other arm has a second model
    gen = cfgs["generative"].tempo
    assert (gen.critic_weights, gen.warmup_replay) == ("own", True)
    assert gen.warmup_states_per_episode == "every_round" and gen.warmup_substeps == mech.FULL.warmup_substeps
    assert all(c.tempo.critic_weights == "shared" for a, c in cfgs.items() if not a.startswith("generative"))
    # keydoor's critic steps at the actor's step size and reads the whole history
    assert all(o.critic_learning_rate is None and o.critic_history_turns is None for o in options.values())
    assert {o.critic_answer_prefix for o in options.values()} == {"<value>"}
    shared = ("env", "sampling", "optim", "warmstart", "kl")
    for c in cfgs.values():
        for part in shared:
            assert getattr(c, part) == getattr(cfgs["grpo"], part), part
        paths = {"state_dir"}
        assert c.backend.model_dump(exclude=paths) == cfgs["grpo"].backend.model_dump(exclude=paths)


@pytest.mark.slow
@pytest.mark.torch
def test_mechanism_benchmark_quick_writes_results_and_one_json_line(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the benchmark trains on the local backend (torch)")
    pytest.importorskip("matplotlib", reason="the benchmark plots with matplotlib")
    out = tmp_path / "mechanism"
    work = tmp_path / "work"
    # two processes: each arm run is submitted once its warm start is done (the cached rerun below, in one
    # process, must read the same figures)
    line = run_benchmark(
        "mechanism.py", "--quick", "--jobs", "2", "--out", str(out), "--work", str(work), timeout=400
    )
    arms = mech.QUICK_ENVS["keydoor"].arms
    assert line["benchmark"] == "mechanism" and line["seeds"] == 1
    for arm in arms:
        mean, se = line[f"keydoor/{arm}/success_final"]
        assert 0.0 <= mean <= 1.0 and se is None  # one seed: no standard error
        assert line[f"keydoor/{arm}/tokens_at_budget"] > 0
    assert line["keydoor/auc_oracle_minus_grpo"]["n"] == 1
    assert line["estimate_full_plan"]["measured_tasks"] == len(arms)
    results = json.loads((out / "results.json").read_text())
    budget = results["scale"]["budget_steps"]
    runs = results["runs"]["keydoor"]
    assert set(runs) == set(arms)
    for arm, per_seed in runs.items():
        run = per_seed["0"]
        # every arm spends (at least) the same env-step budget, counted by cost/env_steps
        assert run["steps"] >= budget and run["cost"]["cost/env_steps"] == run["steps"], arm
        assert run["curve"][0][:2] == [0, 0] and run["curve"][-1][:2] == [run["steps"], run["tokens"]]
        steps = [u["env_steps"] for u in run["updates"]]
        tokens = [u["tokens"] for u in run["updates"]]
        assert steps == sorted(steps) and tokens == sorted(tokens) and steps[-1] == run["steps"]
        assert set(run["time_s"]) >= {"sampling", "env", "training", "eval"}
    # the shared warm start also taught the generative critic its answer format (critic examples beside the
    # demos: without them the generative arm's critic never answers in the format)
    warm = results["warmstart"]["keydoor/0"]["metrics"]
    assert warm["warmstart/datums"] > results["scale"]["warmstart_episodes"]
    # the value probe after the generative critic's warm-up: in its record, its summary and the line, and not
    # charged to the arm's env steps (the first TD update's count starts from the warm-up's)
    gen = runs["generative"]["0"]
    probe = gen["warmup_probe"]
    assert probe["states"] > 0 and probe["rollout_env_steps"] > 0 and gen["time_s"]["probe"] > 0
    assert line["keydoor/generative/warmup_probe_corr_v_return"] == [
        None if probe["corr_v_return"] is None else round(probe["corr_v_return"], 4)
    ]
    phases = [u["train/phase"] for u in gen["updates"]]
    warm_steps = gen["updates"][phases.count(0.0) - 1]["env_steps"]
    td_steps = gen["updates"][phases.count(0.0)]["env_steps"] - warm_steps
    assert phases[0] == 0.0 and 1.0 in phases and td_steps <= 2 * 2 * 4  # states x branches x H rounds
    # the Monte Carlo critic's rollouts are charged to its arm
    assert runs["mc"]["0"]["cost"]["critic/mc_env_steps"] > 0
    assert not any("critic/abs_error_mean" in u for u in runs["grpo"]["0"]["updates"])
    assert (out / "mechanism.png").stat().st_size > 10_000
    # a second call finds every warm start and arm run in its cache: none is run (or rewritten) again
    cached = sorted(work.glob("*.json")) + sorted(work.glob("*-warmstart-*/warmstart.json"))
    assert len(cached) == len(arms) + 1
    stamps = [p.stat().st_mtime_ns for p in cached]
    again = run_benchmark("mechanism.py", "--quick", "--out", str(out), "--work", str(work), timeout=400)
    assert [p.stat().st_mtime_ns for p in cached] == stamps
    keep = ("wall_s", "estimate_full_plan")
    assert {k: v for k, v in again.items() if k not in keep} == {
        k: v for k, v in line.items() if k not in keep
    }


def test_the_no_note_arm_is_the_generative_arm_with_the_critics_note_off(tmp_path: Path) -> None:
    rule = mech.ENVS["keydoor_rule"]
    gen, bare = (
        mech.make_config(rule, mech.FULL, 0, a, tmp_path / a, tmp_path / "tok")
        for a in ("generative", "generative_no_note")
    )
    assert gen.env.kwargs["state_note"] is True and bare.env.kwargs["state_note"] is False
    assert {**bare.env.kwargs, "state_note": True} == gen.env.kwargs
    paths = {"run": {"run_dir"}, "backend": {"state_dir"}, "env": {"kwargs"}}
    assert bare.model_dump(exclude=paths) == gen.model_dump(exclude=paths)
    assert mech.make_options(rule, "generative_no_note") == mech.make_options(rule, "generative")
    # an env without the note has no such arm: it would be the generative arm again
    assert "generative_no_note" not in mech.ENVS["keydoor"].arms and "generative_no_note" in rule.arms


def test_the_default_plan_and_the_order_its_arm_runs_are_submitted_in() -> None:
    """The default plan: ``keydoor_rule`` and ``crossings_rule`` with every arm (prefix correction included: their
    stored states are restored with older policies' prefixes); knights without the flipped oracles (its oracle is
    1 almost everywhere) and ``keydoor`` with the sign only on request. The generative arm, the longest, goes
    first."""
    assert mech.FULL.envs == ("keydoor_rule", "crossings_rule")
    assert mech.ENVS["keydoor_rule"].arms == mech.ENVS["crossings_rule"].arms == tuple(mech.ARMS)
    assert mech.ENVS["knights"].arms == ("grpo", "gigpo", "oracle", "mc", "generative")
    assert "oracle_pc" in mech.ENVS["keydoor"].arms
    tasks = [("knights", 3, a) for a in mech.ENVS["knights"].arms]
    assert mech.longest_first(tasks) == [
        ("knights", 3, "generative"),
        ("knights", 3, "grpo"),
        ("knights", 3, "gigpo"),
        ("knights", 3, "oracle"),
        ("knights", 3, "mc"),
    ]
    rule = [("keydoor_rule", 0, a) for a in ("grpo", "generative_critic_only", "oracle", "generative")]
    assert [a for _e, _s, a in mech.longest_first(rule)] == [
        "generative_critic_only",
        "generative",
        "grpo",
        "oracle",
    ]
    assert mech.longest_first([]) == []


def test_pearson_by_hand_and_undefined_for_a_constant() -> None:
    assert mech.pearson([1.0, 2.0, 3.0], [2.0, 4.0, 6.0]) == pytest.approx(1.0)
    assert mech.pearson([1.0, 2.0, 3.0], [3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    assert mech.pearson([0.0, 0.0, 1.0, 1.0], [0.0, 1.0, 0.0, 1.0]) == pytest.approx(0.0)
    # x = (0, 1, 2), y = (0, 0, 1): cov = 1/3, sd_x = sqrt(2/3), sd_y = sqrt(2/9) -> r = (1/3) / sqrt(4/27) = 0.866
    assert mech.pearson([0.0, 1.0, 2.0], [0.0, 0.0, 1.0]) == pytest.approx(0.8660254, abs=1e-7)
    assert mech.pearson([0.5, 0.5, 0.5], [0.0, 1.0, 0.0]) is None  # every target of a failing policy is 0
    assert mech.pearson([1.0], [1.0]) is None


def test_probe_figures_by_hand_with_the_rollouts_noise_undone() -> None:
    # 4 states, M = 4 rollouts each: V_pi_M = 0, 0.75, 1, 0.25 (var ddof 1 = 0.625 / 3); the rollouts' own
    # variance / M is 0, 0.25 / 4, 0, 0.25 / 4: noise 0.03125, share 0.03125 / 0.208333 = 0.15, factor
    # sqrt(1 / 0.85) = 1.084652; a fifth state whose every rollout failed leaves the V_pi figures only
    rollouts = [
        np.array(r, dtype=float) for r in ([0, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 1], [])
    ]
    v_hat, g = [0.1, 0.5, 0.9, 0.5, 0.3], [0.0, 1.0, 1.0, 1.0, 0.0]
    fig = mech.probe_figures(v_hat, g, rollouts)
    assert fig["states"] == 5 and fig["mean_vpi"] == pytest.approx(0.5)
    assert fig["vpi_noise_share"] == pytest.approx(0.15)
    # cov sums / sqrt(sum squares): V_pi vs G 0.5 / sqrt(0.625 x 0.75); V_hat vs V_pi 0.4 / sqrt(0.32 x 0.625)
    assert fig["ceiling_vpi_return"] == pytest.approx(0.730297, abs=1e-6)
    assert fig["corr_v_vpi"] == pytest.approx(0.894427, abs=1e-6)
    assert fig["ceiling_vpi_return_corrected"] == pytest.approx(0.730297 * 1.084652, abs=1e-5)
    assert fig["corr_v_vpi_corrected"] == pytest.approx(0.894427 * 1.084652, abs=1e-5)
    assert fig["corr_v_return"] == pytest.approx(float(np.corrcoef(v_hat, g)[0, 1]))  # all 5 states
    # one rollout a state: no estimate of the noise, so nothing is corrected
    single = mech.probe_figures(v_hat[:4], g[:4], [r[:1] for r in rollouts[:4]])
    assert single["vpi_noise_share"] is None and single["ceiling_vpi_return_corrected"] is None


@pytest.mark.slow
@pytest.mark.torch
def test_the_value_probe_reads_the_critics_own_value_not_the_mean_of_its_draws(tmp_path: Path) -> None:
    """The probe scores the value TD bootstraps from: with ``critic_answer = "expected"`` the critic's exact
    expectation over its answers, not the mean of its K draws (in steps of 1/K, with their sampling noise)."""
    pytest.importorskip("torch", reason="the probe plays episodes on the local backend (torch)")
    from tempo_rl.critic import CriticEstimates
    from tempo_rl.training.run import build_trainer

    env, scale = mech.QUICK_ENVS["keydoor"], mech.QUICK
    tok_dir = mech.build_env_tokenizer(env, scale, tmp_path)
    cfg = mech.make_config(env, scale, 0, "generative", tmp_path / "run", tok_dir)
    assert cfg.sampling.critic_answer == "expected"
    trainer = build_trainer(cfg, tmp_path / "run", options=mech.make_options(env, "generative"))
    asked: list[int] = []

    # every draw says 1; the exact value is 0.2 at state i = 0, 0.3 at 1, 0.4 at 2, 0.2 at 3...
    async def estimate_many(queries, k):
        asked.append(len(queries))
        return [
            CriticEstimates(values=np.ones(k), samples=(), expectation=0.2 + 0.1 * (i % 3))
            for i in range(len(queries))
        ]

    trainer.estimate_many = estimate_many
    try:
        probe = mech.value_probe(trainer, games=1, rollouts=1, aside=True)
    finally:
        mech._close(trainer)
    n = asked[0]
    assert probe["states"] == n > 0
    assert probe["mean_v"] == pytest.approx(float(np.mean([0.2 + 0.1 * (i % 3) for i in range(n)])))


def test_keydoor_rule_rewards_blue_keys_and_demonstrates_random_ones(tmp_path: Path) -> None:
    """keydoor_rule: both locks need the blue key in every RL and evaluation game, the warm start's demos come
    from games whose locks are drawn apart from their signs, and every arm evaluates at the same temperature."""
    for table in (mech.ENVS, mech.QUICK_ENVS):
        env = table["keydoor_rule"]
        assert env.kwargs["lock_colour"] == "blue" and env.kwargs["keys"] >= 2
        assert env.kwargs["state_note"] is True  # the critic reads the lock note (the actor never does)
        assert env.demo_kwargs == {"lock_colour": "independent"}
        cfgs = [
            mech.make_config(env, mech.FULL, 0, arm, tmp_path / arm, tmp_path / "tok") for arm in env.arms
        ]
        for c in cfgs:
            assert c.env.kwargs["lock_colour"] == "blue"
            assert c.warmstart.env_kwargs == {"lock_colour": "independent"}
            assert c.sampling.eval_temperature == env.eval_temperature
            assert c.env.invalid_action_penalty == 0.0  # reward only at the exit
    # the full run's demos: 256 games instead of the scale's 96; the smoke run keeps its scale's
    full = mech.make_config(mech.ENVS["keydoor_rule"], mech.FULL, 0, "grpo", tmp_path / "f", tmp_path / "tok")
    assert full.warmstart.episodes == 256 and mech.FULL.warmstart_episodes == 96
    quick = mech.make_config(
        mech.QUICK_ENVS["keydoor_rule"], mech.QUICK, 0, "grpo", tmp_path / "q", tmp_path / "t"
    )
    assert quick.warmstart.episodes == mech.QUICK.warmstart_episodes
    keydoor = mech.ENVS["keydoor"]
    assert (
        keydoor.demo_kwargs == {}
        and "lock_colour" not in keydoor.kwargs
        and "state_note" not in keydoor.kwargs
    )
    plain = mech.make_config(keydoor, mech.FULL, 0, "grpo", tmp_path / "k", tmp_path / "tok")
    assert plain.warmstart.episodes == mech.FULL.warmstart_episodes


def test_cache_keys_follow_the_whole_config_and_the_code(tmp_path: Path, monkeypatch) -> None:
    """A cached warm start or arm run is reused only by the same config and the same code: a field
    ``make_config`` does not set (``env.invalid_action_penalty``: otherwise a run made with a penalty the code
    no longer sets would be served), the demo count or the code change both keys; the folder
    the runs are cached in does not."""
    env = mech.QUICK_ENVS["keydoor_rule"]
    seen: list[tuple[str, str]] = []

    def fake_key(*parts: object) -> str:
        seen.append((str(parts[0]), json.dumps(parts, default=str)))
        raise StopIteration  # stop each task right after its key is computed

    def keys(setting: object = env, work: Path = tmp_path) -> tuple[str, str]:
        seen.clear()
        with pytest.raises(StopIteration):
            mech.warm_start_task(setting, mech.QUICK, 0, work, tmp_path / "tok")
        with pytest.raises(StopIteration):
            mech.arm_task(setting, mech.QUICK, 0, "grpo", work, tmp_path / "tok", {"key": "w"})
        assert [kind for kind, _ in seen] == ["warmstart", "arm"]
        return seen[0][1], seen[1][1]

    monkeypatch.setattr(mech, "_cache_key", fake_key)
    base = keys()
    assert keys(work=tmp_path / "elsewhere") == base
    more_demos = keys(mech.replace(env, demo_episodes=7))
    make = mech.make_config

    def with_penalty(*args: object, **kwargs: object) -> object:
        cfg = make(*args, **kwargs)
        return cfg.model_copy(update={"env": cfg.env.model_copy(update={"invalid_action_penalty": 0.1})})

    monkeypatch.setattr(mech, "make_config", with_penalty)
    penalised = keys()
    monkeypatch.setattr(mech, "make_config", make)
    monkeypatch.setattr(mech, "code_fingerprint", lambda: "other-code")
    other_code = keys()
    for variant in (more_demos, penalised, other_code):
        assert variant[0] != base[0] and variant[1] != base[1]


def test_the_code_fingerprint_ignores_docstrings_comments_and_layout() -> None:
    plain = mech._code_of("x = 1\n\n\ndef f():\n    return 2\n")
    assert mech._code_of('"""Module."""\nx = 1  # one\ndef f():\n    """Doc."""\n    return 2\n') == plain
    assert mech._code_of("x = 1\n\n\ndef f():\n    return 3\n") != plain
    assert mech._code_of('def f():\n    """Only a docstring."""\n') == mech._code_of("def f():\n    pass\n")
    assert len(mech.code_fingerprint()) == 12


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in state  # exited, not yet reaped by its new parent


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_a_jobs_worker_exits_when_its_parent_is_killed(tmp_path: Path) -> None:
    """``--jobs`` workers watch their parent: SIGKILL the benchmark and its workers end too (within a poll)."""
    import signal
    import subprocess
    import time

    script = tmp_path / "parent.py"
    script.write_text(
        "import multiprocessing as mp, os, sys, time\n"
        f"sys.path.insert(0, {str(REPO / 'benchmarks')!r})\n"
        "def child(parent):\n"
        "    import mechanism\n"
        "    mechanism.exit_with_parent(parent, poll_s=0.05)\n"
        "    time.sleep(60)\n"
        "if __name__ == '__main__':\n"
        "    p = mp.get_context('spawn').Process(target=child, args=(os.getpid(),))\n"
        "    p.start()\n"
        "    print(p.pid, flush=True)\n"
        "    time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        worker = int(parent.stdout.readline())
        time.sleep(1.0)  # the worker imports the benchmark and starts watching
        assert not _gone(worker)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 30
        while not _gone(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(worker)
    finally:
        parent.kill()


def test_from_results_rewrites_the_folder_it_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--from-results DIR/results.json`` recomputes the line and writes its JSON and figure into DIR, not into
    the default results folder (which it used to overwrite)."""
    pytest.importorskip("matplotlib")
    import shutil

    src = REPO / "benchmarks" / "results" / "mechanism" / "results.json"
    default = REPO / "benchmarks" / "results" / "mechanism" / "results.json"
    before = default.stat().st_mtime_ns
    shutil.copy(src, tmp_path / "results.json")
    assert mech.main(["--from-results", str(tmp_path / "results.json")]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    recorded = json.loads(src.read_text())["headline"]
    assert line["keydoor_rule/auc_oracle_minus_grpo"] == recorded["keydoor_rule/auc_oracle_minus_grpo"]
    assert (tmp_path / "mechanism.png").stat().st_size > 0
    assert default.stat().st_mtime_ns == before


def test_knights_setting_reaches_every_arm_and_keydoor_rule_keeps_the_scales(tmp_path: Path) -> None:
    """knights: every arm's actor samples and is evaluated at 0.5, from a warm start on 512 demo games, with
    macro-steps of 2 rounds; only the generative arm warms its critic up, on 16 games per update, at a critic step
    size of its own (3e-3; every actor's stays 1e-3); every arm's critic prompt shows the last turn only (the
    warm start, shared by the arms, renders it for its critic-format examples). keydoor_rule keeps the scale's
    warm-up games and samples at 1.0; its critic steps at 3e-3 and reads the last turn too, and its warm start
    cools down over its last epoch (knights' does not)."""
    knights = mech.ENVS["knights"]
    for arm in knights.arms:
        c = mech.make_config(knights, mech.FULL, 0, arm, tmp_path / arm, tmp_path / "tok")
        o = mech.make_options(knights, arm)
        assert c.sampling.temperature == c.sampling.eval_temperature == 0.5
        assert c.warmstart.episodes == 512
        assert c.tempo.macro_rounds == (2 if c.algorithm == "tempo" else 10)  # H: TEMPO's alone
        assert o.critic_history_turns == 1 and c.optim.learning_rate == mech.FULL.learning_rate == 1e-3
        if arm == "generative":
            # the warm-up plays GRPO's batch, capped at the env steps of 4 updates of 16 games
            assert c.tempo.warmup_games_per_batch == mech.FULL.grpo_games == 2
            assert (
                c.tempo.warmup_updates == mech.FULL.warmup_updates * 16 // 2 and c.tempo.warmup_trains_actor
            )
            assert c.tempo.critic_weights == "own" and o.critic_learning_rate == 3e-3
        else:
            assert o.critic_learning_rate is None
            if c.algorithm == "tempo":  # the untrained critics have no warm-up
                assert c.tempo.warmup_updates == 0
    rule = mech.make_config(
        mech.ENVS["keydoor_rule"], mech.FULL, 0, "generative", tmp_path / "g", tmp_path / "tok"
    )
    assert rule.sampling.temperature == 1.0 and rule.tempo.warmup_games_per_batch == mech.FULL.grpo_games
    ablation = mech.make_config(
        mech.ENVS["keydoor_rule"], mech.FULL, 0, "generative_critic_only", tmp_path / "a", tmp_path / "tok"
    )
    assert ablation.tempo.warmup_games_per_batch == mech.FULL.warmup_games == 4
    assert not ablation.tempo.warmup_trains_actor and ablation.tempo.handover_corr is None
    rule_options = mech.make_options(mech.ENVS["keydoor_rule"], "generative")
    assert rule_options.critic_learning_rate == 3e-3 and rule_options.critic_history_turns == 1
    assert rule.optim.learning_rate == 1e-3 and rule.warmstart.epochs == 3
    assert rule_options.warmstart_cooldown == pytest.approx(1 / 3)
    grpo = mech.make_options(mech.ENVS["keydoor_rule"], "grpo")
    assert grpo.critic_learning_rate is None and grpo.warmstart_cooldown == pytest.approx(1 / 3)
    assert mech.make_options(knights, "grpo").warmstart_cooldown == 0


def test_the_probe_reads_knights_values_from_32_rollouts_and_the_others_from_the_scales() -> None:
    """V_pi's M: knights' values are small probabilities, whose 8-rollout means were too noisy to score a
    critic against; every other env keeps the scale's M (8; the quick scale's 2)."""
    assert mech.probe_rollouts(mech.ENVS["knights"], mech.FULL) == 32
    assert mech.probe_rollouts(mech.ENVS["keydoor_rule"], mech.FULL) == mech.FULL.probe_rollouts == 8
    assert mech.probe_rollouts(mech.ENVS["keydoor"], mech.FULL) == 8
    assert mech.probe_rollouts(mech.QUICK_ENVS["knights"], mech.QUICK) == mech.QUICK.probe_rollouts == 2


def test_from_results_reads_the_committed_results(tmp_path: Path, capsys) -> None:
    """The committed results.json is read back and its line recomputed: the same figures, the same wall time."""
    pytest.importorskip("matplotlib")
    import shutil

    src = REPO / "benchmarks" / "results" / "mechanism" / "results.json"
    shutil.copy(src, tmp_path / "results.json")
    assert mech.main(["--from-results", str(tmp_path / "results.json")]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    recorded = json.loads(src.read_text())["headline"]
    assert line["wall_s"] == recorded["wall_s"]
    for key in (
        "keydoor_rule/auc_oracle_minus_grpo",
        "keydoor_rule/generative/auc_minus_grpo",
        "keydoor_rule/gigpo/success_auc",
        "keydoor_rule/generative/handover_env_steps",
    ):
        assert line[key] == recorded[key]


@pytest.mark.slow
@pytest.mark.torch
def test_keydoor_rules_prompts_with_the_lock_note_fit_the_critics_budget(tmp_path: Path) -> None:
    """Every critic prompt of ``keydoor_rule`` (the last turn, the layout and the lock note) fits the full
    scale's budget on random play: a prompt over it has no value (NaN: its state is dropped from the warm-up
    and its branch from TD). With the 768-token budget of before the note, the longest reached 769 tokens (779
    since the note counts the spare steps)."""
    pytest.importorskip("torch", reason="the critic renders its prompt with the local backend's chat")
    import random

    from tempo_rl.critic.base import CriticQuery
    from tempo_rl.envs.keydoor import KeyDoorEnv
    from tempo_rl.training.run import build_trainer

    env_setting, scale = mech.ENVS["keydoor_rule"], mech.FULL
    tok_dir = mech.build_env_tokenizer(env_setting, scale, tmp_path)
    cfg = mech.make_config(env_setting, scale, 0, "generative", tmp_path / "run", tok_dir)
    trainer = build_trainer(cfg, tmp_path / "run", options=mech.make_options(env_setting, "generative"))
    try:
        critic, env, rng = trainer.c.critic, KeyDoorEnv(**env_setting.kwargs), random.Random(0)
        longest: dict[str, int] = {}
        for seed in range(20):
            first = obs = env.reset(seed=seed)
            history: list[tuple[str, str]] = []
            while obs.admissible_actions:
                action = rng.choice(obs.admissible_actions)
                obs = env.step(action).observation
                history.append((action, obs.text))
                if obs.privileged_state is None:
                    break
                query = CriticQuery(
                    task="Reach the exit at the end of the corridor.",
                    history=list(history),
                    initial_observation=first.text,
                    privileged_info=env.privileged_info(),
                    privileged_state=obs.privileged_state,
                )
                prompt, omitted = critic.prompt_tokens(query)
                assert prompt is not None and omitted == 0
                longest[obs.privileged_state] = max(longest.get(obs.privileged_state, 0), len(prompt))
        kinds = {note.split(" Spare steps")[0] for note in longest}
        assert kinds >= {"The right keys are still to take.", "The exit is unreachable."}
        assert max(longest.values()) > 768  # the old budget would have dropped these states
    finally:
        mech._close(trainer)


def test_warmup_split_is_the_warmup_share_and_each_phases_tokens_per_env_step() -> None:

    split = mech.warmup_split({"env_steps": 1000.0, "tokens": 4_000_000.0}, 4000.0, 7_000_000.0)
    # 1000 of 4000 env steps; 4M of 7M tokens; 4M / 1000 in the warm-up; (7M - 4M) / (4000 - 1000) in TD
    assert split == {
        "env_step_share": 0.25,
        "token_share": pytest.approx(4 / 7),
        "warmup_tokens_per_step": 4000.0,
        "td_tokens_per_step": 1000.0,
    }
    assert set(mech.warmup_split({"env_steps": None, "tokens": None}, 4000.0, 7e6).values()) == {None}
    assert mech.warmup_split({"env_steps": 4000.0, "tokens": 7e6}, 4000.0, 7e6)["td_tokens_per_step"] is None
    assert mech.run_steps({"curve": [(0, 0, 0.1), (4608, 9, 0.2)]}) == 4608.0
