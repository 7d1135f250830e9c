"""AlfworldEnv.oracle_value: 1 when the planner's plan from the current state fits in the steps left."""

from __future__ import annotations

from pathlib import Path

from tempo_rl.envs.alfworld.env import AlfworldEnv


def test_oracle_value_follows_the_planner_and_leaves_the_state(small_game: Path) -> None:
    env = AlfworldEnv(small_game, max_steps=50)
    try:
        env.reset()
        n = len(env.engine.plan())
        assert n >= 2
        before = env.state_fingerprint()
        assert env.oracle_value(n) == 1.0
        assert env.oracle_value(n - 1) == 0.0  # the plan does not fit
        assert env.state_fingerprint() == before  # planning only reads the state
        for command in env.walkthrough() or ():
            result = env.step(command)
        assert result.terminated and env.oracle_value(50) == 0.0  # won: nothing follows

        short = AlfworldEnv(small_game, max_steps=n)
        try:
            short.reset()
            short.step("dance")  # one step used: the env's own limit leaves n - 1
            assert short.oracle_value(100) == 0.0
        finally:
            short.close()
    finally:
        env.close()
