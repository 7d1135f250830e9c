"""A KV prefix cache for the local sampler: reuse the keys/values of token prefixes across ``sample`` calls.

Every turn of a multi-turn episode re-sends the whole history: turn ``t+1``'s prompt is turn ``t``'s prompt plus
its sampled tokens plus the new observation. Branches restored from one stored state, the TEMPO critic's ``K``
samples and its endpoint samples share long prefixes too. Without a cache each call prefills its whole prompt:
``O(L)`` forward work per call (``O(L^2)`` attention), so turn 50 costs 11-17x turn 5. With the cache a call
prefills only the tokens past its longest cached prefix (the idea of vLLM's automatic prefix caching and
SGLang's radix attention).

**Structure.** A trie whose edges are *blocks* of ``block_tokens`` consecutive token ids (default 16): the node
at depth ``d`` on the path ``b_1 ... b_d`` holds the keys and values of tokens ``[(d-1) B, d B)`` of every
sequence that starts with ``b_1 ... b_d`` (for all layers: one tensor ``[layers, 2, kv_heads, B, head_dim]``).
The KV of a token depends only on the tokens before it and on its position (the trie path fixes both), so a
block is shared by every sequence through it: N branches of one prefix store the prefix once. Only whole blocks
are stored and reused, so a lookup reuses ``B * floor(m / B)`` tokens of an ``m``-token match (at most
``B - 1`` tokens are recomputed), and never the prompt's last token (its logits start the completion).

**Bounds.** ``max_bytes`` bounds the bytes of the stored KV tensors (``sum(block.numel() * element_size)``);
after each insertion, least-recently-used *leaf* blocks are evicted until the total fits. A lookup or an
insertion touches its path leaf-first, so a block is always more recent than its descendants and the LRU block
is a leaf: eviction never orphans a stored descendant. Memory per cached token:
``2 * layers * kv_heads * head_dim * element_size`` bytes (:meth:`PrefixCache.bytes_per_token`).

**Policy versions.** A cache belongs to one :class:`~tempo_rl.backends.local.client.LocalSamplingClient`, i.e. to
one fixed set of weights; a new sampler (after ``optim_step``, from ``save_weights_and_get_sampling_client``)
starts with an empty cache, so KV of different weights never mix.

**Scope.** It serves any ``transformers`` causal LM whose cache is a ``DynamicCache`` of full-attention layers
(keys and values ``[batch, kv_heads, seq, head_dim]``). Other caches (sliding-window layers, linear-attention or
quantized layers, encoder-decoder) are detected at the first call and the cache turns itself off
(:attr:`PrefixCache.disabled_reason` says why); sampling is then exactly the uncached computation.

Counters (:class:`PrefixCacheCounters`) are cumulative; the sampling client reports them with
:meth:`~tempo_rl.backends.local.client.LocalSamplingClient.prefix_cache_stats`.
"""

from __future__ import annotations

import itertools
import os
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tempo_rl._optional import require

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = [
    "DEFAULT_BLOCK_TOKENS",
    "PrefixCache",
    "PrefixCacheCounters",
    "ScratchBuffers",
    "build_dynamic_cache",
    "bump",
    "cache_layers",
    "counters_metrics",
    "default_cache_bytes",
    "growing_cache",
]

#: tokens per stored block (the granularity of reuse and eviction)
DEFAULT_BLOCK_TOKENS = 16


def default_cache_bytes(device: str = "cpu") -> int:
    """The default budget: 1/8 of the device's memory (GPU memory on CUDA, physical RAM on CPU), in bytes.

    The budget is per sampling client; the training client empties the caches of its older sampling clients
    when it makes a new one, so in a training run about one budget is in use at a time.
    """
    if str(device).startswith("cuda"):
        torch = require("torch", "local")
        return int(torch.cuda.get_device_properties(torch.device(device)).total_memory // 8)
    try:
        total = int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover - non-POSIX
        total = 8 * 1024**3
    return total // 8


@dataclass
class PrefixCacheCounters:
    """Cumulative counters of prompt prefill work and of the cache (token and block counts).

    ``prefix_hit_tokens + prefill_tokens`` is the number of prompt tokens of the distinct prompts of all calls
    (requests of one call sharing a prompt count it once): the first were read from the cache, the second were
    computed by a forward pass (padding excluded).
    """

    prefix_hit_tokens: int = 0
    prefill_tokens: int = 0
    inserted_tokens: int = 0
    evictions: int = 0
    evicted_tokens: int = 0
    #: the most bytes one cache held after an insertion (a maximum, not a sum)
    peak_bytes: int = 0


def _growing_layer_class() -> Any:
    """:class:`GrowingLayer`, defined on first use (its base class needs transformers)."""
    global _GROWING
    if _GROWING is None:
        transformers = require("transformers", "local")
        if not hasattr(transformers.cache_utils, "DynamicLayer"):  # pragma: no cover - transformers < 4.56
            return None

        class GrowingLayer(transformers.cache_utils.DynamicLayer):  # type: ignore[misc, name-defined]
            """A ``DynamicLayer`` over preallocated buffers ``[batch, kv_heads, capacity, head_dim]``.

            ``update`` writes the new keys/values in place and returns views of the filled part, so a decode
            step costs O(new tokens) instead of ``DynamicLayer``'s O(cached tokens) ``torch.cat``; the buffers
            double when full. The values are the same as a ``DynamicLayer``'s.
            """

            def __init__(self, kbuf: torch.Tensor, vbuf: torch.Tensor, filled: int) -> None:
                super().__init__()
                self._kbuf, self._vbuf, self._n = kbuf, vbuf, filled
                self.device = kbuf.device
                self.dtype = kbuf.dtype
                self.is_initialized = True
                self._views()

            def _views(self) -> None:
                self.keys = self._kbuf[:, :, : self._n]
                self.values = self._vbuf[:, :, : self._n]

            def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
                new = key_states.shape[-2]
                if self._n + new > self._kbuf.shape[2]:
                    cap = max(2 * self._kbuf.shape[2], self._n + new)
                    grown = []
                    for buf in (self._kbuf, self._vbuf):
                        g = buf.new_empty((*buf.shape[:2], cap, buf.shape[3]))
                        g[:, :, : self._n] = buf[:, :, : self._n]
                        grown.append(g)
                    self._kbuf, self._vbuf = grown
                self._kbuf[:, :, self._n : self._n + new] = key_states
                self._vbuf[:, :, self._n : self._n + new] = value_states
                self._n += new
                self._views()
                return self.keys, self.values

            def get_seq_length(self) -> int:
                return int(self._n)

            def batch_select_indices(self, indices: Any) -> None:
                idx = [int(i) for i in (indices.tolist() if hasattr(indices, "tolist") else indices)]
                if all(b > a for a, b in itertools.pairwise(idx)) and (not idx or idx[0] >= 0):
                    # increasing rows (finished rows dropped): compact in place, row j <- row idx[j] >= j
                    for j, i in enumerate(idx):
                        if i != j:
                            self._kbuf[j, :, : self._n] = self._kbuf[i, :, : self._n]
                            self._vbuf[j, :, : self._n] = self._vbuf[i, :, : self._n]
                    self._kbuf, self._vbuf = self._kbuf[: len(idx)], self._vbuf[: len(idx)]
                else:
                    self._kbuf = self._kbuf[indices, ...]
                    self._vbuf = self._vbuf[indices, ...]
                self._views()

            def batch_repeat_interleave(self, repeats: int) -> None:
                self._kbuf = self._kbuf.repeat_interleave(repeats, dim=0)
                self._vbuf = self._vbuf.repeat_interleave(repeats, dim=0)
                self._views()

            def crop(self, tokens_to_remove: int) -> None:
                if tokens_to_remove > 0:
                    raise ValueError("GrowingLayer.crop takes a negative number of tokens to remove")
                self._n = max(0, self._n + tokens_to_remove)
                self._views()

        _GROWING = GrowingLayer
    return _GROWING


_GROWING: Any = None


def growing_cache(
    layers: Sequence[tuple[torch.Tensor, torch.Tensor]],
    *,
    filled: int,
    rows: Sequence[int] | None = None,
    extra: int = 0,
    scratch: ScratchBuffers | None = None,
) -> Any | None:
    """A ``DynamicCache`` of :class:`GrowingLayer` layers over ``layers``' keys and values.

    Args:
        layers: ``(keys, values)`` per layer, ``[batch, kv_heads, >= filled, head_dim]``; their first ``filled``
            columns are the cached ones.
        filled: number of cached columns.
        rows: batch rows to take, in order (repeats allowed); ``None`` uses ``layers``' tensors as buffers
            (no copy; their spare columns ``[filled, ...)`` receive the next tokens).
        extra: spare columns to allocate past ``filled`` when copying (``rows`` given).
        scratch: reuse its ``"decode"`` buffer for the copy instead of allocating one.

    Returns ``None`` when no copy is needed: ``layers`` come from a cache of growing layers holding exactly
    ``rows`` (``0, 1, ...``) with room for ``extra`` more columns; keep using that cache.
    """
    cls = _growing_layer_class()
    if rows is not None and cls is not None and _has_room(layers, cls, rows, filled + extra):
        return None
    if cls is None:  # pragma: no cover - transformers < 4.56: plain DynamicCache (torch.cat appends)
        torch = require("torch", "local")
        idx = None if rows is None else torch.tensor(list(rows), dtype=torch.long, device=layers[0][0].device)
        return build_dynamic_cache(
            [
                (k[:, :, :filled], v[:, :, :filled])
                if idx is None
                else (k[idx, :, :filled], v[idx, :, :filled])
                for k, v in layers
            ]
        )
    if rows is None:
        built = [cls(k, v, filled) for k, v in layers]
    else:
        rows = list(rows)
        runs: list[
            tuple[int, int, int]
        ] = []  # (first row, last row + 1, source row): one broadcast copy per run of equal sources
        for r, i in enumerate(rows):
            if runs and runs[-1][2] == i and runs[-1][1] == r:
                runs[-1] = (runs[-1][0], r + 1, i)
            else:
                runs.append((r, r + 1, i))
        k0 = layers[0][0]
        shape = (len(layers), 2, len(rows), k0.shape[1], filled + max(extra, 1), k0.shape[3])
        buf = k0.new_empty(shape) if scratch is None else scratch.get("decode", shape, k0)
        built = []
        for layer, (k, v) in enumerate(layers):
            for j, src in enumerate((k, v)):
                for a, b, i in runs:
                    buf[layer, j, a:b, :, :filled].copy_(src[i : i + 1, :, :filled].expand(b - a, -1, -1, -1))
            built.append(cls(buf[layer, 0], buf[layer, 1], filled))
    transformers = require("transformers", "local")
    cache = transformers.cache_utils.DynamicCache()
    cache.layers = built
    cache.layer_class_to_replicate = None
    return cache


def _has_room(layers: Any, cls: Any, rows: Sequence[int], capacity: int) -> bool:
    """True when ``layers`` are already growing layers of exactly ``rows`` with ``capacity`` columns."""
    owners: list[Any] = getattr(layers, "owners", None) or []
    return (
        bool(owners)
        and all(type(layer) is cls and layer._kbuf.shape[2] >= capacity for layer in owners)
        and list(rows) == list(range(owners[0]._kbuf.shape[0]))
    )


class _Layers(list):  # type: ignore[type-arg]
    """``cache_layers``' result, remembering the cache layers it was read from."""

    owners: list[Any]


def cache_layers(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """``[(keys, values), ...]`` per layer of a full-attention ``DynamicCache``, else ``None``.

    Accepts the layered cache of transformers >= 4.56 (``cache.layers[i].keys``) and the older
    ``key_cache`` / ``value_cache`` lists; rejects any layer that is not a plain full-attention ``DynamicLayer``
    (sliding window, quantized, linear attention, ...) because its keys are not one row per token.
    """
    transformers = require("transformers", "local")
    cu = transformers.cache_utils
    if type(cache) is not getattr(cu, "DynamicCache", None):
        return None
    layers = getattr(cache, "layers", None)
    if layers is not None:
        dyn = getattr(cu, "DynamicLayer", None)
        if dyn is None or any(type(layer) not in (dyn, _growing_layer_class()) for layer in layers):
            return None
        out = _Layers((layer.keys, layer.values) for layer in layers)
        out.owners = list(layers)
    else:  # pragma: no cover - transformers < 4.56
        keys, values = getattr(cache, "key_cache", None), getattr(cache, "value_cache", None)
        if keys is None or values is None:
            return None
        out = _Layers(zip(keys, values))
        out.owners = []
    if not out or any(k is None or k.dim() != 4 or v.dim() != 4 for k, v in out):
        return None
    return out


def build_dynamic_cache(layers: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """A ``DynamicCache`` holding ``(keys, values)`` per layer (each ``[batch, kv_heads, seq, head_dim]``)."""
    transformers = require("transformers", "local")
    cls = transformers.cache_utils.DynamicCache
    if hasattr(cls, "from_legacy_cache") and not hasattr(cls(), "layers"):  # pragma: no cover - < 4.56
        return cls.from_legacy_cache(tuple((k, v) for k, v in layers))
    return cls(ddp_cache_data=[(k, v) for k, v in layers])


class ScratchBuffers:
    """Reusable flat buffers for one call's batch KV, so that successive calls do not allocate afresh.

    A fresh multi-megabyte tensor costs its page faults on first touch (about 4 ms of a 30 ms call measured on
    CPU for the width-64 model at 4,000 tokens); reusing the previous call's buffer avoids them. A buffer is
    kept only up to ``max_bytes``; larger requests get a fresh tensor. Only one call may use them at a time
    (the sampling client's lock).
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = int(max_bytes)
        self._flat: dict[str, Any] = {}
        self._resident: Any = None  # [layers, 2, 1, kv_heads, capacity, head_dim]
        self._resident_tokens: tuple[int, ...] = ()  # the tokens whose KV its first columns hold

    @property
    def nbytes(self) -> int:
        """Bytes held."""
        return sum(int(b.numel() * b.element_size()) for b in self._flat.values())

    def get(self, name: str, shape: Sequence[int], like: torch.Tensor) -> torch.Tensor:
        """An uninitialised tensor of ``shape`` with ``like``'s dtype and device, a view of buffer ``name``."""
        numel = 1
        for d in shape:
            numel *= int(d)
        if numel * like.element_size() > self.max_bytes:
            self._flat.pop(name, None)
            return like.new_empty(tuple(shape))
        buf = self._flat.get(name)
        if buf is None or buf.numel() < numel or buf.dtype != like.dtype or buf.device != like.device:
            cap = min(numel + numel // 4, self.max_bytes // like.element_size())
            self._flat.pop(name, None)
            buf = like.new_empty((max(cap, numel),))
            self._flat[name] = buf
        return buf[:numel].view(tuple(shape))

    def resident(
        self, prompt: tuple[int, ...], layout: Sequence[int], capacity: int, like: torch.Tensor
    ) -> tuple[torch.Tensor, int]:
        """The one-sequence KV buffer of single-prompt calls, and how much of ``prompt`` it already holds.

        A call with one distinct prompt prefills into this buffer, whose columns ``[0, len(prompt))`` then hold
        the prompt's KV (:meth:`set_resident`); the next such call finds the longest common prefix of its
        prompt with those tokens already in place (turn ``t + 1`` extends turn ``t``'s prompt) and copies none
        of it. Returns ``(buffer [layers, 2, 1, kv_heads, >= capacity, head_dim], n)``: its first ``n <
        len(prompt)`` columns are the KV of ``prompt[:n]``. The held tokens are forgotten until
        :meth:`set_resident` (the caller overwrites the columns past ``n``). A buffer larger than ``max_bytes``
        is not kept.

        Args:
            prompt: the call's prompt.
            layout: ``(layers, 2, 1, kv_heads, head_dim)``.
            capacity: columns needed (prompt and decode steps).
            like: a tensor of the KV dtype and device.
        """
        layers, two, one, heads, head_dim = (int(d) for d in layout)
        buf = self._resident
        fits = (
            buf is not None
            and tuple(buf.shape[:4]) == (layers, two, one, heads)
            and buf.shape[5] == head_dim
            and buf.shape[4] >= capacity
            and buf.dtype == like.dtype
            and buf.device == like.device
        )
        held = self._resident_tokens if fits else ()
        self._resident_tokens = ()
        if not fits:
            cap = max(int(capacity), 0 if buf is None else buf.shape[4] * 3 // 2)
            cap = -(-cap // 256) * 256  # room to grow for a few turns
            buf = like.new_empty((layers, two, one, heads, cap, head_dim))
            keep = buf.numel() * buf.element_size() <= self.max_bytes
            self._resident = buf if keep else None
        return buf, min(_common_prefix(held, prompt), len(prompt) - 1)

    def set_resident(self, tokens: tuple[int, ...], buf: torch.Tensor) -> None:
        """Record that the first ``len(tokens)`` columns of ``buf`` (from :meth:`resident`) hold their KV."""
        if buf is self._resident:
            self._resident_tokens = tokens

    def clear(self) -> None:
        """Free the buffers."""
        self._flat.clear()
        self._resident = None
        self._resident_tokens = ()


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """Length of the longest common prefix of ``a`` and ``b`` (tuple comparisons run at C speed)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class _Node:
    """One stored block: the KV of ``block_tokens`` tokens at depth ``depth`` of the trie."""

    __slots__ = ("alive", "block", "children", "depth", "kv", "nbytes", "parent")

    def __init__(self, parent: _Node | None, block: tuple[int, ...], kv: Any, depth: int) -> None:
        self.parent = parent
        self.block = block
        self.kv = kv  # [layers, 2, kv_heads, B, head_dim], or None at the root
        self.depth = depth
        self.nbytes = 0 if kv is None else int(kv.numel() * kv.element_size())
        self.children: dict[tuple[int, ...], _Node] = {}
        self.alive = True  # False once evicted or cleared


class PrefixCache:
    """KV of token prefixes, stored in blocks of ``block_tokens`` tokens in a trie with LRU eviction.

    Not thread-safe: its sampling client calls it under the client's lock.

    Args:
        max_bytes: budget for the stored KV tensors, bytes (``> 0``; a sampler without a cache has no
            ``PrefixCache`` at all).
        block_tokens: tokens per block (``>= 1``).
        counters: counter objects every insertion and eviction is added to (e.g. the sampling client's and
            the training client's).
    """

    def __init__(
        self,
        max_bytes: int,
        *,
        block_tokens: int = DEFAULT_BLOCK_TOKENS,
        counters: Sequence[PrefixCacheCounters] = (),
    ) -> None:
        if max_bytes <= 0:
            raise ValueError(
                f"PrefixCache: max_bytes must be > 0, got {max_bytes}; to turn the cache off, do not make one "
                "(backend.prefix_cache_bytes = 0)"
            )
        if block_tokens < 1:
            raise ValueError(f"PrefixCache: block_tokens must be >= 1, got {block_tokens}")
        self.max_bytes = int(max_bytes)
        self.block_tokens = int(block_tokens)
        self._counters = tuple(counters)
        self._root = _Node(None, (), None, 0)
        self._lru: OrderedDict[int, _Node] = OrderedDict()
        self.nbytes = 0
        #: reusable batch buffers of the sampler's calls (at most a quarter of the budget)
        self.scratch = ScratchBuffers(self.max_bytes // 4)
        #: why the cache turned itself off for this model (None while it is on)
        self.disabled_reason: str | None = None
        self._bytes_per_token: int | None = None

    @property
    def enabled(self) -> bool:
        """False once the model's cache type turned out unsupported."""
        return self.disabled_reason is None

    def disable(self, reason: str) -> None:
        """Turn the cache off for good (unsupported model cache) and drop what it holds."""
        self.disabled_reason = reason
        self.clear()

    @property
    def cached_tokens(self) -> int:
        """Tokens whose KV is stored now (each block counted once, however many sequences share it)."""
        return len(self._lru) * self.block_tokens

    def bytes_per_token(self) -> int | None:
        """Bytes of KV per cached token, ``2 * layers * kv_heads * head_dim * element_size``; None before the
        first block is stored."""
        return self._bytes_per_token

    def clear(self) -> None:
        """Drop every stored block (counters are kept)."""
        for node in self._lru.values():
            node.alive = False
        self._root.children.clear()
        self._lru.clear()
        self.nbytes = 0
        self.scratch.clear()

    # ---- lookup
    def _walk(self, tokens: Sequence[int], max_blocks: int) -> list[_Node]:
        b = self.block_tokens
        node, path = self._root, []
        for k in range(max_blocks):
            child = node.children.get(tuple(tokens[k * b : (k + 1) * b]))
            if child is None:
                break
            path.append(child)
            node = child
        return path

    def _touch(self, path: Sequence[_Node]) -> None:
        for node in reversed(path):  # leaf first: every block ends up more recent than its descendants
            self._lru.move_to_end(id(node))

    def lookup(self, prompt: Sequence[int]) -> list[Any]:
        """The stored blocks of ``prompt``'s longest cached prefix that leaves its last token uncached.

        Returns the blocks' KV tensors in order (``len(result) * block_tokens`` tokens; possibly none) and marks
        them recently used. Counts nothing: the caller counts hits and prefill once per distinct prompt.
        """
        return [n.kv for n in self.lookup_path(prompt)]

    def lookup_path(self, prompt: Sequence[int]) -> list[_Node]:
        """Like :meth:`lookup`, returning the trie nodes (``node.kv`` is the block's KV); pass them to
        :meth:`insert` as ``known`` to skip re-walking that prefix."""
        if not self.enabled:
            return []
        path = self._walk(prompt, (len(prompt) - 1) // self.block_tokens)
        self._touch(path)
        return path

    # ---- insertion
    def insert(self, tokens: Sequence[int], keys_values: Any, *, known: Sequence[_Node] = ()) -> None:
        """Store the whole blocks of ``tokens`` that are not stored yet, then evict down to the budget.

        Args:
            tokens: a sequence whose KV was computed (prompt + fed completion tokens).
            keys_values: callable ``(start, stop) -> tensor [layers, 2, kv_heads, stop - start, head_dim]``
                returning the KV of ``tokens[start:stop]``; called at most once, only for the missing blocks.
            known: the path of ``tokens``' first blocks from :meth:`lookup_path` (ignored when it was evicted
                since: only leaves are evicted, so its last node is dead whenever any node of it is).
        """
        if not self.enabled:
            return
        b = self.block_tokens
        n_blocks = len(tokens) // b
        if known and known[-1].alive and len(known) <= n_blocks:
            path = list(known)
            node = path[-1]
            for k in range(len(path), n_blocks):
                child = node.children.get(tuple(tokens[k * b : (k + 1) * b]))
                if child is None:
                    break
                path.append(child)
                node = child
        else:
            path = self._walk(tokens, n_blocks)
        have = len(path)
        if have < n_blocks:
            kv = keys_values(have * b, n_blocks * b)
            node = path[-1] if path else self._root
            for k in range(have, n_blocks):
                block = tuple(int(t) for t in tokens[k * b : (k + 1) * b])
                part = kv.narrow(3, (k - have) * b, b).clone()  # own storage: freeing a block frees its bytes
                child = _Node(node, block, part, k + 1)
                node.children[block] = child
                self._lru[id(child)] = child
                self.nbytes += child.nbytes
                if self._bytes_per_token is None:
                    self._bytes_per_token = child.nbytes // b
                path.append(child)
                node = child
            bump(self._counters, inserted_tokens=(n_blocks - have) * b)
        self._touch(path)
        for target in self._counters:
            target.peak_bytes = max(target.peak_bytes, self.nbytes)  # before eviction: what it really held
        self._evict()

    def _evict(self) -> None:
        while self.nbytes > self.max_bytes and self._lru:
            victim = next((n for n in self._lru.values() if not n.children), None)
            if victim is None:  # pragma: no cover - impossible by the leaf-first touch order
                break
            del self._lru[id(victim)]
            assert victim.parent is not None
            del victim.parent.children[victim.block]
            victim.alive = False
            self.nbytes -= victim.nbytes
            bump(self._counters, evictions=1, evicted_tokens=self.block_tokens)


def bump(counters: Sequence[PrefixCacheCounters], **deltas: int) -> None:
    """Add ``deltas`` (field name -> count) to every counter object of ``counters``."""
    for target in counters:
        for name, n in deltas.items():
            setattr(target, name, getattr(target, name) + n)


def counters_metrics(
    counters: PrefixCacheCounters, caches: Sequence[PrefixCache], prefix: str = "sampling/"
) -> dict[str, float]:
    """Metrics of cumulative ``counters`` and of the current size of ``caches``.

    Keys (with ``prefix``): ``prefix_hit_tokens`` (prompt tokens read from the cache), ``prefill_tokens``
    (prompt tokens computed), ``prefix_hit_rate`` (``hit / (hit + prefill)``, 0 with no prompt),
    ``prefix_inserted_tokens``, ``prefix_evictions`` (blocks evicted), ``prefix_evicted_tokens``,
    ``prefix_cache_peak_bytes`` (the most one cache held, just after an insertion, before eviction), and now:
    ``prefix_cache_bytes`` (bytes of stored KV) and ``prefix_cache_tokens`` (tokens stored).
    """
    total = counters.prefix_hit_tokens + counters.prefill_tokens
    return {
        f"{prefix}prefix_hit_tokens": float(counters.prefix_hit_tokens),
        f"{prefix}prefill_tokens": float(counters.prefill_tokens),
        f"{prefix}prefix_hit_rate": counters.prefix_hit_tokens / total if total else 0.0,
        f"{prefix}prefix_inserted_tokens": float(counters.inserted_tokens),
        f"{prefix}prefix_evictions": float(counters.evictions),
        f"{prefix}prefix_evicted_tokens": float(counters.evicted_tokens),
        f"{prefix}prefix_cache_peak_bytes": float(counters.peak_bytes),
        f"{prefix}prefix_cache_bytes": float(sum(c.nbytes for c in caches)),
        f"{prefix}prefix_cache_tokens": float(sum(c.cached_tokens for c in caches)),
    }
