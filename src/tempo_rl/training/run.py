"""The composition root of a training run: build everything from a config, and train (or resume) in a run
directory.

:func:`build_trainer` wires the clients, critic, store and env workers of a config into a trainer;
:func:`train_run` runs it in a run directory. The directory's I/O (layout, lock, checkpoints, resume) lives in
:mod:`tempo_rl.training.rundir` and :mod:`tempo_rl.training.checkpoint`, the checks made before the first file
is written in :mod:`tempo_rl.training.preflight`, and the console and summary formatting in
:mod:`tempo_rl.training.summary`.

:func:`train_run` starts a new run or (``resume=True``) continues the one in ``RUN_DIR`` from its newest
verified checkpoint: the store file is rolled back to the checkpoint's copy, ``metrics.jsonl`` /
``trajectories.jsonl`` are truncated to their length at the checkpoint, weights and optimizer state are
reloaded, the trainer state (update counter, policy version, data cursor, RNG) is restored; the next update is
the first one not in the checkpoint, so no update is lost or repeated.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tempo_rl.critic.generative import GenerativeCritic
from tempo_rl.critic.privileged import warn_missing_privileged_info
from tempo_rl.envs import ForkCache
from tempo_rl.envs.snapshot import EnvSpec, Snapshot
from tempo_rl.rollout.renderer import ChatRenderer
from tempo_rl.rollout.tool_call import ToolCallParser
from tempo_rl.training.checkpoint import atomic_write_text, save_checkpoint
from tempo_rl.training.config import CRITIC_LEVELS, ConfigError, TrainConfig, load_config
from tempo_rl.training.corpus import env_corpus
from tempo_rl.training.critics import state_critic
from tempo_rl.training.env_calls import FORK_CACHE_LOCK, locked_restore_branches, make_env_at_reset
from tempo_rl.training.options import TrainerOptions
from tempo_rl.training.preflight import preflight
from tempo_rl.training.rundir import (
    APPENDED_FILES,
    CONFIG_FILE,
    METRICS_FILE,
    MIN_FREE_DISK_MB,
    REPLAY_FILE,
    STORE_FILE,
    SUMMARY_FILE,
    TOKENIZER_DIR,
    TRAJECTORIES_FILE,
    JsonlWriter,
    RunDirError,
    RunLock,
    SettingChange,
    check_run_dir,
    file_size,
    move_aside,
    prepare_resume,
    read_replay,
    resume_changes,
)
from tempo_rl.training.store import StateStore
from tempo_rl.training.summary import console_line, format_summary, summarize, summary_json
from tempo_rl.training.trainer import MacroStepTrainer, TrainerState
from tempo_rl.training.types import TrainerComponents

__all__ = [
    "CONFIG_FILE",
    "DEFAULT_CONFIG",
    "FORK_CACHE_LOCK",
    "METRICS_FILE",
    "SUMMARY_FILE",
    "TRAJECTORIES_FILE",
    "RunDirError",
    "build_trainer",
    "check_run_dir",
    "console_line",
    "env_corpus",
    "env_workers",
    "format_summary",
    "locked_restore_branches",
    "make_env_at_reset",
    "run_tokenizer",
    "summarize",
    "train_run",
]

#: The built-in offline main job (``tempo-rl train`` without ``--config``); the same file ships as
#: ``examples/configs/keydoor_local.toml``.
DEFAULT_CONFIG = Path(__file__).with_name("main_job.toml")


# ------------------------------------------------------------------------------------------------ clients


def run_tokenizer(config: TrainConfig, run_dir: Path, *, resume: bool) -> Any:
    """The run's offline tokenizer when the local backend has none of its own, else None (the backend loads it).

    A local backend without ``model_path`` or ``tokenizer_path`` gets a tokenizer trained on :func:`env_corpus`
    at the start of a run, saved in ``RUN_DIR/tokenizer``; a resume reloads that one.
    """
    cfg = config.backend
    if cfg.kind != "local" or cfg.model_path is not None or cfg.tokenizer_path is not None:
        return None
    from tempo_rl.backends.local.tokenizer import build_tokenizer, load_tokenizer

    tok_dir = run_dir / TOKENIZER_DIR
    if resume and tok_dir.is_dir():
        return load_tokenizer(tok_dir)
    tokenizer = build_tokenizer(env_corpus(config), vocab_size=cfg.vocab_size)
    tokenizer.save_pretrained(str(tok_dir))
    return tokenizer


def _create_clients(
    config: TrainConfig,
    run_dir: Path,
    tokenizer: Any,
    backend_state: str | None,
    *,
    service_client: Any = None,
    state_subdir: str | None = None,
) -> tuple[Any, Any, Any]:
    """(training client, sampling client, tokenizer) for the configured backend.

    ``tokenizer`` is the run's (:func:`run_tokenizer`; None: the backend's own); backend states are written
    under ``RUN_DIR/backend_states`` unless the config names a ``state_dir``. Every backend goes through
    :func:`tempo_rl.backends.factory.create_clients` (the same retry layer for all); ``backend_state`` (a
    resume) makes the training client start from that saved state, weights and optimizer.

    A second pair for the same run (the critic's own weights) passes the first pair's ``tokenizer`` and a
    ``state_subdir`` of the local backend's state directory, so the two never write the same file.
    """
    from tempo_rl.backends.config import LocalBackendConfig
    from tempo_rl.backends.factory import create_clients

    cfg = config.backend
    # local backend, built-in or checkpoint model: the default means "not chosen" (config.toml stores every
    # default too), and the states go into the run directory, never into the current directory
    default_state_dir = LocalBackendConfig.model_fields["state_dir"].default
    if isinstance(cfg, LocalBackendConfig) and cfg.state_dir == default_state_dir:
        cfg = cfg.model_copy(update={"state_dir": str(run_dir / "backend_states")})
    if isinstance(cfg, LocalBackendConfig) and state_subdir is not None:
        cfg = cfg.model_copy(update={"state_dir": str(Path(cfg.state_dir) / state_subdir)})
    s = config.sampling
    training, sampler = create_clients(
        cfg,
        tokenizer=tokenizer,
        service_client=service_client,
        resume_from=backend_state,
        max_sequence_tokens=max(s.max_trajectory_tokens, s.critic_max_prompt_tokens + s.critic_max_tokens),
    )
    return training, sampler, training.get_tokenizer()


# ------------------------------------------------------------------------------------------------ build


def env_workers(
    config: TrainConfig,
) -> tuple[Any, Callable[[EnvSpec, int], Any], Callable[[Snapshot, int], list[Any]], ForkCache | None]:
    """The env plumbing of a trainer from ``config.workers``: ``(pool, make_env, restore_branches, cache)``.

    * ``workers.ray = false``: envs live in this process; ``make_env`` / ``restore_branches`` build them here
      (restores share a :class:`~tempo_rl.envs.ForkCache`, so envs with a native fork copy instead of
      replaying) and steps run on an :class:`~tempo_rl.envs.workers.EnvWorkerPool` of threads.
    * ``workers.ray = true``: a :class:`~tempo_rl.envs.workers.RayEnvWorkerPool`; ``make_env`` starts an
      actor that builds and resets the game, ``restore_branches`` starts ``n`` actors that each restore the
      snapshot by verified replay, in parallel (a divergence raises here, and the trainer quarantines the
      state). The envs are :class:`~tempo_rl.envs.workers.RemoteEnv` proxies; no fork cache.

    Raises:
        tempo_rl._optional.MissingDependencyError: ``workers.ray = true`` without the ``ray`` extra (the
            message names the install).
    """
    w = config.workers
    if w.ray:
        from tempo_rl.envs.workers import RayEnvWorkerPool

        ray_pool = RayEnvWorkerPool(
            max_workers=w.max_workers,
            step_timeout_s=w.step_timeout_s,
            start_timeout_s=max(120.0, 2 * w.step_timeout_s),
            init_kwargs={"address": w.ray} if isinstance(w.ray, str) else None,
        )

        def restore_remote(snapshot: Snapshot, n: int) -> list[Any]:
            return list(ray_pool.restore_branches(snapshot, n))

        return ray_pool, ray_pool.make_at_reset, restore_remote, None

    from tempo_rl.envs.workers import EnvWorkerPool

    pool = EnvWorkerPool(max_workers=w.max_workers, step_timeout_s=w.step_timeout_s)
    cache = ForkCache()

    def restore_local(snapshot: Snapshot, n: int) -> list[Any]:
        return locked_restore_branches(snapshot, n, cache)

    return pool, make_env_at_reset, restore_local, cache


def _warn_token_budgets(config: TrainConfig, tokenizer: Any, options: TrainerOptions | None = None) -> None:
    """Warn when a turn budget cannot hold the shortest valid answer in this tokenizer (a real tokenizer
    splits the tags into several tokens); see :mod:`tempo_rl.rollout.budgets`."""
    import warnings

    from tempo_rl.rollout.budgets import TokenBudgetWarning, token_budget_problems

    s = config.sampling
    for problem in token_budget_problems(
        tokenizer,
        max_tokens=s.max_tokens,
        critic_max_tokens=s.critic_max_tokens,
        critic_answer_prefix=(options or TrainerOptions()).critic_answer_prefix,
        generative_critic=config.algorithm == "tempo" and config.tempo.critic == "generative",
    ):
        warnings.warn(problem, TokenBudgetWarning, stacklevel=3)


def build_trainer(
    config: TrainConfig,
    run_dir: Path,
    *,
    resume: bool = False,
    log: Callable[[int, Mapping[str, float]], None] | None = None,
    write_trajectories: Callable[[Sequence[Mapping[str, Any]]], None] | None = None,
    state: TrainerState | None = None,
    backend_state: str | None = None,
    service_client: Any = None,
    critic_backend_state: str | None = None,
    store: StateStore | None = None,
    options: TrainerOptions | None = None,
) -> MacroStepTrainer:
    """Build the configured trainer with all its components (clients, critic, store, pool) in ``run_dir``.

    ``service_client`` (PyTRIO / Tinker only) replaces the SDK's ``ServiceClient``, e.g. with the recording
    stubs of :mod:`tempo_rl.backends.testing`. With ``tempo.critic_weights = "own"`` a second training client
    holds the critic's weights: from ``critic_backend_state`` (a resume), else from ``backend_state`` like the
    actor's (a fresh run's warm start then copies the policy into it: :meth:`MacroStepTrainer.copy_policy_to_critic`).
    ``store`` replaces the run's state store (``RUN_DIR/store.sqlite``, opened for writing), e.g. with an
    in-memory one for a command that must not write the run (``tempo-rl eval``). ``options`` are the
    settings beyond the config that code may pass (:class:`~tempo_rl.training.options.TrainerOptions`).
    """
    options = options or TrainerOptions()
    tokenizer = run_tokenizer(config, run_dir, resume=resume)
    training, sampler, tokenizer = _create_clients(
        config, run_dir, tokenizer, backend_state, service_client=service_client
    )
    critic_training = critic_sampler = None
    if config.algorithm == "tempo" and config.tempo.critic_weights == "own":
        critic_training, critic_sampler, _ = _create_clients(
            config, run_dir, tokenizer, critic_backend_state or backend_state, state_subdir="critic"
        )
    chat = ChatRenderer(tokenizer)
    eos = tokenizer.eos_token_id
    s = config.sampling
    _warn_token_budgets(config, tokenizer, options)
    critic = GenerativeCritic(
        chat,
        s.critic_params((int(eos),) if eos is not None else None),
        max_prompt_tokens=s.critic_max_prompt_tokens,
        history_turns=options.critic_history_turns,
        answer_prefix=options.critic_answer_prefix,
        answer=s.critic_answer,
        levels=CRITIC_LEVELS,
    )
    if store is None:
        store = StateStore(
            run_dir / STORE_FILE,
            capacity=config.store.capacity,
            max_age_versions=config.store.max_age_versions,
        )
    pool, make_env, restore_n, _cache = env_workers(config)
    components = TrainerComponents(
        training_client=training,
        sampler=sampler,
        chat=chat,
        critic=critic  # tempo.critic: the oracle / Monte Carlo critics value the restored state itself
        if config.tempo.critic == "generative"
        else state_critic(config, chat, pool=pool, restore_branches=restore_n, options=options),
        store=store,
        pool=pool,
        parser=ToolCallParser(),
        make_env=make_env,
        restore_branches=restore_n,
        critic_training_client=critic_training,
        critic_sampler=critic_sampler,
    )
    if config.algorithm == "tempo":
        from tempo_rl.training.tempo import TempoTrainer

        trainer: MacroStepTrainer = TempoTrainer(
            config, components, state=state, log=log, write_trajectories=write_trajectories
        )
    elif config.algorithm == "gigpo":
        from tempo_rl.training.gigpo import GigpoTrainer

        trainer = GigpoTrainer(
            config, components, state=state, log=log, write_trajectories=write_trajectories
        )
    else:
        from tempo_rl.training.grpo import GrpoTrainer

        trainer = GrpoTrainer(config, components, state=state, log=log, write_trajectories=write_trajectories)
    trainer.options = options
    return trainer


# ------------------------------------------------------------------------------------------------ run


def _load_resume_config(
    run_path: Path, overrides: Iterable[str]
) -> tuple[TrainConfig, tuple[SettingChange, ...]]:
    """The run's config with ``overrides`` applied, and the settings they change (checked by
    :func:`~tempo_rl.training.rundir.resume_changes`: a change of the run's shape is refused)."""
    cfg_file = run_path / CONFIG_FILE
    if not cfg_file.is_file():
        raise ConfigError(f"{run_path} has no {CONFIG_FILE}; it is not a tempo-rl run directory to resume")
    overrides = list(overrides)
    config = load_config(cfg_file, overrides)
    changes = resume_changes(run_path, load_config(cfg_file), config) if overrides else ()
    return config, changes


def _remove_new_entries(run_path: Path, before: set[str] | None) -> None:
    """Undo a new run's setup: remove what it created in ``run_path`` (all of it when it created the directory,
    ``before is None``), so that a fixed retry finds the directory as it was."""
    import shutil

    if before is None:
        shutil.rmtree(run_path, ignore_errors=True)
        return
    for entry in run_path.iterdir():
        if entry.name not in before:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def train_run(
    run_dir: str | Path,
    config: TrainConfig | None = None,
    *,
    resume: bool = False,
    overrides: Iterable[str] = (),
    max_updates: int | None = None,
    console: bool | None = None,
    service_client: Any = None,
    overwrite: bool = False,
    options: TrainerOptions | None = None,
) -> dict[str, Any]:
    """Train (or resume) the run in ``run_dir``; return the end-of-run summary.

    Before the first file is written, the config is checked against its env and backend
    (:func:`tempo_rl.training.preflight.preflight`) and the directory against the disk
    (:func:`~tempo_rl.training.rundir.check_run_dir`). The run then holds the directory's lock
    (:class:`~tempo_rl.training.rundir.RunLock`) until it returns or raises. A new run whose setup fails (before
    its first update) removes what it created, leaving the directory as it was.

    Args:
        run_dir: the run directory (created for a new run).
        config: the config of a new run (ignored on resume, where ``run_dir/config.toml`` is read back and
            ``overrides`` applied to it).
        resume: continue from the newest verified checkpoint.
        overrides: ``key=value`` overrides applied on resume (e.g. more ``tempo.td_updates``).
        max_updates: stop after this many updates (tests; the run stays resumable).
        console: print progress (default: ``"console"`` in ``config.run.loggers``).
        service_client: PyTRIO / Tinker only: use this ``ServiceClient`` (e.g. a recording stub).
        overwrite: a new run into a directory that holds one moves the old run aside to
            ``<run_dir>.replaced-<UTC time>`` first (:func:`~tempo_rl.training.rundir.move_aside`).
        options: settings beyond the config (:class:`~tempo_rl.training.options.TrainerOptions`); the run
            directory does not record them, so a resume passes them again.

    Raises:
        ConfigError: an invalid config for its env or backend, a new run into a directory that already holds a
            run (use ``resume`` or ``overwrite``), a resume of a directory without ``config.toml``.
        RunDirError: the directory is unusable, in use by another process (the message names its pid), or
            its checkpoints or logs are damaged beyond a fallback (nothing is changed then).
    """
    run_path = Path(run_dir)
    changes: tuple[SettingChange, ...] = ()
    if resume:
        config, changes = _load_resume_config(run_path, overrides)
    elif config is None:
        raise ConfigError("a new run needs a config (or pass resume=True)")
    assert config is not None
    preflight(config)
    if not resume and overwrite:
        aside = move_aside(run_path)
        if aside is not None:
            print(
                f"tempo-rl: moved the existing run {run_path} aside to {aside}", file=sys.stderr, flush=True
            )
    before = {p.name for p in run_path.iterdir()} if run_path.is_dir() else None
    check_run_dir(run_path, min_free_mb=MIN_FREE_DISK_MB)
    with RunLock(run_path):
        if resume:
            return _train_locked(
                run_path, config, True, max_updates, console, service_client, None, changes, options
            )
        if (run_path / CONFIG_FILE).exists():
            raise ConfigError(
                f"{run_path} already holds a run; resume it with `tempo-rl train --resume {run_path}`, move it aside "
                "with --overwrite, or choose another run.run_dir"
            )
        try:
            return _train_locked(
                run_path, config, False, max_updates, console, service_client, before, options=options
            )
        except _SetupFailed as failed:
            _remove_new_entries(run_path, before)
            raise failed.error from failed.error.__cause__


#: the trainer-state key of a checkpoint that records how many of critic_replay.jsonl's examples it holds
_REPLAY_EXAMPLES = "critic_replay_examples"


class _SetupFailed(Exception):
    """A new run's setup (before its first update) failed with ``error``."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _train_locked(
    run_path: Path,
    config: TrainConfig,
    resume: bool,
    max_updates: int | None,
    console: bool | None,
    service_client: Any,
    before: set[str] | None,
    changes: tuple[SettingChange, ...] = (),
    options: TrainerOptions | None = None,
) -> dict[str, Any]:
    """:func:`train_run` once the lock is held. A resume's ``changes`` are recorded: ``config.toml`` is
    rewritten with them, and the next metrics record carries each as ``resume/<setting>`` (its new value)."""
    show = config.run.logs_to("console") if console is None else console
    state: TrainerState | None = None
    replay_written = 0  # the critic examples critic_replay.jsonl holds (an inline replay is written out anew)
    backend_state: str | None = None
    critic_backend_state: str | None = None
    if resume:
        point = prepare_resume(run_path)
        for note in point.notes:
            print(f"tempo-rl: {note}", file=sys.stderr, flush=True)
        checkpoint = point.checkpoint
        if checkpoint is not None:
            state = TrainerState.from_json(checkpoint.trainer_state)
            if "critic_replay" not in checkpoint.trainer_state:  # kept in critic_replay.jsonl, not inline
                state.critic_replay = read_replay(
                    run_path, int(checkpoint.trainer_state.get(_REPLAY_EXAMPLES, 0)), checkpoint.update
                )
                replay_written = len(state.critic_replay)
            backend_state = checkpoint.backend_state
            critic_backend_state = checkpoint.critic_backend_state
            if config.tempo.critic_weights == "own" and critic_backend_state is None:
                raise ValueError(
                    f"{run_path} was checkpointed with one set of weights for actor and critic, so it cannot "
                    "resume with tempo.critic_weights = 'own'; resume it with tempo.critic_weights = 'shared', "
                    "or start a new run"
                )
            if show or point.notes:
                print(
                    f"resuming {run_path} from {checkpoint.path.name} (after update {checkpoint.update})",
                    flush=True,
                )
        elif show:
            print(f"{run_path} has no checkpoint yet: starting it over in place", flush=True)
        if changes:
            atomic_write_text(run_path / CONFIG_FILE, config.to_toml())
            print(
                f"tempo-rl: resuming with {', '.join(c.describe() for c in changes)} (recorded in {CONFIG_FILE} "
                f"and as resume/<setting> in the next {METRICS_FILE} record)",
                file=sys.stderr,
                flush=True,
            )
    recorded = {f"resume/{c.key}": float(c.new) for c in changes if isinstance(c.new, int | float)}

    from tempo_rl.training.metrics import MetricsLogger

    try:
        if not resume:
            atomic_write_text(run_path / CONFIG_FILE, config.to_toml())
        logger = MetricsLogger(
            run_path,
            swanlab=config.run.logs_to("swanlab"),
            wandb=config.run.logs_to("wandb"),
            project=config.run.logger_project(),
            console=show,
        )
    except Exception as exc:
        if resume:
            raise
        raise _SetupFailed(exc) from exc
    trajectories = JsonlWriter(run_path / TRAJECTORIES_FILE)
    replay: JsonlWriter | None = None  # critic_replay.jsonl, opened when it first has an example to hold

    def log(step: int, metrics: Mapping[str, float]) -> None:
        if recorded:
            metrics = {**metrics, **recorded}
            recorded.clear()
        logger.log(step, metrics)
        if show:
            print(console_line(step, metrics), flush=True)

    warn_missing_privileged_info(config.env)  # before the first update: games without it are named
    try:
        trainer = build_trainer(
            config,
            run_path,
            resume=resume,
            log=log,
            write_trajectories=trajectories.write if config.run.save_trajectories else None,
            state=state,
            backend_state=backend_state,
            service_client=service_client,
            critic_backend_state=critic_backend_state,
            options=options,
        )
    except Exception as exc:
        logger.close()
        trajectories.close()
        if resume:
            raise
        raise _SetupFailed(exc) from exc

    def checkpoint_now(t: MacroStepTrainer) -> None:
        # the live RNG may have moved since the last update (the warm start draws demonstrations and their
        # order from it): save where it is now, or a resume would replay those draws
        t.state.rng_state = dict(t.rng.bit_generator.state)
        nonlocal replay, replay_written
        trainer_state = t.state.to_json()
        examples = trainer_state.pop("critic_replay")
        if len(examples) > replay_written:  # the replay only grows: each example is written once
            replay = replay or JsonlWriter(run_path / REPLAY_FILE)
            replay.write(examples[replay_written:])
        replay_written = len(examples)
        trainer_state[_REPLAY_EXAMPLES] = replay_written
        save_checkpoint(
            run_path,
            update=t.state.update,
            trainer_state=trainer_state,
            training_client=t.c.training_client,
            critic_training_client=t.c.critic_training_client,
            store=t.c.store,
            offsets={name: file_size(run_path / name) for name in APPENDED_FILES},
        )

    def on_update_end(t: MacroStepTrainer) -> None:
        every = config.run.checkpoint_every
        if t.state.update % every == 0 or t.state.update == t.total_updates():
            checkpoint_now(t)

    trainer._on_update_end = on_update_end
    try:
        if not trainer.state.warmstart_done:
            if config.warmstart.enabled:
                from tempo_rl.training.warmstart import warm_start

                if show:
                    print(f"supervised warm start on {config.warmstart.episodes} expert demos...", flush=True)
                ws = warm_start(trainer)
            else:
                ws = {}
            trainer.copy_policy_to_critic()  # a critic of its own starts from the warm-started weights
            ws.update(trainer.initial_eval())
            if ws:
                log(0, ws)
            trainer.state.warmstart_done = True
            checkpoint_now(trainer)
        trainer.train(max_updates=max_updates)
    finally:
        logger.close()
        trajectories.close()
        if replay is not None:
            replay.close()
        trainer.c.pool.close() if hasattr(trainer.c.pool, "close") else None
        trainer.c.store.close()
    summary = summarize(run_path / METRICS_FILE)
    summary["updates_done"] = trainer.state.update
    summary["run_dir"] = str(run_path)
    atomic_write_text(run_path / SUMMARY_FILE, summary_json(summary))
    if show:
        print(format_summary(summary), flush=True)
    return summary
