"""MkDocs hook: generate the configuration reference from tempo-rl's pydantic models at build time.

``docs/configuration.md`` contains the marker ``<!-- tempo-rl:config-reference -->``; :func:`on_page_markdown`
replaces it with one table per section of :class:`tempo_rl.training.config.TrainConfig` (``[env]``,
``[tempo]``, ...): key, type, default, constraints and description, read from the models themselves, so the
page can never drift from the code. :func:`render_config_reference` is importable for tests.
"""

from __future__ import annotations

import json
import types
import typing
from typing import Any

MARKER = "<!-- tempo-rl:config-reference -->"

_BOUNDS = {"gt": ">", "ge": ">=", "lt": "<", "le": "<=", "min_length": "min length", "max_length": "max length"}


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(json.dumps(arg) for arg in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(arg) for arg in typing.get_args(annotation))
    if origin is not None:
        args = ", ".join(_type_name(arg) for arg in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


def _default(field: Any) -> str:
    if field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:  # pragma: no cover - factories that take the validated data
            return "(computed)"
    else:
        value = field.default
    if hasattr(value, "model_dump"):
        return "(section)"
    return json.dumps(value) if not isinstance(value, float) else repr(value)


def _constraints(field: Any) -> str:
    parts = []
    for item in field.metadata:
        for attr, symbol in _BOUNDS.items():
            bound = getattr(item, attr, None)
            if bound is not None:
                parts.append(f"{symbol} {bound}")
    return ", ".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and hasattr(annotation, "model_fields")


def _table(model: type, prefix: str) -> list[str]:
    lines = ["| key | type | default | constraints | description |", "|---|---|---|---|---|"]
    for name, field in model.model_fields.items():  # type: ignore[attr-defined]
        if _is_model(field.annotation):
            continue
        lines.append(
            f"| `{prefix}{name}` | `{_cell(_type_name(field.annotation))}` | `{_cell(_default(field))}` | "
            f"{_cell(_constraints(field))} | {_cell(field.description or '')} |"
        )
    return lines


def _doc(model: type) -> str:
    return " ".join((model.__doc__ or "").split())


def render_config_reference(root: type | None = None) -> str:
    """Markdown tables for every field of ``root`` (default :class:`TrainConfig`) and its section models."""
    if root is None:
        from tempo_rl.training.config import TrainConfig

        root = TrainConfig
    out = ["### Top level", "", _doc(root), "", *_table(root, ""), ""]
    for name, field in root.model_fields.items():  # type: ignore[attr-defined]
        if _is_model(field.annotation):
            section = field.annotation
            out += [f"### `[{name}]`", "", f"`{section.__name__}`: {_doc(section)}", ""]
            out += [*_table(section, f"{name}."), ""]
    out += _backend_sections()
    return "\n".join(out)


def _backend_sections() -> list[str]:
    """One table per backend kind (``[backend] kind = "local" | "pytrio" | "tinker"``)."""
    try:
        from tempo_rl.backends import config as backend_config
    except ImportError:  # pragma: no cover - the backend package is part of tempo-rl
        return []
    out: list[str] = []
    for class_name in ("LocalBackendConfig", "PyTrioBackendConfig", "TinkerBackendConfig"):
        model = getattr(backend_config, class_name, None)
        if model is None:
            continue
        kind = model.model_fields["kind"].default
        out += [f'### `[backend]` with `kind = "{kind}"`', "", f"`{class_name}`: {_doc(model)}", ""]
        out += [*_table(model, "backend."), ""]
        for name, field in model.model_fields.items():
            if _is_model(field.annotation):
                out += [f"#### `[backend.{name}]`", "", _doc(field.annotation), ""]
                out += [*_table(field.annotation, f"backend.{name}."), ""]
    return out


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace the marker with the generated reference (MkDocs hook entry point)."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render_config_reference())
