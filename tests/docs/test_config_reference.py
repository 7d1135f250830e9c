"""The generated configuration reference (docs/hooks/config_reference.py) covers every config field."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from pydantic import BaseModel, Field

ROOT = Path(__file__).resolve().parents[2]


def load_hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "docs/hooks/config_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Inner(BaseModel):
    """An inner section."""

    rate: float = Field(default=0.5, gt=0.0, le=1.0, description="a | rate")
    mode: str | None = None


class Outer(BaseModel):
    """The root."""

    name: str = "x"
    inner: Inner = Field(default_factory=Inner)


def test_tables_pinned_on_a_small_model() -> None:
    text = load_hook().render_config_reference(Outer)
    assert '| `name` | `str` | `"x"` |  |  |' in text
    assert "### `[inner]`" in text and "`Inner`: An inner section." in text
    assert "| `inner.rate` | `float` | `0.5` | > 0.0, <= 1.0 | a \\| rate |" in text
    assert "| `inner.mode` | `str \\| None` | `null` |  |  |" in text


def test_every_train_config_field_is_documented() -> None:
    from tempo_rl.training.config import TrainConfig

    text = load_hook().render_config_reference()
    for name, field in TrainConfig.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            for sub in annotation.model_fields:
                assert f"`{name}.{sub}`" in text, f"{name}.{sub} missing from the reference"
        else:
            assert f"| `{name}` |" in text
    assert '`[backend]` with `kind = "pytrio"`' in text and "`backend.lora_rank`" in text


def test_hook_replaces_only_the_marker() -> None:
    hook = load_hook()
    page = f"# Title\n\n{hook.MARKER}\n"
    out = hook.on_page_markdown(page, None, None, None)
    assert hook.MARKER not in out and "`tempo.macro_rounds`" in out
    assert hook.on_page_markdown("no marker here", None, None, None) == "no marker here"
    assert hook.MARKER in (ROOT / "docs/configuration.md").read_text(encoding="utf-8")
