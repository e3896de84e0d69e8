"""Import hooks that let an inference engine's release build its own argparse on this machine.

Used only by ``scripts/engine_knobs_probe.py``, in a child process per release: the release's
own modules execute for real (``Tolerant``), and every third-party module it imports that is
not needed for its command line (torch, transformers, triton, ...) is a stub (``Stubs``) whose
attributes are permissive placeholders. Never imported by kernelpolicy.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

# Attributes a stubbed module must not have: probing code reads ``hasattr(torch, "npu")`` as
# "this is an Ascend machine" and raises when the device is missing.
ABSENT_ATTRS = frozenset({"npu", "xpu", "hpu", "musa", "mlu"})


class _AnyMeta(type):
    """Metaclass of the placeholders: a placeholder class behaves as a value too."""

    def __new__(mcls, name: str, bases: tuple[type, ...], ns: dict[str, Any], **_: Any) -> Any:
        return super().__new__(mcls, name, bases, ns)

    def __init__(cls, name: str, bases: tuple[type, ...], ns: dict[str, Any], **_: Any) -> None:
        super().__init__(name, bases, ns)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return placeholder(name)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        decorated = args[0] if len(args) == 1 and not kwargs else None
        if callable(decorated) and not isinstance(decorated, _AnyMeta):
            return decorated  # used as a decorator: keep the function
        return type.__call__(cls, *args, **kwargs)

    def __or__(cls, other: Any) -> Any:
        return cls

    __ror__ = __add__ = __radd__ = __mul__ = __rmul__ = __sub__ = __truediv__ = __or__
    __getitem__ = __or__

    def __iter__(cls) -> Iterator[Any]:
        return iter(())

    def __len__(cls) -> int:
        return 0

    def __bool__(cls) -> bool:
        return False

    def __int__(cls) -> int:
        return 0

    __index__ = __int__

    def __float__(cls) -> float:
        return 0.0

    def __lt__(cls, other: Any) -> bool:
        return False

    __gt__ = __le__ = __ge__ = __contains__ = __lt__

    def __hash__(cls) -> int:
        return id(cls)


class _AnyBase(metaclass=_AnyMeta):
    """An instance of a placeholder: callable, iterable (empty), false, zero."""

    def __init_subclass__(cls, **_: Any) -> None:
        pass

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return placeholder("call")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return placeholder(name)

    def __or__(self, other: Any) -> Any:
        return self

    __ror__ = __add__ = __radd__ = __mul__ = __rmul__ = __sub__ = __truediv__ = __or__
    __getitem__ = __or__

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return False

    def __int__(self) -> int:
        return 0

    __index__ = __int__

    def __float__(self) -> float:
        return 0.0


Base = _AnyBase
"""Subclass it for a placeholder with a few real attributes (a fake current platform)."""


def placeholder(name: str) -> Any:
    """A fresh placeholder class: usable as a base class, a decorator, a value and a type."""
    return _AnyMeta(name.rsplit(".", 1)[-1], (_AnyBase,), {})


class _StubModule(types.ModuleType):
    __path__: ClassVar[list[str]] = []  # a package, so that submodules import too

    def __getattr__(self, name: str) -> Any:
        if name in ABSENT_ATTRS or (name.startswith("__") and name != "__version__"):
            raise AttributeError(name)
        return "0.0.0" if name == "__version__" else placeholder(f"{self.__name__}.{name}")


class Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Every module outside ``real`` (and the standard library) imports as a stub; modules in
    ``absent`` stay missing (their presence means special hardware to the release)."""

    def __init__(self, real: set[str], absent: set[str]) -> None:
        self.real = real | set(sys.stdlib_module_names)
        self.absent = absent

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        top = name.split(".", maxsplit=1)[0]
        if top in self.real or top in self.absent:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _StubModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def _missing(attr: str) -> Any:
    if attr.startswith("__"):
        raise AttributeError(attr)
    return placeholder(attr)


class Tolerant(importlib.abc.MetaPathFinder):
    """The release's own modules execute for real; one that fails at import is kept as far as
    it got (its missing names read as placeholders), except the ``strict`` ones, whose failure
    is the probe's. ``failed`` records what failed, for the table's notes."""

    def __init__(self, own: set[str], strict: set[str]) -> None:
        self.own = own
        self.strict = strict
        self.failed: dict[str, str] = {}

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name.split(".", maxsplit=1)[0] not in self.own:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _TolerantLoader(spec.loader, name, self)
        return spec


class _TolerantLoader(importlib.abc.Loader):
    def __init__(self, inner: Any, name: str, owner: Tolerant) -> None:
        self.inner = inner
        self.name = name
        self.owner = owner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        module.__getattr__ = _missing  # type: ignore[method-assign]
        try:
            self.inner.exec_module(module)
        except Exception as exc:  # a broken import is recorded; only argparse matters
            if self.name in self.owner.strict:
                raise
            self.owner.failed[self.name] = f"{type(exc).__name__}: {exc}"[:200]


def install(own: str, strict: set[str], real: set[str], absent: set[str]) -> Tolerant:
    """Put both hooks first on ``sys.meta_path``; returns the tolerant one (its ``failed``)."""
    tolerant = Tolerant({own}, strict)
    sys.meta_path.insert(0, Stubs(real | {own}, absent))
    sys.meta_path.insert(0, tolerant)
    return tolerant
