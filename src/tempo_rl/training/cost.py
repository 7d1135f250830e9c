"""What a run costs: tokens processed and env steps, counted from what the trainer sends (``cost/*`` metrics).

Tokens processed = prefill + sampled + trained, each counted where the trainer calls the backend, so the same
figures come out on the local backend, PyTRIO and Tinker:

* **prefill** (``cost/prefill_tokens``): the prompt of every ``sample_async`` request (one request for all
  ``num_samples`` of a prompt: the prompt is billed once), and every token of every ``compute_logprobs`` call
  (the prefix correction's recomputation and the KL anchor's reference logprobs, each a forward pass over its
  tokens). A prefix cache on the service's side does not reduce it: this is what the service is asked to
  process (the local backend reports its own ``sampling/prefill_tokens``, after its prefix cache, beside it);
* **sampled** (``cost/sampled_tokens``): the completion tokens returned;
* **trained** (``cost/trained_tokens``): ``len(model_input)`` of every Datum sent to ``forward_backward``;
* ``cost/tokens`` = prefill + sampled + trained;
* ``cost/env_steps``: actions sent to an env by a training rollout (``rollout/turns``), the Monte Carlo
  critic's rollouts included. Replays that restore a stored state and the resets of fresh games are not
  counted (they re-execute steps already counted, or take none).

Every figure is cumulative over the run (kept in :attr:`TrainerState.cost
<tempo_rl.training.trainer.TrainerState>`, so a resumed run goes on counting), and covers the warm-up, TD and
GRPO updates, critic calls included. Not counted: the supervised warm start (it runs before the first update;
see ``warmstart/*``) and evaluation, which is kept apart in ``eval/cost_tokens`` (prefill + sampled) and
``eval/cost_env_steps`` (cumulative too; logged once the run has evaluated), so that how often a run evaluates
changes no ``cost/*`` figure.

A critic that does backend or env work of its own beyond the samples it returns (the Monte Carlo critic's
rollouts) reports it through ``cost_counters()``: a mapping with cumulative ``prefill_tokens``,
``sampled_tokens``, ``env_steps`` (and optionally ``queries``, ``rollouts``), read before and after each batch
of estimates; the difference is added here and shown as ``critic/mc_*``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tempo_rl.backends.types import Datum
    from tempo_rl.critic.base import CriticEstimates
    from tempo_rl.rollout.branches import RolloutStats

__all__ = ["CostLedger", "critic_cost_counters"]

#: The counters a critic's ``cost_counters()`` reports, as (its key, the ledger's field).
_CRITIC_KEYS = (
    ("prefill_tokens", "critic_prefill_tokens"),
    ("sampled_tokens", "critic_sampled_tokens"),
    ("env_steps", "critic_env_steps"),
    ("queries", "critic_queries"),
    ("rollouts", "critic_rollouts"),
)


def critic_cost_counters(critic: Any) -> dict[str, int] | None:
    """The cumulative ``cost_counters()`` of ``critic`` as ints, or None when it has none."""
    fn = getattr(critic, "cost_counters", None)
    if not callable(fn):
        return None
    raw = fn()
    if not isinstance(raw, Mapping):
        raise TypeError(
            f"{type(critic).__name__}.cost_counters() must return a mapping, got {type(raw).__name__}"
        )
    return {key: int(raw.get(key, 0)) for key, _ in _CRITIC_KEYS}


@dataclass
class CostLedger:
    """Cumulative counts of one run (plain ints; see the module docstring for what each counts).

    ``critic_*`` fields are the part of ``prefill_tokens`` / ``sampled_tokens`` / ``env_steps`` done by a
    critic's own rollouts (``cost_counters()``); ``eval_*`` are kept apart and count in no other field.
    """

    prefill_tokens: int = 0
    sampled_tokens: int = 0
    trained_tokens: int = 0
    env_steps: int = 0
    critic_prefill_tokens: int = 0
    critic_sampled_tokens: int = 0
    critic_env_steps: int = 0
    critic_queries: int = 0
    critic_rollouts: int = 0
    eval_prefill_tokens: int = 0
    eval_sampled_tokens: int = 0
    eval_env_steps: int = 0

    @property
    def tokens(self) -> int:
        """Tokens processed: prefill + sampled + trained."""
        return self.prefill_tokens + self.sampled_tokens + self.trained_tokens

    def add_rollout(self, stats: RolloutStats, *, evaluation: bool = False) -> None:
        """A rollout's sample requests (``stats.prompt_tokens``, ``stats.sampled_tokens``) and env steps
        (``stats.turns``); into the ``eval_*`` fields with ``evaluation=True``."""
        if evaluation:
            self.eval_prefill_tokens += int(stats.prompt_tokens)
            self.eval_sampled_tokens += int(stats.sampled_tokens)
            self.eval_env_steps += int(stats.turns)
        else:
            self.prefill_tokens += int(stats.prompt_tokens)
            self.sampled_tokens += int(stats.sampled_tokens)
            self.env_steps += int(stats.turns)

    def add_estimates(self, estimates: Iterable[CriticEstimates]) -> None:
        """The sample requests behind critic estimates: each estimate with samples is one request, its prompt
        billed once (``len(samples[0].prompt_tokens)``) and every sample's completion tokens."""
        for est in estimates:
            if est.samples:
                self.prefill_tokens += len(est.samples[0].prompt_tokens)
                self.sampled_tokens += sum(len(s.sequence.tokens) for s in est.samples)

    def add_critic_work(self, before: Mapping[str, int], after: Mapping[str, int]) -> None:
        """What a critic's own rollouts did between two :func:`critic_cost_counters` readings."""
        delta = {key: int(after[key]) - int(before[key]) for key, _ in _CRITIC_KEYS}
        if any(v < 0 for v in delta.values()):
            raise ValueError(
                f"a critic's cost_counters() went down ({before} -> {after}): they must be cumulative"
            )
        for key, name in _CRITIC_KEYS:
            setattr(self, name, getattr(self, name) + delta[key])
        self.prefill_tokens += delta["prefill_tokens"]
        self.sampled_tokens += delta["sampled_tokens"]
        self.env_steps += delta["env_steps"]

    def add_logprob_calls(self, lengths: Iterable[int]) -> None:
        """``compute_logprobs`` calls over sequences of these lengths (prefill: a forward pass over each)."""
        self.prefill_tokens += sum(int(n) for n in lengths)

    def add_datums(self, datums: Sequence[Datum]) -> None:
        """Datums sent to ``forward_backward``: ``len(model_input)`` of each."""
        self.trained_tokens += sum(len(d.model_input) for d in datums)

    def metrics(self, *, critic: bool = False) -> dict[str, float]:
        """``cost/*``, ``eval/cost_*`` once evaluation has cost anything, and, with ``critic=True``, the critic's
        own rollouts as ``critic/mc_*``."""
        out = {
            "cost/prefill_tokens": float(self.prefill_tokens),
            "cost/sampled_tokens": float(self.sampled_tokens),
            "cost/trained_tokens": float(self.trained_tokens),
            "cost/tokens": float(self.tokens),
            "cost/env_steps": float(self.env_steps),
        }
        if self.eval_env_steps or self.eval_prefill_tokens:
            out["eval/cost_tokens"] = float(self.eval_prefill_tokens + self.eval_sampled_tokens)
            out["eval/cost_env_steps"] = float(self.eval_env_steps)
        if critic:
            out.update(
                {
                    "critic/mc_queries": float(self.critic_queries),
                    "critic/mc_rollouts": float(self.critic_rollouts),
                    "critic/mc_env_steps": float(self.critic_env_steps),
                    "critic/mc_prefill_tokens": float(self.critic_prefill_tokens),
                    "critic/mc_sampled_tokens": float(self.critic_sampled_tokens),
                }
            )
        return out

    def to_json(self) -> dict[str, int]:
        """The counters by name."""
        return {f.name: int(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> CostLedger:
        """Inverse of :meth:`to_json`; a checkpoint written before these counters existed gives zeros."""
        if not data:
            return cls()
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown cost counters {sorted(unknown)} in the checkpoint's trainer state")
        return cls(**{k: int(v) for k, v in data.items()})
