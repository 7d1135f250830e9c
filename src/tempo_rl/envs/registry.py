"""A registry of env factories by name, and the env spec syntax used on the command line.

``register(name, factory)`` maps a name to a callable ``factory(**kwargs) -> ReplayableEnv`` (or to a lazy
``"package.module:attribute"`` import path, so that registering an adapter never imports its heavy
dependencies). ``make(spec_or_name, **kwargs)`` builds the env, wraps it in a
:class:`~tempo_rl.envs.recorder.RecordedEnv` carrying its :class:`~tempo_rl.envs.snapshot.EnvSpec`, and
returns
it (not yet reset). Snapshots store that spec, which is how :func:`tempo_rl.envs.restore` rebuilds envs.

Spec strings (``parse_spec``): ``name`` or ``name:key=value,key=value``; each value is read as a JSON literal
when it parses as one (``40``, ``0.5``, ``true``, ``null``, ``"text"``), else kept as a plain string, e.g.
``keydoor:horizon=40``, ``textworld:path=game.z8``, ``gymnasium:id=FrozenLake-v1,is_slippery=false``.
"""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from tempo_rl.envs.core import ReplayableEnv
from tempo_rl.envs.recorder import RecordedEnv
from tempo_rl.envs.snapshot import EnvSpec

__all__ = [
    "EnvFactory",
    "UnknownEnvError",
    "available",
    "get_factory",
    "make",
    "parse_spec",
    "register",
    "unregister",
]

#: A callable that builds an env from JSON-serialisable keyword arguments.
EnvFactory = Callable[..., ReplayableEnv]

_REGISTRY: dict[str, EnvFactory | str] = {
    "knights": "tempo_rl.envs.knights:KnightsEnv",
    "keydoor": "tempo_rl.envs.keydoor:KeyDoorEnv",
    "crossings": "tempo_rl.envs.crossings:CrossingsEnv",
    "textworld": "tempo_rl.envs.textworld_adapter:TextWorldEnv",
    "gymnasium": "tempo_rl.envs.gymnasium_adapter:GymnasiumEnv",
    "alfworld": "tempo_rl.envs.alfworld.env:AlfworldEnv",
    "arc-stub": "tempo_rl.envs.arc.stub:ArcStubEnv",
    "arc": "tempo_rl.envs.arc.toolkit:ArcToolkitEnv",
}


class UnknownEnvError(KeyError):
    """An env name that is not registered; the message lists the registered names."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""


def register(name: str, factory: EnvFactory | str, *, overwrite: bool = False) -> None:
    """Register ``factory`` under ``name``.

    Args:
        name: the env name used in specs (no ``:``, ``,`` or ``=``).
        factory: ``factory(**kwargs) -> ReplayableEnv`` (a class works), or a lazy import path
            ``"package.module:attribute"`` resolved on first use.
        overwrite: allow replacing an existing registration.

    Raises:
        ValueError: a bad name, or the name is taken and ``overwrite`` is False.
    """
    if not name or any(ch in name for ch in ":,= ") or name != name.strip():
        raise ValueError(f"env name {name!r} must be non-empty and contain no ':', ',', '=' or spaces")
    if not callable(factory) and not (isinstance(factory, str) and ":" in factory):
        raise TypeError(
            f"factory for {name!r} must be a callable returning a ReplayableEnv or a 'module:attribute' "
            f"string, got {factory!r}"
        )
    if name in _REGISTRY and not overwrite:
        raise ValueError(f"env {name!r} is already registered; pass overwrite=True to replace it")
    _REGISTRY[name] = factory


def unregister(name: str) -> None:
    """Remove a registration (no error when absent)."""
    _REGISTRY.pop(name, None)


def available() -> tuple[str, ...]:
    """The registered env names, sorted."""
    return tuple(sorted(_REGISTRY))


def get_factory(name: str) -> EnvFactory:
    """The factory registered under ``name`` (resolving a lazy import path).

    Raises:
        UnknownEnvError: ``name`` is not registered (the message lists what is).
    """
    try:
        entry = _REGISTRY[name]
    except KeyError:
        raise UnknownEnvError(
            f"unknown env {name!r}; available envs: {', '.join(available())}. "
            "Register your own with tempo_rl.envs.register(name, factory)"
        ) from None
    if isinstance(entry, str):
        module_name, _, attribute = entry.partition(":")
        module = importlib.import_module(module_name)
        resolved: EnvFactory = getattr(module, attribute)
        _REGISTRY[name] = resolved
        return resolved
    return entry


def accepted_arguments(factory: EnvFactory) -> tuple[str, ...] | None:
    """The keyword arguments ``factory`` accepts, or None when it takes ``**kwargs`` (anything goes)."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # pragma: no cover - builtins without signatures
        return None
    names: list[str] = []
    for parameter in signature.parameters.values():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            return None
        if parameter.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            names.append(parameter.name)
    return tuple(names)


def _describe_arguments(factory: EnvFactory) -> str:
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # pragma: no cover
        return "(unknown)"
    parts = []
    for parameter in signature.parameters.values():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            parts.append(f"**{parameter.name}")
        elif parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        elif parameter.default is inspect.Parameter.empty:
            parts.append(f"{parameter.name} (required)")
        else:
            parts.append(f"{parameter.name}={parameter.default!r}")
    return ", ".join(parts) if parts else "(none)"


def make(spec_or_name: EnvSpec | str, **kwargs: Any) -> RecordedEnv:
    """Build a registered env and wrap it in a :class:`RecordedEnv` that carries its spec (not yet reset).

    Args:
        spec_or_name: an :class:`EnvSpec`, a registered name, or a spec string ``name:key=value,...``.
        **kwargs: constructor arguments, merged over those of the spec (JSON-serialisable, since they are
            stored in snapshots).

    Raises:
        UnknownEnvError: the name is not registered (lists the registered names).
        TypeError: an argument the env does not accept, or a required one missing (lists the accepted ones).
        ValueError: the env rejected an argument value (its message, plus the accepted arguments).
    """
    if isinstance(spec_or_name, EnvSpec):
        spec = spec_or_name
    elif isinstance(spec_or_name, str):
        spec = parse_spec(spec_or_name)
    else:
        raise TypeError(f"make() takes an EnvSpec or a name/spec string, got {type(spec_or_name).__name__}")
    if kwargs:
        spec = EnvSpec(name=spec.name, kwargs={**spec.kwargs, **kwargs})
    factory = get_factory(spec.name)
    accepted = accepted_arguments(factory)
    if accepted is not None:
        unknown = sorted(set(spec.kwargs) - set(accepted))
        if unknown:
            raise TypeError(
                f"env {spec.name!r} does not accept argument(s) {', '.join(unknown)}; "
                f"accepted arguments: {_describe_arguments(factory)}"
            )
    try:
        inspect.signature(factory).bind(**spec.kwargs)
    except TypeError as exc:
        raise TypeError(
            f"bad arguments for env {spec.name!r}: {exc}; accepted arguments: {_describe_arguments(factory)}"
        ) from None
    except ValueError:  # pragma: no cover - no signature available
        pass
    try:
        env = factory(**spec.kwargs)
    except (TypeError, ValueError) as exc:
        error = TypeError if isinstance(exc, TypeError) else ValueError
        raise error(
            f"env {spec.name!r} rejected its arguments {spec.kwargs}: {exc}; "
            f"accepted arguments: {_describe_arguments(factory)}"
        ) from exc
    if not isinstance(env, ReplayableEnv):
        raise TypeError(f"factory for {spec.name!r} returned {type(env).__name__}, not a ReplayableEnv")
    return RecordedEnv(env, spec)


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_spec(text: str) -> EnvSpec:
    """Parse ``name`` or ``name:key=value,key=value`` into an :class:`EnvSpec`.

    Values are JSON literals when they parse as one (``40``, ``true``, ``0.5``, ``null``), else strings.

    Raises:
        ValueError: malformed text (the message shows the expected syntax).
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("an env spec must be a non-empty string like 'keydoor:horizon=40'")
    name, _, rest = text.strip().partition(":")
    name = name.strip()
    kwargs: dict[str, Any] = {}
    if rest.strip():
        for item in rest.split(","):
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep or not key:
                raise ValueError(
                    f"bad env spec {text!r}: expected 'name:key=value,key=value' "
                    f"(e.g. 'keydoor:horizon=40'), got the item {item!r}"
                )
            if key in kwargs:
                raise ValueError(f"bad env spec {text!r}: argument {key!r} given twice")
            kwargs[key] = _parse_value(value.strip())
    return EnvSpec(name=name, kwargs=kwargs)


def spec_string(spec: EnvSpec | Mapping[str, Any]) -> str:
    """The inverse of :func:`parse_spec` for simple kwargs (for display)."""
    if not isinstance(spec, EnvSpec):
        spec = EnvSpec.model_validate(spec)
    if not spec.kwargs:
        return spec.name
    items = ",".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in spec.kwargs.items())
    return f"{spec.name}:{items}"
