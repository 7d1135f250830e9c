"""Array plumbing shared by the signal functions: numpy/torch dispatch, validation and masked group means.

Every public signal function accepts numpy arrays, Python sequences/scalars or torch tensors. When at least
one argument is a torch tensor the whole computation runs in torch on that tensor's device and floating
dtype, and torch tensors come back; otherwise everything runs in numpy and numpy arrays come back. torch is
looked up in ``sys.modules`` only, so it is never imported here: a caller who passes a tensor has imported it.

Conventions (see :mod:`tempo_rl.signals`):

* the group axis is the last axis;
* a boolean ``mask`` of the values' shape marks real entries (``True``) and padding (``False``);
* padding is excluded from every mean and returned as 0;
* a group with no unmasked entry has mean 0.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "Backend",
    "resolve_backend",
]


def is_tensor(x: object) -> bool:
    """True when ``x`` is a torch tensor (decided without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


@dataclass(frozen=True)
class Backend:
    """The array library chosen for one call, with the float dtype (and device) every input is cast to.

    Attributes:
        torch: True for torch, False for numpy.
        dtype: ``numpy.dtype`` or ``torch.dtype`` of the floating result.
        device: the torch device of the tensor inputs; None for numpy.
    """

    torch: bool
    dtype: Any
    device: Any = None

    # ------------------------------------------------------------------ conversion
    def _mod(self) -> Any:
        return sys.modules["torch"] if self.torch else np

    def floats(self, x: Any, name: str) -> Any:
        """``x`` as a floating array of this backend's dtype (and device)."""
        if self.torch:
            torch = self._mod()
            if isinstance(x, torch.Tensor):
                return x.to(dtype=self.dtype)
            return torch.as_tensor(_to_numpy(x, name), dtype=self.dtype, device=self.device)
        return _to_numpy(x, name).astype(self.dtype, copy=False)

    def bools(self, x: Any, name: str) -> Any:
        """``x`` as a boolean array; accepts booleans or numbers that are all exactly 0 or 1."""
        if self.torch:
            torch = self._mod()
            t = x if isinstance(x, torch.Tensor) else torch.as_tensor(_to_numpy(x, name))
            t = t.to(device=self.device)
            if t.dtype != torch.bool:
                if t.is_complex() or not bool(((t == 0) | (t == 1)).all()):
                    raise ValueError(f"{name} must be boolean (or 0/1 numbers); got other values.")
                t = t != 0
            return t
        arr = _to_numpy(x, name)
        if arr.dtype != np.bool_:
            if arr.dtype.kind not in "biuf" or not bool(np.all((arr == 0) | (arr == 1))):
                raise ValueError(
                    f"{name} must be boolean (or 0/1 numbers); got dtype {arr.dtype} with other values."
                )
            arr = arr != 0
        return arr

    # ------------------------------------------------------------------ elementwise helpers
    def where(self, cond: Any, a: Any, b: Any) -> Any:
        if self.torch:
            torch = self._mod()
            return torch.where(cond, _as_operand(torch, a, self), _as_operand(torch, b, self))
        return np.where(cond, a, b).astype(self.dtype, copy=False)

    def isnan(self, x: Any) -> Any:
        return self._mod().isnan(x)

    def isfinite(self, x: Any) -> Any:
        return self._mod().isfinite(x)

    def abs(self, x: Any) -> Any:
        return self._mod().abs(x)

    def exp(self, x: Any) -> Any:
        return self._mod().exp(x)

    def sqrt(self, x: Any) -> Any:
        return self._mod().sqrt(x)

    def clip(self, x: Any, low: float | None, high: float | None) -> Any:
        if self.torch:
            return x.clamp(min=low, max=high)
        return np.clip(x, low, high)

    def cast(self, x: Any) -> Any:
        """Cast a boolean array to this backend's float dtype."""
        if self.torch:
            return x.to(dtype=self.dtype)
        return x.astype(self.dtype)

    def zeros_like(self, x: Any) -> Any:
        return self._mod().zeros_like(x)

    def sum_last(self, x: Any, keepdims: bool = False) -> Any:
        """Sum over the last (group) axis."""
        if self.torch:
            return x.sum(dim=-1, keepdim=keepdims)
        # einsum is ~2x faster than np.sum for the short group axes used here (N, K ~ 4..16).
        total = np.einsum("...i->...", x)
        return total[..., None] if keepdims else total

    def all_last(self, x: Any) -> Any:
        """Logical AND over the last (group) axis."""
        if self.torch:
            return x.all(dim=-1)
        return np.all(x, axis=-1)

    def stack_last(self, xs: Sequence[Any]) -> Any:
        if self.torch:
            return self._mod().stack(list(xs), dim=-1)
        return np.stack(list(xs), axis=-1)

    def any(self, x: Any) -> bool:
        """Python bool: is any element true (used by validation)."""
        return bool(x.any())

    def shape(self, x: Any) -> tuple[int, ...]:
        return tuple(x.shape)

    def finish(self, x: Any) -> Any:
        """Final result: numpy results are returned as ``np.ndarray`` (0-d for scalars), torch as tensors."""
        if self.torch:
            return x
        return np.asarray(x)


def _as_operand(torch: Any, v: Any, backend: Backend) -> Any:
    if isinstance(v, torch.Tensor):
        return v
    return torch.tensor(v, dtype=backend.dtype, device=backend.device)


def _to_numpy(x: Any, name: str) -> np.ndarray:
    """``np.asarray(x)`` with a clear error for ragged input."""
    try:
        arr = np.asarray(x)
    except ValueError as exc:
        raise ValueError(
            f"{name} could not be made into a rectangular array ({exc}). Pad ragged groups to a common size "
            "and pass a boolean mask (False = padding)."
        ) from exc
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name} must hold real numbers (or booleans); got dtype {arr.dtype}.")
    return arr


def resolve_backend(*values: Any) -> Backend:
    """Choose numpy or torch for one call from its array arguments (None entries are ignored).

    torch is chosen when any argument is a tensor; the float dtype is the promotion of the floating tensor
    dtypes (``torch.get_default_dtype()`` when none is floating) and all tensors must share one device.
    For numpy the dtype is the promotion of the floating inputs' dtypes, float64 when none is floating.
    """
    tensors = [v for v in values if v is not None and is_tensor(v)]
    if tensors:
        torch = sys.modules["torch"]
        devices = {t.device for t in tensors}
        if len(devices) > 1:
            raise ValueError(
                f"tensor arguments are on different devices {sorted(map(str, devices))}; "
                "move them to one device."
            )
        float_dtypes = [t.dtype for t in tensors if t.is_floating_point()]
        dtype = float_dtypes[0] if float_dtypes else torch.get_default_dtype()
        for d in float_dtypes[1:]:
            dtype = torch.promote_types(dtype, d)
        return Backend(torch=True, dtype=dtype, device=tensors[0].device)
    float_np = [
        v.dtype for v in values if isinstance(v, np.ndarray | np.generic) and np.asarray(v).dtype.kind == "f"
    ]
    dtype = np.result_type(*float_np) if float_np else np.dtype(np.float64)
    return Backend(torch=False, dtype=dtype)


# ---------------------------------------------------------------------- shared validation and group maths


def check_same_shape(reference_name: str, reference: Any, **others: Any) -> None:
    """Raise ValueError unless every array in ``others`` has the shape of ``reference``."""
    ref_shape = tuple(reference.shape)
    for name, arr in others.items():
        if arr is not None and tuple(arr.shape) != ref_shape:
            raise ValueError(
                f"{name} has shape {tuple(arr.shape)} but {reference_name} has shape {ref_shape}; "
                "they must match element for element (pad ragged groups and pass a mask)."
            )


def check_has_group_axis(name: str, x: Any) -> None:
    """Raise ValueError for 0-d input: the group axis is the last axis, so at least one axis is needed."""
    if len(tuple(x.shape)) == 0:
        raise ValueError(
            f"{name} is a scalar; it needs at least one axis (the last axis is the group axis), e.g. [x]."
        )


def check_finite(b: Backend, name: str, x: Any, mask: Any | None = None, hint: str = "") -> None:
    """Raise ValueError when an unmasked entry of ``x`` is NaN or infinite."""
    bad = ~b.isfinite(x)
    if mask is not None:
        bad = bad & mask
    if b.any(bad):
        count = int(bad.sum())
        raise ValueError(
            f"{name} has {count} non-finite (NaN/inf) unmasked entries.{' ' + hint if hint else ''}"
        )


def prepare_mask(b: Backend, mask: Any | None, values: Any, values_name: str) -> Any | None:
    """Validate ``mask`` against ``values`` and return it as a boolean array (or None)."""
    if mask is None:
        return None
    m = b.bools(mask, "mask")
    check_same_shape(values_name, values, mask=m)
    return m


def masked_floats(name: str, values: Any, mask: Any | None) -> tuple[Backend, Any, Any | None]:
    """The validated ``(backend, x, mask)`` of a signal's masked input ``values`` of shape ``[..., N]``.

    ``x`` is ``values`` as floats; it must have at least one axis (the last one: a group or time axis),
    ``mask`` (when given) its shape, and every unmasked entry must be finite. Raises ValueError naming
    ``name`` otherwise.
    """
    b = resolve_backend(values, mask)
    x = b.floats(values, name)
    check_has_group_axis(name, x)
    m = prepare_mask(b, mask, x, name)
    check_finite(b, name, x, m)
    return b, x, m


def group_mean(b: Backend, x: Any, mask: Any | None) -> tuple[Any, Any | None]:
    """Masked mean over the last axis and the per-group count of unmasked entries.

    mean_g = sum_i m_gi x_gi / max(1, sum_i m_gi)   (0 for a group with no unmasked entry)

    Masked entries are replaced by 0 before summing, so NaN/inf in padding never leaks into the mean.
    Returns ``(mean, count)`` where ``count`` is None when there is no mask (every group has ``x.shape[-1]``
    entries) and the mean has shape ``x.shape[:-1]``.
    """
    if mask is None:
        n = x.shape[-1]
        if n == 0:
            return b.sum_last(x), None
        return b.sum_last(x) / n, None
    xm = b.where(mask, x, 0.0)
    count = b.sum_last(b.cast(mask))
    safe = b.where(count > 0, count, 1.0)
    return b.sum_last(xm) / safe, count
