"""Property tests of the small text functions: canonicalisation, task extraction, walkthrough mapping."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tempo_rl.envs.alfworld.env import canonicalize_action, extract_task
from tempo_rl.envs.alfworld.walkthrough import format_walkthrough, has_raw_ids, map_walkthrough

_WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=8)
_SPACE = st.text(alphabet=" \t\n\r", min_size=1, max_size=3)


@given(st.lists(_WORD, min_size=1, max_size=6), st.data())
def test_canonicalize_joins_words_with_single_spaces_in_lower_case(
    words: list[str], data: st.DataObject
) -> None:
    seps = [data.draw(_SPACE) for _ in range(len(words) + 1)]
    noisy = seps[0]
    for i, w in enumerate(words):
        noisy += (w.upper() if i % 2 else w) + seps[i + 1]
    out = canonicalize_action(noisy)
    assert out == " ".join(words)
    assert canonicalize_action(out) == out


@given(st.text(max_size=40))
def test_canonicalize_is_idempotent_on_any_text(text: str) -> None:
    once = canonicalize_action(text)
    assert canonicalize_action(once) == once
    assert once == once.strip() and "  " not in once


@given(
    st.text(alphabet=st.characters(blacklist_characters="\n\r"), max_size=30),
    st.text(alphabet="abcdefghij .,", min_size=1, max_size=30).filter(lambda s: s.strip()),
)
def test_extract_task_reads_the_task_line(prefix: str, task: str) -> None:
    text = f"-= Welcome =-\n\n{prefix}\n\nYour task is to: {task}\nmore text"
    assert extract_task(text) == task.strip()
    assert extract_task("no task here") == ""


_ID = st.builds(
    lambda n, a, b: f"{n}_bar__plus_{a:02d}_dot_{b:02d}", _WORD, st.integers(0, 99), st.integers(0, 99)
)


@given(st.dictionaries(_ID, _WORD.map(lambda w: f"{w} 1"), min_size=1, max_size=5), st.data())
def test_map_walkthrough_replaces_every_known_id(names: dict[str, str], data: st.DataObject) -> None:
    ids = sorted(names)
    commands = [
        f"take {data.draw(st.sampled_from(ids))} from {data.draw(st.sampled_from(ids))}",
        f"go to {data.draw(st.sampled_from(ids)).upper()}",  # ids match case-insensitively
        "look",
    ]
    mapped = map_walkthrough(commands, names)
    assert not has_raw_ids(mapped)
    assert mapped[2] == "look" and mapped[0].startswith("take ") and " from " in mapped[0]
    assert all(tok not in ids for cmd in mapped for tok in cmd.split())
    assert map_walkthrough(mapped, names) == mapped  # already readable: unchanged
    assert format_walkthrough(mapped).splitlines()[0] == f"1. {mapped[0]}"


def test_unmapped_ids_stay_visible_as_raw() -> None:
    raw = ["take mug_bar__minus_02_dot_05 from shelf_bar__plus_01_dot_00"]
    assert has_raw_ids(map_walkthrough(raw, {}))
    assert map_walkthrough(
        raw, {"MUG_bar__minus_02_dot_05": "mug 1", "shelf_bar__plus_01_dot_00": "shelf 1"}
    ) == ("take mug 1 from shelf 1",)
