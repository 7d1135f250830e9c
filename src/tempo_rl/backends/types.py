"""The model-backend contract, shaped like PyTRIO (= Tinker): the whole thing on one screen.

A *sampling client* generates completions with exact per-token logprobs; a *training client* takes
:class:`Datum` batches through ``forward_backward`` with one of the built-in losses, then ``optim_step``.
The local torch backend, PyTRIO and Tinker all implement these protocols (the latter two through thin
adapters), so the trainer never knows which one it drives.

Loss semantics (per datum, summed over target positions t; ``A`` = advantages, ``lp_old`` = sampler logprobs):

* ``importance_sampling``: ``-sum_t exp(lp_theta_t - lp_old_t) * A_t``
* ``ppo``: ``-sum_t min(rho_t * A_t, clip(rho_t, low, high) * A_t)``, ``rho_t = exp(lp_theta_t - lp_old_t)``,
  with ratio bounds ``loss_fn_config = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}``
* ``cross_entropy``: ``-sum_t w_t * lp_theta_t`` (``weights`` default 1)

Datum layout (PyTRIO's): ``model_input`` = tokens[:-1]; ``loss_fn_inputs["target_tokens"]`` = tokens[1:]
(int64); ``logprobs`` / ``advantages`` / ``weights`` are float32 arrays of the same length. Context tokens
carry logprob 0 and advantage 0; sampled tokens carry their sampled logprob and the advantage. The one-token
shift is done by tempo-rl (see :mod:`tempo_rl.rollout.datums`), never by the service.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "AdamParams",
    "Datum",
    "ForwardBackwardOutput",
    "LossFn",
    "SampleResult",
    "SampledSequence",
    "SamplingClient",
    "SamplingParams",
    "Tokenizer",
    "TrainingClient",
]

LossFn = Literal["importance_sampling", "ppo", "cross_entropy"]


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings (PyTRIO's ``SamplingParams``). ``stop`` holds token ids or strings."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    stop: tuple[int, ...] | tuple[str, ...] | None = None


@dataclass(frozen=True)
class SampledSequence:
    """One completion: its token ids, the sampler's logprob of each (natural log), text and stop reason."""

    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    stop_reason: str = "stop"  # "stop" (hit a stop token/string) or "length" (max_tokens)


@dataclass(frozen=True)
class SampleResult:
    """The ``num_samples`` completions of one prompt."""

    sequences: tuple[SampledSequence, ...]


@dataclass(frozen=True)
class AdamParams:
    """Adam settings with PyTRIO's names and defaults."""

    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0  # 0 = no clipping

    @classmethod
    def of(cls, source: Any) -> AdamParams:
        """The settings of any object with these six attribute names (an optimiser config, a service's own
        ``AdamParams``)."""
        return cls(**{name: getattr(source, name) for name in cls.__dataclass_fields__})

    def as_dict(self) -> dict[str, float]:
        """The six settings by name (to build a service's ``AdamParams``)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class Datum:
    """One training sequence in PyTRIO's format (already shifted by one token).

    Attributes:
        model_input: input token ids (``tokens[:-1]``).
        loss_fn_inputs: ``target_tokens`` (int64) and, depending on the loss, ``logprobs``, ``advantages``,
            ``weights`` (float32), each of length ``len(model_input)``.
    """

    model_input: tuple[int, ...]
    loss_fn_inputs: Mapping[str, np.ndarray]
    tags: Mapping[str, str] = field(default_factory=dict)  # e.g. {"role": "actor"}; never sent to a service


@dataclass(frozen=True)
class ForwardBackwardOutput:
    """What ``forward_backward`` reports: the summed loss and backend metrics (token counts, etc.)."""

    loss: float
    metrics: Mapping[str, float] = field(default_factory=dict)


@runtime_checkable
class Tokenizer(Protocol):
    """The subset of a Hugging Face tokenizer that tempo-rl uses."""

    eos_token_id: int | None

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...

    def __len__(self) -> int: ...


@runtime_checkable
class SamplingClient(Protocol):
    """Generates completions with exact per-token logprobs."""

    def sample(self, prompt: Sequence[int], num_samples: int, params: SamplingParams) -> SampleResult: ...

    async def sample_async(
        self, prompt: Sequence[int], num_samples: int, params: SamplingParams
    ) -> SampleResult: ...

    def compute_logprobs(self, tokens: Sequence[int]) -> list[float | None]:
        """Logprob of each token given its prefix (the first is None), under this client's weights."""
        ...

    async def compute_logprobs_async(self, tokens: Sequence[int]) -> list[float | None]: ...


@runtime_checkable
class TrainingClient(Protocol):
    """Accumulates gradients from Datum batches and applies optimizer steps."""

    def forward_backward(
        self, datums: Sequence[Datum], loss_fn: LossFn, loss_fn_config: Mapping[str, Any] | None = None
    ) -> ForwardBackwardOutput: ...

    def optim_step(self, adam_params: AdamParams) -> None: ...

    def save_state(self, name: str) -> str:
        """Save weights + optimizer state; return a path/URI accepted by :meth:`load_state`."""
        ...

    def load_state(self, path: str) -> None: ...

    def save_weights_and_get_sampling_client(self, name: str | None = None) -> SamplingClient: ...

    def get_tokenizer(self) -> Tokenizer: ...
