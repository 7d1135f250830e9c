"""Compatibility shims for TextWorld 1.7 / fast-downward, applied at run time (site-packages untouched).

These problems are fixed here, each idempotently and only when ALFWorld is actually used:

* **PEP 667 (CPython >= 3.13).** ``textworld.envs.pddl.textgen.EvalSymbol.derive`` does
  ``locals().update(context["variables"])`` and then a bare ``eval(expression)``. Since 3.13 ``locals()`` in a
  function is a snapshot, so the grammar variables (``r``, ``o``, ...) are invisible and ``reset()`` fails
  with
  ``NameError: name 'r' is not defined``. :func:`patch_textworld` replaces ``derive`` at class level with one
  that evaluates in an explicit namespace: the textgen module globals, then ``self`` and ``context``, then the
  grammar variables (the same name resolution the original had on 3.11). Async TextWorld workers get the same
  patch through :class:`CompatWrapper`, which is constructed inside each worker process.
* **Thread safety.** TextWorld parses with module-level TatSu parsers (``_PARSER`` in ``textworld.logic``,
  ``textworld.textgen``, ``textworld.envs.pddl.logic`` and ``textworld.envs.pddl.textgen``). A TatSu parser
  keeps its parse state (AST/CST stacks, memo) on the instance and its semantics object points back at it, so
  two threads loading or stepping games at once corrupt each other's parse (``'ActionGrammarNode' object is
  not iterable``, ``pop from empty list``, ``'NoneType' object is not iterable``). :func:`patch_textworld`
  swaps each for a :class:`ThreadLocalParser`: the same parser and semantics classes, one instance per
  thread. The PDDL->SAS translation sets the process-global ``sys.argv`` and fast-downward's global options,
  so translations (cache misses only) are serialised by a lock.
* **``sys.argv`` clobbering.** ``fast_downward.pddl2sas`` sets
  ``sys.argv = ["translate.py", "domain", "task"]``
  and never restores it. :func:`preserve_argv` restores the caller's list (the same object, same contents).
* **Parse cost.** TextWorld re-parses the same grammar snippets (command templates, feedback rules, fact
  queries) with TatSu on every step (~40% of a step). :func:`enable_parse_cache` memoises those parses; a
  cached symbol list is deep-copied on each use (the grammar engine mutates it), a query's predicate list is
  shallow-copied (predicates are immutable). ``textgen.copy_context`` deep-copies the grammar variables
  (entity
  infos) for every symbol (~30% of a step); nothing in text generation mutates those values, only the two
  dicts, so the cache also swaps it for a copy of the two dicts that shares their (read-only) values.
* **Translation cost.** The PDDL->SAS translation is deterministic in ``(domain, problem, optimize)`` and is
  94-98% of a stock ``reset()``. :func:`enable_translation_cache` routes TextWorld's calls through an LRU memo
  (keyed on a SHA-256 of the inputs) that also protects ``sys.argv``. The cached ``(task, sas)`` pair is only
  read by TextWorld, never mutated.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

__all__ = [
    "CompatWrapper",
    "ThreadLocalParser",
    "close_batch_env",
    "disable_translation_cache",
    "enable_parse_cache",
    "enable_translation_cache",
    "make_parsers_thread_safe",
    "patch_textworld",
    "preserve_argv",
    "translation_cache_info",
]

# Process-wide state. Everything below patches TextWorld's and fast-downward's *modules*, which every thread of
# the process shares, so the patches are process-wide by nature: there is one ``textgen.EvalSymbol.derive``, one
# set of TatSu parsers and one ``fast_downward`` per interpreter. Who writes it: :func:`patch_textworld`,
# :func:`enable_translation_cache` and :func:`enable_parse_cache`, called by every
# :class:`tempo_rl.envs.alfworld.fast.Engine` before it loads its game, and by :class:`CompatWrapper`
# inside TextWorld's async worker processes; :func:`disable_translation_cache` undoes the translation memo
# (tests). Each writer is idempotent and holds ``_LOCK``, so concurrent first calls from several threads install
# each patch once; after installation the patched functions are safe to call from any thread (per-thread
# parsers, a locked translation memo, parse memos whose entries are copied on every read).

#: whether :func:`patch_textworld` has installed the PEP 667 fix and the per-thread parsers (written under ``_LOCK``)
_PATCHED = False
#: guards every install/uninstall of a patch in this module (re-entrant: one patch may install another)
_LOCK = threading.RLock()
#: Serialises PDDL->SAS translations: fast-downward reads its options from the process-global ``sys.argv``.
_TRANSLATE_LOCK = threading.Lock()

#: ``(module, attribute path)`` of TextWorld's shared TatSu parsers.
_SHARED_PARSERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("textworld.logic", ("_PARSER",)),
    ("textworld.textgen", ("TextGrammar", "_PARSER")),
    ("textworld.envs.pddl.logic", ("_PARSER",)),
    ("textworld.envs.pddl.textgen", ("_PARSER",)),
)


class ThreadLocalParser:
    """Stands in for a shared TatSu parser: one parser (with its own semantics object) per thread.

    Built from the original's classes (``type(parser)``, ``type(parser.semantics)``, ``parseinfo=True`` as
    TextWorld builds them), so every thread parses exactly as the original would, without sharing state.
    """

    def __init__(self, parser_cls: type, semantics_cls: type | None) -> None:
        self.parser_cls = parser_cls
        self.semantics_cls = semantics_cls
        self._local = threading.local()

    @classmethod
    def replacing(cls, parser: Any) -> ThreadLocalParser:
        """A per-thread stand-in for ``parser`` (``parser`` itself when it already is one)."""
        if isinstance(parser, ThreadLocalParser):
            return parser
        semantics = getattr(parser, "semantics", None)
        return cls(type(parser), type(semantics) if semantics is not None else None)

    def parser(self) -> Any:
        """This thread's parser (built on first use)."""
        parser = getattr(self._local, "parser", None)
        if parser is None:
            semantics = self.semantics_cls() if self.semantics_cls is not None else None
            parser = self._local.parser = self.parser_cls(semantics=semantics, parseinfo=True)
        return parser

    def parse(self, *args: Any, **kwargs: Any) -> Any:
        """``parse`` on this thread's parser."""
        return self.parser().parse(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("parser_cls", "semantics_cls", "_local"):
            raise AttributeError(name)
        return getattr(self.parser(), name)


def make_parsers_thread_safe() -> None:
    """Give every thread its own copy of TextWorld's shared TatSu parsers (idempotent; see the module
    docstring). Called by :func:`patch_textworld`."""
    import importlib

    with _LOCK:
        for module_name, path in _SHARED_PARSERS:
            owner: Any = importlib.import_module(module_name)
            for name in path[:-1]:
                owner = getattr(owner, name)
            current = getattr(owner, path[-1])
            if not isinstance(current, ThreadLocalParser):
                setattr(owner, path[-1], ThreadLocalParser.replacing(current))


def _derive_with_explicit_namespace(self: Any, context: Any = None) -> list[Any]:
    """``EvalSymbol.derive`` without ``locals()``: eval in ``globals | {self, context} | variables``."""
    from textworld.envs.pddl import textgen

    context = context or self.context
    namespace: dict[str, Any] = {"self": self, "context": context}
    namespace.update(context["variables"])
    value = eval(self.expression, vars(textgen), namespace)
    return [textgen.TerminalSymbol(value)]


def patch_textworld() -> None:
    """Install the PEP 667 fix for TextWorld's grammar evaluation and the per-thread TatSu parsers
    (:func:`make_parsers_thread_safe`) in this process (idempotent).

    Applied on every Python version: the explicit namespace resolves names exactly as the original did on
    3.11, so behaviour is identical there and correct on 3.13+.
    """
    global _PATCHED
    with _LOCK:
        if _PATCHED:
            return
        from textworld.envs.pddl import textgen

        textgen.EvalSymbol.derive = _derive_with_explicit_namespace  # type: ignore[method-assign]
        make_parsers_thread_safe()
        _PATCHED = True


@contextlib.contextmanager
def preserve_argv() -> Iterator[None]:
    """Restore ``sys.argv`` (same list object, same contents) after the block, whatever it did to it."""
    saved_obj = sys.argv
    saved = list(sys.argv)
    try:
        yield
    finally:
        saved_obj[:] = saved
        sys.argv = saved_obj


class _TranslationCache:
    """LRU memo of ``fast_downward.pddl2sas`` keyed on SHA-256(domain, problem, optimize)."""

    def __init__(self, original: Any, maxsize: int) -> None:
        self.original = original
        self.maxsize = maxsize
        self.entries: OrderedDict[str, Any] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __call__(self, domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
        digest = hashlib.sha256()
        for part in (domain, "\x00", problem, "\x00", "1" if optimize else "0"):
            digest.update(part.encode("utf-8"))
        key = digest.hexdigest()
        with _LOCK:
            if key in self.entries:
                self.entries.move_to_end(key)
                self.hits += 1
                return self.entries[key]
        with _TRANSLATE_LOCK:  # one translation at a time: it rewrites the process-global sys.argv
            with _LOCK:  # another thread may have translated this game while we waited
                if key in self.entries:
                    self.entries.move_to_end(key)
                    self.hits += 1
                    return self.entries[key]
            with preserve_argv():
                result = self.original(domain, problem, verbose=verbose, optimize=optimize)
        with _LOCK:
            self.misses += 1
            self.entries[key] = result
            while len(self.entries) > self.maxsize:
                self.entries.popitem(last=False)
        return result


class _FastDownwardProxy:
    """Stands in for the ``fast_downward`` module inside ``textworld.envs.pddl.logic`` only."""

    def __init__(self, module: Any, cache: _TranslationCache) -> None:
        self._module = module
        self.pddl2sas = cache

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


#: the process's PDDL->SAS translation memo (LRU; its entries and counters are read and written under ``_LOCK``,
#: translations run one at a time under ``_TRANSLATE_LOCK``); kept across
#: :func:`disable_translation_cache` so that re-enabling reuses it; written under ``_LOCK``
_CACHE: _TranslationCache | None = None


def enable_translation_cache(maxsize: int = 32) -> None:
    """Memoise TextWorld's PDDL->SAS translation (per process, LRU of ``maxsize`` games; idempotent).

    Only ``textworld.envs.pddl.logic`` sees the memo; other users of ``fast_downward`` are unaffected. Every
    translation, cached or not, leaves ``sys.argv`` as it was. The memo survives
    :func:`disable_translation_cache` (re-enabling reuses it) unless that is called with ``clear=True``.
    """
    global _CACHE
    if maxsize < 1:
        raise ValueError(f"maxsize must be >= 1, got {maxsize}")
    from textworld.envs.pddl import logic as pddl_logic

    with _LOCK:
        current = pddl_logic.fast_downward
        if isinstance(current, _FastDownwardProxy):
            current.pddl2sas.maxsize = max(current.pddl2sas.maxsize, maxsize)
            return
        if _CACHE is None:
            _CACHE = _TranslationCache(current.pddl2sas, maxsize)
        _CACHE.maxsize = max(_CACHE.maxsize, maxsize)
        pddl_logic.fast_downward = _FastDownwardProxy(current, _CACHE)


def disable_translation_cache(*, clear: bool = False) -> None:
    """Route TextWorld back to the stock translation (idempotent); ``clear=True`` also drops the memo."""
    global _CACHE
    from textworld.envs.pddl import logic as pddl_logic

    with _LOCK:
        current = pddl_logic.fast_downward
        if isinstance(current, _FastDownwardProxy):
            pddl_logic.fast_downward = current._module
        if clear:
            _CACHE = None


def translation_cache_info() -> dict[str, int]:
    """``{"hits", "misses", "size", "maxsize"}`` of the translation memo (all 0 when it is disabled)."""
    from textworld.envs.pddl import logic as pddl_logic

    current = pddl_logic.fast_downward
    if not isinstance(current, _FastDownwardProxy):
        return {"hits": 0, "misses": 0, "size": 0, "maxsize": 0}
    cache = current.pddl2sas
    return {"hits": cache.hits, "misses": cache.misses, "size": len(cache.entries), "maxsize": cache.maxsize}


#: whether :func:`enable_parse_cache` has installed the parse memos (written under ``_LOCK``; never uninstalled).
#: The memos themselves live in that function's closure: dicts that only grow, to ``_PARSE_CACHE_MAX`` entries
#: each; a racing miss may parse the same snippet twice and store equal values, and every hit is copied.
_PARSE_CACHE_ON = False
_PARSE_CACHE_MAX = 4096


def enable_parse_cache() -> None:
    """Memoise TextWorld's TatSu parses of grammar snippets and fact queries in this process (idempotent).

    Keys are the exact input strings and rule names; the outputs are rebuilt from the cache exactly as a fresh
    parse would build them (deep copy for mutable grammar symbols), so text generation is unchanged.
    """
    global _PARSE_CACHE_ON
    with _LOCK:
        if _PARSE_CACHE_ON:
            return
        import copy

        import textworld.logic as tw_logic
        from textworld.envs.pddl import textgen

        symbols_cache: dict[tuple[str, str], Any] = {}
        original_textgen = textgen._parse_and_convert

        def cached_symbols(text: str, rule_name: str = "", **kwargs: Any) -> Any:
            if kwargs.get("trace") or not isinstance(text, str):
                return original_textgen(text, rule_name=rule_name, **kwargs)
            key = (text, rule_name)
            hit = symbols_cache.get(key)
            if hit is None:
                hit = original_textgen(text, rule_name=rule_name, **kwargs)
                if len(symbols_cache) < _PARSE_CACHE_MAX:
                    symbols_cache[key] = hit
                return copy.deepcopy(hit)
            return copy.deepcopy(hit)

        query_cache: dict[str, Any] = {}
        original_logic = tw_logic._parse_and_convert

        def cached_logic(*args: Any, **kwargs: Any) -> Any:
            if (
                kwargs.get("rule_name") != "conjunctiveQuery"
                or len(args) != 1
                or not isinstance(args[0], str)
            ):
                return original_logic(*args, **kwargs)
            hit = query_cache.get(args[0])
            if hit is None:
                hit = original_logic(*args, **kwargs)
                if len(query_cache) < _PARSE_CACHE_MAX:
                    query_cache[args[0]] = hit
            return list(hit)

        def copy_context(context: dict[str, Any]) -> dict[str, Any]:
            return {
                "state": context["state"],
                "facts": context["facts"],
                "variables": dict(context["variables"]),
                "mapping": dict(context["mapping"]),
                "entity_infos": context["entity_infos"],
            }

        textgen._parse_and_convert = cached_symbols
        textgen.copy_context = copy_context
        tw_logic._parse_and_convert = cached_logic
        _PARSE_CACHE_ON = True


def _compat_wrapper_base() -> type:
    import textworld.core

    return textworld.core.Wrapper  # type: ignore[no-any-return]


class CompatWrapper:
    """A TextWorld wrapper factory that applies :func:`patch_textworld` where the env is built.

    Put it first in ``wrappers=[CompatWrapper, ...]`` for ``textworld.start`` or
    ``textworld.gym.register_games``: TextWorld constructs wrappers inside each async worker process, so the
    PEP 667 fix is installed there too (whatever the multiprocessing start method). Calling it returns a
    plain ``textworld.core.Wrapper`` around the env; it adds no behaviour beyond the patch.
    """

    def __new__(cls, env: Any = None) -> Any:
        patch_textworld()
        return _compat_wrapper_base()(env)


def close_batch_env(env: Any, *, timeout: float = 2.0) -> None:
    """Shut down a ``textworld.gym`` batch env for sure, leaving no worker process behind.

    TextWorld's async workers exit only when the batch env is closed *and* garbage-collected, and its
    ``__del__`` can block or raise on a closed pipe. This sends each worker the raw close command, joins it
    (``timeout`` seconds), terminates it if still alive, and detaches the workers so no destructor talks to
    them again. Works on sync batch envs too (it then just closes them).
    """
    import contextlib

    batch = getattr(env, "unwrapped", env)
    inner = getattr(batch, "batch_env", None)
    children = list(getattr(inner, "envs", None) or [])
    if inner is None or not children or not all(hasattr(c, "_process") for c in children):
        with contextlib.suppress(Exception):
            batch.close()
        return
    for child in children:
        with contextlib.suppress(Exception):
            child._pipe.send(("close", ""))
    for child in children:
        process = child._process
        process.join(timeout=timeout)
        if process.is_alive():
            process.terminate()
            process.join(timeout=timeout)
        with contextlib.suppress(Exception):
            child._pipe.close()
        type(child).__del__ = _no_del  # the stock __del__ would send on the closed pipe and block
    inner.envs = []
    batch.batch_env = None


def _no_del(self: Any) -> None:
    """Replacement destructor for already-closed TextWorld async workers."""
