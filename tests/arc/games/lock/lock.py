"""A tiny ARC-AGI-3 game for tempo-rl's tests (the toolkit ships none).

An 8 x 8 board (the camera upscales it 8x to the 64 x 64 frame). The player (colour 3) moves with ACTION1-4
(up, down, left, right) and must touch the goal (colour 14). A door column (colour 2) blocks the way.
Hidden rule: clicking (ACTION6) the switch (colour 9) opens the door. ACTION5 does nothing. Two levels; the
seed moves the player's start row.
"""

from arcengine import ARCBaseGame, Camera, GameAction, Level, Sprite

MOVES = {
    GameAction.ACTION1: (0, -1),
    GameAction.ACTION2: (0, 1),
    GameAction.ACTION3: (-1, 0),
    GameAction.ACTION4: (1, 0),
}


def _walls() -> Sprite:
    pixels = [[4 if x in (0, 7) or y in (0, 7) else -1 for x in range(8)] for y in range(8)]
    return Sprite(pixels, name="walls", tags=["wall"])


def _level(name: str, start_y: int, door_x: int, switch: tuple[int, int], goal: tuple[int, int]) -> Level:
    sprites = [
        _walls(),
        Sprite([[2]] * 6, name="door", x=door_x, y=1, tags=["door"]),
        Sprite([[9]], name="switch", x=switch[0], y=switch[1], tags=["switch", "sys_click"]),
        Sprite([[14]], name="goal", x=goal[0], y=goal[1], tags=["goal"]),
        Sprite([[3]], name="player", x=1, y=start_y, layer=1, tags=["player"]),
    ]
    return Level(sprites=sprites, grid_size=(8, 8), name=name)


class Lock(ARCBaseGame):
    def __init__(self, seed: int = 0) -> None:
        start_y = 1 + seed % 3
        levels = [
            _level("one", start_y, door_x=4, switch=(2, 6), goal=(6, 3)),
            _level("two", start_y, door_x=3, switch=(1, 6), goal=(6, 1)),
        ]
        camera = Camera(width=8, height=8, background=0, letter_box=0)
        super().__init__(
            game_id="lock", levels=levels, camera=camera, available_actions=[1, 2, 3, 4, 5, 6], seed=seed
        )

    def step(self) -> None:
        action = self.action.id
        if action in MOVES:
            dx, dy = MOVES[action]
            hits = self.try_move("player", dx, dy)
            if any("goal" in sprite.tags for sprite in hits):
                self.next_level()
        elif action == GameAction.ACTION6:
            x, y = int(self.action.data.get("x", -1)) // 8, int(self.action.data.get("y", -1)) // 8
            target = self.current_level.get_sprite_at(x, y)
            if target is not None and "switch" in target.tags:
                for door in self.current_level.get_sprites_by_tag("door"):
                    self.current_level.remove_sprite(door)
        self.complete_action()
