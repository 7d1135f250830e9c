"""Shared fixtures for the backend tests: one offline tokenizer per session, fresh tiny models per test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="the local backend needs the 'local' extra (torch)")

CORPUS = [
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a drawer 2, a desk 1.",
    "Your task is to: put a clean apple in the fridge.",
    "go to desk 1",
    "take apple 1 from desk 1",
    "Nothing happens.",
] * 20


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    from tempo_rl.backends.local import build_tokenizer

    return build_tokenizer(CORPUS, vocab_size=512)


@pytest.fixture
def local_training(tokenizer: Any, tmp_path: Path) -> Any:
    from tempo_rl.backends.local import LocalTrainingClient, build_tiny_model

    model = build_tiny_model(len(tokenizer), hidden_size=32, num_layers=1, num_heads=2, seed=0)
    return LocalTrainingClient(model, tokenizer, state_dir=tmp_path / "ckpt", seed=0)
