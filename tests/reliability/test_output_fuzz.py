"""Model-output fuzzing: arbitrary text, huge outputs, unicode, nested / repeated tags and numbers such as
``1e309``, ``-0.0``, ``NaN`` or ``0.5.5`` inside ``<value>`` and inside tool calls never crash the critic or the
rollout, and every output is classified correctly (against independent oracles written here)."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tempo_rl.backends.types import SampledSequence, SampleResult, SamplingParams
from tempo_rl.critic import ValueStatus, classify_value
from tempo_rl.critic.base import CriticQuery, endpoint_value
from tempo_rl.critic.generative import GenerativeCritic
from tempo_rl.rollout.tool_call import INVALID_ACTION, ToolCallParser, format_tool_call
from tempo_rl.signals import critic_rewards
from tempo_rl.testing.faults import GARBAGE

NASTY_NUMBERS = [
    "1e309",
    "-1e309",
    "-0.0",
    "+0.0",
    "NaN",
    "nan",
    "-inf",
    "Infinity",
    "0.5.5",
    "1e",
    ".",
    "-",
    "0x1",
    "1_0",
    "٣",
    "０.５",
    "0.42",
    ".5",
    "5e-1",
    "1",
    "2",
    "-3",
    "1e-400",
    "\u00a00.3\u2003",
]
TAGS = [
    "<value>",
    "</value>",
    "<VALUE>",
    "</Value>",
    "<value >",
    "<tool_call>",
    "</tool_call>",
    "<function=env_step>",
    "</function>",
    "<parameter=action>",
    "</parameter>",
    "<|im_end|>",
    "<",
    ">",
    "/",
]


def _fragment() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(NASTY_NUMBERS),
        st.sampled_from(TAGS),
        st.sampled_from(GARBAGE),
        st.text(max_size=30),  # any unicode, surrogates excluded by hypothesis
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.tuples(st.sampled_from(TAGS + NASTY_NUMBERS), st.integers(1, 3000)).map(lambda t: t[0] * t[1]),
    )


texts = st.lists(_fragment(), max_size=12).map("".join)


# ------------------------------------------------------------------------------------------ oracles


def _grammar_ok(raw: str) -> bool:
    """``[+-]digits[.digits][e[+-]digits]`` or ``[+-].digits[...]``, ASCII digits only (written by hand)."""
    s = raw[1:] if raw[:1] in "+-" else raw
    mantissa, _, exponent = s.partition("e") if "e" in s else s.partition("E")
    if "e" in s or "E" in s:
        exp = exponent[1:] if exponent[:1] in "+-" else exponent
        if not exp or any(c not in "0123456789" for c in exp):
            return False
    whole, dot, frac = mantissa.partition(".")
    digits = set("0123456789")
    if any(c not in digits for c in whole + frac):
        return False
    return bool(whole) or (bool(dot) and bool(frac))


def value_oracle(text: str, r_max: float) -> tuple[ValueStatus, float | None]:
    """The last ``<value>x</value>`` pair whose content holds no '<' decides (case-insensitive tags)."""
    content = None
    for close in range(len(text)):
        if text[close : close + 8].lower() != "</value>":
            continue
        opening = text.rfind("<", 0, close)
        if opening >= 0 and text[opening : opening + 7].lower() == "<value>" and opening + 7 <= close:
            content = text[opening + 7 : close]
    if content is None:
        return ValueStatus.MISSING, None
    raw = content.strip()
    if (
        raw.lower().lstrip("+-") in ("nan", "inf", "infinity")
        and raw.lower().count("+") + raw.count("-") <= 1
    ):
        return ValueStatus.NON_FINITE, None
    if not _grammar_ok(raw):
        return ValueStatus.MALFORMED, None
    number = float(raw)
    if not math.isfinite(number):
        return ValueStatus.NON_FINITE, None
    clipped = min(max(number, 0.0), r_max) + 0.0
    return (ValueStatus.OK if clipped == number else ValueStatus.CLIPPED), clipped


# ------------------------------------------------------------------------------------------ critic


@pytest.mark.parametrize(
    ("text", "status", "value"),
    [
        ("<value>1e309</value>", ValueStatus.NON_FINITE, None),
        ("<value>-0.0</value>", ValueStatus.OK, 0.0),
        ("<value> NaN </value>", ValueStatus.NON_FINITE, None),
        ("<value>0.5.5</value>", ValueStatus.MALFORMED, None),
        ("<value><value>0.3</value></value>", ValueStatus.OK, 0.3),
        ("<value>0.9</value>" * 5000 + "<value>0.1</value>", ValueStatus.OK, 0.1),  # huge, repeated
        ("x" * 1_000_000 + "<value>0.7</value>", ValueStatus.OK, 0.7),
        ("<value>" * 100_000 + "0.2" + "</value>" * 100_000, ValueStatus.OK, 0.2),
        ("😀 <VALUE>\u20030.25\u2003</VALUE> ✓", ValueStatus.OK, 0.25),
        ("<value>٠.٥</value>", ValueStatus.MALFORMED, None),
        (
            '<tool_call>{"name": "env_step", "arguments": {"action": "<value>0.4</value>"}}</tool_call>',
            ValueStatus.OK,
            0.4,
        ),
    ],
)
def test_pinned_critic_outputs(text: str, status: ValueStatus, value: float | None) -> None:
    read = classify_value(text, 1.0)
    assert (read.status, read.value) == (status, value) == value_oracle(text, 1.0)
    if value == 0.0:
        assert math.copysign(1.0, read.value or 0.0) == 1.0  # -0.0 reads as +0.0


class TextSampler:
    """A sampling client that answers with the given texts (tokens: one dummy token per answer)."""

    def __init__(self, answers: Sequence[str]) -> None:
        self.answers = list(answers)

    async def sample_async(
        self, prompt: Sequence[int], num_samples: int, params: SamplingParams
    ) -> SampleResult:
        seqs = tuple(
            SampledSequence(tokens=(5,), logprobs=(-1.0,), text=t) for t in self.answers[:num_samples]
        )
        return SampleResult(sequences=seqs)


def char_render(messages: Sequence[Any]) -> list[int]:
    """A renderer stand-in: one token per character of the chat."""
    return [min(ord(c), 255) for m in messages for c in m["content"]]


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(answers=st.lists(texts, min_size=1, max_size=4), r_max=st.sampled_from([1.0, 2.0, 0.5]))
def test_critic_pipeline_never_crashes_and_classifies_every_answer(answers: list[str], r_max: float) -> None:
    critic = GenerativeCritic(char_render, SamplingParams(max_tokens=8), max_prompt_tokens=100_000)
    query = CriticQuery(task="t", history=(("go", "ok"),), initial_observation="start", r_max=r_max)
    est = asyncio.run(critic.estimate(query, len(answers), TextSampler(answers)))  # type: ignore[arg-type]
    for sample, text in zip(est.samples, answers, strict=True):
        status, value = value_oracle(text, r_max)
        assert sample.status == status
        assert (math.isnan(sample.value) and value is None) or sample.value == value
        if value is not None:
            assert 0.0 <= sample.value <= r_max
    parsed = [v for v in est.values if not math.isnan(v)]
    v_hat = endpoint_value(est)
    assert math.isnan(v_hat) if not parsed else v_hat == pytest.approx(float(np.mean(parsed)))
    rewards = critic_rewards(est.values[None, :], np.array([0.5 * r_max]), r_max=r_max, failure_reward=-1.0)
    assert np.all(np.isfinite(rewards)) and np.all(rewards <= 0.0) and np.all(rewards >= -1.0)


# ------------------------------------------------------------------------------------------ tool calls

PARSER = ToolCallParser()


@pytest.mark.parametrize(
    ("text", "valid", "action_or_reason"),
    [
        (format_tool_call("1e309"), True, "1e309"),  # a number inside a call is just action text
        (format_tool_call("-0.0"), True, "-0.0"),
        (format_tool_call("NaN"), True, "NaN"),
        (format_tool_call("0.5.5"), True, "0.5.5"),
        (format_tool_call("<value>0.5</value>"), True, "<value>0.5</value>"),
        (format_tool_call("go to 😀 ☃ naïve"), True, "go to 😀 ☃ naïve"),
        (
            '<tool_call>{"name": "env_step", "arguments": {"action": 1e309}}</tool_call>',
            False,
            "bad_arguments",
        ),
        ('<tool_call>{"name": "env_step", "arguments": {"action": NaN}}</tool_call>', False, "bad_arguments"),
        (
            '<tool_call>{"name": "env_step", "arguments": {"action": -0.0}}</tool_call>',
            False,
            "bad_arguments",
        ),
        ('<tool_call>{"name": "env_step", "arguments": {"action": "0.5.5"}}</tool_call>', True, "0.5.5"),
        ("<tool_call><tool_call>look</tool_call></tool_call>", False, "multiple_tool_calls"),
        (format_tool_call("look") * 2, False, "multiple_tool_calls"),
        (format_tool_call("look") * 20_000, False, "multiple_tool_calls"),
        ("<tool_call>" + "</parameter>" * 50_000 + "</tool_call>", False, "malformed_call"),
        ("x" * 1_000_000 + format_tool_call("look"), True, "look"),
        (format_tool_call("look") + "<|im_end|>" * 100, True, "look"),
        (
            "<tool_call><function=env_step><parameter=action><parameter=action>x</parameter></parameter>"
            "</function></tool_call>",
            False,
            "bad_arguments",
        ),
    ],
)
def test_pinned_tool_call_outputs(text: str, valid: bool, action_or_reason: str) -> None:
    call = PARSER.parse(text)
    assert call.valid is valid
    assert (call.action if valid else call.reason) == action_or_reason


def _count_oracle(text: str) -> str | None:
    """The reasons decided by tag counts alone (after end-of-turn markers are stripped)."""
    stripped = text.rstrip()
    while any(stripped.endswith(s) for s in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>")):
        for s in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>"):
            if stripped.endswith(s):
                stripped = stripped[: -len(s)].rstrip()
    n_open, n_close = stripped.count("<tool_call>"), stripped.count("</tool_call>")
    if n_open == n_close == 0:
        return "no_tool_call"
    if n_open > 1 or n_close > 1:
        return "multiple_tool_calls"
    if n_close == 0:
        return "unclosed_tool_call"
    return None


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_tool_call_parser_never_crashes_and_classifies_by_the_rules(text: str) -> None:
    call = PARSER.parse(text)
    assert call.valid == (call.reason == "ok") and (call.action == INVALID_ACTION) != call.valid
    expected = _count_oracle(text)
    if expected is not None:
        assert call.reason == expected
    if call.valid:
        assert call.action == call.action.strip() and call.action
        if call.form == "xml" and "</parameter>" not in call.action:
            assert PARSER.parse(format_tool_call(call.action)).action == call.action
        if call.form == "json":
            body = text[text.find("<tool_call>") + 11 : text.find("</tool_call>")]
            args = json.loads(body)["arguments"]
            args = json.loads(args) if isinstance(args, str) else args
            assert args["action"].strip() == call.action


# ------------------------------------------------------------------------------------------ rollout


@pytest.fixture(scope="module")
def keydoor_chat() -> Any:
    pytest.importorskip("tokenizers")
    from tempo_rl.backends.local import build_tokenizer
    from tempo_rl.rollout.renderer import ChatRenderer

    tok = build_tokenizer(["go on", "take red key", "open door", "<value>0.5</value>"] * 20, vocab_size=300)
    return ChatRenderer(tok)


class GarbageActor:
    """Answers each request with the next texts (tokens: the tokenizer's encoding of a short stand-in)."""

    def __init__(self, tokenizer: Any, answers: list[str]) -> None:
        self.tokenizer = tokenizer
        self.answers = answers
        self.i = 0

    async def sample_async(
        self, prompt: Sequence[int], num_samples: int, params: SamplingParams
    ) -> SampleResult:
        seqs = []
        for _ in range(num_samples):
            text = self.answers[self.i % len(self.answers)]
            self.i += 1
            tokens = (*self.tokenizer.encode("go on", add_special_tokens=False), self.tokenizer.eos_token_id)
            seqs.append(SampledSequence(tokens=tokens, logprobs=tuple(-1.0 for _ in tokens), text=text))
        return SampleResult(sequences=tuple(seqs))


@settings(
    max_examples=15,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(answers=st.lists(texts, min_size=1, max_size=6))
def test_rollouts_on_garbage_never_crash_and_count_every_invalid_call(
    keydoor_chat: Any, answers: list[str]
) -> None:
    from tempo_rl.envs import make
    from tempo_rl.envs.snapshot import EnvSpec
    from tempo_rl.envs.workers import EnvWorkerPool
    from tempo_rl.rollout.branches import RolloutSettings, run_branches
    from tempo_rl.training.types import StoredState

    spec = EnvSpec(name="keydoor", kwargs={"horizon": 12, "keys": 1, "colours": 2})
    envs = []
    for _ in range(2):
        env = make(spec)
        env.reset(0)
        envs.append(env)
    snap = envs[0].snapshot()
    start = StoredState.at_reset(snap, game_id="g", task="", policy_version=0)
    actor = GarbageActor(keydoor_chat.tokenizer, answers)
    settings_ = RolloutSettings(
        sampling=SamplingParams(max_tokens=8, seed=1),
        max_rounds=6,
        segment_rounds=3,
        max_trajectory_tokens=100_000,
    )
    with EnvWorkerPool(max_workers=2, step_timeout_s=30) as pool:
        results, stats = asyncio.run(
            run_branches(
                [start],
                [envs],
                sampler=actor,
                chat=keydoor_chat,
                settings=settings_,
                pool=pool,
                parser=PARSER,
            )
        )
    sent = [a for b in results[0] for a in b.actions]
    assert stats.turns == len(sent) == actor.i
    valid = [PARSER.parse(answers[k % len(answers)]).valid for k in range(actor.i)]
    assert stats.valid_tool_calls == sum(valid)
    assert sent.count(INVALID_ACTION) == stats.turns - stats.valid_tool_calls
    assert all(b.end_reason in ("macro_boundary", "terminated", "max_rounds") for b in results[0])
