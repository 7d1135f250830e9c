"""The local (torch) backend: a training client and snapshot sampling clients, fully offline.

:class:`LocalTrainingClient` owns a causal LM, its tokenizer and an Adam optimizer. ``forward_backward``
accumulates gradients of the summed loss (see :mod:`tempo_rl.backends.local.losses`) with the model in eval
mode (no dropout), so training logprobs are the sampler's logprobs on the same weights; ``optim_step`` clips
the global gradient norm (when ``grad_clip_norm > 0``), applies one decoupled-weight-decay Adam step with
PyTRIO's parameters and clears the gradients. ``save_weights_and_get_sampling_client`` returns a
:class:`LocalSamplingClient` over the current weights: later training never changes what it computes.

Weights snapshots (one copy of the frozen weights). A sampling client does not copy the model: its parameters
are new tensors over the training model's storage (the same data pointers). A parameter is copied into the
sampler only when the training client is about to change it in place while that sampler is still alive
(copy-on-write): ``optim_step`` copies the parameters it trains, ``load_state`` the ones whose values it
changes. So with LoRA every sampler shares the frozen base weights and owns only a copy of the adapter, and
with full fine-tuning a sampler holds its own copy only from the first step after it was made, while something
(a rollout of that policy version) still references it; a dropped sampler frees its copy.
:class:`LocalSamplingStats` reports ``sampling/live_samplers``, ``sampling/live_snapshots`` (samplers that hold
copied weights) and ``sampling/snapshot_bytes``.

Concurrency: ``sample_async`` calls issued together on one event loop (e.g. ``asyncio.gather`` over N
branches) are coalesced into one batched forward per decode step (an asyncio micro-batcher: the first request
schedules a flush with ``loop.call_soon``, so every request enqueued in the same loop tick joins it), and the
batch runs in a worker thread so the event loop keeps stepping environments meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import re
import threading
import warnings
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tempo_rl._optional import require
from tempo_rl.backends.local.losses import compute_loss
from tempo_rl.backends.local.model import check_dtype, forward_logits
from tempo_rl.backends.local.prefix_cache import (
    PrefixCache,
    PrefixCacheCounters,
    counters_metrics,
    default_cache_bytes,
)
from tempo_rl.backends.local.sampling import SampleRequest, sample_batch, validate_request
from tempo_rl.backends.types import (
    AdamParams,
    Datum,
    ForwardBackwardOutput,
    LossFn,
    SampleResult,
    SamplingParams,
    Tokenizer,
)
from tempo_rl.backends.validation import IGNORE_INDEX, validate_datums, validate_loss_fn

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = [
    "CHECKPOINT_NAME_RE",
    "LocalSamplingClient",
    "LocalSamplingStats",
    "LocalTrainingClient",
    "check_checkpoint_name",
]

#: PyTRIO's checkpoint-name rule, enforced everywhere so that a name valid locally is valid on the service
CHECKPOINT_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9_-])?$")


def check_checkpoint_name(name: str) -> str:
    """Return ``name`` or raise ``ValueError`` when PyTRIO would reject it."""
    if not CHECKPOINT_NAME_RE.match(name):
        raise ValueError(
            f"checkpoint name {name!r} is invalid: use letters, digits, '.', '_' and '-', starting with a "
            "letter or digit and not ending with '.' (e.g. 'step-000010')"
        )
    return name


def _vocab_size(model: Any) -> int:
    return int(model.get_input_embeddings().weight.shape[0])


def _check_cache_bytes(prefix_cache_bytes: int | None) -> None:
    if prefix_cache_bytes is not None and prefix_cache_bytes < 0:
        raise ValueError(
            f"prefix_cache_bytes must be >= 0 (0 = no prefix cache, None = default), got {prefix_cache_bytes}"
        )


def _max_positions(model: Any) -> int | None:
    return getattr(model.config, "max_position_embeddings", None)


def _shared_view(model: Any) -> tuple[Any, list[tuple[Any, Any]]]:
    """A structural copy of ``model`` whose parameters are new, frozen tensors over the same storage.

    Returns the copy and the ``(model parameter, copy's parameter)`` pairs (tied parameters once). Buffers
    (small: rotary frequencies) are copied. Nothing of the weights is allocated.
    """
    torch = require("torch", "local")
    memo: dict[int, Any] = {}
    pairs: list[tuple[Any, Any]] = []
    for p in model.parameters():
        view = torch.nn.Parameter(p.detach(), requires_grad=False)
        memo[id(p)] = view
        pairs.append((p, view))
    return copy.deepcopy(model, memo), pairs


def _checkpointable_layers(model: Any) -> list[Any]:
    """The repeated blocks of ``model`` (``transformers``' ``GradientCheckpointingLayer``: one decoder layer
    each), set up to recompute their activations in the backward pass instead of keeping them (non-reentrant
    ``torch.utils.checkpoint``). A block checkpoints only while its own ``training`` flag is set (see
    :meth:`LocalTrainingClient.forward_backward`), so sampling is unaffected. Empty for other models."""
    require("torch", "local")
    from torch.utils.checkpoint import checkpoint

    try:
        from transformers.modeling_layers import GradientCheckpointingLayer
    except ImportError:  # pragma: no cover - transformers without the layer class
        return []
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    recompute = functools.partial(checkpoint, use_reentrant=False)
    for layer in layers:
        layer._gradient_checkpointing_func = recompute  # type: ignore[assignment]
        layer.gradient_checkpointing = True
    return layers


def _check_ids(ids: Sequence[int], vocab_size: int, what: str) -> None:
    """Raise ``ValueError`` naming ``what`` and the first bad ids when a token id is outside the vocabulary."""
    if ids and (min(ids) < 0 or max(ids) >= vocab_size):  # C-speed check of long prompts first
        bad = [t for t in ids if not 0 <= t < vocab_size]
        raise ValueError(f"{what}: token ids {bad[:5]} outside [0, {vocab_size})")


class LocalSamplingClient:
    """Samples from a fixed set of weights (see :mod:`tempo_rl.backends.local.sampling` for the semantics).

    Args:
        model: causal LM; switched to eval mode and never trained through this client.
        tokenizer: the tokenizer (decoding, default EOS stop).
        device: torch device holding ``model``.
        seed: seeds the generator used by requests whose ``SamplingParams.seed`` is None.
        max_batch_rows: most completions decoded in one batch (larger coalesced batches are split).
        prefix_cache_bytes: budget of the KV prefix cache in bytes
            (:mod:`tempo_rl.backends.local.prefix_cache`): ``None`` = 1/8 of the device's memory
            (:func:`~tempo_rl.backends.local.prefix_cache.default_cache_bytes`), ``0`` = no cache (the uncached
            computation, bit for bit).
        shared_counters: counters of an owner (the training client) that this client's counts are added to.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Tokenizer,
        *,
        device: str = "cpu",
        seed: int = 0,
        max_batch_rows: int = 64,
        prefix_cache_bytes: int | None = None,
        shared_counters: PrefixCacheCounters | None = None,
    ) -> None:
        torch = require("torch", "local")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.device = device
        self.vocab_size = _vocab_size(model)
        self.max_batch_rows = max_batch_rows
        self._generator = torch.Generator(device="cpu")
        self._generator.manual_seed(seed)
        self._lock = threading.Lock()
        self._pending: dict[
            asyncio.AbstractEventLoop, list[tuple[SampleRequest, asyncio.Future[SampleResult]]]
        ]
        self._pending = {}
        #: number of batched sampling computations run, and requests served (coalescing = requests / batches)
        self.batches_run = 0
        self.requests_served = 0
        _check_cache_bytes(prefix_cache_bytes)
        self.counters = PrefixCacheCounters()
        counters = (self.counters,) if shared_counters is None else (self.counters, shared_counters)
        self._counters = counters
        budget = default_cache_bytes(device) if prefix_cache_bytes is None else int(prefix_cache_bytes)
        #: the KV prefix cache of these weights (None when ``prefix_cache_bytes == 0``)
        self.prefix_cache = PrefixCache(budget, counters=counters) if budget > 0 else None
        #: ``(owner's parameter, this client's parameter)`` pairs still sharing storage (copy-on-write, set by
        #: the training client that made this one; empty for a client over a model of its own)
        self._borrowed: list[tuple[Any, Any]] = []
        #: bytes of weights this client copied out of its owner's (0 while it shares them all)
        self.snapshot_bytes = 0

    def _own_copies(self, changing: set[int]) -> None:
        """Copy every borrowed parameter whose owner's id is in ``changing`` before the owner changes it in
        place; waits for a computation of this client in flight (its lock)."""
        with self._lock:
            kept: list[tuple[Any, Any]] = []
            for owner, mine in self._borrowed:
                if id(owner) in changing:
                    mine.data = owner.detach().clone()
                    self.snapshot_bytes += mine.numel() * mine.element_size()
                else:
                    kept.append((owner, mine))
            self._borrowed = kept

    # ---- sampling
    def _request(self, prompt: Sequence[int], num_samples: int, params: SamplingParams) -> SampleRequest:
        req = SampleRequest(tuple(map(int, prompt)), int(num_samples), params)
        validate_request(req, self.vocab_size, _max_positions(self.model))
        return req

    def _run(self, reqs: Sequence[SampleRequest]) -> list[SampleResult]:
        out: list[SampleResult] = []
        chunk: list[SampleRequest] = []
        rows = 0
        with self._lock:
            for r in [*reqs, None]:
                if r is None or (chunk and rows + r.num_samples > self.max_batch_rows):
                    out.extend(
                        sample_batch(
                            self.model,
                            self.tokenizer,
                            chunk,
                            device=self.device,
                            generator=self._generator,
                            prefix_cache=self.prefix_cache,
                            counters=self._counters,
                        )
                    )
                    self.batches_run += 1
                    chunk, rows = [], 0
                if r is not None:
                    chunk.append(r)
                    rows += r.num_samples
            self.requests_served += len(reqs)
        return out

    def sample(self, prompt: Sequence[int], num_samples: int, params: SamplingParams) -> SampleResult:
        """``num_samples`` completions of ``prompt`` (one batched computation)."""
        return self._run([self._request(prompt, num_samples, params)])[0]

    async def sample_async(
        self, prompt: Sequence[int], num_samples: int, params: SamplingParams
    ) -> SampleResult:
        """Like :meth:`sample`; concurrent calls on one event loop are coalesced into one batch."""
        req = self._request(prompt, num_samples, params)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[SampleResult] = loop.create_future()
        pending = self._pending.setdefault(loop, [])
        pending.append((req, fut))
        if len(pending) == 1:
            loop.call_soon(self._flush, loop)
        return await fut

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        batch = self._pending.pop(loop, [])
        if not batch:
            return

        async def run() -> None:
            try:
                results = await asyncio.to_thread(self._run, [r for r, _ in batch])
            except BaseException as exc:  # deliver the failure to every waiter
                for _, f in batch:
                    if not f.done():
                        f.set_exception(exc)
                return
            for (_, f), res in zip(batch, results):
                if not f.done():
                    f.set_result(res)

        task = loop.create_task(run())
        task.add_done_callback(lambda t: None)  # keep a reference until done

    def prefix_cache_stats(self) -> dict[str, float]:
        """Cumulative prompt-work and prefix-cache counters of this client, as metrics.

        ``sampling/prefix_hit_tokens`` (prompt tokens whose KV came from the cache), ``sampling/prefill_tokens``
        (prompt tokens computed by a forward; with the cache off, every distinct prompt's length),
        ``sampling/prefix_hit_rate``, ``sampling/prefix_inserted_tokens``, ``sampling/prefix_evictions``
        (blocks), ``sampling/prefix_evicted_tokens``, ``sampling/prefix_cache_peak_bytes`` and the cache's
        current ``sampling/prefix_cache_bytes`` and ``sampling/prefix_cache_tokens``. Counts are since this
        client was made.
        """
        with self._lock:
            return counters_metrics(self.counters, [] if self.prefix_cache is None else [self.prefix_cache])

    def clear_prefix_cache(self) -> None:
        """Drop the cached KV (counters are kept); sampling stays correct, it only prefills more."""
        with self._lock:
            if self.prefix_cache is not None:
                self.prefix_cache.clear()

    # ---- scoring
    def compute_logprobs(self, tokens: Sequence[int]) -> list[float | None]:
        """``[None, lp_1, ..., lp_{n-1}]``, ``lp_t = log p(tokens[t] | tokens[:t])`` under these weights."""
        torch = require("torch", "local")
        ids = [int(t) for t in tokens]
        if not ids:
            raise ValueError("compute_logprobs: empty token list")
        _check_ids(ids, self.vocab_size, "compute_logprobs")
        if len(ids) == 1:
            return [None]
        with self._lock, torch.inference_mode():
            x = torch.tensor([ids], dtype=torch.long, device=self.device)
            logits, _ = forward_logits(self.model, x)
            lp = torch.log_softmax(logits[0, :-1], dim=-1).gather(-1, x[0, 1:, None]).squeeze(-1)
        return [None, *(float(v) for v in lp.tolist())]

    async def compute_logprobs_async(self, tokens: Sequence[int]) -> list[float | None]:
        """:meth:`compute_logprobs` in a worker thread."""
        return await asyncio.to_thread(self.compute_logprobs, tokens)

    def score_continuations(
        self, prompt: Sequence[int], continuations: Sequence[Sequence[int]]
    ) -> list[list[float]]:
        """The logprobs of each continuation after one shared prompt, the prompt prefilled once.

        Returns ``[[log p(c_0 | prompt), log p(c_1 | prompt + c_0), ...] for c in continuations]``: the tail of
        ``compute_logprobs(prompt + c)``. The prompt's keys and values are computed by one forward pass and
        shared by the continuations, so scoring L answers of m tokens after a P-token prompt runs
        ``P + L * (m - 1)`` token positions instead of ``L * (P + m)`` (the generative critic's answer grid,
        :mod:`tempo_rl.critic.generative`). The values agree with :meth:`compute_logprobs` up to float rounding
        (the continuation tokens attend to cached keys instead of recomputed ones); a call always runs the same
        computation, so it is deterministic.
        """
        torch = require("torch", "local")
        ids = [int(t) for t in prompt]
        conts = [[int(t) for t in c] for c in continuations]
        if not ids:
            raise ValueError("score_continuations: empty prompt")
        _check_ids([*ids, *(t for c in conts for t in c)], self.vocab_size, "score_continuations")
        limit = _max_positions(self.model)
        longest = len(ids) + max((len(c) for c in conts), default=0)
        if limit is not None and longest > limit:
            raise ValueError(
                f"score_continuations: prompt + continuation is {longest} tokens, over the model's "
                f"max_positions={limit}; shorten the prompt (e.g. sampling.critic_max_prompt_tokens)"
            )
        out: list[list[float]] = []
        with self._lock, torch.inference_mode():
            x = torch.tensor([ids], dtype=torch.long, device=self.device)
            logits, cache = forward_logits(self.model, x, use_cache=True, logits_to_keep=1)
            first = torch.log_softmax(logits[0, -1], dim=-1)
            for c in conts:
                if not c:
                    out.append([])
                    continue
                lps = [float(first[c[0]])]
                if len(c) > 1:
                    y = torch.tensor([c], dtype=torch.long, device=self.device)
                    pos = torch.arange(len(ids), len(ids) + len(c) - 1, device=self.device)[None]
                    step, _ = forward_logits(
                        self.model, y[:, :-1], position_ids=pos, cache=copy.deepcopy(cache), use_cache=True
                    )
                    lp = torch.log_softmax(step[0], dim=-1).gather(-1, y[0, 1:, None]).squeeze(-1)
                    lps.extend(float(v) for v in lp.tolist())
                out.append(lps)
        return out

    async def score_continuations_async(
        self, prompt: Sequence[int], continuations: Sequence[Sequence[int]]
    ) -> list[list[float]]:
        """:meth:`score_continuations` in a worker thread."""
        return await asyncio.to_thread(self.score_continuations, prompt, continuations)

    def get_tokenizer(self) -> Tokenizer:
        """The tokenizer of this model."""
        return self.tokenizer


class LocalSamplingStats:
    """Sampling counters of every :class:`LocalSamplingClient` a training client made (all policy versions).

    ``as_metrics()`` is read into the run's metrics by the trainer with the other components' counters: the
    keys of :meth:`LocalSamplingClient.prefix_cache_stats`, cumulative since the training client was made, with
    ``sampling/prefix_cache_bytes`` / ``_tokens`` summed over the sampling clients still alive; and the weights
    snapshots now: ``sampling/live_samplers`` (sampling clients still referenced), ``sampling/live_snapshots``
    (those of them that hold a copy of some weights: an older policy version still in use) and
    ``sampling/snapshot_bytes`` (the bytes of those copies).
    """

    def __init__(self) -> None:
        self.counters = PrefixCacheCounters()
        self.samplers: weakref.WeakSet[LocalSamplingClient] = weakref.WeakSet()

    def snapshots(self) -> dict[str, float]:
        """``live_samplers``, ``live_snapshots`` and ``snapshot_bytes`` (without the prefix)."""
        live = list(self.samplers)
        copies = [s.snapshot_bytes for s in live if s.snapshot_bytes > 0]
        return {
            "live_samplers": float(len(live)),
            "live_snapshots": float(len(copies)),
            "snapshot_bytes": float(sum(copies)),
        }

    def as_metrics(self) -> dict[str, float]:
        """The counters as ``sampling/...`` metrics."""
        caches = [s.prefix_cache for s in list(self.samplers) if s.prefix_cache is not None]
        out = counters_metrics(self.counters, caches)
        out.update({f"sampling/{k}": v for k, v in self.snapshots().items()})
        return out


def _first_active(loss_fn: str, mask: torch.Tensor, inputs: Mapping[str, torch.Tensor]) -> int:
    """The first position (column) of a ``[B, T]`` chunk where any row's loss term can be non-zero: a target
    with a non-zero advantage (importance sampling, PPO) or weight (cross-entropy). ``T - 1`` when none.

    Every term before it is exactly zero (times a zero advantage or weight), so dropping those positions from
    the logits leaves the loss and the gradient as they are."""
    scale = inputs.get("weights") if loss_fn == "cross_entropy" else inputs.get("advantages")
    active = mask if scale is None else mask * (scale != 0)
    cols = active.sum(0).nonzero()
    return int(cols[0].item()) if len(cols) else mask.shape[1] - 1


class LocalTrainingClient:
    """Trains a local causal LM with PyTRIO's ``forward_backward`` / ``optim_step`` semantics.

    Args:
        model: a causal LM (e.g. from :func:`~tempo_rl.backends.local.model.build_tiny_model`, optionally
            wrapped by :func:`~tempo_rl.backends.local.model.apply_lora`: then only the adapter's parameters
            train).
        tokenizer: its tokenizer; ``len(tokenizer)`` must not exceed the model's vocabulary.
        device: ``"cpu"``, ``"cuda"``, ...; the model is moved there.
        seed: seed of sampling clients' default generators.
        state_dir: where ``save_state(name)`` writes ``<name>.pt`` (created on demand).
        max_tokens_per_chunk: ``forward_backward`` processes datums in chunks of at most this many padded
            tokens (gradients accumulate across chunks, so the result does not depend on it).
        max_batch_rows: passed to sampling clients.
        num_threads: torch CPU threads (process-wide ``torch.set_num_threads``). ``None`` = automatic: 1
            thread for a small model (< 20M parameters) on CPU, where multi-threading tiny matrix products
            costs more than it saves (10-20x slower sampling measured on a loaded 2-core machine); torch's
            default otherwise.
        prefix_cache_bytes: KV prefix cache budget of each sampling client (see
            :class:`LocalSamplingClient`; ``None`` = default, ``0`` = off). A sampling client made after an
            ``optim_step`` empties the caches of the clients made before it (they stay usable), so one budget is
            in use at a time in a training run; :attr:`sampling_stats` sums the counters of all of them.
        activation_checkpointing: ``forward_backward`` keeps only each decoder layer's input and recomputes the
            layer's activations in the backward pass (one more forward: about a third more training time).
            Measured on SmolLM2-135M with LoRA: 0.8 MB of memory a token of model input instead of 2.3 MB. The
            loss and the gradient are the same, bit for bit. ``None`` = automatic: on for models of at least
            20M parameters.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Tokenizer,
        *,
        device: str = "cpu",
        seed: int = 0,
        state_dir: str | Path = "checkpoints",
        max_tokens_per_chunk: int = 16384,
        max_batch_rows: int = 64,
        num_threads: int | None = None,
        prefix_cache_bytes: int | None = None,
        activation_checkpointing: bool | None = None,
    ) -> None:
        torch = require("torch", "local")
        _check_cache_bytes(prefix_cache_bytes)
        small = sum(p.numel() for p in model.parameters()) < 20_000_000
        if num_threads is None and str(device).startswith("cpu") and small:
            num_threads = 1
        if num_threads is not None:
            if num_threads < 1:
                raise ValueError(f"num_threads must be >= 1, got {num_threads}")
            torch.set_num_threads(num_threads)
        if len(tokenizer) > _vocab_size(model):
            raise ValueError(
                f"tokenizer has {len(tokenizer)} tokens but the model's vocabulary is {_vocab_size(model)}; "
                "build the model with vocab_size=len(tokenizer)"
            )
        self.model = model.to(device).eval()  # always eval: no dropout in training or sampling
        dtypes = {p.dtype for p in self.model.parameters()}
        for dt in dtypes:
            check_dtype(dt, device)
        low = sorted(
            str(p.dtype) for p in self.model.parameters() if p.requires_grad and p.element_size() < 4
        )
        if low:
            warnings.warn(
                f"the trained parameters are {low[0].removeprefix('torch.')}: Adam updates smaller than their "
                "rounding step (~0.4% of a weight in bfloat16) are lost; train full fine-tuning in float32, or "
                "use LoRA (its adapter stays float32 over half-precision base weights)",
                stacklevel=2,
            )
        self.tokenizer = tokenizer
        self.device = device
        self.seed = seed
        self.state_dir = Path(state_dir)
        self.max_tokens_per_chunk = max_tokens_per_chunk
        self.max_batch_rows = max_batch_rows
        self.vocab_size = _vocab_size(model)
        self._optimizer: Any = None
        self._lock = threading.Lock()
        self._snapshots = 0
        #: optimizer steps taken, and the pre-clip global gradient norm of the last one
        self.step = 0
        self.last_grad_norm = 0.0
        self.prefix_cache_bytes = prefix_cache_bytes
        #: sampling counters of every sampling client made here (read by the trainer's run metrics)
        self.sampling_stats = LocalSamplingStats()
        self._samplers: list[tuple[int, weakref.ref[LocalSamplingClient]]] = []
        if activation_checkpointing is None:
            activation_checkpointing = not small
        #: the decoder layers that recompute their activations in ``forward_backward`` (empty: none do)
        self.checkpointed_layers = _checkpointable_layers(self.model) if activation_checkpointing else []

    # ---- helpers
    def _trainable(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def _make_optimizer(self) -> Any:
        torch = require("torch", "local")
        if self._optimizer is None:
            d = AdamParams()
            self._optimizer = torch.optim.AdamW(
                self._trainable(), lr=d.learning_rate, betas=(d.beta1, d.beta2), eps=d.eps, weight_decay=0.0
            )
        return self._optimizer

    def _chunks(self, datums: Sequence[Datum]) -> list[list[Datum]]:
        chunks: list[list[Datum]] = [[]]
        width = 0
        for d in datums:
            w = max(width, len(d.model_input))
            if chunks[-1] and w * (len(chunks[-1]) + 1) > self.max_tokens_per_chunk:
                chunks.append([])
                w = len(d.model_input)
            chunks[-1].append(d)
            width = w
        return chunks

    def _tensors(self, chunk: Sequence[Datum]) -> tuple[Any, Any, Any, dict[str, Any]]:
        torch = require("torch", "local")
        width = max(len(d.model_input) for d in chunk)
        b = len(chunk)
        ids = torch.zeros((b, width), dtype=torch.long)
        attn = torch.zeros((b, width), dtype=torch.long)
        tgt = torch.zeros((b, width), dtype=torch.long)
        mask = torch.zeros((b, width), dtype=torch.float32)
        floats = {
            k: torch.zeros((b, width), dtype=torch.float32) for k in ("logprobs", "advantages", "weights")
        }
        present: set[str] = set()
        for i, d in enumerate(chunk):
            n = len(d.model_input)
            ids[i, :n] = torch.tensor(d.model_input, dtype=torch.long)
            attn[i, :n] = 1
            t = np.asarray(d.loss_fn_inputs["target_tokens"], dtype=np.int64)
            valid = t != IGNORE_INDEX
            tgt[i, :n] = torch.from_numpy(np.where(valid, t, 0))
            mask[i, :n] = torch.from_numpy(valid.astype(np.float32))
            for k, arr in floats.items():
                if k in d.loss_fn_inputs:
                    arr[i, :n] = torch.from_numpy(np.asarray(d.loss_fn_inputs[k], dtype=np.float32))
                    present.add(k)
                elif k == "weights":
                    arr[i, :n] = 1.0
        inputs = {k: floats[k].to(self.device) for k in present}  # missing weights of a datum count as 1
        return ids.to(self.device), attn.to(self.device), (tgt.to(self.device), mask.to(self.device)), inputs

    @contextlib.contextmanager
    def _checkpointing(self) -> Iterator[None]:
        """Switch the checkpointed layers' own ``training`` flag on (a layer checkpoints only then; their
        submodules stay in eval mode: no dropout) for the duration of a ``forward_backward``."""
        for layer in self.checkpointed_layers:
            layer.training = True
        try:
            yield
        finally:
            for layer in self.checkpointed_layers:
                layer.training = False

    # ---- protocol
    def forward_backward(
        self, datums: Sequence[Datum], loss_fn: LossFn, loss_fn_config: Mapping[str, Any] | None = None
    ) -> ForwardBackwardOutput:
        """Add the gradient of the summed loss over ``datums`` to the parameters' ``.grad``.

        Returns:
            ``loss`` (the summed loss) and metrics: ``tokens`` (model-input tokens), ``target_tokens``
            (positions in the loss), ``datums``, and for the ratio losses ``ratio_mean`` / ``ratio_max`` (and
            PPO's ``clip_fraction``), averaged over chunks weighted by their target tokens.
        """
        torch = require("torch", "local")
        cfg = validate_loss_fn(loss_fn, loss_fn_config)
        validate_datums(datums, self.vocab_size, loss_fn)
        total = 0.0
        n_tok = 0
        n_tgt = 0.0
        agg: dict[str, float] = {}
        with self._lock, self._checkpointing():
            for chunk in self._chunks(datums):
                ids, attn, (tgt, mask), inputs = self._tensors(chunk)
                m = float(mask.sum().item())  # positions in the loss, before any are cut below
                # logits only from the chunk's first position that can move the loss (a non-zero advantage
                # or weight) on: an RL datum's prompt cannot, and [B, T, V] logits of a real vocabulary are
                # most of the memory (1,000 prompt tokens x 49,152 x 4 bytes = 197 MB a row, held twice)
                first = _first_active(loss_fn, mask, inputs)
                width = ids.shape[1]
                if first > 0:
                    tgt, mask = tgt[:, first:], mask[:, first:]
                    inputs = {k: v[:, first:] for k, v in inputs.items()}
                # right padding + causal attention: real positions never see the padding, so no mask is
                # needed (and the unmasked causal kernel is much faster, backward especially)
                logits, _ = forward_logits(self.model, ids, logits_to_keep=width - first if first > 0 else 0)
                lp = torch.log_softmax(logits, dim=-1).gather(-1, tgt[..., None]).squeeze(-1)
                loss, metrics = compute_loss(loss_fn, lp, inputs, mask, cfg)
                loss.backward()
                total += float(loss.item())
                n_tok += int(attn.sum().item())
                n_tgt += m
                for k, v in metrics.items():
                    agg[k] = max(agg.get(k, v), v) if k.endswith("_max") else agg.get(k, 0.0) + v * m
        out = {k: (v if k.endswith("_max") else (v / n_tgt if n_tgt else 0.0)) for k, v in agg.items()}
        out.update({"tokens": float(n_tok), "target_tokens": n_tgt, "datums": float(len(datums))})
        return ForwardBackwardOutput(loss=total, metrics=out)

    def optim_step(self, adam_params: AdamParams) -> None:
        """Clip the accumulated gradient (global L2 norm <= ``grad_clip_norm`` when > 0), take one Adam step
        ``p <- p - lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p)`` (decoupled decay, AdamW) and zero
        the gradients."""
        torch = require("torch", "local")
        a = adam_params
        if a.learning_rate < 0 or not 0 <= a.beta1 < 1 or not 0 <= a.beta2 < 1 or a.eps <= 0:
            raise ValueError(f"invalid AdamParams {a}: need lr >= 0, 0 <= beta1, beta2 < 1 and eps > 0")
        with self._lock:
            opt = self._make_optimizer()
            for g in opt.param_groups:
                g.update(lr=a.learning_rate, betas=(a.beta1, a.beta2), eps=a.eps, weight_decay=a.weight_decay)
            # samplers still alive keep their policy version: they copy what the step changes in place
            self._release({id(p) for g in opt.param_groups for p in g["params"]})
            params = self._trainable()
            grads = [p.grad for p in params if p.grad is not None]
            norm = (
                torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
                if grads
                else None
            )
            self.last_grad_norm = float(norm.item()) if norm is not None else 0.0
            if a.grad_clip_norm > 0 and grads:
                torch.nn.utils.clip_grad_norm_(params, a.grad_clip_norm)
            opt.step()
            opt.zero_grad(set_to_none=True)
            self.step += 1

    def save_state(self, name: str) -> str:
        """Write weights, optimizer state and step count to ``state_dir/<name>.pt``; return that path."""
        torch = require("torch", "local")
        check_checkpoint_name(name)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        path = self.state_dir / f"{name}.pt"
        with self._lock:
            state = {
                "model": {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
                "optimizer": None if self._optimizer is None else self._optimizer.state_dict(),
                "step": self.step,
            }
            tmp = path.with_suffix(".pt.tmp")
            torch.save(state, tmp)
            tmp.replace(path)
        return str(path)

    def load_state(self, path: str) -> None:
        """Restore weights, optimizer state and step count from a :meth:`save_state` file."""
        torch = require("torch", "local")
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"no saved state at {p}; pass a path returned by save_state(name)")
        state = torch.load(p, map_location=self.device, weights_only=True)
        with self._lock:
            loaded = state["model"]
            changing = {  # what load_state_dict overwrites in place with other values
                id(v)
                for k, v in self.model.state_dict(keep_vars=True).items()
                if isinstance(v, torch.nn.Parameter)
                and (v.requires_grad or k not in loaded or not torch.equal(v.detach(), loaded[k]))
            }
            self._release(changing)
            self.model.load_state_dict(loaded)
            self._optimizer = None
            if state.get("optimizer") is not None:
                self._make_optimizer().load_state_dict(state["optimizer"])
            self.step = int(state.get("step", 0))

    def _live_samplers(self) -> list[LocalSamplingClient]:
        return [s for s in (ref() for _, ref in self._samplers) if s is not None]

    def _release(self, changing: set[int]) -> None:
        """Before the parameters with ids in ``changing`` change in place: every live sampler copies those it
        still shares (copy-on-write); dead samplers are forgotten."""
        self._samplers = [(step, ref) for step, ref in self._samplers if ref() is not None]
        for sampler in self._live_samplers():
            sampler._own_copies(changing)

    def save_weights_and_get_sampling_client(self, name: str | None = None) -> LocalSamplingClient:
        """A sampling client over the current weights, which later training never changes for it; ``name`` is
        a label only.

        The client shares the weights' storage and copies a parameter only before this client changes it
        while the sampler is alive (see the module's docstring): with LoRA the frozen base weights stay one
        copy, shared by every policy version.
        """
        if name is not None:
            check_checkpoint_name(name)
        with self._lock:  # registered before an optim_step can change the shared weights
            snapshot, pairs = _shared_view(self.model)
            self._snapshots += 1
            sampler = LocalSamplingClient(
                snapshot,
                self.tokenizer,
                device=self.device,
                seed=self.seed + self._snapshots,
                max_batch_rows=self.max_batch_rows,
                prefix_cache_bytes=self.prefix_cache_bytes,
                shared_counters=self.sampling_stats.counters,
            )
            sampler._borrowed = pairs
            live: list[tuple[int, weakref.ref[LocalSamplingClient]]] = []
            for step, ref in self._samplers:
                old = ref()
                if old is None:
                    continue
                if step < self.step:  # an older policy version: free its memory for the new one's cache
                    old.clear_prefix_cache()
                live.append((step, ref))
            self._samplers = [*live, (self.step, weakref.ref(sampler))]
        self.sampling_stats.samplers.add(sampler)
        return sampler

    def get_tokenizer(self) -> Tokenizer:
        """The tokenizer of this model."""
        return self.tokenizer
