"""A training run on disk: build everything from a config, train, checkpoint, resume.

Run directory layout::

    RUN_DIR/
      config.toml          the validated config (resume reads it back)
      metrics.jsonl        one JSON record per update (tempo_rl.training.metrics)
      trajectories.jsonl   one record per played branch / episode
      store.sqlite         the StateStore (live)
      tokenizer/           the offline tokenizer (local backend)
      checkpoints/         update_<u>/ {backend.pt, store.sqlite, checkpoint.json} + LATEST
      summary.json         the end-of-run summary

:func:`train_run` starts a new run or (``resume=True``) continues the one in ``RUN_DIR`` from its latest
checkpoint: the store file is rolled back to the checkpoint's copy, ``metrics.jsonl`` / ``trajectories.jsonl``
are truncated to their length at the checkpoint, weights and optimizer state are reloaded, the trainer state
(update counter, policy version, data cursor, RNG) is restored; the next update is the first one not in the
checkpoint, so no update is lost or repeated.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tempo_rl.backends.types import SamplingParams
from tempo_rl.critic.base import CriticQuery
from tempo_rl.critic.generative import GenerativeCritic
from tempo_rl.critic.prompt import build_critic_messages
from tempo_rl.envs import ForkCache, make, restore_branches
from tempo_rl.envs.snapshot import EnvSpec, Snapshot
from tempo_rl.rollout.prompts import build_actor_messages, format_observation
from tempo_rl.rollout.renderer import ChatRenderer
from tempo_rl.rollout.tool_call import ToolCallParser, format_tool_call
from tempo_rl.training.checkpoint import atomic_write_text, latest_checkpoint, save_checkpoint
from tempo_rl.training.config import ConfigError, TrainConfig, load_config
from tempo_rl.training.critics import state_critic
from tempo_rl.training.metrics import nanmean as _nanmean
from tempo_rl.training.store import StateStore
from tempo_rl.training.trainer import MacroStepTrainer, TrainerState
from tempo_rl.training.types import TrainerComponents

__all__ = [
    "CONFIG_FILE",
    "DEFAULT_CONFIG",
    "METRICS_FILE",
    "TRAJECTORIES_FILE",
    "build_trainer",
    "env_corpus",
    "env_workers",
    "summarize",
    "train_run",
]

#: The built-in offline main job (``tempo-rl train`` without ``--config``); the same file ships as
#: ``examples/configs/keydoor_local.toml``.
DEFAULT_CONFIG = Path(__file__).with_name("main_job.toml")

CONFIG_FILE = "config.toml"
METRICS_FILE = "metrics.jsonl"
TRAJECTORIES_FILE = "trajectories.jsonl"
STORE_FILE = "store.sqlite"
SUMMARY_FILE = "summary.json"
TOKENIZER_DIR = "tokenizer"


# ------------------------------------------------------------------------------------------------ env helpers


#: Restores that share one :class:`~tempo_rl.envs.ForkCache` are serialised: the cache is not thread-safe.
#: Env construction needs no lock (the TextWorld/ALFWorld adapters load games thread-safely), and steps on
#: live envs run concurrently in the worker pool.
FORK_CACHE_LOCK = threading.RLock()


def make_env_at_reset(spec: EnvSpec, seed: int) -> Any:
    """A live :class:`~tempo_rl.envs.RecordedEnv` of ``spec`` reset with ``seed`` (thread-safe)."""
    env = make(spec)
    env.reset(seed)
    return env


def locked_restore_branches(snapshot: Snapshot, n: int, cache: ForkCache | None = None) -> list[Any]:
    """:func:`tempo_rl.envs.restore_branches`, under :data:`FORK_CACHE_LOCK` when ``cache`` is given."""
    if cache is None:
        return restore_branches(snapshot, n)
    with FORK_CACHE_LOCK:
        return restore_branches(snapshot, n, cache=cache)


def env_corpus(config: TrainConfig, games: int = 24, seed: int = 0) -> list[str]:
    """Texts the local tokenizer is trained on: what the actor and the critic will read and write.

    Plays ``games`` training games (the walkthrough, with random admissible actions mixed in) and collects the
    actor prompts, observation turns, tool calls of every admissible action, critic prompts (with the env's
    privileged information) and every value string ``<value>0.0</value>`` ... ``<value>1.0</value>``.
    """
    rng = np.random.default_rng(seed)
    parser_tool = ToolCallParser().tool_name
    texts: list[str] = []
    for g in range(games):
        env = make_env_at_reset(*config.env.train_game(g))
        obs = env.last_observation
        initial = obs.text
        task = str(obs.info.get("task", "")) if obs.info else ""
        texts.extend(m["content"] for m in build_actor_messages(obs, tool_name=parser_tool))
        plan = list(env.walkthrough() or ())
        history: list[tuple[str, str]] = []
        for step in range(config.tempo.max_rounds):
            admissible = list(obs.admissible_actions or ())
            if plan and (rng.random() > 0.3 or not admissible):
                action = plan.pop(0)
            elif admissible:
                action = admissible[int(rng.integers(len(admissible)))]
            else:
                break
            texts.append(format_tool_call(action, parser_tool))
            texts.extend(format_tool_call(a, parser_tool) for a in admissible)
            result = env.step(action)
            obs = result.observation
            history.append((action, obs.text))
            texts.append(format_observation(obs, remaining_steps=config.tempo.max_rounds - step - 1))
            if result.terminated or result.truncated:
                break
        query = CriticQuery(
            task=task,
            history=history,
            initial_observation=initial,
            privileged_info=env.privileged_info(),
            remaining_steps=3,
            r_max=config.tempo.r_max,
        )
        texts.extend(m["content"] for m in build_critic_messages(query))
        env.close()
    texts.extend(f"<value>{v / 10:.1f}</value>" for v in range(11))
    return texts


# ------------------------------------------------------------------------------------------------ clients


def _create_clients(
    config: TrainConfig, run_dir: Path, *, resume: bool, service_client: Any = None
) -> tuple[Any, Any, Any]:
    """(training client, sampling client, tokenizer) for the configured backend.

    Local backend without a tokenizer of its own: an offline tokenizer is trained on :func:`env_corpus` at the
    start of a run and saved in ``RUN_DIR/tokenizer`` (a resume reloads it); backend states are written under
    ``RUN_DIR/backend_states`` unless the config names a ``state_dir``. Every backend goes through
    :func:`tempo_rl.backends.config.create_clients`.
    """
    from tempo_rl.backends.config import create_clients, parse_backend_config

    backend = dict(config.backend)
    cfg = parse_backend_config(backend)
    tokenizer: Any = None
    if cfg.kind == "local" and cfg.model_path is None and cfg.tokenizer_path is None:
        from tempo_rl.backends.local.tokenizer import build_tokenizer, load_tokenizer

        tok_dir = run_dir / TOKENIZER_DIR
        if resume and tok_dir.is_dir():
            tokenizer = load_tokenizer(tok_dir)
        else:
            tokenizer = build_tokenizer(env_corpus(config), vocab_size=cfg.vocab_size)
            tokenizer.save_pretrained(str(tok_dir))
        if "state_dir" not in backend:
            cfg = cfg.model_copy(update={"state_dir": str(run_dir / "backend_states")})
    if cfg.kind == "local":
        from tempo_rl.backends.retry import RetryingTrainingClient

        training, sampler = create_clients(cfg, tokenizer=tokenizer)
        # remote clients retry inside their adapters; the local one gets the same policy here, with
        # optim_step applied exactly once across retries (its step counter settles a lost acknowledgement)
        training = RetryingTrainingClient(training)
        sampler = training.wrap_sampler(sampler)
    else:
        training, sampler = create_clients(cfg, service_client=service_client)
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
            num_cpus_per_env=w.ray_num_cpus_per_env,
            start_timeout_s=w.ray_start_timeout_s,
            init_kwargs={"address": w.ray_address} if w.ray_address else None,
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
) -> MacroStepTrainer:
    """Build the configured trainer with all its components (clients, critic, store, pool) in ``run_dir``.

    ``service_client`` (PyTRIO / Tinker only) replaces the SDK's ``ServiceClient``, e.g. with the recording
    stubs of :mod:`tempo_rl.backends.testing`.
    """
    training, sampler, tokenizer = _create_clients(
        config, run_dir, resume=resume, service_client=service_client
    )
    if backend_state is not None:
        training.load_state(backend_state)
        sampler = training.save_weights_and_get_sampling_client()
    chat = ChatRenderer(tokenizer)
    eos = tokenizer.eos_token_id
    s = config.sampling
    critic = GenerativeCritic(
        chat,
        SamplingParams(
            max_tokens=s.critic_max_tokens,
            temperature=s.critic_temperature,
            stop=(int(eos),) if eos is not None else None,
        ),
        max_prompt_tokens=s.critic_max_prompt_tokens,
        answer_prefix=s.critic_answer_prefix,
    )
    store = StateStore(
        run_dir / STORE_FILE,
        capacity=config.store.capacity,
        per_game_cap=config.store.per_game_cap,
        max_age_versions=config.store.max_age_versions,
    )
    pool, make_env, restore_n, _cache = env_workers(config)
    components = TrainerComponents(
        training_client=training,
        sampler=sampler,
        chat=chat,
        critic=critic  # tempo.critic: the oracle / Monte Carlo critics value the restored state itself
        if config.tempo.critic == "generative"
        else state_critic(config, chat, pool=pool, restore_branches=restore_n),
        store=store,
        pool=pool,
        parser=ToolCallParser(),
        make_env=make_env,
        restore_branches=restore_n,
    )
    if config.algorithm == "tempo":
        from tempo_rl.training.tempo import TempoTrainer

        return TempoTrainer(config, components, state=state, log=log, write_trajectories=write_trajectories)
    from tempo_rl.training.grpo import GrpoTrainer

    return GrpoTrainer(config, components, state=state, log=log, write_trajectories=write_trajectories)


# ------------------------------------------------------------------------------------------------ files


def _truncate(path: Path, size: int) -> None:
    if path.exists() and path.stat().st_size > size:
        with open(path, "r+b") as fh:
            fh.truncate(size)
            fh.flush()
            os.fsync(fh.fileno())


class _JsonlWriter:
    """Appends JSON lines, flushed and fsync'ed per batch."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def write(self, records: Sequence[Mapping[str, Any]]) -> None:
        for rec in records:
            self._fh.write(json.dumps(rec, default=_json_default, allow_nan=True) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _file_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


# ------------------------------------------------------------------------------------------------ run


class RunDirError(ConfigError):
    """The run directory cannot hold a run (not creatable, not writable, or too little free disk). Raised
    before anything is trained, with the path and the fix in the message."""


def check_run_dir(path: Path, *, min_free_mb: float) -> None:
    """Fail fast, before training starts, when ``path`` cannot hold a run.

    Creates ``path`` (with parents), writes and fsyncs a 4 KiB probe file in it, removes it, and checks that
    at least ``min_free_mb`` MiB (2**20 bytes) are free on its file system.

    Raises:
        RunDirError: ``path`` is a file, cannot be created or written, or its disk has too little free space.
    """
    if path.exists() and not path.is_dir():
        raise RunDirError(
            f"run directory {str(path)!r} exists and is not a directory; choose another run.run_dir"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(
            f"cannot create the run directory {str(path)!r}: {exc.strerror or exc}; choose a writable "
            "run.run_dir (--run-dir) or fix the permissions of its parent"
        ) from None
    probe = path / f".write-probe-{os.getpid()}"
    try:
        with open(probe, "wb") as fh:
            fh.write(b"\0" * 4096)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise RunDirError(
            f"the run directory {str(path)!r} is not writable ({exc.strerror or exc}); choose a writable "
            "run.run_dir (--run-dir), fix its permissions or free disk space"
        ) from None
    finally:
        with contextlib.suppress(OSError):  # the write error above is the one to report
            probe.unlink(missing_ok=True)
    free = shutil.disk_usage(path).free
    if free < min_free_mb * 2**20:
        raise RunDirError(
            f"only {free / 2**20:.1f} MiB free on the disk of the run directory {str(path)!r}, below "
            f"run.min_free_disk_mb = {min_free_mb:g}; free disk space, choose another run.run_dir or lower "
            "run.min_free_disk_mb"
        )


def train_run(
    run_dir: str | Path,
    config: TrainConfig | None = None,
    *,
    resume: bool = False,
    overrides: Iterable[str] = (),
    max_updates: int | None = None,
    console: bool | None = None,
    service_client: Any = None,
) -> dict[str, Any]:
    """Train (or resume) the run in ``run_dir``; return the end-of-run summary.

    Args:
        run_dir: the run directory (created for a new run).
        config: the config of a new run (ignored on resume, where ``run_dir/config.toml`` is read back and
            ``overrides`` applied to it).
        resume: continue from the latest checkpoint.
        overrides: ``key=value`` overrides applied on resume (e.g. more ``tempo.td_updates``).
        max_updates: stop after this many updates (tests; the run stays resumable).
        console: print progress (default: ``config.run.console``).
        service_client: PyTRIO / Tinker only: use this ``ServiceClient`` (e.g. a recording stub).

    Raises:
        ConfigError: a new run into a directory that already holds a run (use ``resume``), or a resume of a
            directory without ``config.toml``.
    """
    run_path = Path(run_dir)
    cfg_file = run_path / CONFIG_FILE
    if resume:
        if not cfg_file.is_file():
            raise ConfigError(
                f"{run_path} has no {CONFIG_FILE}; it is not a tempo-rl run directory to resume"
            )
        config = load_config(cfg_file, overrides)
        check_run_dir(run_path, min_free_mb=config.run.min_free_disk_mb)
    else:
        if config is None:
            raise ConfigError("a new run needs a config (or pass resume=True)")
        if cfg_file.exists():
            raise ConfigError(
                f"{run_path} already holds a run; resume it with `tempo-rl train --resume {run_path}` or choose "
                "another run.run_dir"
            )
        check_run_dir(run_path, min_free_mb=config.run.min_free_disk_mb)
        atomic_write_text(cfg_file, config.to_toml())
    assert config is not None
    show = config.run.console if console is None else console

    checkpoint = latest_checkpoint(run_path) if resume else None
    state: TrainerState | None = None
    backend_state: str | None = None
    if checkpoint is not None:
        _truncate(run_path / METRICS_FILE, checkpoint.offsets.get(METRICS_FILE, 0))
        _truncate(run_path / TRAJECTORIES_FILE, checkpoint.offsets.get(TRAJECTORIES_FILE, 0))
        if checkpoint.store_path is not None:
            StateStore.restore_file(checkpoint.store_path, run_path / STORE_FILE)
        state = TrainerState.from_json(checkpoint.trainer_state)
        backend_state = checkpoint.backend_state
        if show:
            print(f"resuming {run_path} after update {checkpoint.update}", flush=True)
    elif resume:  # died before its first checkpoint: start over in place
        for name in (METRICS_FILE, TRAJECTORIES_FILE):
            _truncate(run_path / name, 0)
        for suffix in ("", "-wal", "-shm"):
            Path(str(run_path / STORE_FILE) + suffix).unlink(missing_ok=True)
        shutil.rmtree(run_path / "checkpoints", ignore_errors=True)

    from tempo_rl.training.metrics import MetricsLogger

    logger = MetricsLogger(
        run_path,
        swanlab=config.run.swanlab,
        wandb=config.run.wandb,
        project=config.run.project,
        console=show,
    )
    trajectories = _JsonlWriter(run_path / TRAJECTORIES_FILE)

    def log(step: int, metrics: Mapping[str, float]) -> None:
        logger.log(step, metrics)
        if show:
            print(console_line(step, metrics), flush=True)

    trainer = build_trainer(
        config,
        run_path,
        resume=resume,
        log=log,
        write_trajectories=trajectories.write if config.run.save_trajectories else None,
        state=state,
        backend_state=backend_state,
        service_client=service_client,
    )

    def checkpoint_now(t: MacroStepTrainer) -> None:
        # the live RNG may have moved since the last update (the warm start draws demonstrations and their
        # order from it): save where it is now, or a resume would replay those draws
        t.state.rng_state = dict(t.rng.bit_generator.state)
        save_checkpoint(
            run_path,
            update=t.state.update,
            trainer_state=t.state.to_json(),
            training_client=t.c.training_client,
            store=t.c.store,
            offsets={
                METRICS_FILE: _file_size(run_path / METRICS_FILE),
                TRAJECTORIES_FILE: _file_size(run_path / TRAJECTORIES_FILE),
            },
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
            ws.update(trainer.initial_eval())
            if ws:
                log(0, ws)
            trainer.state.warmstart_done = True
            checkpoint_now(trainer)
        trainer.train(max_updates=max_updates)
    finally:
        logger.close()
        trajectories.close()
        trainer.c.pool.close() if hasattr(trainer.c.pool, "close") else None
        trainer.c.store.close()
    summary = summarize(run_path / METRICS_FILE)
    summary["updates_done"] = trainer.state.update
    summary["run_dir"] = str(run_path)
    atomic_write_text(run_path / SUMMARY_FILE, json.dumps(summary, indent=1, default=_json_default))
    if show:
        print(format_summary(summary), flush=True)
    return summary


# ------------------------------------------------------------------------------------------------ summary

_CONSOLE_KEYS = (
    ("critic/abs_error_mean", "critic_err"),
    ("critic/parse_failure_rate", "parse_fail"),
    ("critic/value_corr", "v_corr"),
    ("warmup/success_rate", "warm_succ"),
    ("actor/terminal_won_rate", "won"),
    ("actor/degenerate_group_rate", "degen"),
    ("td/reused_states", "reused"),
    ("td/fresh_states", "fresh"),
    ("store/size", "store"),
    ("eval/success_rate", "EVAL_SUCC"),
    ("warmstart/loss_last", "ws_loss"),
    ("time/update_seconds", "sec"),
)


def console_line(step: int, metrics: Mapping[str, float]) -> str:
    """One short console line per update."""
    phase = {0.0: "warm-up", 1.0: "TD", 2.0: "GRPO"}.get(float(metrics.get("train/phase", -1.0)), "start")
    parts = [f"[{step:>3}] {phase:<7}"]
    for key, short in _CONSOLE_KEYS:
        value = metrics.get(key)
        if isinstance(value, int | float) and not math.isnan(value):
            parts.append(f"{short}={value:.3g}")
    return " ".join(parts)


def _read_metrics(path: Path) -> list[dict[str, Any]]:
    records = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line:
                records.append(json.loads(line))
    return records


def _metric(record: Mapping[str, Any], key: str) -> float:
    value = record.get(key)
    if value is None and isinstance(record.get("metrics"), Mapping):
        value = record["metrics"].get(key)
    return float(value) if isinstance(value, int | float) else math.nan


def summarize(metrics_path: Path) -> dict[str, Any]:
    """The end-of-run summary from ``metrics.jsonl``: critic error first vs last warm-up update, the correlation
    of its estimates with their targets (per warm-up update; TD mean, NaN-skipping), the TD
    success curve (eval success where evaluated, else the terminal-won rate of TD branches), states reused."""
    records = _read_metrics(metrics_path)
    warm = [r for r in records if _metric(r, "train/phase") == 0.0]
    td = [r for r in records if _metric(r, "train/phase") == 1.0]
    grpo = [r for r in records if _metric(r, "train/phase") == 2.0]
    err = [_metric(r, "critic/abs_error_mean") for r in warm]
    eval_records = [r for r in records if not math.isnan(_metric(r, "eval/success_rate"))]
    evals = [(int(r.get("step", 0)), _metric(r, "eval/success_rate")) for r in eval_records]
    return {
        "updates": len(warm) + len(td) + len(grpo),
        "warmup_updates": len(warm),
        "td_updates": len(td),
        "grpo_updates": len(grpo),
        "grpo_success_rate": [_metric(r, "grpo/success_rate") for r in grpo],
        "critic_abs_error_first_warmup": err[0] if err else math.nan,
        "critic_abs_error_last_warmup": err[-1] if err else math.nan,
        "critic_abs_error_warmup": err,
        "critic_abs_error_td_last": _metric(td[-1], "critic/abs_error_mean") if td else math.nan,
        "critic_value_corr_warmup": [_metric(r, "critic/value_corr") for r in warm],
        "critic_value_corr_td_mean": _nanmean([_metric(r, "critic/value_corr") for r in td]),
        "td_terminal_won_rate": [_metric(r, "actor/terminal_won_rate") for r in td],
        "eval_success": evals,
        "eval_games": _metric(eval_records[-1], "eval/episodes") if eval_records else math.nan,
        "eval_success_first": evals[0][1] if evals else math.nan,
        "eval_success_last": evals[-1][1] if evals else math.nan,
        "states_reused_total": _metric(td[-1], "td/reused_states_total") if td else 0.0,
        "store_size": _metric(records[-1], "store/size") if records else math.nan,
    }


def format_summary(summary: Mapping[str, Any]) -> str:
    """A short human-readable end-of-run summary."""

    def f(x: Any) -> str:
        return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"

    lines = [
        "== tempo-rl run summary ==",
        f"updates: {summary.get('updates')} ({summary.get('warmup_updates')} warm-up, {summary.get('td_updates')} TD, "
        f"{summary.get('grpo_updates')} GRPO)",
        f"critic abs error, warm-up: first {f(summary.get('critic_abs_error_first_warmup'))} -> last "
        f"{f(summary.get('critic_abs_error_last_warmup'))}; last TD {f(summary.get('critic_abs_error_td_last'))}",
    ]
    err = summary.get("critic_abs_error_warmup") or []
    if err:
        lines.append("critic abs error per warm-up update: " + " ".join(f(x) for x in err))
    corr = summary.get("critic_value_corr_warmup") or []
    if corr:
        blocks = [_nanmean(corr[i : i + 5]) for i in range(0, len(corr), 5)]
        lines.append(
            "critic value correlation with its targets, warm-up, mean per 5 updates: "
            + " ".join(f(x) for x in blocks)
            + f"; TD mean {f(summary.get('critic_value_corr_td_mean'))}"
        )
    evals = summary.get("eval_success") or []
    if evals:
        games = summary.get("eval_games")
        n = f"{games:.0f}" if isinstance(games, int | float) and not math.isnan(games) else "?"
        first, last = evals[0][1], evals[-1][1]
        lines.append(
            f"actor eval success on {n} held-out games, by updates done (u0 = after the warm start): "
            + ", ".join(f"u{s}={v:.2f}" for s, v in evals)
            + f"; first {first:.2f} -> last {last:.2f} ({last - first:+.2f})"
        )
    won = summary.get("td_terminal_won_rate") or []
    if won:
        lines.append("TD branch success: " + " ".join(f(x) for x in won))
    grpo = summary.get("grpo_success_rate") or []
    if grpo:
        lines.append("GRPO episode success: " + " ".join(f(x) for x in grpo))
    lines.append(
        f"stored states restored and reused in TD: {f(summary.get('states_reused_total'))}; "
        f"store size {f(summary.get('store_size'))}"
    )
    return "\n".join(lines)
