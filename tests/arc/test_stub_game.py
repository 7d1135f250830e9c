"""The hidden-rule stub game and its adapter: rules, rewards, end flags and text, pinned on seed 3."""

from __future__ import annotations

import numpy as np
import pytest

from tempo_rl.envs.arc import ArcAction, ArcStubEnv, GameState, HiddenRuleGame, render_grid

# seed 3, level 0 (hand-read from the board below): wall/key colour 11 (b); player at cell (3, 4);
# tiles: (2, 3) colour 10, (4, 6) colour 14, (6, 5) colour 11 = the key tile.
SEED3_BOARD = ["bbbbbbbb", "b000000b", "b00a000b", "b000300b", "b00000eb", "b000000b", "b0000b0b", "bbbbbbbb"]


def board(env: ArcStubEnv) -> list[str]:
    return render_grid(env.frame.grid, scale=8).splitlines()


def test_seed3_layout_is_pinned() -> None:
    env = ArcStubEnv(scale=8)
    obs = env.reset(3)
    assert obs.text.splitlines()[-8:] == SEED3_BOARD
    assert obs.admissible_actions == (
        "ACTION1",
        "ACTION2",
        "ACTION3",
        "ACTION4",
        "ACTION5",
        "ACTION6 28 20",
        "ACTION6 52 36",
        "ACTION6 44 52",
        "ACTION7",
    )
    assert obs.info["task"].startswith("Play the game")
    assert env.walkthrough() == ("ACTION6 44 52", "ACTION6 52 52")


def test_full_frame_is_64_by_64_blocks() -> None:
    env = ArcStubEnv()
    obs = env.reset(3)
    rows = obs.text.splitlines()[-64:]
    assert len(rows) == 64 and all(len(row) == 64 for row in rows)
    assert rows[0] == "b" * 64
    assert rows[20][24:32] == "a" * 8  # tile (2, 3) covers pixels x 24..31, y 16..23
    assert env.frame.grid.shape == (64, 64)


def test_moves_walls_and_undo() -> None:
    env = ArcStubEnv(scale=8)
    env.reset(3)
    for _ in range(3):
        env.step("ACTION4")  # right: (3, 4) -> (3, 5) -> (3, 6) -> wall
    assert board(env)[3] == "b000003b"
    env.step("ACTION7")  # undo the last *move*: the blocked one recorded nothing
    assert board(env)[3] == "b000030b"
    env.step("ACTION7")
    env.step("ACTION7")  # nothing left to undo
    assert board(env)[3] == "b000300b"


def test_wrong_tile_costs_a_life_then_game_over() -> None:
    env = ArcStubEnv(scale=8, lives=2)
    env.reset(3)
    first = env.step("ACTION6 28 20")  # colour 10: wrong
    assert (first.reward, first.terminated, first.truncated) == (0.0, False, False)
    assert board(env)[2] == "b000000b"  # the tile is gone
    assert "ACTION6 28 20" not in first.observation.admissible_actions
    env.step("ACTION6 28 20")  # clicking the empty cell does nothing
    second = env.step("ACTION6 52 36")  # colour 14: wrong, last life
    assert second.terminated and not second.info["won"] and second.info["state"] == "GAME_OVER"
    after = env.step("ACTION6 44 52")
    assert after.terminated and after.reward == 0.0 and "game is over" in after.observation.text


def test_walking_and_action5_completes_the_level() -> None:
    env = ArcStubEnv(scale=8)
    env.reset(3)
    env.step("ACTION5")  # nothing under the player
    for action in ("ACTION2", "ACTION2", "ACTION2", "ACTION4"):  # (3, 4) -> (6, 5), onto the key tile
        env.step(action)
    result = env.step("ACTION5")
    assert result.reward == pytest.approx(0.5) and not result.terminated
    assert result.info["levels_completed"] == 1
    assert "levels completed: 1/2" in result.observation.text


def test_walkthrough_wins_with_return_one() -> None:
    for seed in range(5):
        env = ArcStubEnv(levels=3)
        env.reset(seed)
        rewards = [env.step(action).reward for action in env.walkthrough() or ()]
        assert sum(rewards) == pytest.approx(1.0)
        assert env.frame.state is GameState.WIN


def test_invalid_text_counts_a_step_and_truncates() -> None:
    env = ArcStubEnv(scale=8, max_steps=2)
    env.reset(3)
    first = env.step("jump")
    assert "last action: invalid: not an ARC action" in first.observation.text
    assert not first.info["valid_action"] and not first.done
    assert first.observation.text.splitlines()[-8:] == SEED3_BOARD
    second = env.step("ACTION1")
    assert second.truncated and not second.terminated and "step: 2/2" in second.observation.text


def test_privileged_info_is_the_game_source_and_not_shown_to_the_actor() -> None:
    env = ArcStubEnv()
    obs = env.reset(0)
    source = env.privileged_info()
    assert "class HiddenRuleGame" in source and "the hidden rule" in source
    assert "key_colour" not in obs.text and "hidden rule" not in obs.text.lower()


def test_game_property_exposes_the_live_hidden_state() -> None:
    env = ArcStubEnv(scale=8)
    with pytest.raises(RuntimeError, match="reset"):
        _ = env.game
    env.reset(3)
    assert env.game.level.key_colour == 11 and env.game.lives == 2 and len(env.game.tiles) == 3
    env.step("ACTION6 28 20")
    assert env.game.lives == 1 and len(env.game.tiles) == 2


def test_seeds_are_deterministic_and_differ() -> None:
    a, b = HiddenRuleGame(seed=7), HiddenRuleGame(seed=7)
    assert np.array_equal(a.grid(), b.grid()) and a.fingerprint() == b.fingerprint()
    assert not np.array_equal(HiddenRuleGame(seed=8).grid(), a.grid())
    a.perform(ArcAction(1))
    assert a.fingerprint() != b.fingerprint()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"levels": 0}, "levels"),
        ({"n_tiles": 1}, "n_tiles"),
        ({"lives": 0}, "lives"),
        ({"max_steps": 0}, "max_steps"),
        ({"scale": 3}, "scale"),
        ({"sep": ","}, "sep"),
    ],
)
def test_bad_arguments_are_rejected(kwargs: dict[str, int | str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ArcStubEnv(**kwargs)  # type: ignore[arg-type]


def test_step_before_reset_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="reset"):
        ArcStubEnv().step("ACTION1")
