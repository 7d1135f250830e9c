"""Backend wiring: the config is a leaf, no import cycle (in the backends, nor between any two modules of the
package), no import of the training layer from the layers below it, one factory with the same retries for every
backend, ``TrainConfig.backend`` typed, and the recording stubs bound by the SDKs' rules."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path
from typing import Any

import pytest

from tempo_rl.backends import (
    LocalBackendConfig,
    PyTrioBackendConfig,
    RetryConfig,
    SamplingParams,
    create_clients,
)
from tempo_rl.rollout.datums import completion_datum

SRC = Path(__file__).resolve().parents[2] / "src"
PKG = SRC / "tempo_rl" / "backends"
FAST = RetryConfig(result_timeout_s=5.0, max_attempts=3, backoff_initial_s=0.0, backoff_max_s=0.0, jitter=0.0)


def _module_imports(path: Path) -> set[str]:
    """tempo_rl modules that ``path`` imports anywhere (lazy imports in function bodies too), except under
    ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tempo_rl"):
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("tempo_rl"))
    return out


def test_config_is_a_leaf_and_the_package_has_no_import_cycle() -> None:
    graph = {}
    for path in PKG.glob("*.py"):
        name = "tempo_rl.backends" if path.stem == "__init__" else f"tempo_rl.backends.{path.stem}"
        graph[name] = {m for m in _module_imports(path) if m != name and m != "tempo_rl.backends"}
    assert graph["tempo_rl.backends.config"] == set()

    def reach(start: str, seen: set[str]) -> set[str]:
        for nxt in graph.get(start, set()):
            if nxt not in seen:
                seen.add(nxt)
                reach(nxt, seen)
        return seen

    cycles = [m for m in graph if m != "tempo_rl.backends" and m in reach(m, set())]
    assert cycles == []


def import_graph(src: Path) -> dict[str, set[str]]:
    """Module -> the modules it imports (lazy imports included), over every non-package module below ``src``.

    ``from pkg import name`` counts as importing ``pkg.name`` when that is a module. Packages (``__init__``) are
    left out: they re-export their modules, and importing one of its modules runs a package's ``__init__``
    anyway, so an edge through a package says nothing about how the modules depend on each other.
    """
    modules: dict[str, Path] = {}
    packages: set[str] = set()
    for path in src.rglob("*.py"):
        parts = path.relative_to(src).with_suffix("").parts
        if parts[-1] == "__init__":
            packages.add(".".join(parts[:-1]))
        else:
            modules[".".join(parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        skip = {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If)
            for n in ast.walk(node)
            if "TYPE_CHECKING" in ast.unparse(node.test)
        }
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets.update(f"{node.module}.{a.name}" for a in node.names)
                targets.add(node.module)
            elif isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that reach each other through imports (strongly connected, more than one)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_two_modules_of_the_package_import_each_other() -> None:
    cycles = import_cycles(import_graph(SRC))
    assert cycles == [], f"import cycles (lazy imports count): {cycles}"


#: The packages below the training layer: what they need from a run is passed in, never imported from it.
LOWER_LAYERS = ("backends", "envs", "rollout", "critic")


def imports_of(path: Path, src: Path) -> set[str]:
    """Every module name ``path`` imports, anywhere in it (lazy, ``TYPE_CHECKING`` and relative imports resolved,
    ``importlib.import_module("...")`` with a literal name too)."""
    parts = path.relative_to(src).with_suffix("").parts
    package = parts[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            out.add(module)
            out.update(f"{module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func).endswith("import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            out.add(node.args[0].value)
    return out


def upward_imports(src: Path) -> list[str]:
    """``file: module`` for each import of ``tempo_rl.training`` from a module of :data:`LOWER_LAYERS`."""
    found = []
    for layer in LOWER_LAYERS:
        for path in sorted((src / "tempo_rl" / layer).rglob("*.py")):
            for module in sorted(imports_of(path, src)):
                if module == "tempo_rl.training" or module.startswith("tempo_rl.training."):
                    found.append(f"{path.relative_to(src)}: {module}")
    return found


def test_the_lower_layers_never_import_the_training_layer() -> None:
    """backends, envs, rollout and critic get what they need from a run (a tokenizer, a game, a setting) as a
    value passed in by the training layer, which builds the run top-down; none imports from it."""
    assert upward_imports(SRC) == []


def test_the_layer_check_sees_every_form_of_import(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for layer in LOWER_LAYERS:
        (src / "tempo_rl" / layer).mkdir(parents=True)
    (src / "tempo_rl" / "envs" / "lazy.py").write_text(
        "def f():\n    from tempo_rl.training.config import X\n"
    )
    (src / "tempo_rl" / "critic" / "rel.py").write_text("from ..training import store\n")
    (src / "tempo_rl" / "rollout" / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import tempo_rl.training.types\n"
    )
    (src / "tempo_rl" / "backends" / "dyn.py").write_text(
        "import importlib\nimportlib.import_module('tempo_rl.training.run')\n"
    )
    (src / "tempo_rl" / "backends" / "fine.py").write_text("from tempo_rl.backends.types import Datum\n")
    assert upward_imports(src) == [
        "tempo_rl/backends/dyn.py: tempo_rl.training.run",
        "tempo_rl/envs/lazy.py: tempo_rl.training.config",
        "tempo_rl/envs/lazy.py: tempo_rl.training.config.X",
        "tempo_rl/rollout/typed.py: tempo_rl.training.types",
        "tempo_rl/critic/rel.py: tempo_rl.training",
        "tempo_rl/critic/rel.py: tempo_rl.training.store",
    ]


def test_the_cycle_check_sees_lazy_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg import a, b\n")
    (pkg / "a.py").write_text("from pkg.b import g\n\ndef f():\n    return g()\n")
    (pkg / "b.py").write_text("def g():\n    from pkg.a import f\n    return f\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n")
    assert import_cycles(import_graph(tmp_path)) == [["pkg.a", "pkg.b"]]
    (pkg / "b.py").write_text("from pkg import c\n")
    assert import_cycles(import_graph(tmp_path)) == []


def test_every_backend_gets_the_same_retry_layer(tokenizer: Any, tmp_path: Path) -> None:
    from tempo_rl.backends.retry import RetryingSamplingClient, RetryingTrainingClient

    local = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "state_dir": str(tmp_path), "retry": FAST}
    configs: list[Any] = [LocalBackendConfig(**local)]
    for kind in ("pytrio", "tinker"):
        try:
            __import__(kind)
        except ImportError:  # that extra is not installed
            continue
        configs.append({"kind": kind, "stub": True, "stub_local": local, "retry": FAST.model_dump()})
    for cfg in configs:
        training, sampler = create_clients(cfg, tokenizer=tokenizer)
        assert isinstance(training, RetryingTrainingClient) and isinstance(sampler, RetryingSamplingClient)
        assert training.retry == FAST
        inner = training.inner

        def sometimes(*a: Any, _s: Any = sampler.inner.sample, _left: list[int] = [2], **k: Any) -> Any:  # noqa: B006
            if _left[0]:
                _left[0] -= 1
                raise ConnectionError("reset by peer")
            return _s(*a, **k)

        sampler.inner.sample = sometimes
        prompt = tokenizer.encode("go to desk 1", add_special_tokens=False)
        assert len(sampler.sample(prompt, 1, SamplingParams(max_tokens=2, seed=0)).sequences) == 1
        assert training.stats.retries["sample"] == 2, type(inner).__name__


def test_train_config_backend_is_typed() -> None:
    from tempo_rl.training.config import ConfigError, load_config

    cfg = load_config(None, ['backend.kind="pytrio"', "backend.lora_rank=16", "backend.stub=true"])
    assert isinstance(cfg.backend, PyTrioBackendConfig) and cfg.backend.lora_rank == 16
    assert isinstance(load_config(None, []).backend, LocalBackendConfig)
    assert isinstance(
        load_config(None, ["backend.hidden_size=32"]).backend, LocalBackendConfig
    )  # kind defaults
    with pytest.raises(ConfigError, match=r"backend\.pytrio\.lora_rank"):
        load_config(None, ['backend.kind="pytrio"', "backend.lora_rank=128"])


# ------------------------------------------------------------------------------------------ stub rules
@pytest.fixture
def pytrio_stub(local_training: Any) -> tuple[Any, Any, Any]:
    pytest.importorskip("pytrio")
    from tempo_rl.backends.testing import RecordingPyTrioService

    service = RecordingPyTrioService(local_training)
    training, sampling = create_clients(
        PyTrioBackendConfig(base_model="stub/tiny", lora_rank=8, seed=3, retry=FAST), service_client=service
    )
    return service, training, sampling


def test_pytrio_stub_refuses_a_load_once_training_started(pytrio_stub: tuple[Any, Any, Any]) -> None:
    from pytrio.errors.base import ValidationError

    service, training, _ = pytrio_stub
    raw = training.inner.raw
    path = raw.save_state("x").result().path
    with pytest.raises(ValidationError) as info:
        raw.load_state(path)
    assert info.value.code == "validation.already_initialized"
    fresh = service.create_lora_training_client("stub/tiny", rank=8)
    fresh.load_state_with_optimizer(path).result()  # before its first training call: accepted


def test_stubs_never_overwrite_a_name(pytrio_stub: tuple[Any, Any, Any]) -> None:
    from tempo_rl.backends.testing import StubCallError

    _, training, _ = pytrio_stub
    raw = training.inner.raw
    raw.save_state("same").result()
    with pytest.raises(StubCallError, match="already exists"):
        raw.save_state("same")
    raw.save_state("same", overwrite=True).result()


def test_pytrio_stub_answers_with_pytrios_metric_names(pytrio_stub: tuple[Any, Any, Any]) -> None:
    _, training, sampling = pytrio_stub
    prompt = training.get_tokenizer().encode("go", add_special_tokens=False)
    seq = sampling.sample(prompt, 1, SamplingParams(max_tokens=2, seed=0)).sequences[0]
    datum = completion_datum(prompt, list(seq.tokens), list(seq.logprobs), 1.0)
    out = training.forward_backward([datum], "importance_sampling")
    assert {"loss_sum", "loss_mean", "token_count"} <= set(out.metrics) and "loss:sum" not in out.metrics
    assert out.loss == out.metrics["loss_sum"]


def test_tinker_stub_warns_like_tinker(local_training: Any) -> None:
    pytest.importorskip("tinker")
    import asyncio

    from tempo_rl.backends.testing import RecordingTinkerService

    service = RecordingTinkerService(local_training)
    raw = service.create_lora_training_client("stub").result()
    T = __import__("tinker").types
    with pytest.warns(DeprecationWarning, match="name"):
        sampler = raw.save_weights_and_get_sampling_client(name="x").result()
    with pytest.warns(FutureWarning, match="sample_async"):
        asyncio.run(sampler.sample_async(T.ModelInput.from_ints([1, 2]), 1, T.SamplingParams(max_tokens=1)))
    path = raw.save_state("s").result().path
    with pytest.warns(FutureWarning, match="load_state"):
        raw.load_state(path).result()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        raw.save_weights_and_get_sampling_client().result()


def test_the_local_factory_passes_each_config_field_to_a_parameter_of_that_name(tmp_path: Path) -> None:
    """The names the factory passes through (``LocalBackendConfig.x`` -> ``x=``) exist on both sides, and every
    parameter of the tiny model and of the training client that the config has a field for is passed."""
    import inspect

    from tempo_rl.backends import factory
    from tempo_rl.backends.local.client import LocalTrainingClient
    from tempo_rl.backends.local.model import build_tiny_model
    from tempo_rl.backends.local.tokenizer import build_tokenizer

    fields = set(LocalBackendConfig.model_fields)
    for names, target in (
        (factory._TINY_MODEL_FIELDS, build_tiny_model),
        (factory._TRAINING_CLIENT_FIELDS, LocalTrainingClient),
    ):
        params = set(inspect.signature(target).parameters) - {"self"}
        assert set(names) <= fields & params, set(names) - (fields & params)
        assert (fields & params) - {"device", "vocab_size"} == set(
            names
        )  # device is resolved, vocab from the tokenizer

    cfg = LocalBackendConfig(
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        max_positions=128,
        seed=3,
        state_dir=str(tmp_path / "s"),
        max_batch_rows=5,
        max_tokens_per_chunk=99,
    )
    tokenizer = build_tokenizer(["go north", "take key"], vocab_size=cfg.vocab_size)
    training, _ = factory.create_local_clients(cfg, tokenizer=tokenizer)
    config = training.model.config
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (32, 1, 2)
    assert config.max_position_embeddings == 128 and training.seed == 3
    assert (training.state_dir, training.max_batch_rows, training.max_tokens_per_chunk) == (
        tmp_path / "s",
        5,
        99,
    )
