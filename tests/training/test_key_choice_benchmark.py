"""``benchmarks/key_choice.py --quick`` runs and prints one JSON line per its contract."""

from __future__ import annotations

import importlib.util
import json
from types import ModuleType

import pytest
from benchmark_runs import REPO, run_benchmark


def _key_choice_module() -> ModuleType:
    """``benchmarks/key_choice.py`` imported as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("key_choice", REPO / "benchmarks" / "key_choice.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.torch
def test_key_choice_benchmark_quick() -> None:
    pytest.importorskip("torch", reason="the benchmark trains a local-backend model (torch)")
    figures = run_benchmark("key_choice.py", "--quick")
    assert figures["benchmark"] == "key_choice" and figures["quick"] is True
    assert (
        figures["role"] == "actor" and figures["layout"] == "adjacent" and figures["context_tokens_mean"] > 50
    )
    assert set(figures["arms"]) == {"sft", "rl_2e-4", "rl_1e-3"}
    for name, arm in figures["arms"].items():
        assert 0.0 <= arm["final_accuracy"] <= 1.0 and arm["steps"] == 10
        # the RL arms start from a model that names a colour but ignores the sign: half right on 2 colours
        if name != "sft":
            assert 0.3 <= arm["start_accuracy"] <= 0.7


@pytest.mark.slow
@pytest.mark.torch
def test_key_choice_benchmark_critic_role_quick() -> None:
    pytest.importorskip("torch", reason="the benchmark trains a local-backend model (torch)")
    figures = run_benchmark(
        "key_choice.py", "--quick", "--role", "critic", "--arms", "rl_1e-3", "--games-per-step", "2"
    )
    assert figures["role"] == "critic" and figures["games_per_step"] == 2
    assert figures["context_tokens_mean"] > 200  # the critic's prompt: task, hidden layout, history
    (arm,) = figures["arms"].values()
    # the RL arm starts from a model that answers 0 or 1 at random: about half right
    assert 0.3 <= arm["start_accuracy"] <= 0.7 and arm["steps"] == 10


@pytest.mark.slow
@pytest.mark.torch
def test_key_choice_benchmark_starts_from_a_saved_backend_state(tmp_path) -> None:
    torch = pytest.importorskip("torch", reason="the benchmark trains a local-backend model (torch)")
    import subprocess
    import sys

    from tempo_rl.backends.local.model import build_tiny_model
    from tempo_rl.backends.local.tokenizer import build_tokenizer
    from tempo_rl.training.config import load_config
    from tempo_rl.training.run import DEFAULT_CONFIG, env_corpus

    cfg = load_config(DEFAULT_CONFIG, ["env.kwargs={horizon=12,keys=1,colours=2,clue_gap=0,lock_gap=0}"])
    tokenizer = build_tokenizer(env_corpus(cfg, games=8), vocab_size=1024)
    tokenizer.save_pretrained(str(tmp_path / "tokenizer"))
    torch.manual_seed(0)
    model = build_tiny_model(len(tokenizer), hidden_size=64, num_layers=2, num_heads=4, max_positions=4096)
    model.eval()
    state = tmp_path / "state.pt"
    torch.save({"model": model.state_dict()}, state)
    args = (
        "--quick",
        "--arms",
        "rl_1e-3",
        "--init-state",
        str(state),
        "--tokenizer",
        str(tmp_path / "tokenizer"),
    )
    figures = run_benchmark("key_choice.py", *args)
    assert figures["init_state"] == str(state)
    # the RL arm starts from exactly this model (no random-colour steps): its greedy accuracy on the held-out
    # games of a quick run
    key_choice = _key_choice_module()
    held_out = key_choice.examples(key_choice.LAYOUTS["adjacent"], range(10**6, 10**6 + 50), tokenizer)
    with torch.no_grad():
        right = [int(model(input_ids=torch.tensor([c])).logits[0, -1].argmax()) == t for c, t in held_out]
    (arm,) = figures["arms"].values()
    assert arm["start_accuracy"] == pytest.approx(sum(right) / len(right), abs=0.021)
    # a state of another model size fails naming the fix; the two options go together
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "key_choice.py"), *args, "--hidden-size", "32"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode != 0 and "--hidden-size / --num-layers" in done.stderr
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "key_choice.py"), "--quick", "--tokenizer", "x"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 2 and "--init-state and --tokenizer go together" in done.stderr


@pytest.mark.torch
def test_key_choice_clue_at_key_layout_shows_the_sign_in_the_key_rooms_observation() -> None:
    pytest.importorskip("transformers", reason="the local tokenizer")
    from tempo_rl.backends.local.tokenizer import build_tokenizer
    from tempo_rl.training.config import load_config
    from tempo_rl.training.run import DEFAULT_CONFIG, env_corpus

    key_choice = _key_choice_module()
    layout = key_choice.LAYOUTS["clue_at_key"]
    cfg = load_config(DEFAULT_CONFIG, [f"env.kwargs.{k}={json.dumps(v)}" for k, v in layout.items()])
    tokenizer = build_tokenizer(env_corpus(cfg, games=8), vocab_size=1024)
    for name, shown in (("clue_at_key", True), ("adjacent", False)):
        for context, target in key_choice.examples(key_choice.LAYOUTS[name], range(5), tokenizer):
            text = tokenizer.decode(context)
            key_room = text[text.rindex("Room 2 of") :]  # the key room's observation, up to `take`
            colour = tokenizer.decode([target]).strip()
            assert (f"A sign shows a {colour} key. Keys here:" in key_room) is shown
            assert text.rstrip().endswith("take")


@pytest.mark.torch
def test_actor_contexts_hold_every_earlier_tool_call_and_walk_accuracy_scores_the_rest_of_the_walk() -> None:
    torch = pytest.importorskip("torch", reason="walk_accuracy runs a model")
    from types import SimpleNamespace

    from tempo_rl.backends.local.tokenizer import build_tokenizer
    from tempo_rl.envs.keydoor import KeyDoorEnv
    from tempo_rl.training.config import load_config
    from tempo_rl.training.run import DEFAULT_CONFIG, env_corpus

    key_choice = _key_choice_module()
    layout = key_choice.LAYOUTS["adjacent"]
    cfg = load_config(DEFAULT_CONFIG, [f"env.kwargs.{k}={json.dumps(v)}" for k, v in layout.items()])
    tokenizer = build_tokenizer(env_corpus(cfg, games=8), vocab_size=1024)
    demos = [key_choice.actor_demo(layout, seed, tokenizer) for seed in range(4)]
    for seed, ((tokens, mask), (context, target)) in enumerate(
        zip(demos, key_choice.examples(layout, range(4), tokenizer))
    ):
        env = KeyDoorEnv(**layout)
        env.reset(seed)
        plan = list(env.walkthrough() or ())
        take = next(i for i, a in enumerate(plan) if a.startswith("take "))
        # the context is the demo up to the colour, and holds each earlier turn's tool call, as in the trainer
        assert len(tokens) == len(mask) and mask.count(key_choice.COLOUR) == 1
        assert (context, target) == (
            tokens[: mask.index(key_choice.COLOUR)],
            tokens[mask.index(key_choice.COLOUR)],
        )
        text = tokenizer.decode(context)
        # the turns only: the system prompt shows the call format too
        text = text[text.index("<|im_start|>assistant") :]
        assert text.count("<parameter=action>") == take + 1
        assert text.count("<parameter=action>go on</parameter>") == plan[:take].count("go on") > 0
        # WALK marks every tool-call token but the colour: one EOS per turn, every action word
        walk = [t for t, m in zip(tokens, mask) if m == key_choice.WALK]
        assert walk.count(tokenizer.eos_token_id) == len(plan)
        assert tokenizer.decode([t for t in walk if t != tokenizer.eos_token_id]).count(
            "<parameter=action>"
        ) == len(plan)

    def model_predicting(pick):  # logits whose argmax at position i is pick(tokens, i)
        def run(input_ids, attention_mask, position_ids):
            ids = input_ids[0].tolist()
            logits = torch.zeros(1, len(ids), len(tokenizer))
            for i in range(len(ids)):
                logits[0, i, pick(ids, i)] = 1.0
            return SimpleNamespace(logits=logits)

        return run

    oracle = model_predicting(lambda ids, i: ids[i + 1] if i + 1 < len(ids) else 0)
    assert key_choice.walk_accuracy(oracle, demos) == 1.0
    colours = {tokens[mask.index(key_choice.COLOUR)] for tokens, mask in demos}
    only_colours = model_predicting(  # right exactly where the next token is a colour: the walk scores 0
        lambda ids, i: ids[i + 1] if i + 1 < len(ids) and ids[i + 1] in colours else 0
    )
    assert key_choice.walk_accuracy(only_colours, demos) == 0.0
