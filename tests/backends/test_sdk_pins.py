"""Pins: every SDK method, type and file layout tempo-rl relies on, checked against the installed pytrio and tinker.

A new SDK release that renames a parameter, deprecates a method we call, moves the credential files or changes
the loss metric's name fails here, with the name of what changed, before it fails a paid run. The recording
stubs of :mod:`tempo_rl.backends.testing` are pinned to the same signatures.
"""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytrio = pytest.importorskip("pytrio")
tinker = pytest.importorskip("tinker")


def _params(fn: Any) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p != "self"]


PYTRIO_CALLS = {
    ("ServiceClient", "create_lora_training_client"): [
        "base_model", "rank", "seed", "train_mlp", "train_attn", "train_unembed",
    ],
    ("ServiceClient", "create_training_client_from_state_with_optimizer"): ["path"],
    ("ServiceClient", "get_server_capabilities"): [],
    ("TrainingClient", "forward_backward"): ["data", "loss_fn", "loss_fn_config", "auto_shift"],
    ("TrainingClient", "optim_step"): ["adam_params"],
    ("TrainingClient", "save_state"): ["name", "ttl_seconds", "overwrite"],
    ("TrainingClient", "save_weights_and_get_sampling_client"): [],
    ("TrainingClient", "get_tokenizer"): [],
    ("SamplingClient", "sample"): [
        "prompt", "num_samples", "sampling_params", "include_prompt_logprobs", "topk_prompt_logprobs", "return_text",
    ],
    ("SamplingClient", "sample_async"): [
        "prompt", "num_samples", "sampling_params", "include_prompt_logprobs", "topk_prompt_logprobs", "return_text",
    ],
    ("SamplingClient", "compute_logprobs"): ["prompt"],
    ("SamplingClient", "compute_logprobs_async"): ["prompt"],
}  # fmt: skip

TINKER_CALLS = {
    ("ServiceClient", "create_lora_training_client"): [
        "base_model", "rank", "seed", "train_mlp", "train_attn", "train_unembed",
    ],
    ("ServiceClient", "create_training_client_from_state_with_optimizer"): ["path"],
    ("TrainingClient", "forward_backward"): ["data", "loss_fn", "loss_fn_config"],
    ("TrainingClient", "optim_step"): ["optim_params", "adam_params"],
    ("TrainingClient", "save_state"): ["name", "ttl_seconds", "overwrite"],
    ("TrainingClient", "save_weights_and_get_sampling_client"): [],
    ("TrainingClient", "get_tokenizer"): [],
    ("SamplingClient", "sample"): ["prompt", "num_samples", "sampling_params"],
    ("SamplingClient", "compute_logprobs"): ["prompt"],
}  # fmt: skip


@pytest.mark.parametrize(("owner", "method"), sorted(PYTRIO_CALLS))
def test_pytrio_methods_we_call(owner: str, method: str) -> None:
    fn = getattr(getattr(pytrio, owner), method)
    want = PYTRIO_CALLS[(owner, method)]
    assert _params(fn)[: len(want)] == want, f"pytrio {owner}.{method} now takes {_params(fn)}"
    assert getattr(fn, "__deprecated__", None) is None, f"pytrio deprecates {owner}.{method}"


@pytest.mark.parametrize(("owner", "method"), sorted(TINKER_CALLS))
def test_tinker_methods_we_call(owner: str, method: str) -> None:
    fn = getattr(getattr(tinker, owner), method)
    want = TINKER_CALLS[(owner, method)]
    got = _params(fn)
    assert all(p in got for p in want), f"tinker {owner}.{method} now takes {got}"
    assert got[: len(want)] == [p for p in got if p in want][: len(want)]
    assert getattr(fn, "__deprecated__", None) is None, f"tinker deprecates {owner}.{method}"
    if (owner, method) == ("TrainingClient", "optim_step"):
        kind = inspect.signature(fn).parameters["adam_params"].kind
        assert kind is inspect.Parameter.KEYWORD_ONLY


def test_tinker_apis_we_no_longer_call_are_the_deprecated_ones() -> None:
    """Why the adapter avoids them: they are deprecated."""
    for owner, method in [
        ("SamplingClient", "sample_async"),
        ("SamplingClient", "compute_logprobs_async"),
        ("TrainingClient", "load_state"),
        ("TrainingClient", "load_state_with_optimizer"),
    ]:
        assert getattr(getattr(getattr(tinker, owner), method), "__deprecated__", None), (owner, method)


@pytest.mark.parametrize("sdk", ["pytrio", "tinker"])
def test_types_we_build(sdk: str) -> None:
    T = (pytrio if sdk == "pytrio" else tinker).types
    sp = T.SamplingParams(max_tokens=3, seed=1, stop=[7], temperature=0.5, top_k=-1, top_p=1.0)
    assert (sp.max_tokens, sp.seed, sp.temperature) == (3, 1, 0.5)
    ap = T.AdamParams(
        learning_rate=1e-4, beta1=0.9, beta2=0.95, eps=1e-12, weight_decay=0.0, grad_clip_norm=0.0
    )
    assert ap.beta2 == 0.95
    mi = T.ModelInput.from_ints([1, 2, 3])
    assert list(mi.to_ints()) == [1, 2, 3]
    td = T.TensorData.from_numpy(np.array([2, 3, 4], np.int64))
    assert np.asarray(td.to_numpy()).tolist() == [2, 3, 4] and str(td.dtype) == "int64"
    d = T.Datum(model_input=mi, loss_fn_inputs={"target_tokens": td})
    assert d.loss_fn_inputs["target_tokens"] is not None


def test_pytrio_reports_loss_sum_not_loss_colon_sum() -> None:
    """pytrio's own response adapter names the metrics the remote adapter reads (defect 3)."""
    from pytrio.client.adapters.training import actor_forward_responses_to_sdk

    from tempo_rl.backends.pytrio import pytrio_flavor

    out = actor_forward_responses_to_sdk(
        [
            {
                "result": {
                    "loss_fn_outputs": [{}],
                    "metrics": {"loss_sum": 6.0, "loss_mean": 2.0, "token_count": 3},
                }
            }
        ],
        expected_samples=(1,),
    )
    assert set(out.metrics) == {"loss_sum", "loss_mean", "token_count"}
    assert pytrio_flavor(pytrio).loss_metric in out.metrics


def test_pytrio_vocab_size_is_a_cached_property_we_can_seed() -> None:
    """tokenizer_path works by seeding this cache (defect 4); a real pytrio TrainingClient then never calls
    ``get_tokenizer``."""
    from pytrio.client.training import TrainingClient

    from tempo_rl.backends.remote import seed_pytrio_vocab_size

    assert isinstance(
        inspect.getattr_static(TrainingClient, "_tokenizer_vocab_size"), functools.cached_property
    )
    raw = object.__new__(TrainingClient)
    seed_pytrio_vocab_size(raw, [0] * 321)  # type: ignore[arg-type]
    assert raw._tokenizer_vocab_size == 321


def test_pytrio_checkpoint_name_rule_matches_ours() -> None:
    from pytrio.client.builders.training import CHECKPOINT_NAME_MAX_LENGTH, CHECKPOINT_NAME_PATTERN_TEXT

    from tempo_rl.backends import remote

    assert remote._NAME_RE.pattern == CHECKPOINT_NAME_PATTERN_TEXT
    assert remote._MAX_NAME == CHECKPOINT_NAME_MAX_LENGTH


def test_pytrio_credential_files_are_where_we_look(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect 7: profiles written by pytrio's own config repository (``trio login``, ``trio env use NAME``) are
    found; a config file without a key is not a credential."""
    from pytrio.config.environment import EnvironmentVariable
    from pytrio.config.models import EnvironmentState, ProfileConfig
    from pytrio.config.repository import ConfigRepository

    from tempo_rl.backends.pytrio import pytrio_credentials_available

    assert {"PYTRIO_API_KEY", "PYTRIO_ENV"} <= {v.value for v in EnvironmentVariable}
    monkeypatch.delenv("PYTRIO_API_KEY", raising=False)
    monkeypatch.delenv("PYTRIO_ENV", raising=False)
    repo = ConfigRepository(tmp_path / ".pytrio")
    assert not pytrio_credentials_available(tmp_path)
    repo.save_profile("", ProfileConfig(api_key="", base_url="https://trio.example"))  # a file with no key
    assert (tmp_path / ".pytrio" / "config.toml").is_file()
    assert not pytrio_credentials_available(tmp_path)
    repo.save_profile("work", ProfileConfig(api_key="sk-work"))  # a named profile ...
    assert not pytrio_credentials_available(tmp_path)  # ... not active yet
    repo.save_environment_state(EnvironmentState(active_env="work"))
    assert pytrio_credentials_available(tmp_path)
    repo.save_environment_state(EnvironmentState(active_env=""))
    monkeypatch.setenv("PYTRIO_ENV", "work")
    assert pytrio_credentials_available(tmp_path)
    monkeypatch.delenv("PYTRIO_ENV")
    repo.save_profile("", ProfileConfig(api_key="sk-default"))
    assert pytrio_credentials_available(tmp_path)


@pytest.mark.parametrize(
    ("stub_name", "sdk_cls", "methods"),
    [
        ("RecordingPyTrioService", "pytrio.ServiceClient", ["create_lora_training_client"]),
        ("_PyTrioTraining", "pytrio.TrainingClient", ["forward_backward", "optim_step", "save_state"]),
        ("_PyTrioSampling", "pytrio.SamplingClient", ["sample", "sample_async", "compute_logprobs"]),
        ("_TinkerTraining", "tinker.TrainingClient", ["forward_backward", "optim_step", "save_state"]),
    ],
)
def test_stubs_take_the_sdk_signatures(stub_name: str, sdk_cls: str, methods: list[str]) -> None:
    from tempo_rl.backends import testing

    mod, cls = sdk_cls.split(".")
    real = getattr(pytrio if mod == "pytrio" else tinker, cls)
    stub = getattr(testing, stub_name)
    for m in methods:
        want = _params(getattr(real, m))
        assert _params(getattr(stub, m))[: len(want)] == want, f"{stub_name}.{m} differs from {sdk_cls}.{m}"


def test_pytrio_normalises_over_all_target_tokens_of_a_call() -> None:
    """The fact behind docs/alfworld-pytrio.md's normalisation section: pytrio's planner counts every target
    that is not -100 as active, tempo-rl's context tokens included, per ``forward_backward`` call."""
    from pytrio.client.training_batch import plan_training_batch
    from pytrio.model.limits import TrainingLimits

    from tempo_rl.backends.remote import to_service_datum
    from tempo_rl.rollout.datums import completion_datum

    datums = [
        completion_datum([1, 2, 3, 4, 5], [6, 7], [-1.0, -1.0], 1.0),  # 6 targets, 2 with an advantage
        completion_datum([1, 2], [3, 4, 5], [-1.0] * 3, -0.5),  # 4 targets, 3 with an advantage
    ]
    limits = TrainingLimits(max_batch_size=None, max_tokens_per_request=None, max_seq_len=None)

    def totals(batch: list[Any]) -> tuple[int, int, int]:
        t = plan_training_batch(
            [to_service_datum(d, pytrio.types) for d in batch],
            loss_fn="importance_sampling",
            auto_shift=False,
            limits=limits,
            tokenizer_vocab_size=100,
        ).totals
        return t.total_samples, t.total_active_tokens, t.total_advantage_tokens

    assert totals(datums) == (2, 10, 5)
    assert totals(datums[:1]) == (1, 6, 2) and totals(datums[1:]) == (1, 4, 3)  # chunk_datums=1: own divisors
