"""tempo-rl on the real pytrio 0.2.9 client, with only its HTTP transport replaced (``fake_pytrio``).

One test per adapter behaviour the real client could break: resume and the KL-reference reload
(``validation.already_initialized``), Adam restored on resume, the loss metric, ``tokenizer_path`` honoured by
pytrio's ``forward_backward``, checkpoint names never reused (two saves of one name, a save retried after a
timeout), pytrio's per-sample limit checked at the start.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pytrio")
pytest.importorskip("torch")

from fake_pytrio import FakeServer, HttpService, install_http

from tempo_rl.backends import AdamParams, PyTrioBackendConfig, RetryConfig, SamplingParams, create_clients
from tempo_rl.rollout.datums import completion_datum

FAST = RetryConfig(
    result_timeout_s=20.0, max_attempts=3, backoff_initial_s=0.0, backoff_max_s=0.0, jitter=0.0
)
MODEL = "Qwen/Qwen3-4B"


@pytest.fixture
def tok_dir(tokenizer: Any, tmp_path: Path) -> Path:
    out = tmp_path / "tokenizer"
    tokenizer.save_pretrained(str(out))
    return out


@pytest.fixture
def make_service(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``make_service(local, **server_kw)`` or ``make_service(server=...)``: a real ``pytrio.ServiceClient()``
    (it authenticates, opens its session, ...) whose every HTTP request goes to the in-process fake."""
    from pytrio.config.config import configuration

    from tempo_rl.backends.pytrio import import_pytrio

    trio = import_pytrio()
    monkeypatch.setattr(configuration, "base_url", "http://control.test")
    services: dict[int, HttpService] = {}
    clients: list[Any] = []

    def make(
        local: Any = None, *, server: FakeServer | None = None, **server_kw: Any
    ) -> tuple[Any, FakeServer]:
        if server is None:
            server = FakeServer(local, **server_kw)
        if id(server) not in services:
            services[id(server)] = install_http(monkeypatch, server)
        client = trio.ServiceClient(api_key="sk-test")
        clients.append(client)
        return client, server

    yield make
    for client in clients:
        client._runtime.shutdown()
    assert [e for http in services.values() for e in http.errors] == []


@pytest.fixture
def fetched(monkeypatch: pytest.MonkeyPatch, tokenizer: Any) -> list[str]:
    """pytrio's tokenizer loader (``get_tokenizer(model_id)``, a ModelScope / Hugging Face download) replaced by
    one that records the model id and hands out the test tokenizer."""
    import pytrio.client.training as training_mod

    asked: list[str] = []

    def fetch(model_id: str) -> Any:
        asked.append(model_id)
        return tokenizer

    monkeypatch.setattr(training_mod, "get_tokenizer", fetch)
    return asked


def _cfg(**kw: Any) -> PyTrioBackendConfig:
    kw.setdefault("retry", FAST)
    return PyTrioBackendConfig(base_model=MODEL, lora_rank=8, seed=0, **kw)


def _datum(tokenizer: Any, sampler: Any) -> Any:
    prompt = tokenizer.encode("go to desk 1", add_special_tokens=False)
    seq = sampler.sample(prompt, 1, SamplingParams(max_tokens=3, seed=0)).sequences[0]
    return completion_datum(prompt, list(seq.tokens), list(seq.logprobs), 1.0)


def _train_once(training: Any, datum: Any) -> Any:
    out = training.forward_backward([datum], "importance_sampling")
    training.optim_step(AdamParams(learning_rate=1e-2))
    return out


def _adam_moments(local: Any) -> list[np.ndarray]:
    state = local._optimizer.state_dict()["state"]
    return [state[k]["exp_avg"].numpy().copy() for k in sorted(state)]


def test_loss_is_the_services_loss_sum(
    make_service: Any, local_training: Any, tokenizer: Any, fetched: list[str]
) -> None:
    """Defect 3: ``loss`` is pytrio's ``loss_sum`` (it was NaN: pytrio reports no ``loss:sum``)."""
    service, _ = make_service(local_training, model=MODEL)
    training, sampler = create_clients(_cfg(), service_client=service)
    datum = _datum(tokenizer, sampler)
    out = training.forward_backward([datum], "importance_sampling")
    # importance sampling at ratio 1 with advantage 1 on the completion tokens: loss = -(completion tokens)
    completion = int(np.sum(datum.loss_fn_inputs["advantages"] != 0))
    assert out.loss == pytest.approx(-completion, abs=1e-3)
    assert out.metrics["loss_sum"] == out.loss


def test_tokenizer_path_stops_pytrio_fetching_the_tokenizer(
    make_service: Any, local_training: Any, tokenizer: Any, tok_dir: Path, fetched: list[str]
) -> None:
    """Defect 4: with ``tokenizer_path``, pytrio's ``forward_backward`` takes the vocabulary size from that
    tokenizer instead of loading the tokenizer by model id (it did, on its first use)."""
    service, _ = make_service(local_training, model=MODEL)
    training, sampler = create_clients(_cfg(tokenizer_path=str(tok_dir)), service_client=service)
    training.forward_backward([_datum(tokenizer, sampler)], "importance_sampling")
    assert fetched == []
    training.load_state(training.save_state("s"))  # a new training client gets the size too
    training.forward_backward([_datum(tokenizer, sampler)], "importance_sampling")
    assert fetched == []
    assert training.inner.raw._tokenizer_vocab_size == len(tokenizer)


def test_load_state_after_training_restores_weights_and_adam(
    make_service: Any, local_training: Any, tokenizer: Any, fetched: list[str]
) -> None:
    """Defects 1 and 2: ``load_state`` once the trainer has started (pytrio raised ValidationError
    ``validation.already_initialized``), and it restores the Adam moments, not only the weights."""
    service, server = make_service(local_training, model=MODEL)
    training, sampler = create_clients(_cfg(), service_client=service)
    datum = _datum(tokenizer, sampler)
    _train_once(training, datum)
    path = training.save_state("update_000001")
    saved_moments = _adam_moments(local_training)
    probe = list(datum.model_input)
    saved_logprobs = training.save_weights_and_get_sampling_client().compute_logprobs(probe)
    _train_once(training, datum)  # move on, so that the load has something to undo
    assert training.save_weights_and_get_sampling_client().compute_logprobs(probe) != saved_logprobs

    training.load_state(path)

    assert training.save_weights_and_get_sampling_client().compute_logprobs(probe) == saved_logprobs
    for got, want in zip(_adam_moments(local_training), saved_moments, strict=True):
        np.testing.assert_array_equal(got, want)
    creates = [e[1][1] for e in server.events if e[0] == "control" and e[1][0] == "create_training_run"]
    assert creates[-1]["source_checkpoint_uri"] == path and creates[-1]["restore_optimizer"] is True


def test_one_name_saved_twice_gets_two_checkpoints(
    make_service: Any, local_training: Any, tokenizer: Any, fetched: list[str]
) -> None:
    """Defect 5: pytrio saves with ``overwrite=False``, so one name saved twice in a training run
    (``kl-resume-current`` on every resume, ``update_NNNNNN`` after resuming from an older checkpoint) was
    refused; each save now gets a name of its own."""
    service, server = make_service(local_training, model=MODEL)
    training, sampler = create_clients(_cfg(), service_client=service)
    _train_once(training, _datum(tokenizer, sampler))
    first = training.save_state("kl-resume-current")
    second = training.save_state("kl-resume-current")
    assert first != second and "/state/kl-resume-current-" in first and "/state/kl-resume-current-" in second
    assert {first, second} <= set(server.checkpoints)


def test_a_save_retried_after_a_timeout_is_not_refused(
    make_service: Any, local_training: Any, tokenizer: Any, fetched: list[str]
) -> None:
    """Defect 5: a save whose answer came after the timeout was done on the service; its retry under the same
    name was refused (``overwrite=False``). The retry now sends a new name and succeeds."""
    service, server = make_service(local_training, model=MODEL)
    training, sampler = create_clients(
        _cfg(retry=FAST.model_copy(update={"result_timeout_s": 1.5})), service_client=service
    )
    _train_once(training, _datum(tokenizer, sampler))
    server.late_next_save = 2.5  # saved at once, but the answer comes after the 1.5 s timeout
    path = training.save_state("update_000002")
    assert "/state/update_000002-" in path and path in server.checkpoints
    saves = [e for e in server.events if e[0] == "actor" and e[1][1] == "trainer.save_state"]
    assert (
        len(saves) >= 2
    )  # the late one and its retry (a retry queued behind the late answer may time out too)
    assert training.stats.retries.get("save_state") == len(saves) - 1
    assert len([u for u in server.checkpoints if "/state/update_000002-" in u]) == len(saves)  # all distinct


def test_a_sample_longer_than_the_models_limit_is_refused_at_the_start(
    make_service: Any, local_training: Any, fetched: list[str]
) -> None:
    """Defect 7 (lengths): pytrio reports the model's ``max_seq_len``; a run whose samples may be longer is
    refused when its clients are created, naming the settings, before any training run exists."""
    service, server = make_service(local_training, model=MODEL, max_seq_len=4096)
    with pytest.raises(
        ValueError,
        match=r"sampling.max_trajectory_tokens.*12000 tokens exceed pytrio's per-sample training limit of 4096",
    ):
        create_clients(_cfg(), service_client=service, max_sequence_tokens=12_000)
    assert not [e for e in server.events if e[1][0] == "create_training_run"]
    training, _ = create_clients(_cfg(), service_client=service, max_sequence_tokens=4096)
    assert training.limits.max_seq_len == 4096


def test_a_datum_longer_than_the_limit_fails_before_any_request(
    make_service: Any, local_training: Any, fetched: list[str]
) -> None:
    """Defect 7 (lengths), per datum: a clear error naming the datum, the limit and the settings, raised by
    tempo-rl before pytrio plans the batch."""
    from tempo_rl.backends import DatumError

    service, server = make_service(local_training, model=MODEL, max_seq_len=8)
    training, _ = create_clients(_cfg(), service_client=service)
    before = len(server.events)
    long = completion_datum(list(range(1, 10)), [3, 4], [-1.0, -1.0], 1.0)  # 10 input tokens > 8
    with pytest.raises(DatumError, match=r"datum 0: 10 input tokens exceed pytrio's per-sample limit of 8"):
        training.forward_backward([long], "importance_sampling")
    assert server.events[before:] == []


def test_a_prompt_longer_than_the_sampling_limit_fails_before_any_request(
    make_service: Any, local_training: Any, fetched: list[str]
) -> None:
    """Defect 7 (lengths), sampling: pytrio reports the sampler's ``max_seq_len`` but its client does not check
    it; tempo-rl refuses ``len(prompt) + max_tokens`` above it before sending."""
    service, server = make_service(local_training, model=MODEL, max_seq_len=8)
    _, sampler = create_clients(_cfg(), service_client=service)
    before = len(server.events)
    with pytest.raises(
        ValueError, match=r"6-token prompt plus max_tokens=3 exceeds pytrio's sampling limit of 8"
    ):
        sampler.sample([1, 2, 3, 4, 5, 6], 1, SamplingParams(max_tokens=3))
    assert server.events[before:] == []
    assert len(sampler.sample([1, 2, 3, 4, 5], 1, SamplingParams(max_tokens=3, seed=0)).sequences) == 1


TINY_PYTRIO = """
algorithm = "tempo"

[env]
name = "keydoor"
kwargs = {{ horizon = 12, keys = 1, colours = 2 }}

[backend]
kind = "pytrio"
base_model = "Qwen/Qwen3-4B"
lora_rank = 8
seed = 0
retry = {{ result_timeout_s = 60.0, max_attempts = 2, backoff_initial_s = 0.0, backoff_max_s = 0.0, jitter = 0.0 }}

[tempo]
max_rounds = 12
macro_rounds = 4
critic_samples = 2
endpoint_samples = 1
states_per_batch = 2
critic = "oracle"        # exact values: TD advantages that move the actor (until a step does, pi is pi_ref
branches = 4             # and the anchor trains nothing)
warmup_updates = 0
td_updates = 3

[sampling]
max_tokens = 32
critic_max_tokens = 8
critic_max_prompt_tokens = 400
max_trajectory_tokens = 1200
show_remaining_steps = false

[optim]
learning_rate = 1e-3

[kl]
coef = 0.1

[warmstart]
episodes = 32           # long enough for valid tool calls
epochs = 10
batch_size = 4
learning_rate = 3e-3

[run]
loggers = []
checkpoint_every = 1
"""


@pytest.mark.slow
def test_a_pytrio_run_resumes_twice_with_its_kl_reference(
    make_service: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defects 1, 3 and 5 end to end: a TEMPO run with the KL anchor on PyTRIO, killed after two updates and
    resumed (twice), finishes; every resume starts a training run from the checkpoint with its optimizer, the KL
    reference is reloaded on the service, and the losses are numbers."""
    import pytrio.client.training as training_mod

    from tempo_rl.backends.local import LocalTrainingClient, build_tiny_model
    from tempo_rl.backends.local.tokenizer import build_tokenizer
    from tempo_rl.training.checkpoint import latest_checkpoint
    from tempo_rl.training.config import load_config
    from tempo_rl.training.run import env_corpus, train_run

    probe_cfg = load_config(None, ['env.name="keydoor"', "env.kwargs={horizon=12, keys=1, colours=2}"])
    tokenizer = build_tokenizer(env_corpus(probe_cfg, games=4), vocab_size=512)
    monkeypatch.setattr(training_mod, "get_tokenizer", lambda model_id: tokenizer)  # no download
    cfg_file = tmp_path / "run.toml"
    cfg_file.write_text(TINY_PYTRIO.format())
    config = load_config(cfg_file)
    model = build_tiny_model(
        len(tokenizer), hidden_size=64, num_layers=2, num_heads=4, max_positions=2048, seed=0
    )
    local = LocalTrainingClient(model, tokenizer, state_dir=tmp_path / "service_states", seed=0)
    service, server = make_service(local, model=MODEL)
    run_dir = tmp_path / "run"

    train_run(run_dir, config, console=False, max_updates=1, service_client=service)
    for expected in (2, 3):
        resumed, _ = make_service(server=server)  # a new process sees the same service
        summary = train_run(run_dir, resume=True, console=False, max_updates=1, service_client=resumed)
        assert summary["updates_done"] == expected
    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None and ckpt.update == 3
    creates = [e[1][1] for e in server.events if e[0] == "control" and e[1][0] == "create_training_run"]
    restores = [c for c in creates if c["source_checkpoint_uri"]]
    assert all(c["restore_optimizer"] for c in restores)
    kl_ref = ckpt.trainer_state["kl_reference"]
    assert any(c["source_checkpoint_uri"] == kl_ref for c in restores)  # the reference reloaded on resume
    records = [
        json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()
    ]
    losses = [r["train/loss"] for r in records if "train/loss" in r]
    assert losses and all(math.isfinite(x) for x in losses)
    assert any(r["kl/ref_k1_mean"] != 0.0 for r in records[2:])  # a step moved the actor from the reference
    assert all(math.isfinite(r["warmstart/loss_first"]) for r in records if "warmstart/loss_first" in r)


def test_fake_server_applies_pytrios_own_rules(
    make_service: Any, local_training: Any, tokenizer: Any
) -> None:
    """The fake is faithful where it matters: pytrio's client itself refuses a load after training started."""
    from pytrio.errors.base import ValidationError

    service, _ = make_service(local_training, model=MODEL)
    raw = service.create_lora_training_client(MODEL, rank=8)
    raw.__dict__["_tokenizer_vocab_size"] = len(tokenizer)
    T = __import__("pytrio").types
    datum = T.Datum(
        model_input=T.ModelInput.from_ints([1, 2]),
        loss_fn_inputs={"target_tokens": np.array([2, 3], np.int64), "weights": np.ones(2, np.float32)},
    )
    raw.forward_backward([datum], "cross_entropy").result()
    path = raw.save_state("s").result().path
    with pytest.raises(ValidationError) as info:
        raw.load_state(path)
    assert info.value.code == "validation.already_initialized"
    assert isinstance(FakeServer, type)


@pytest.mark.slow
def test_a_gigpo_run_trains_through_the_pytrio_client(
    make_service: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``algorithm = "gigpo"`` on PyTRIO: its per-round advantages reach the service as Datums that it takes."""
    import pytrio.client.training as training_mod

    from tempo_rl.backends.local import LocalTrainingClient, build_tiny_model
    from tempo_rl.backends.local.tokenizer import build_tokenizer
    from tempo_rl.training.config import load_config
    from tempo_rl.training.run import env_corpus, train_run

    probe_cfg = load_config(None, ['env.name="keydoor"', "env.kwargs={horizon=12, keys=1, colours=2}"])
    tokenizer = build_tokenizer(env_corpus(probe_cfg, games=4), vocab_size=512)
    monkeypatch.setattr(training_mod, "get_tokenizer", lambda model_id: tokenizer)  # no download
    cfg_file = tmp_path / "run.toml"
    cfg_file.write_text(TINY_PYTRIO.format())
    config = load_config(
        cfg_file, ['algorithm="gigpo"', "grpo.updates=2", "grpo.games_per_batch=2", "kl.coef=0.0"]
    )
    model = build_tiny_model(
        len(tokenizer), hidden_size=64, num_layers=2, num_heads=4, max_positions=2048, seed=0
    )
    local = LocalTrainingClient(model, tokenizer, state_dir=tmp_path / "service_states", seed=0)
    service, server = make_service(local, model=MODEL)
    summary = train_run(tmp_path / "run", config, console=False, service_client=service)
    assert summary["updates_done"] == 2
    records = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if line
    ]
    updates = [r for r in records if r.get("train/phase") == 3.0]
    assert len(updates) == 2 and all(r["gigpo/anchor_groups"] >= 2 for r in updates)
    assert sum(r["train/actor_datums"] for r in updates) > 0
    assert any(e[0] == "actor" and "forward_backward" in str(e[1][1]) for e in server.events)
