"""A package face that imports each name's module on first use.

Importing a package runs its `__init__` before any module inside it, so a face that re-exported eagerly would
load cryptography or psycopg for every caller of the package's lightest module (and `import pollwarden`
for every command). A face built here names where each of its names lives and imports that module only when
the name is first looked up; its `TYPE_CHECKING` imports show mypy and IDEs the real names.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_face(package: str, where: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`, whose names are `where`: a module (relative to the package)
    to the names it gives, separated by spaces. A name, once resolved, is a plain attribute of the package, so
    later lookups never reach `__getattr__`."""
    namespace = vars(sys.modules[package])
    module_of = {name: module for module, names in where.items() for name in names.split()}

    def __getattr__(name: str) -> object:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(module_of))

    return __getattr__, __dir__
