"""Training configuration: pydantic models, TOML loading and ``--set key=value`` overrides.

One :class:`TrainConfig` describes a whole run (environment, backend, algorithm, sampling, optimiser, store,
checkpoints). It is loaded from a TOML file whose tables mirror the model (``[env]``, ``[backend]``,
``[tempo]``, ...), then command-line overrides are applied with dotted paths, e.g.
``--set tempo.branches=8 --set optim.learning_rate=5e-4``. Every invalid value fails with a
:class:`ConfigError` (a ``ValueError``) naming the field and the fix.

TEMPO's letters map to these fields:

=====  =================================  ==========================================================
H      ``tempo.macro_rounds``             rounds (env steps) per macro-step
N      ``tempo.branches``                 branches per start state (the actor's GRPO group)
K      ``tempo.critic_samples``           critic estimates per start state (the critic's group)
E      ``tempo.endpoint_samples``         critic estimates averaged into each endpoint value V_hat
T      ``tempo.max_rounds``               episode step limit (a multiple of H)
R_max  ``tempo.r_max``                    the range of the remaining return (normalises critic errors)
=====  =================================  ==========================================================
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tempo_rl.backends.config import BackendConfig, LocalBackendConfig
from tempo_rl.backends.types import AdamParams, SamplingParams
from tempo_rl.envs.games import GAME_KWARG
from tempo_rl.envs.snapshot import EnvSpec

__all__ = [
    "ADAM_EPS",
    "CRITIC_LEVELS",
    "EVAL_SEED_START",
    "MODE_SETTINGS",
    "READ_BY_EVERY_ALGORITHM",
    "ConfigError",
    "EnvConfig",
    "GigpoConfig",
    "GrpoConfig",
    "KLConfig",
    "OptimConfig",
    "RunConfig",
    "SamplingConfig",
    "StoreConfig",
    "TempoConfig",
    "TrainConfig",
    "WarmStartConfig",
    "WorkersConfig",
    "apply_overrides",
    "config_for",
    "config_from",
    "configs_for",
    "load_config",
    "parse_override",
    "read_config_file",
    "settings_without_effect",
    "validate_config",
]


#: The critic's answer grid: L evenly spaced values of [0, R_max]; with 2 each answer is one binary token and
#: the expected-answer critic's V_hat is the probability of R_max (measured against 11 levels: docs/concepts.md)
CRITIC_LEVELS = 2

#: Adam's epsilon: a weight's step is lr * m_hat / (sqrt(v_hat) + eps), so a weight whose gradient RMS is far
#: below eps moves by much less than lr. Measured on the main job against the services' 1e-12, which moves every
#: weight by about lr however faint its gradient: at 1e-12 one seed's learnt walk broke for good (docs/results.md)
ADAM_EPS = 1e-6


#: the reset seed of the first evaluation game (``EVAL_SEED_START + j``), far from the training seeds
EVAL_SEED_START = 1_000_000

#: the metrics sinks of ``run.loggers``
LOGGERS = ("console", "swanlab", "wandb")


class ConfigError(ValueError):
    """An invalid training configuration; the message names the field (dotted path) and the fix."""


class _Model(BaseModel):
    # allow_inf_nan=False: every float field rejects inf and NaN (optim.learning_rate=inf)
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _integers_are_integers(cls, value: Any, info: ValidationInfo) -> Any:
        """An int field takes an int, not a float that happens to be whole (``tempo.td_updates=1e24``)."""
        if isinstance(value, float) and info.field_name is not None:
            annotation = cls.model_fields[info.field_name].annotation
            if annotation in (int, int | None):
                raise ValueError(
                    f"must be an integer, got {value!r}; write it without a decimal point or exponent"
                )
        return value


class EnvConfig(_Model):
    """Which environment to train on and which reset seeds count as training / evaluation games.

    Fresh episode starts use seeds ``train_seed_start + i`` (``i`` = 0, 1, 2, ...: every fresh game a new one);
    evaluation uses ``EVAL_SEED_START + j`` (1,000,000 + j, apart from the training
    seeds) for ``j < run.eval_episodes``. With
    ``games_dir`` each game is a file, passed to the env as its ``game_file`` keyword argument.
    """

    name: str = Field(default="keydoor", min_length=1, description="registered env name (tempo_rl.envs)")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="env constructor keyword arguments")
    train_seed_start: int = Field(
        default=0, ge=0, description="reset seed of the first fresh training game; the i-th uses this + i"
    )
    games_dir: str | None = Field(default=None, description="folder of game files (one env per file)")
    eval_games_dir: str | None = Field(
        default=None, description="folder of evaluation game files (None: evaluation games are reset seeds)"
    )
    invalid_action_penalty: float = Field(
        default=0.0,
        ge=0.0,
        allow_inf_nan=False,
        description=(
            "p, subtracted from a round's reward for an invalid action: an unreadable tool call, or an action "
            "not in the admissible list the env showed (when it shows one); an episode's return is then "
            "1[won] - p * invalid actions. The reference's chapter-8 GRPO uses 0.1; 0 keeps TEMPO's binary "
            "reward (R_max = 1). Returns can then fall below 0 while critic values stay in [0, tempo.r_max]. "
            "It applies to training and evaluation rollouts alike (eval/return_mean), never to success"
        ),
    )

    def spec(self) -> EnvSpec:
        """The :class:`EnvSpec` used to build (and to restore) every env of the run."""
        return EnvSpec(name=self.name, kwargs=dict(self.kwargs))

    def train_seed(self, index: int) -> int:
        """The reset seed of the ``index``-th fresh training game."""
        return self.train_seed_start + index

    def _game_files(self, folder: str) -> tuple[str, ...]:
        from tempo_rl.envs.games import NoGamesError, find_games, game_file_pattern

        try:
            return find_games(folder, game_file_pattern(self.name))
        except NoGamesError as exc:
            raise ConfigError(
                f"env: {exc}; point env.games_dir / env.eval_games_dir at a folder of games (e.g. an ALFWorld "
                "json_2.1.1/<split> folder)"
            ) from None

    def train_game(self, index: int) -> tuple[EnvSpec, int]:
        """``(spec, seed)`` of the ``index``-th fresh training game.

        With ``games_dir`` the game is file ``index mod n`` of the sorted game files there (the env's ``game_files`` glob), passed
        as ``kwargs["game_file"]``; otherwise every game is ``spec()`` and the seed picks the instance.
        """
        seed = self.train_seed(index)
        if self.games_dir is None:
            return self.spec(), seed
        files = self._game_files(self.games_dir)
        return EnvSpec(name=self.name, kwargs={**self.kwargs, GAME_KWARG: files[index % len(files)]}), seed

    def eval_game(self, index: int) -> tuple[EnvSpec, int]:
        """``(spec, seed)`` of the ``index``-th evaluation game (``eval_games_dir`` or seeds from
        :data:`EVAL_SEED_START`)."""
        seed = EVAL_SEED_START + index
        folder = self.eval_games_dir or None
        if folder is None:
            return self.spec(), seed
        files = self._game_files(folder)
        return EnvSpec(name=self.name, kwargs={**self.kwargs, GAME_KWARG: files[index % len(files)]}), seed


class SamplingConfig(_Model):
    """Sampling settings of the actor and the critic (token counts are model tokens)."""

    temperature: float = Field(
        default=1.0,
        gt=0.0,
        description="sampling temperature of the actor's turns and the critic's sampled answers",
    )
    max_tokens: int = Field(default=512, ge=1, description="max sampled tokens per actor turn")
    critic_max_tokens: int = Field(
        default=512,
        ge=1,
        description="sampling.critic_answer = 'sampled': max sampled tokens per critic answer (its reasoning and "
        "<value>v</value>)",
    )
    critic_max_prompt_tokens: int = Field(
        default=8192,
        ge=16,
        description="token budget of one critic prompt; a state whose prompt is longer gets no estimate (counted)",
    )
    critic_answer: Literal["sampled", "constrained", "expected"] = Field(
        default="expected",
        description=(
            "how the generative critic answers (tempo_rl.critic.generative): 'expected' (its value is the exact "
            "expectation over the answers <value>0</value> and <value>R_max</value>, trained by their log-loss; "
            "the local backend's default), 'sampled' (K free completions, strictly parsed; the default and only "
            "mode of PyTRIO and Tinker) or 'constrained' (the K answers drawn from the model's distribution "
            "restricted to those valid answers; local backend)"
        ),
    )
    max_trajectory_tokens: int = Field(
        default=12_000, ge=16, description="token budget of one actor sequence"
    )
    show_remaining_steps: bool = Field(
        default=True, description="show the remaining step budget (T - round) to the actor and the critic"
    )
    eval_temperature: float = Field(
        default=0.01, gt=0.0, description="sampling temperature of evaluation episodes (0.01: near-greedy)"
    )

    def actor_params(
        self, stop: tuple[int, ...] | None, *, temperature: float | None = None, seed: int | None = None
    ) -> SamplingParams:
        """The actor's :class:`~tempo_rl.backends.types.SamplingParams` for one assistant turn (``max_tokens``,
        ``temperature`` unless given; top-p 1: RL samples from the whole distribution), stopping at ``stop``
        (the tokenizer's EOS)."""
        return SamplingParams(
            max_tokens=self.max_tokens,
            temperature=self.temperature if temperature is None else temperature,
            seed=seed,
            stop=stop,
        )

    def critic_params(self, stop: tuple[int, ...] | None) -> SamplingParams:
        """The critic's sampling parameters (``critic_max_tokens``, at the actor's ``temperature``), stopping at
        ``stop``."""
        return SamplingParams(max_tokens=self.critic_max_tokens, temperature=self.temperature, stop=stop)


class TempoConfig(_Model):
    """TEMPO's macro-step settings (letters as in the module docstring)."""

    macro_rounds: int = Field(default=10, ge=1, description="H, env steps (rounds) per macro-step")
    branches: int = Field(
        default=4, ge=2, description="N, branches rolled out from each start state (the actor's GRPO group)"
    )
    critic_samples: int = Field(
        default=4,
        ge=1,
        description="K, critic estimates of each start state (the critic's group; sampled and constrained answers)",
    )
    critic: Literal["generative", "oracle", "monte_carlo"] = Field(
        default="generative",
        description=(
            "who values states: 'generative' (TEMPO: the policy model prompted as a value estimator, trained "
            "with the actor), 'oracle' (the env's exact optimal value V*, ReplayableEnv.oracle_value: does the "
            "setup learn with a perfect critic?) or 'monte_carlo' (VinePPO: the mean "
            "return of critic_rollouts policy rollouts from the restored state; their env steps and tokens are "
            "extra cost). The last two are not trained"
        ),
    )
    critic_weights: Literal["shared", "own"] = Field(
        default="shared",
        description=(
            "generative critic: 'shared' (TEMPO as published: one model answers as actor and as critic, and "
            "every optimiser step trains both) or 'own' (the critic is a second copy of the model, initialised "
            "from the warm-started weights: critic Datums step only its weights and actor Datums only the "
            "actor's, so the critic's steps cannot move the policy). 'own' needs the local backend"
        ),
    )
    critic_rollouts: int = Field(
        default=4, ge=1, description="M, monte_carlo critic: policy rollouts averaged per valued state"
    )
    endpoint_samples: int = Field(
        default=2,
        ge=1,
        description="E, critic estimates averaged into each endpoint value V_hat (sampled and constrained answers)",
    )
    max_rounds: int = Field(
        default=50, ge=1, description="T, the episode's step limit in env steps (a multiple of H)"
    )
    states_per_batch: int = Field(default=4, ge=1, description="start states per TD update")
    fresh_share: float = Field(
        default=0.25, ge=0.0, le=1.0, description="share of fresh starts per TD update"
    )
    warmup_updates: int = Field(
        default=4,
        ge=0,
        description="the most warm-up updates (on full episodes) before TD; the hand-over gate may end it sooner",
    )
    warmup_games_per_batch: int = Field(
        default=4, ge=1, description="fresh games per warm-up update, each played by N branches to the end"
    )
    warmup_trains_actor: bool = Field(
        default=True,
        description=(
            "warm-up episodes also train the actor, each branch with its group's GRPO advantage "
            "R_n - mean(R) (the warm-up plays GRPO's batch); false: the actor waits for TD"
        ),
    )
    handover_corr: float | None = Field(
        default=0.5,
        ge=-1.0,
        le=1.0,
        description=(
            "TD begins after the first warm-up update at which the critic's correlation with the Monte Carlo "
            "returns of that update's fresh episodes, read before it trains on them (critic/value_corr), "
            "averaged over the last tempo.handover_window warm-up updates, reaches this; at the latest after "
            "tempo.warmup_updates. None: always after tempo.warmup_updates"
        ),
    )
    handover_window: int = Field(
        default=2, ge=1, description="warm-up updates whose critic readings the hand-over gate averages"
    )
    warmup_substeps: int | None = Field(
        default=None,
        ge=1,
        description=(
            "optimiser steps per warm-up update: its Datums are split into this many "
            "minibatches, each its own forward_backward + optim_step; None = optim.substeps (TD updates always "
            "use optim.substeps)"
        ),
    )
    warmup_replay: bool = Field(
        default=False,
        description=(
            "keep the warm-up's Monte Carlo critic examples and rehearse them: every critic step also fits as "
            "many of them (drawn without replacement; all of them while they are fewer) as it has new examples, "
            "a warm-up step its batch's, a TD step its bootstrapped ones (a batch whose episodes were all lost "
            "no longer pulls every value to 0, and TD's values stay tied to observed returns; the trained tokens "
            "grow linearly with the updates); kept in the run's critic_replay.jsonl (each example written once, "
            "its count in the checkpoint). Needs "
            "sampling.critic_answer = 'expected' (cross-entropy Datums stay valid examples; sampled answers' "
            "policy-gradient Datums do not)"
        ),
    )
    warmup_states_per_episode: int | Literal["every_round"] = Field(
        default=2,
        description=(
            "critic states per warm-up episode: at most this many (>= 1) of its macro-step boundaries (rounds H, "
            "2H, ..., drawn uniformly; equal weight per episode), or 'every_round': every round of the episode "
            "(one Monte Carlo example per env step). Each game's start state is added once, against the mean of its "
            "branches' returns; the store receives the boundaries every H rounds either way"
        ),
    )
    td_updates: int = Field(default=40, ge=0, description="TD updates after the warm-up")
    r_max: float = Field(
        default=1.0,
        gt=0.0,
        description="R_max, the largest return of an episode: critic values lie in [0, R_max] (1: win or lose)",
    )
    error: Literal["l1", "brier"] = Field(
        default="l1",
        description=(
            "sampling.critic_answer = 'sampled' / 'constrained': the critic sample's reward, -|V_k - G| / R_max "
            "('l1') or -((V_k - G) / R_max)^2 ('brier'); an unreadable answer gets -1"
        ),
    )
    unparsed_endpoint: Literal["drop"] | float = Field(
        default="drop",
        description=(
            "an endpoint whose E critic samples all fail to parse: 'drop' the branch (counted in "
            "critic/unparsed_endpoints) or a number in [0, tempo.r_max] used as its V_hat; never a silent 0"
        ),
    )
    #: TEMPO trains both roles in every update (not settings)
    train_actor: ClassVar[bool] = True
    train_critic: ClassVar[bool] = True
    prefix_correction: Literal["off", "ratio", "clipped"] = Field(
        default="clipped",
        description=(
            "weight each branch's advantage by the likelihood ratio of its stored token prefix under the current "
            "policy against the policy that sampled it: 'off' (weight 1), 'ratio' (the raw ratio) or 'clipped' "
            "(the ratio clipped to [0.5, 2]); see tempo_rl.training.prefix_correction"
        ),
    )

    @field_validator("warmup_states_per_episode")
    @classmethod
    def _check_states_per_episode(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:
            raise ValueError(f"must be at least 1 or 'every_round'; got {value}")
        return value


class GrpoConfig(_Model):
    """The trajectory-level GRPO baseline: full episodes of ``tempo.max_rounds`` rounds, groups of branches."""

    updates: int = Field(default=40, ge=0, description="GRPO / GiGPO updates")
    games_per_batch: int = Field(default=4, ge=1, description="fresh games per update")
    group_size: int = Field(
        default=4, ge=2, description="episodes per game (the group its advantages centre on)"
    )


class GigpoConfig(_Model):
    """GiGPO's step level (``algorithm = "gigpo"``, on the ``grpo`` section's batch): each round's advantage is
    ``A^E_n + step_weight * A^S_{n,t}`` (:mod:`tempo_rl.training.gigpo`). Defaults: the GiGPO paper's."""

    step_weight: float = Field(
        default=1.0, ge=0.0, description="w, the weight of the step-level advantage (0: GRPO's advantages)"
    )
    gamma: float = Field(
        default=0.95, ge=0.0, le=1.0, description="discount of the step return from each round (per env step)"
    )


class OptimConfig(_Model):
    """Adam (PyTRIO names), the policy loss and how a batch is split into ``forward_backward`` calls."""

    learning_rate: float = Field(default=1e-6, gt=0.0, description="Adam's step size for RL updates")
    betas: tuple[float, float] = Field(
        default=(0.9, 0.95),
        description=(
            "Adam's (beta1, beta2), each in [0, 1): the decay rates of the gradient's running mean and of its "
            "running square. Adam's epsilon is fixed at 1e-6 (ADAM_EPS)"
        ),
    )
    grad_clip_norm: float = Field(
        default=1.0, ge=0.0, description="the gradient's global L2 norm is clipped to this (0: no clipping)"
    )
    ppo_clip: tuple[float, float] | None = Field(
        default=None,
        description=(
            "the policy loss: None = importance sampling (the ratio pi / pi_sampler times the advantage, "
            "unclipped); (low, high) with 0 < low < 1 < high = PPO's loss, the ratio clipped to [low, high], "
            "e.g. [0.8, 1.2]"
        ),
    )
    chunk_datums: int = Field(
        default=128,
        ge=1,
        description=(
            "the most datums per forward_backward call: an update with more is sent in chunks whose gradients "
            "accumulate into one optimiser step (lower it when a call runs out of memory)"
        ),
    )
    substeps: int = Field(
        default=1,
        ge=1,
        description=(
            "optimiser steps per update: the update's datums are split into this many interleaved minibatches, "
            "each its own forward_backward + optim_step (tinker-cookbook's num_substeps); the sampler, and so "
            "the policy version, still changes once per update"
        ),
    )

    @field_validator("betas")
    @classmethod
    def _check_betas(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= b < 1.0 for b in value):  # NaN fails every comparison
            raise ValueError(f"each of Adam's betas must lie in [0, 1), e.g. (0.9, 0.95); got {value}")
        return value

    @field_validator("ppo_clip")
    @classmethod
    def _check_ppo_clip(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
        if value is None:
            return None
        low, high = value
        if not 0.0 < low < 1.0 < high:
            raise ValueError(f"ppo_clip must satisfy 0 < low < 1 < high, e.g. (0.8, 1.2); got {value}")
        return value

    @property
    def loss_fn(self) -> Literal["importance_sampling", "ppo"]:
        """The backend loss of the policy-gradient Datums: ``"ppo"`` with ``ppo_clip``, else
        ``"importance_sampling"``."""
        return "importance_sampling" if self.ppo_clip is None else "ppo"

    def adam(self, learning_rate: float | None = None) -> AdamParams:
        """The Adam step of these settings (``learning_rate`` unless given; epsilon :data:`ADAM_EPS`, no weight
        decay)."""
        return AdamParams(
            learning_rate=self.learning_rate if learning_rate is None else learning_rate,
            beta1=self.betas[0],
            beta2=self.betas[1],
            eps=ADAM_EPS,
            weight_decay=0.0,
            grad_clip_norm=self.grad_clip_norm,
        )


class KLConfig(_Model):
    """A KL anchor of the actor to the policy as RL begins (not part of TEMPO; ``coef = 0`` turns it off).

    Every actor token sampled in an update is trained with ``A'_t = A_t - coef * (log pi(a_t) - log
    pi_ref(a_t))`` (:func:`tempo_rl.signals.kl_penalized_advantages`), where pi_ref is the policy RL starts
    from (after the supervised warm start; in a resumed run that first switches the anchor on, the policy at
    that point), frozen: a policy-gradient step then also descends ``coef * KL(pi || pi_ref)``. With
    ``coef > 0`` the actor's samples of groups that carry no advantage (TEMPO's critic-only warm-up, degenerate
    groups) are trained by the anchor alone, so critic updates cannot drag the shared weights away from what the
    actor does.
    """

    coef: float = Field(
        default=0.3,
        ge=0.0,
        description=(
            "beta, the anchor's weight in advantage units per nat of log pi(a_t) - log pi_ref(a_t); 0 = off. "
            "Costs one reference forward pass over every sampled actor sequence per update"
        ),
    )


class StoreConfig(_Model):
    """The StateStore (see :mod:`tempo_rl.training.store`)."""

    capacity: int = Field(default=256, ge=1, description="states the store keeps (the oldest leave first)")
    max_age_versions: int | None = Field(
        default=None,
        ge=1,
        description="evict states sampled more than this many policy versions ago (None: by capacity only)",
    )


class WarmStartConfig(_Model):
    """Optional supervised warm start on expert demonstrations (cross-entropy), before RL.

    Every demonstration also teaches the critic its answer format: one example answer ``<value>v</value>`` at a
    random state of the demo, with ``v`` drawn from the critic's binary grid {0, R_max}
    (:data:`CRITIC_LEVELS`). Each distinct expert action gets the same total weight, so rare decisive actions
    count."""

    episodes: int = Field(
        default=0,
        ge=0,
        description="expert demonstrations (one per training game) of the supervised warm start; 0: no warm start",
    )
    noise: float = Field(default=0.3, ge=0.0, le=1.0, description="probability of a random admissible action")
    expert: Literal["walkthrough", "recovering"] = Field(
        default="recovering",
        description=(
            "who the demonstrations imitate: 'recovering' (ReplayableEnv.expert_action() at every step: after a "
            "noisy step the expert recovers from where it is, and a demo stops only when the episode ends or can "
            "no longer be won) or 'walkthrough' (the reset-state walkthrough, for envs without expert_action(); "
            "a demo stops where a noisy step makes its next action inadmissible)"
        ),
    )
    epochs: int = Field(default=1, ge=1, description="passes over the demonstrations")
    batch_size: int = Field(default=32, ge=1, description="Datums per optimiser step")
    learning_rate: float = Field(default=5e-4, gt=0.0, description="Adam's step size for the warm start")
    env_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "env kwargs the demonstration games use instead of env.kwargs' (merged over them), e.g. "
            '{ lock_colour = "independent" } for KeyDoor: the demos teach the walk and no key preference, so what '
            "the actor learns about keys comes from RL"
        ),
    )

    @property
    def enabled(self) -> bool:
        """Whether the run starts with the supervised warm start (``episodes > 0``)."""
        return self.episodes > 0


class WorkersConfig(_Model):
    """Where env calls run: a thread pool (default) or Ray actors (``ray`` extra).

    With ``ray = false`` envs live in the trainer process; their steps run on up to ``max_workers`` threads
    (:class:`~tempo_rl.envs.workers.EnvWorkerPool`). With ``ray = true`` (``pip install 'tempo-rl[ray]'``)
    every env lives in its own Ray actor (:class:`~tempo_rl.envs.workers.RayEnvWorkerPool`): fresh games are
    built and reset there, a restore starts N actors that each replay and verify the snapshot in parallel, and
    steps are awaited with the ``step_timeout_s`` deadline (a hung actor is killed for real and replaced). The
    rollout code is the same for both. Ray is initialised on first use unless it already is (call
    ``ray.init(...)`` yourself to choose resources); ``ray = "ADDRESS"`` joins an existing cluster. Envs must be
    registered where the actors run: built-in envs are; a custom env must be registered when its module is
    imported (``tempo_rl.envs.register`` at import time of an installed module).
    """

    max_workers: int = Field(default=8, ge=1, description="env calls in flight at once")
    step_timeout_s: float = Field(default=60.0, gt=0.0, description="deadline of one env call (seconds)")
    ray: bool | str = Field(
        default=False,
        description=(
            "false: envs on threads in this process; true: each env in its own Ray actor (the ray extra), Ray "
            'started here unless it already is; a string: the address of a Ray cluster to join (e.g. "auto")'
        ),
    )


class RunConfig(_Model):
    """Run directory, seeding, checkpoints and logging."""

    run_dir: str = Field(
        default="runs/tempo", description="the run directory: config, checkpoints, metrics, trajectories"
    )
    seed: int = Field(default=0, description="random seed of the run (sampling, store draws, demo noise)")
    checkpoint_every: int = Field(default=1, ge=1, description="updates between checkpoints")
    save_trajectories: bool = Field(
        default=True,
        description="write every episode to RUN_DIR/trajectories.jsonl (what tempo-rl report shows)",
    )
    eval_every: int = Field(
        default=0,
        ge=0,
        description="updates between evaluations (0 = never); evaluation samples with a seed of its own "
        "(from run.seed and the updates done), so it leaves the training samples unchanged",
    )
    eval_episodes: int = Field(
        default=16,
        ge=1,
        description="held-out games per evaluation: reset seed EVAL_SEED_START + j, or the files of env.eval_games_dir",
    )
    loggers: list[str] = Field(
        default_factory=lambda: ["console"],
        description=(
            "where metrics go besides RUN_DIR/metrics.jsonl (always written): 'console' (a progress bar and a "
            "line per update), 'swanlab' and 'wandb' (the swanlab / wandb extras; 'wandb:PROJECT' names the "
            "project, default tempo-rl); [] for none"
        ),
    )

    @field_validator("loggers")
    @classmethod
    def _check_loggers(cls, value: list[str]) -> list[str]:
        for item in value:
            kind, _, project = item.partition(":")
            if kind not in LOGGERS or (project and kind == "console") or (":" in item and not project):
                raise ValueError(
                    f"{item!r} is not a logger: use 'console', 'swanlab', 'wandb', 'swanlab:PROJECT' or "
                    "'wandb:PROJECT'"
                )
        return value

    def logger_project(self) -> str | None:
        """The SwanLab / W&B project named in ``loggers`` (``"wandb:PROJECT"``), None when none is."""
        return next((item.partition(":")[2] for item in self.loggers if ":" in item), None)

    def logs_to(self, kind: str) -> bool:
        """Whether ``loggers`` names ``kind`` (``"console"``, ``"swanlab"``, ``"wandb"``), with or without a
        project."""
        return any(item.partition(":")[0] == kind for item in self.loggers)


class TrainConfig(_Model):
    """A whole training run. ``algorithm`` selects TEMPO, the trajectory-level GRPO baseline or GiGPO (GRPO's
    batch with a step-level advantage within anchor-state groups)."""

    algorithm: Literal["tempo", "grpo", "gigpo"] = Field(
        default="tempo",
        description="'tempo' (macro-step TD with a critic), 'grpo' (trajectory-level GRPO) or 'gigpo' (GRPO's "
        "batch with step-level advantages)",
    )
    env: EnvConfig = Field(default_factory=EnvConfig)
    backend: BackendConfig = Field(
        default_factory=LocalBackendConfig,
        description="backend config (tempo_rl.backends.config), tagged by kind: 'local' (default), 'pytrio', 'tinker'",
    )
    tempo: TempoConfig = Field(default_factory=TempoConfig)
    grpo: GrpoConfig = Field(default_factory=GrpoConfig)
    gigpo: GigpoConfig = Field(default_factory=GigpoConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    kl: KLConfig = Field(default_factory=KLConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    warmstart: WarmStartConfig = Field(default_factory=WarmStartConfig)
    workers: WorkersConfig = Field(default_factory=WorkersConfig)
    run: RunConfig = Field(default_factory=RunConfig)

    @model_validator(mode="before")
    @classmethod
    def _critic_answer_follows_the_backend(cls, data: Any) -> Any:
        """Unset, ``sampling.critic_answer`` is ``"expected"`` on the local backend and ``"sampled"`` on the
        remote ones (the only mode they offer)."""
        if not isinstance(data, Mapping):
            return data
        sampling = data.get("sampling")
        if isinstance(sampling, Mapping) and "critic_answer" in sampling:
            return data
        backend = data.get("backend")
        kind = (
            backend.get("kind", "local")
            if isinstance(backend, Mapping)
            else getattr(backend, "kind", "local")
        )
        if kind == "local" or not isinstance(sampling, Mapping | None):
            return data
        return {**data, "sampling": {**(sampling or {}), "critic_answer": "sampled"}}

    @field_validator("backend", mode="before")
    @classmethod
    def _default_backend_kind(cls, value: Any) -> Any:
        if isinstance(value, Mapping) and "kind" not in value:
            return {"kind": "local", **value}
        return value

    @model_validator(mode="after")
    def _cross_field_checks(self) -> TrainConfig:
        t = self.tempo
        if self.algorithm == "tempo" and t.max_rounds % t.macro_rounds != 0:
            raise ValueError(
                f"tempo.max_rounds (T={t.max_rounds}) must be a multiple of tempo.macro_rounds "
                f"(H={t.macro_rounds}); e.g. set tempo.max_rounds={t.macro_rounds * max(1, round(t.max_rounds / t.macro_rounds))}"
            )
        if t.unparsed_endpoint != "drop" and not 0.0 <= t.unparsed_endpoint <= t.r_max:
            raise ValueError(
                f"tempo.unparsed_endpoint ({t.unparsed_endpoint}) must be 'drop' or a value in "
                f"[0, tempo.r_max={t.r_max}]"
            )
        if self.sampling.critic_answer != "sampled" and self.backend.kind != "local":
            raise ValueError(
                f"sampling.critic_answer = {self.sampling.critic_answer!r} is for the local backend (it scores "
                f"every answer level with compute_logprobs); backend.kind = {self.backend.kind!r} keeps the "
                "sampled answer: set sampling.critic_answer = 'sampled'"
            )
        if t.critic_weights == "own" and (self.backend.kind != "local" or t.critic != "generative"):
            raise ValueError(
                "tempo.critic_weights = 'own' trains a second copy of the model as the generative critic; it "
                f"needs backend.kind = 'local' (got {self.backend.kind!r}) and tempo.critic = 'generative' "
                f"(got {t.critic!r}): set tempo.critic_weights = 'shared'"
            )
        if t.warmup_replay and (self.sampling.critic_answer != "expected" or t.critic != "generative"):
            raise ValueError(
                "tempo.warmup_replay trains earlier warm-up updates' critic Datums again, which stay valid only "
                "as cross-entropy examples: it needs tempo.critic = 'generative' and sampling.critic_answer = "
                f"'expected' (got {t.critic!r} and {self.sampling.critic_answer!r}); set tempo.warmup_replay = "
                "false"
            )
        if self.sampling.max_tokens >= self.sampling.max_trajectory_tokens:
            raise ValueError(
                "sampling.max_tokens must be smaller than sampling.max_trajectory_tokens (one turn must fit in the "
                "trajectory budget)"
            )
        return self

    @model_validator(mode="after")
    def _every_setting_acts(self, info: ValidationInfo) -> TrainConfig:
        """Reject a non-default setting that the configured mode never reads (see :data:`_MODE_RULES`), naming it
        and the setting that rules it out. With ``context={"collect": [...]}`` the dotted paths are appended to
        that list instead (how :func:`config_for` finds a job's settings of other modes)."""
        found = settings_without_effect(self)
        collect = info.context.get("collect") if isinstance(info.context, dict) else None
        if collect is not None:
            collect.extend(path for path, _ in found)
        elif found:
            raise ValueError("\n  ".join(message for _, message in found))
        return self

    def total_updates(self) -> int:
        """Updates of the RL phase(s): warm-up + TD for TEMPO, ``grpo.updates`` for GRPO and GiGPO."""
        if self.algorithm == "tempo":
            return self.tempo.warmup_updates + self.tempo.td_updates
        return self.grpo.updates

    def to_toml(self) -> str:
        """Serialise to TOML (what the run directory stores as ``config.toml``)."""
        return _to_toml(self.model_dump(mode="json"))


#: The fields of the ``tempo`` section that every algorithm reads: the episode's step limit T, the return's range
#: R_max and the critic's kind (which also decides whether the warm start teaches the critic's answer format)
READ_BY_EVERY_ALGORITHM = ("max_rounds", "r_max", "critic")

#: The settings that only some modes read: ``(section, fields, mode, values, applies)``. ``fields`` of ``section``
#: act only while the dotted setting ``mode`` holds one of ``values``; ``()`` is the whole section but
#: :data:`READ_BY_EVERY_ALGORITHM`; the rule is checked only where ``applies(config)`` (the mode it refines is on).
_MODE_RULES: tuple[tuple[str, tuple[str, ...], str, tuple[str, ...], Callable[[TrainConfig], bool]], ...] = (
    ("tempo", (), "algorithm", ("tempo",), lambda c: True),
    ("store", (), "algorithm", ("tempo",), lambda c: True),
    ("grpo", (), "algorithm", ("grpo", "gigpo"), lambda c: True),
    ("gigpo", (), "algorithm", ("gigpo",), lambda c: True),
    # only the generative critic is trained (its answers' rewards) and can fail to parse
    (
        "tempo",
        ("error", "unparsed_endpoint"),
        "tempo.critic",
        ("generative",),
        lambda c: c.algorithm == "tempo",
    ),
    ("tempo", ("critic_rollouts",), "tempo.critic", ("monte_carlo",), lambda c: c.algorithm == "tempo"),
    # a critic answering by its expectation samples nothing: no K or E answers, no answer length, no reward
    (
        "sampling",
        ("critic_max_tokens",),
        "sampling.critic_answer",
        ("sampled", "constrained"),
        lambda c: c.algorithm == "tempo" and c.tempo.critic == "generative",
    ),
    (
        "tempo",
        ("error", "critic_samples", "endpoint_samples"),
        "sampling.critic_answer",
        ("sampled", "constrained"),
        lambda c: c.algorithm == "tempo" and c.tempo.critic == "generative",
    ),
)

#: The settings that choose a mode (a ``--set`` of one may leave out the file's settings of the mode it leaves)
MODE_SETTINGS = tuple(sorted({rule[2] for rule in _MODE_RULES}))


def _setting(config: BaseModel, dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def settings_without_effect(config: TrainConfig) -> list[tuple[str, str]]:
    """``(dotted path, message)`` of every setting given a non-default value that ``config``'s mode never reads
    (:data:`_MODE_RULES`): e.g. ``grpo.updates`` under ``algorithm = "tempo"``, ``tempo.critic_rollouts`` under a
    generative critic, ``tempo.critic_samples`` with ``sampling.critic_answer = "expected"``."""
    found: dict[str, str] = {}
    for section, names, mode, values, applies in _MODE_RULES:
        current = _setting(config, mode)
        if current in values or not applies(config):
            continue
        model = getattr(config, section)
        fields = type(model).model_fields
        chosen = names or tuple(
            n for n in fields if not (section == "tempo" and n in READ_BY_EVERY_ALGORITHM)
        )
        for name in chosen:
            field = fields[name]
            default = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
            value = getattr(model, name)
            path = f"{section}.{name}"
            if value == default or path in found:
                continue
            acts = " or ".join(repr(v) for v in values)
            found[path] = (
                f"{path} = {_plain(value)!r} has no effect with {mode} = {current!r} (it acts with {mode} = {acts}): "
                f"drop {path} (default {_plain(default)!r}) or set {mode} = {values[0]!r}"
            )
    return list(found.items())


def _plain(value: Any) -> Any:
    """A setting as its TOML reads (``{...}`` for a nested model)."""
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


# --------------------------------------------------------------------------------------------------- loading


def _format_validation_error(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<config>"
        msg = err["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        if err["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; see tempo_rl.training.config for the accepted fields)"
        lines.append(f"{loc}: {msg}" if loc != "<config>" else msg)
    return "invalid training config:\n  " + "\n  ".join(lines)


def validate_config(data: Mapping[str, Any]) -> TrainConfig:
    """Build a :class:`TrainConfig` from a mapping, raising :class:`ConfigError` naming every bad field."""
    try:
        return TrainConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc)) from None


def parse_override(item: str) -> tuple[list[str], Any]:
    """Parse ``"a.b.c=value"`` into (``["a", "b", "c"]``, value).

    The value is read as a TOML literal (``8``, ``5e-4``, ``true``, ``"x"``, ``[1, 2]``, ``{k = 1}``); anything
    that is not valid TOML is taken as a plain string (``env.name=keydoor``).
    """
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like key=value, e.g. tempo.branches=8")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {item!r} has an empty key; use a dotted path like tempo.branches=8")
    raw = raw.strip()
    try:
        value: Any = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key.split("."), value


def apply_overrides(data: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Return a deep copy of ``data`` with every ``key=value`` override applied (dotted paths create tables)."""
    out: dict[str, Any] = json.loads(json.dumps(dict(data)))
    for item in overrides:
        path, value = parse_override(item)
        node = out
        for part in path[:-1]:
            child = node.get(part)
            if child is None:
                child = {}
                node[part] = child
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {part!r} is a value, not a table")
            node = child
        node[path[-1]] = value
    return out


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The table of a TOML config file.

    Raises:
        ConfigError: a directory, a missing file, invalid TOML or text that is not UTF-8 (the message says which).
    """
    p = Path(path)
    if p.is_dir():
        raise ConfigError(
            f"config path {str(p)!r} is a directory; pass a .toml file to --config (e.g. one of "
            "examples/configs/), or resume a run directory with --resume"
        )
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist; pass an existing .toml file to --config")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {str(p)!r} is not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {str(p)!r} is not UTF-8 text (byte {exc.start}: {exc.reason}); TOML files must be "
            "UTF-8: re-save it as UTF-8"
        ) from None


def load_config(path: str | Path | None = None, overrides: Iterable[str] = ()) -> TrainConfig:
    """Load a TOML config (``None`` = the built-in defaults), apply overrides and validate.

    A setting that the configured mode never reads (:func:`settings_without_effect`) is an error, except where an
    override switches the mode (one of :data:`MODE_SETTINGS`: ``--set algorithm='"grpo"'`` on a TEMPO config):
    then the file's settings of the mode it leaves are left out, as :func:`config_for` leaves them out of a job.

    Raises:
        ConfigError: unreadable TOML or any invalid field (the message names it).
    """
    return config_from({} if path is None else read_config_file(path), overrides)


def config_from(data: Mapping[str, Any], overrides: Iterable[str] = ()) -> TrainConfig:
    """:func:`load_config` of a config table already read: ``data`` as the file, then ``overrides``.

    Raises:
        ConfigError: any invalid field (the message names it).
    """
    overrides = list(overrides)
    data = apply_overrides(data, overrides)
    given = {".".join(parse_override(item)[0]) for item in overrides}
    if given & set(MODE_SETTINGS):
        data = _without(data, [p for p in _unread_settings(data) if p not in given])
    return validate_config(data)


def config_for(job: Mapping[str, Any], algorithm: str) -> TrainConfig:
    """The config of one algorithm of a job, a config table that may hold the settings of several algorithms
    (the race's holds TEMPO's and GRPO's): ``job`` with ``algorithm`` set and without the settings that algorithm
    never reads (:func:`settings_without_effect`).

    Raises:
        ConfigError: any invalid field (the message names it).
    """
    data = {**job, "algorithm": algorithm}
    return validate_config(_without(data, _unread_settings(data)))


def configs_for(job: Mapping[str, Any], algorithms: Iterable[str]) -> dict[str, TrainConfig]:
    """:func:`config_for` of each algorithm; a setting that none of them reads is an error naming it.

    Raises:
        ConfigError: a setting no algorithm reads, or any invalid field (the message names it).
    """
    algorithms = list(algorithms)
    unread = [set(_unread_settings({**job, "algorithm": a})) for a in algorithms]
    nobody = sorted(set.intersection(*unread)) if unread else []
    if nobody:
        raise ConfigError(
            "invalid training config:\n  "
            + "\n  ".join(
                f"{path}: read by none of algorithm = {' / '.join(repr(a) for a in algorithms)}; drop it"
                for path in nobody
            )
        )
    return {a: config_for(job, a) for a in algorithms}


def _unread_settings(data: Mapping[str, Any]) -> list[str]:
    """The dotted paths of ``data``'s settings that its mode never reads."""
    collect: list[str] = []
    try:
        TrainConfig.model_validate(dict(data), context={"collect": collect})
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc)) from None
    return collect


def _without(data: Mapping[str, Any], paths: Iterable[str]) -> dict[str, Any]:
    """A deep copy of ``data`` without the dotted ``paths`` (each then takes its default)."""
    out: dict[str, Any] = json.loads(json.dumps(dict(data)))
    for path in paths:
        *tables, name = path.split(".")
        node: Any = out
        for part in tables:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(name, None)
    return out


# ---------------------------------------------------------------------------------------------- TOML output


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items() if v is not None)
            + "}"
        )
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _toml_key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else json.dumps(key)


def _to_toml(data: Mapping[str, Any], prefix: str = "") -> str:
    scalars = [(k, v) for k, v in data.items() if not isinstance(v, dict) and v is not None]
    tables = [(k, v) for k, v in data.items() if isinstance(v, dict)]
    lines = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in scalars]
    for key, table in tables:
        name = f"{prefix}.{_toml_key(key)}" if prefix else _toml_key(key)
        body = _to_toml(table, name)
        lines.append("")
        lines.append(f"[{name}]")
        if body:
            lines.append(body)
    return "\n".join(lines).strip("\n") + "\n" if not prefix else "\n".join(lines).strip("\n")
