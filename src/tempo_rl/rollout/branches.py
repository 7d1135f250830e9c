"""N-branch macro-step rollouts and full episodes, with exact token prefixes.

One call of :func:`run_branches` plays many *branches* in lockstep rounds. Each branch starts from a
:class:`~tempo_rl.training.types.StoredState` (a fresh episode start has an empty token prefix) on its own live
env (restored and verified beforehand, see :meth:`MacroStepTrainer.restore_start`) and repeats:

1. sample one assistant turn from the current prompt (``sample_async``; all branches of one round concurrently;
   branches that share the same prompt, e.g. the N branches of a start at their first round, share one request
   with ``num_samples`` > 1);
2. parse the single tool call (:mod:`tempo_rl.rollout.tool_call`); an unreadable call sends the sentinel
   :data:`INVALID_ACTION` to the env (it still consumes a step, as in the reference, and is counted);
3. step the env (through the worker pool: crashes and time-outs drop that branch only); the round's reward is
   the env's, less ``RolloutSettings.invalid_action_penalty`` when the action was invalid (the reference's
   chapter-8 GRPO reward ``1[won] - 0.1 * invalid actions``; 0 by default);
4. extend the prompt by appending: previous tokens + the exact sampled tokens + the tool-result turn
   (:class:`~tempo_rl.rollout.renderer` renders only the new suffix; sampled tokens are never re-tokenized).

A branch ends with the first reason that applies, in this priority:

=================  ============================================  ==================================
reason             condition                                     TEMPO's return
=================  ============================================  ==================================
``terminated``     the env reports a terminal MDP state          R_n = r_n (no bootstrap)
``max_rounds``     the episode reached T env steps (or the env   R_n = r_n (the step budget is
                   truncated it)                                 spent)
``macro_boundary`` the segment reached H rounds                  R_n = r_n + V_hat; endpoint stored
``token_budget``   the next turn would not fit the token budget  R_n = r_n (the agent cannot act on)
``error``          env crash / time-out                          branch dropped (counted)
=================  ============================================  ==================================

**Template restarts.** A chat template that rewrites history (e.g. Qwen3 dropping earlier ``<think>`` blocks)
admits no token-exact extension; :meth:`~tempo_rl.rollout.renderer.ChatRenderer.extend` then returns a fresh
full render. The branch goes on: its current token sequence ends with the last sampled turn and a new sequence
starts from the fresh render (context only, logprob 0). A branch thus yields one training sequence per restart
plus one (:meth:`BranchResult.sequences`), each a Datum with the same branch advantage; sampled tokens keep
their sampled logprobs and are never re-tokenized. Restarts are counted in
:attr:`RolloutStats.template_restarts`, and a state stored after a restart carries the restarted prefix.

The remaining step budget ``T - round`` is shown to the actor in every observation turn when
``show_remaining_steps`` is set (the critic gets it through :class:`~tempo_rl.critic.CriticQuery`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from tempo_rl.backends.types import SampledSequence, SamplingClient, SamplingParams
from tempo_rl.envs.core import Observation, StepResult
from tempo_rl.envs.snapshot import Snapshot
from tempo_rl.rollout.prompts import OBSERVATION_ROLE, build_actor_messages, format_observation
from tempo_rl.rollout.renderer import PromptState, PromptWindow
from tempo_rl.rollout.tool_call import INVALID_ACTION, ToolCallParser

__all__ = [
    "BranchResult",
    "EndReason",
    "RolloutSettings",
    "RolloutStart",
    "RolloutStats",
    "TokenSequence",
    "run_branches",
]

EndReason = Literal["terminated", "max_rounds", "macro_boundary", "token_budget", "error"]


class RolloutStart(Protocol):
    """Where branches start (:class:`~tempo_rl.training.types.StoredState` is one): an env state, the turns
    that led there and the exact actor prompt; an empty ``token_prefix`` is a fresh episode, whose opening
    prompt is rendered from the reset observation."""

    @property
    def snapshot(self) -> Snapshot: ...

    @property
    def token_prefix(self) -> tuple[int, ...]: ...

    @property
    def history(self) -> tuple[tuple[str, str], ...]: ...

    def prompt_state(self) -> PromptState:
        """The renderer state of ``token_prefix`` (only called when it is not empty)."""
        ...


@dataclass(frozen=True)
class RolloutSettings:
    """How branches are played.

    Attributes:
        sampling: the actor's sampling parameters (``max_tokens`` = the per-turn budget).
        max_rounds: T, the episode step limit (counted from reset, across segments).
        segment_rounds: H, the rounds per macro-step; None plays until the episode ends (full episodes).
        max_trajectory_tokens: the token budget of one actor sequence (prefix included).
        show_remaining_steps: show ``T - round`` to the actor.
        tool_name: the tool the actor calls.
        invalid_action_penalty: p >= 0, subtracted from a round's env reward when its action is invalid (an
            unreadable tool call, or not in the admissible list shown with the prompt when the env lists one):
            ``r_t = r_env_t - p * 1[invalid_t]``, the reference's chapter-8 GRPO reward with p = 0.1.
    """

    sampling: SamplingParams
    max_rounds: int
    segment_rounds: int | None = None
    max_trajectory_tokens: int = 12_000
    show_remaining_steps: bool = True
    tool_name: str = "env_step"
    invalid_action_penalty: float = 0.0


@dataclass
class RolloutStats:
    """Counters and wall-clock time of one :func:`run_branches` call (seconds; counts are plain integers)."""

    sampling_s: float = 0.0
    env_s: float = 0.0
    prompt_s: float = 0.0
    turns: int = 0
    valid_tool_calls: int = 0
    admissible_actions: int = 0
    admissible_known: int = 0
    admissible_known_valid: int = 0
    env_errors: int = 0
    sample_requests: int = 0
    prompt_tokens: int = 0  # summed prompt length of the sample requests (each billed once for its samples)
    sampled_tokens: int = 0
    template_restarts: int = 0

    def merge(self, other: RolloutStats) -> None:
        """Add ``other``'s counters and times to this one."""
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(frozen=True)
class TokenSequence:
    """One finished training sequence of a branch (see the template restarts in the module docstring).

    Attributes:
        tokens: the sequence's tokens (its prompt, then its turns, ending with the last sampled turn).
        logprobs: same length: the sampler's logprob on sampled tokens, 0 on context.
        sampled_mask: same length: True on tokens the segment sampled.
    """

    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    sampled_mask: tuple[bool, ...]

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(tokens int64, logprobs float32, sampled_mask bool)`` as numpy arrays."""
        return (
            np.asarray(self.tokens, dtype=np.int64),
            np.asarray(self.logprobs, dtype=np.float32),
            np.asarray(self.sampled_mask, dtype=bool),
        )


@dataclass
class BranchResult:
    """One played branch.

    Attributes:
        start_index: index of its start in the ``starts`` given to :func:`run_branches`.
        tokens: the current actor sequence: the start's token prefix, then this segment's turns (after a
            template restart: the fresh render, then the later turns; see :attr:`earlier`). When the branch
            can continue (``macro_boundary``), it ends with the next generation prompt: exactly the token prefix
            to store for the endpoint.
        prefix_len: ``len(start.token_prefix)``, or the length of the rendered opening prompt for a fresh start.
        logprobs: float32, same length as ``tokens``: the sampler's logprob on sampled tokens, 0 on context.
        sampled_mask: bool, same length: True on tokens this segment sampled (they carry the advantage).
        rewards: one reward per round of this segment: the env's, less ``invalid_action_penalty`` for an
            invalid action (see :class:`RolloutSettings`).
        actions: the actions sent to the env (``INVALID_ACTION`` for unreadable tool calls).
        history: the start's ``(action, observation)`` turns followed by this segment's.
        observations: the observation after each round of this segment.
        end_reason: see the module table.
        rounds: env steps in this segment; ``round_index``: env steps since reset at the end.
        invalid_actions: this segment's invalid actions (unreadable tool calls, and actions not in the admissible
            list shown when the env lists one): the count ``invalid_action_penalty`` is charged for.
        invalid_turns: for each round of this segment, whether its action was one of those invalid actions.
        snapshot: the env snapshot at the end (None after an error).
        error: the error message when ``end_reason == "error"``.
        turn_starts: for each round of this segment, where its sampled turn starts in its token sequence
            (= the length of the prompt it was sampled from).
        turn_seq: for each round, the index of its token sequence in :meth:`sequences` (0 until the first
            template restart).
        earlier: the finished sequences before the current one (``tokens`` ... ``sampled_mask``), one per
            template restart.
    """

    start_index: int
    tokens: list[int]
    prefix_len: int
    logprobs: list[float]
    sampled_mask: list[bool]
    rewards: list[float] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    history: list[tuple[str, str]] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)
    end_reason: EndReason | None = None
    rounds: int = 0
    round_index: int = 0
    snapshot: Any = None
    error: str | None = None
    valid_tool_calls: int = 0
    invalid_actions: int = 0
    won: bool = False
    turn_starts: list[int] = field(default_factory=list)
    admissible: tuple[str, ...] | None = None
    prompt: Any = None
    windows: list[PromptWindow] = field(default_factory=list)
    turn_seq: list[int] = field(default_factory=list)
    earlier: list[TokenSequence] = field(default_factory=list)
    invalid_turns: list[bool] = field(default_factory=list)

    @property
    def done(self) -> bool:
        """True once an end reason is set."""
        return self.end_reason is not None

    def privileged_state_at(self, rounds: int, at_start: str | None) -> str | None:
        """The env's critic-only :attr:`~tempo_rl.envs.Observation.privileged_state` after ``rounds`` rounds
        of this segment (``at_start``, the start state's, for 0 rounds; None past the rounds played)."""
        if rounds == 0:
            return at_start
        return self.observations[rounds - 1].privileged_state if rounds <= len(self.observations) else None

    @property
    def terminated(self) -> bool:
        """The branch reached a terminal MDP state (bootstrap value 0)."""
        return self.end_reason == "terminated"

    @property
    def truncated(self) -> bool:
        """The branch was cut while the future still has value (bootstrap with V_hat)."""
        return self.end_reason in ("max_rounds", "macro_boundary")

    @property
    def segment_reward(self) -> float:
        """r_n: the sum of this segment's env rewards."""
        return float(sum(self.rewards))

    @property
    def sampled_logprob_sum(self) -> float:
        """Sum of the sampler logprobs of this segment's sampled tokens, over all its sequences."""
        return float(sum(lp for q in self.sequences() for lp, m in zip(q.logprobs, q.sampled_mask) if m))

    @property
    def restarts(self) -> int:
        """Template restarts in this segment (= ``len(sequences()) - 1``)."""
        return len(self.earlier)

    def current(self) -> TokenSequence:
        """The current (last) token sequence, as a :class:`TokenSequence`."""
        return TokenSequence(tuple(self.tokens), tuple(self.logprobs), tuple(self.sampled_mask))

    def sequences(self) -> list[TokenSequence]:
        """Every training sequence of this branch: one per template restart, then the current one."""
        return [*self.earlier, self.current()]

    def sequence(self, index: int) -> TokenSequence:
        """Sequence ``index`` of :meth:`sequences` (the current one for ``index == len(earlier)``)."""
        if not 0 <= index <= len(self.earlier):
            raise IndexError(f"branch has {len(self.earlier) + 1} token sequences, no index {index}")
        return self.earlier[index] if index < len(self.earlier) else self.current()

    def turn_values(self, per_round: Sequence[float]) -> list[np.ndarray]:
        """Spread one number per round over the tokens of :meth:`sequences`: in each sequence, every token from
        round r's turn start (:attr:`turn_starts`) up to the next turn's start carries ``per_round[r]``; the
        tokens before a sequence's first turn carry 0. A sampled token thus carries its own round's number
        (a step-level advantage), while context tokens, masked out of the loss, are never read.

        Raises:
            ValueError: ``per_round`` does not hold one number per played round.
        """
        if len(per_round) != self.rounds:
            raise ValueError(f"per_round has {len(per_round)} numbers for a branch of {self.rounds} rounds")
        out = [np.zeros(len(q.tokens), dtype=np.float64) for q in self.sequences()]
        for r in range(self.rounds):
            seq, start = self.turn_seq[r], self.turn_starts[r]
            same = [i for i in range(r + 1, self.rounds) if self.turn_seq[i] == seq]
            end = self.turn_starts[same[0]] if same else len(out[seq])
            out[seq][start:end] = per_round[r]
        return out

    def state_keys(self) -> list[str]:
        """For each round of this segment, a key of the state its action was taken in: the env's hidden-state
        fingerprint where the snapshot recorded one (:meth:`~tempo_rl.envs.ReplayableEnv.state_fingerprint`),
        else the digest of the observation text and admissible actions shown then. Equal keys = the same
        state (GiGPO's anchor states). Needs the final :attr:`snapshot` (None after an error).
        """
        snap = self.snapshot
        if snap is None:
            raise ValueError("a branch without a final snapshot (it ended in an error) has no state keys")
        first = snap.round_index - self.rounds
        states = snap.state_digests
        keys = []
        for r in range(first, first + self.rounds):
            state = states[r] if states is not None else None
            keys.append(f"state:{state}" if state is not None else f"obs:{snap.observation_digests[r]}")
        return keys

    def restart(self, prompt: PromptState) -> None:
        """End the current sequence and start a new one from ``prompt`` (a fresh render: all context)."""
        self.earlier.append(self.current())
        self.prompt = prompt
        self.tokens = list(prompt.tokens)
        self.logprobs = [0.0] * len(self.tokens)
        self.sampled_mask = [False] * len(self.tokens)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(tokens int64, logprobs float32, sampled_mask bool)`` as numpy arrays."""
        return (
            np.asarray(self.tokens, dtype=np.int64),
            np.asarray(self.logprobs, dtype=np.float32),
            np.asarray(self.sampled_mask, dtype=bool),
        )


def _won(result: StepResult) -> bool:
    won = result.info.get("won") if isinstance(result.info, Mapping) else None
    if won is None:
        return bool(result.terminated and result.reward > 0)
    return bool(won)


async def run_branches(
    starts: Sequence[RolloutStart],
    envs: Sequence[Sequence[Any]],
    *,
    sampler: SamplingClient,
    chat: Any,
    settings: RolloutSettings,
    pool: Any,
    parser: ToolCallParser,
) -> tuple[list[list[BranchResult]], RolloutStats]:
    """Play ``len(envs[i])`` branches from each start ``starts[i]`` in lockstep rounds.

    Args:
        starts: start states (see :class:`RolloutStart`); an empty ``token_prefix`` means a fresh episode (the
            opening prompt is rendered).
        envs: for each start, its live branch envs, all at exactly the start state (from
            :func:`tempo_rl.envs.restore_branches`).
        sampler: the actor's sampling client.
        chat: the :class:`~tempo_rl.rollout.renderer.ChatRenderer` of the actor.
        settings: see :class:`RolloutSettings`.
        pool: the env worker pool (``await pool.call(env, "step", action)``).
        parser: the single-tool-call parser (:class:`~tempo_rl.rollout.tool_call.ToolCallParser`).

    Returns:
        ``(results, stats)``: ``results[i][j]`` is branch j of start i.
    """
    if len(starts) != len(envs):
        raise ValueError(f"got {len(starts)} starts but {len(envs)} env groups; pass one group per start")
    if not (math.isfinite(settings.invalid_action_penalty) and settings.invalid_action_penalty >= 0):
        raise ValueError(
            f"settings.invalid_action_penalty must be a finite number >= 0, got {settings.invalid_action_penalty!r}"
            " (a penalty is subtracted: pass 0.1, not -0.1)"
        )
    stats = RolloutStats()
    branches: list[list[BranchResult]] = []
    live: list[tuple[BranchResult, Any]] = []
    for i, (start, group) in enumerate(zip(starts, envs)):
        t0 = time.perf_counter()
        opening = _current_observation(group[0], start) if group else None
        if start.token_prefix:
            prompt = start.prompt_state()
        else:
            assert opening is not None
            prompt = chat.start(
                build_actor_messages(
                    opening,
                    tool_name=settings.tool_name,
                    remaining_steps=_remaining(settings, start.snapshot.round_index),
                )
            )
        stats.prompt_s += time.perf_counter() - t0
        prefix = list(prompt.tokens)
        row = []
        for env in group:
            b = BranchResult(
                start_index=i,
                tokens=list(prefix),
                prefix_len=len(prefix),
                logprobs=[0.0] * len(prefix),
                sampled_mask=[False] * len(prefix),
                history=[(str(a), str(o)) for a, o in start.history],
                round_index=start.snapshot.round_index,
                admissible=opening.admissible_actions if opening is not None else None,
                prompt=prompt,
            )
            row.append(b)
            live.append((b, env))
        branches.append(row)

    max_new = settings.sampling.max_tokens
    round_no = 0
    while live:
        # token budget: a turn that could not fit ends the branch before sampling
        still = []
        for b, env in live:
            if len(b.tokens) + max_new > settings.max_trajectory_tokens:
                b.end_reason = "token_budget"
                b.snapshot = _snapshot(env)
            else:
                still.append((b, env))
        live = still
        if not live:
            break
        # one request per distinct prompt (branches of a start share their first prompt)
        groups: dict[tuple[int, int], list[tuple[BranchResult, Any]]] = {}
        for b, env in live:
            key = (b.start_index, -1) if b.rounds == 0 else (b.start_index, id(b))
            groups.setdefault(key, []).append((b, env))
        t0 = time.perf_counter()
        round_no += 1
        responses = await asyncio.gather(
            *(
                sampler.sample_async(
                    members[0][0].tokens, len(members), _request_params(settings.sampling, round_no, k)
                )
                for k, members in enumerate(groups.values())
            )
        )
        stats.sampling_s += time.perf_counter() - t0
        stats.sample_requests += len(groups)
        stats.prompt_tokens += sum(len(members[0][0].tokens) for members in groups.values())
        actions: list[str] = []
        order: list[tuple[BranchResult, Any, SampledSequence]] = []
        for members, response in zip(groups.values(), responses):
            if len(response.sequences) != len(members):
                raise RuntimeError(
                    f"the sampler returned {len(response.sequences)} sequences for num_samples={len(members)}"
                )
            for (b, env), seq in zip(members, response.sequences):
                order.append((b, env, seq))
        for b, _env, seq in order:
            b.turn_starts.append(len(b.tokens))
            b.turn_seq.append(len(b.earlier))
            b.windows.append(PromptWindow.of(b.prompt))
            b.tokens.extend(seq.tokens)
            b.logprobs.extend(float(x) for x in seq.logprobs)
            b.sampled_mask.extend([True] * len(seq.tokens))
            stats.sampled_tokens += len(seq.tokens)
            call = parser.parse(seq.text)
            actions.append(call.action if call.valid else INVALID_ACTION)
            if call.valid:
                b.valid_tool_calls += 1
                stats.valid_tool_calls += 1
            stats.turns += 1
        t0 = time.perf_counter()
        outcomes = await asyncio.gather(
            *(pool.call(env, "step", action) for (_b, env, _s), action in zip(order, actions)),
            return_exceptions=True,
        )
        stats.env_s += time.perf_counter() - t0
        next_live = []
        for (b, env, seq), action, outcome in zip(order, actions, outcomes):
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, Exception):
                    raise outcome
                b.end_reason = "error"
                b.error = f"{type(outcome).__name__}: {outcome}"
                stats.env_errors += 1
                continue
            result: StepResult = outcome
            invalid = action == INVALID_ACTION
            if b.admissible is not None:
                stats.admissible_known += 1
                if action != INVALID_ACTION:
                    stats.admissible_known_valid += 1
                if action in b.admissible:
                    stats.admissible_actions += 1
                else:
                    invalid = True
            b.admissible = result.observation.admissible_actions
            b.actions.append(action)
            b.invalid_actions += invalid
            b.invalid_turns.append(bool(invalid))
            b.rewards.append(float(result.reward) - (settings.invalid_action_penalty if invalid else 0.0))
            b.observations.append(result.observation)
            b.history.append((action, result.observation.text))
            b.rounds += 1
            b.round_index += 1
            if result.terminated:
                b.end_reason = "terminated"
                b.won = _won(result)
            elif result.truncated or b.round_index >= settings.max_rounds:
                b.end_reason = "max_rounds"
            elif settings.segment_rounds is not None and b.rounds >= settings.segment_rounds:
                b.end_reason = "macro_boundary"
            status = None if action != INVALID_ACTION else "invalid tool call: the step was used"
            if b.end_reason in (None, "macro_boundary"):
                t1 = time.perf_counter()
                text = format_observation(
                    result.observation,
                    remaining_steps=_remaining(settings, b.round_index),
                    status=status,
                )
                ext = chat.extend(b.prompt, seq.tokens, [{"role": OBSERVATION_ROLE, "content": text}])
                stats.prompt_s += time.perf_counter() - t1
                if ext.restarted:
                    # the template rewrote history: no token-exact extension exists. The current sequence
                    # ends with the sampled turn; the branch goes on in a new sequence from the fresh render
                    # (counted), so nothing the policy sampled is re-tokenized.
                    b.restart(ext.state)
                    stats.template_restarts += 1
                else:
                    b.prompt = ext.state
                    b.tokens.extend(ext.appended)
                    b.logprobs.extend([0.0] * len(ext.appended))
                    b.sampled_mask.extend([False] * len(ext.appended))
            if b.end_reason is None:
                next_live.append((b, env))
            else:
                b.snapshot = _snapshot(env)
        live = next_live
    return branches, stats


def _request_params(params: SamplingParams, round_no: int, k: int) -> SamplingParams:
    """A distinct, reproducible seed per request (same base seed -> same run; never two requests alike)."""
    if params.seed is None:
        return params
    seed = (params.seed * 1_000_003 + round_no * 10_007 + k) % (2**31 - 1)
    return dataclasses.replace(params, seed=seed)


def _remaining(settings: RolloutSettings, round_index: int) -> int | None:
    return max(0, settings.max_rounds - round_index) if settings.show_remaining_steps else None


def _snapshot(env: Any) -> Any:
    snap = getattr(env, "snapshot", None)
    return snap() if callable(snap) else None


def _current_observation(env: Any, start: RolloutStart) -> Observation:
    last = getattr(env, "last_observation", None)
    if isinstance(last, Observation):
        return last
    snap = start.snapshot
    return Observation(text=snap.last_observation, admissible_actions=snap.last_admissible)
