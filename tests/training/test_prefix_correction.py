"""Prefix importance-sampling correction: span bookkeeping, weights, advantages, and its use in the TD update.

Pinned on hand-computed numbers (fake samplers with known logprobs), on the real local backend (an update that
lowers a prefix's probability makes its weight < 1), and end to end in the TEMPO TD update with the scripted
KeyDoor sampler of ``trainer_doubles``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trainer_doubles import ScriptedSampler, scripted_components, tiny_config

from tempo_rl.envs import make
from tempo_rl.envs.snapshot import EnvSpec
from tempo_rl.rollout.renderer import PromptWindow
from tempo_rl.rollout.tool_call import format_tool_call
from tempo_rl.training.config import ConfigError, TempoConfig
from tempo_rl.training.prefix_correction import (
    PrefixCorrection,
    endpoint_spans,
    sampled_spans,
    weight_metrics,
)
from tempo_rl.training.tempo import TempoTrainer
from tempo_rl.training.types import PrefixSpan, StoredState, make_state_id

_SNAPSHOT: Any = None


def _snapshot() -> Any:
    global _SNAPSHOT
    if _SNAPSHOT is None:
        env = make(EnvSpec(name="keydoor", kwargs={"horizon": 16, "keys": 1, "colours": 2}))
        env.reset(0)
        _SNAPSHOT = env.snapshot()
        env.close()
    return _SNAPSHOT


def _state(prefix: Sequence[int], spans: Sequence[PrefixSpan] | None, version: int = 0) -> StoredState:
    snap = _snapshot()
    return StoredState(
        id=make_state_id(snap, prefix),
        snapshot=snap,
        game_id="keydoor:0",
        task="t",
        token_prefix=tuple(prefix),
        policy_version=version,
        macro_index=1,
        prompt=PromptWindow(messages=({"role": "user", "content": "o"},), head=1) if prefix else None,
        spans=tuple(spans) if spans is not None else (None if prefix else ()),
    )


class FixedLogprobs:
    """A sampler whose ``compute_logprobs`` returns ``table[t]`` for token id t (and counts its calls)."""

    def __init__(self, table: dict[int, float] | None = None, default: float = -1.0) -> None:
        self.table = table or {}
        self.default = default
        self.calls = 0

    def compute_logprobs(self, tokens: Sequence[int]) -> list[float | None]:
        self.calls += 1
        return [None, *(self.table.get(int(t), self.default) for t in tokens[1:])]


class Exploding:
    """A sampler that must not be asked for logprobs."""

    def compute_logprobs(self, tokens: Sequence[int]) -> list[float | None]:
        raise AssertionError("compute_logprobs must not be called when nothing is stale")


# ------------------------------------------------------------------------------------------------ spans


def test_sampled_spans_are_maximal_runs_with_their_logprob_sums():
    mask = [False, True, True, False, False, True, True, True, False]
    lps = [0.0, -1.0, -0.5, 0.0, 0.0, -0.25, -0.25, -2.0, 0.0]
    assert [s.to_json() for s in sampled_spans(mask, lps, 7)] == [[1, 3, 7, -1.5], [5, 8, 7, -2.5]]
    # `end` cuts the prefix: the second run is truncated to [5, 7)
    assert [s.to_json() for s in sampled_spans(mask, lps, 7, end=7)] == [[1, 3, 7, -1.5], [5, 7, 7, -0.5]]
    assert sampled_spans([False, False], [0.0, 0.0], 0) == []
    with pytest.raises(ValueError, match="differ in length"):
        sampled_spans([True], [0.0, 0.0], 0)


def test_endpoint_spans_extend_the_parent_spans():
    parent = _state(list(range(10)), [PrefixSpan(2, 4, 0, -3.0)])

    class Branch:
        sampled_mask = [False] * 10 + [True, True, False, True, False]
        logprobs = [0.0] * 10 + [-1.0, -1.0, 0.0, -0.5, 0.0]

    rows = [s.to_json() for s in endpoint_spans(parent, Branch(), 14, version=3)]
    assert rows == [[2, 4, 0, -3.0], [10, 12, 3, -2.0], [13, 14, 3, -0.5]]


def test_prefix_spans_validation():
    assert _state([], None).spans == ()
    assert _state([1, 2, 3], None).spans is None  # a prefix without recorded spans
    with pytest.raises(ValueError, match="overlap"):
        _state([1, 2, 3], [PrefixSpan(0, 2, 0, -1.0), PrefixSpan(1, 3, 0, -1.0)])
    with pytest.raises(ValueError, match="past the prefix length"):
        _state([1, 2, 3], [PrefixSpan(0, 5, 0, -1.0)])
    with pytest.raises(ValueError, match="start < end"):
        PrefixSpan.from_json([3, 3, 0, -1.0])


# ------------------------------------------------------------------------------------------------ weights


def test_weights_are_exactly_one_when_the_policy_has_not_changed():
    states = [
        _state([], None),  # a fresh episode start: no assistant tokens
        _state(list(range(8)), [PrefixSpan(2, 5, 4, -7.5)], version=4),  # sampled by the current version 4
        _state(list(range(12)), [PrefixSpan(1, 3, 4, -1.0), PrefixSpan(6, 9, 4, -2.0)], version=4),
    ]
    for mode in ("ratio", "clipped"):
        pw = asyncio.run(PrefixCorrection(mode).compute(Exploding(), states, policy_version=4))
        assert pw.weights.tolist() == [1.0, 1.0, 1.0]  # exactly, with no recomputation at all
        assert pw.calls == 0 and pw.recomputed_tokens == 0 and not pw.stale.any()
        adv = np.array([[0.5, -0.5], [0.25, -0.25], [1.0, 0.0]])
        assert np.array_equal(PrefixCorrection(mode).apply(adv, pw), adv)


def test_weights_hand_computed_ratio_clipped_and_off():
    # prefix tokens 0..9; assistant spans [2, 4) sampled by v0 and [6, 8) by v2 (the current version)
    spans = [PrefixSpan(2, 4, 0, -2.0), PrefixSpan(6, 8, 2, -1.0)]
    state = _state(list(range(10)), spans)
    # current policy: token 2 -> -0.5, token 3 -> -0.75; only the stale span counts: new = -1.25, old = -2.0
    sampler = FixedLogprobs({2: -0.5, 3: -0.75}, default=-9.0)
    pw = asyncio.run(PrefixCorrection("ratio").compute(sampler, [state], policy_version=2))
    assert pw.log_ratio[0] == pytest.approx(0.75)
    assert pw.weights[0] == pytest.approx(math.exp(0.75))
    assert pw.recomputed_tokens == 2 and pw.calls == 1
    pw_c = asyncio.run(PrefixCorrection("clipped", (0.5, 2.0)).compute(sampler, [state], policy_version=2))
    assert pw_c.weights[0] == 2.0  # e^0.75 = 2.117 clipped to the upper bound
    assert pw_c.metrics()["prefix/clipped_fraction"] == 1.0
    pw_off = asyncio.run(PrefixCorrection("off").compute(Exploding(), [state], policy_version=2))
    assert pw_off.weights.tolist() == [1.0]


def test_branches_of_one_state_share_one_logprob_call_and_metrics():
    a = _state(list(range(6)), [PrefixSpan(1, 3, 0, -1.0)])
    b = _state(list(range(7)), [PrefixSpan(1, 3, 0, -1.0)])
    sampler = FixedLogprobs(default=-1.5)  # new = -3.0, old = -1.0 -> log w = -2
    pw = asyncio.run(
        PrefixCorrection("clipped", (0.25, 4.0)).compute(sampler, [a, a, b, a], policy_version=1)
    )
    assert sampler.calls == 2  # one per distinct state id
    assert pw.log_ratio.tolist() == pytest.approx([-2.0] * 4)
    assert pw.weights.tolist() == pytest.approx([0.25] * 4)  # e^-2 = 0.135 clipped to 0.25
    m = pw.metrics()
    assert m["prefix/stale_states"] == 4.0 and m["prefix/clipped_fraction"] == 1.0
    assert m["prefix/weight_q50"] == pytest.approx(0.25)
    assert m["prefix/logprob_calls"] == 2.0


def test_unknown_spans_are_counted_and_weigh_one():
    pw = asyncio.run(
        PrefixCorrection("ratio").compute(Exploding(), [_state([1, 2, 3], None)], policy_version=5)
    )
    assert pw.weights.tolist() == [1.0] and pw.unknown.tolist() == [True]
    assert pw.metrics()["prefix/unknown_states"] == 1.0


def test_apply_multiplies_by_weight_and_segment_count():
    corr = PrefixCorrection("clipped", segments=5, segment_scaling=True)
    adv = np.array([[0.5, -0.5, 0.0], [0.2, 0.1, -0.3]])
    out = corr.apply(adv, np.array([0.5, 2.0]))
    assert np.allclose(out, [[1.25, -1.25, 0.0], [2.0, 1.0, -3.0]], rtol=0, atol=1e-12)
    assert corr.scale == 5.0
    with pytest.raises(ValueError, match="one prefix weight per start state"):
        corr.apply(adv, np.array([1.0, 1.0, 1.0]))


def test_weight_metrics_definitions():
    m = weight_metrics(
        [0.5, 1.0, 2.0, 1.0], [-1.0, 0.0, 1.0, 0.0], stale=[True, False, True, False], clip=(0.5, 2.0)
    )
    assert (
        m["prefix/weight_min"] == 0.5 and m["prefix/weight_max"] == 2.0 and m["prefix/weight_mean"] == 1.125
    )
    assert m["prefix/weight_q50"] == 1.0
    # stale raw ratios e^-1 = 0.37 and e^1 = 2.72 both fall outside [0.5, 2]
    assert m["prefix/clipped_fraction"] == 1.0 and m["prefix/log_ratio_mean"] == 0.0
    assert math.isnan(weight_metrics([], [])["prefix/weight_mean"])


def test_invalid_modes_and_clips_name_the_fix():
    with pytest.raises(ValueError, match="one of"):
        PrefixCorrection("sometimes")
    with pytest.raises(ValueError, match="low <= 1 <= high"):
        PrefixCorrection("clipped", (1.5, 2.0))
    with pytest.raises(ValueError, match="segments"):
        PrefixCorrection("clipped", segments=0)
    assert TempoConfig().prefix_correction == "clipped"
    assert PrefixCorrection.from_config(TempoConfig()).clip == (0.5, 2.0)
    with pytest.raises(ConfigError, match="prefix_correction"):
        tiny_config('tempo.prefix_correction="sometimes"')


@settings(max_examples=60)
@given(
    data=st.lists(
        st.tuples(st.integers(1, 4), st.integers(0, 3), st.booleans(), st.floats(-5, 0), st.floats(-5, 0)),
        min_size=0,
        max_size=5,
    ),
    current=st.integers(0, 3),
)
def test_property_log_ratio_is_the_stale_span_difference(data, current):
    # spans separated by one context token; each span has a length, a version, and per-token new/old logprobs
    spans, table, pos, expected = [], {}, 1, 0.0
    for length, version, _, new_lp, old_lp in data:
        spans.append(PrefixSpan(pos, pos + length, version, old_lp * length))
        for t in range(pos, pos + length):
            table[t] = new_lp
        if version != current:
            expected += (new_lp - old_lp) * length
        pos += length + 1
    state = _state(list(range(pos)), spans)
    pw = asyncio.run(PrefixCorrection("ratio").compute(FixedLogprobs(table), [state], policy_version=current))
    assert pw.log_ratio[0] == pytest.approx(expected, abs=1e-9)
    assert pw.weights[0] == pytest.approx(math.exp(expected), rel=1e-9)
    stale = any(v != current for _, v, *_ in data)
    if not stale:
        assert pw.weights[0] == 1.0
    clipped = asyncio.run(
        PrefixCorrection("clipped", (0.5, 2.0)).compute(FixedLogprobs(table), [state], policy_version=current)
    )
    assert 0.5 <= clipped.weights[0] <= 2.0
    assert clipped.weights[0] == pytest.approx(min(2.0, max(0.5, math.exp(expected))), rel=1e-9)


# ---------------------------------------------------------------------------------------------- local backend


@pytest.mark.torch
def test_local_backend_update_lowering_a_prefix_makes_its_weight_drop_below_one(tmp_path):
    pytest.importorskip("torch", reason="the local backend needs the 'local' extra (torch)")
    from tempo_rl.backends.local import LocalTrainingClient, build_tiny_model, build_tokenizer
    from tempo_rl.backends.types import AdamParams, SamplingParams
    from tempo_rl.rollout.datums import make_datum

    corpus = [
        "go on",
        "go back",
        "take red",
        "open door",
        "Room 3 of 9. A locked door.",
        "Nothing happens.",
    ] * 10
    tok = build_tokenizer(corpus, vocab_size=300)
    model = build_tiny_model(len(tok), hidden_size=32, num_layers=1, num_heads=2, seed=0)
    training = LocalTrainingClient(model, tok, state_dir=tmp_path / "ckpt", seed=0)
    sampler0 = training.save_weights_and_get_sampling_client()

    # prefix = prompt + turn 1 (sampled) + observation + turn 2 (sampled); version 0 sampled both turns
    params = SamplingParams(max_tokens=6, temperature=1.0, seed=3)
    tokens = tok.encode("Room 3 of 9. A locked door.", add_special_tokens=False)
    lps = [0.0] * len(tokens)
    mask = [False] * len(tokens)
    for obs in ("Nothing happens.", "Room 3 of 9."):
        seq = sampler0.sample(tokens, 1, params).sequences[0]
        tokens += list(seq.tokens)
        lps += list(seq.logprobs)
        mask += [True] * len(seq.tokens)
        o = tok.encode(obs, add_special_tokens=False)
        tokens += o
        lps += [0.0] * len(o)
        mask += [False] * len(o)
    spans = sampled_spans(mask, lps, 0)
    assert len(spans) == 2
    state = _state(tokens, spans, version=0)

    # the policy has not changed: exactly 1 at version 0; recomputing under the same weights gives ~1
    assert asyncio.run(PrefixCorrection("ratio").compute(Exploding(), [state], 0)).weights[0] == 1.0
    same = asyncio.run(PrefixCorrection("ratio").compute(sampler0, [state], 1))
    assert abs(same.weights[0] - 1.0) < 1e-4

    # one update that pushes the prefix's assistant tokens down (negative advantage on them)
    adv_tokens = [-1.0 if m else 0.0 for m in mask]
    datum = make_datum(tokens, lps, adv_tokens, vocab_size=len(tok))
    training.forward_backward([datum], "importance_sampling")
    training.optim_step(AdamParams(learning_rate=1e-2))
    sampler1 = training.save_weights_and_get_sampling_client()

    new_lps = sampler1.compute_logprobs(tokens)
    new_sum = sum(float(new_lps[t]) for s in spans for t in range(s.start, s.end))  # type: ignore[arg-type]
    old_sum = sum(s.logprob_sum for s in spans)
    assert new_sum < old_sum  # the update lowered the prefix's probability

    ratio = asyncio.run(PrefixCorrection("ratio").compute(sampler1, [state], policy_version=1))
    assert ratio.weights[0] < 1.0
    assert ratio.log_ratio[0] == pytest.approx(new_sum - old_sum, abs=1e-6)
    assert ratio.weights[0] == pytest.approx(math.exp(new_sum - old_sum), rel=1e-6)
    clipped = asyncio.run(
        PrefixCorrection("clipped", (0.5, 2.0)).compute(sampler1, [state], policy_version=1)
    )
    assert clipped.weights[0] == pytest.approx(max(0.5, ratio.weights[0]), rel=1e-9)

    # the branch advantages of that start shrink by exactly the weight
    adv = np.array([[0.75, -0.25, -0.25, -0.25]])
    out = PrefixCorrection("ratio").apply(adv, ratio)
    assert out == pytest.approx(ratio.weights[0] * adv)
    assert np.all(np.abs(out) < np.abs(adv))


# ------------------------------------------------------------------------------------------------ TD update


class LowerSampler(ScriptedSampler):
    """The scripted KeyDoor sampler whose current policy gives each token logprob -0.26 (sampled: -0.25)."""

    def compute_logprobs(self, tokens: Sequence[int]) -> list[float | None]:
        return [None] + [-0.26] * (len(tokens) - 1)


def _td_trainer(cfg):
    comps, _sampler, training = scripted_components(cfg, p_right=0.5, undecided=0.5)
    sampler = LowerSampler(comps.sampler.tokenizer, p_right=0.5, undecided=0.5)
    comps.sampler = sampler
    training.sampler = sampler
    records: list = []
    trainer = TempoTrainer(cfg, comps, write_trajectories=lambda recs: records.extend(recs))
    return trainer, training, records


def test_stored_endpoints_record_their_assistant_token_spans():
    cfg = tiny_config("tempo.warmup_updates=0", "tempo.td_updates=1", "tempo.fresh_share=1.0")
    trainer, _training, _ = _td_trainer(cfg)
    asyncio.run(trainer.td_update(0))
    tok = trainer.c.chat.tokenizer
    states = trainer.c.store.sample(len(trainer.c.store), np.random.default_rng(0))
    assert states
    for state in states:
        spans = state.spans
        assert spans is not None and len(spans) == len(state.history) == 4
        assert sum(s.logprob_sum for s in spans) == pytest.approx(-0.25 * sum(s.end - s.start for s in spans))
        for span, (action, _obs) in zip(spans, state.history):
            assert span.version == 0
            text = tok.decode(list(state.token_prefix[span.start : span.end]), skip_special_tokens=True)
            assert text.strip() == format_tool_call(action).strip()


@pytest.mark.parametrize("mode", ["ratio", "clipped"])
def test_td_update_weights_the_advantages_of_stale_starts(mode):
    cfg = tiny_config(
        "tempo.warmup_updates=0",
        "tempo.td_updates=2",
        "tempo.fresh_share=0.5",
        "tempo.states_per_batch=2",
        f'tempo.prefix_correction="{mode}"',
    )
    trainer, training, records = _td_trainer(cfg)
    asyncio.run(trainer.td_update(0))
    trainer.state.policy_version = 1  # the policy changed since the stored endpoints were sampled
    n_calls = len(training.calls)
    n_before = len(records)
    metrics = asyncio.run(trainer.td_update(1))
    recs = records[n_before:]
    stored = [r for r in recs if not r["fresh"]]
    assert len(stored) == 4 and metrics["prefix/stale_states"] == 1.0
    state = trainer.c.store.get(stored[0]["start_id"])
    # every stored prefix token was sampled at -0.25 and now has -0.26: log w = -0.01 * (assistant tokens)
    n_assistant = sum(s.end - s.start for s in state.spans or ())
    assert n_assistant > 20
    w = math.exp(-0.01 * n_assistant)
    if mode == "clipped":
        w = max(0.5, w)
    assert metrics["prefix/weight_min"] == pytest.approx(w)
    assert metrics["prefix/weight_max"] == 1.0  # the fresh start
    expected = sorted(
        (w if not r["fresh"] else 1.0) * r["advantage"] for r in recs if abs(r["advantage"]) > 1e-12
    )
    got = []
    for name, payload in training.calls[n_calls:]:
        if name == "forward_backward":
            for d in payload:
                if d.tags.get("role") == "actor":
                    a = d.loss_fn_inputs["advantages"]
                    got.append(float(a[a != 0][0]))
    assert len(got) == len(expected) > 0
    assert sorted(got) == pytest.approx(expected, rel=1e-5)
