"""The store's roles (`store/roles.py`): every backend gives every role, and `Store` is exactly their union."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from pollwarden.store import roles
from pollwarden.store.base import Store
from pollwarden.store.postgres import PostgresStore
from pollwarden.store.sqlite import SQLiteStore
from tests.store.conftest import AnyStore

ROLES: list[type[Any]] = [
    roles.Opened,
    roles.Operations,
    roles.Decisions,
    roles.Submissions,
    roles.Grants,
    roles.AuditLog,
    roles.Contracts,
    roles.FleetQueue,
    roles.Deliveries,
    roles.Pages,
    roles.Pushes,
]


def _own(role: type[Any]) -> set[str]:
    """The members a role declares itself: methods, properties and annotated attributes."""
    return {name for name in vars(role) if not name.startswith("_")} | set(vars(role).get("__annotations__", {}))


def _members(protocol: type[Any]) -> set[str]:
    return set().union(*(_own(cls) for cls in protocol.__mro__ if cls not in (object,) and cls.__module__ != "typing"))


def _statically(sqlite: SQLiteStore, postgres: PostgresStore) -> None:
    """Never called: mypy checks that each backend class is every role, signatures and all."""
    for store in (sqlite, postgres):
        operations: roles.Operations = store
        decisions: roles.Decisions = store
        submissions: roles.Submissions = store
        grants: roles.Grants = store
        audit: roles.AuditLog = store
        contracts: roles.Contracts = store
        fleet: roles.FleetQueue = store
        deliveries: roles.Deliveries = store
        pages: roles.Pages = store
        pushes: roles.Pushes = store
        whole: Store = store
        del operations, decisions, submissions, grants, audit, contracts, fleet, deliveries, pages, pushes, whole


def test_every_member_of_the_store_belongs_to_exactly_one_role() -> None:
    owners: dict[str, list[str]] = {}
    for role in ROLES:
        for name in _own(role):
            owners.setdefault(name, []).append(role.__name__)
    assert {name: found for name, found in owners.items() if len(found) > 1} == {}
    assert _members(Store) == set(owners)
    assert all(roles.Opened in role.__mro__ for role in ROLES)  # each role can say where it is, and close


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.__name__)
@pytest.mark.parametrize("backend", [SQLiteStore, PostgresStore], ids=["sqlite", "postgres"])
def test_each_backend_class_gives_the_role_with_its_parameters(backend: type[Any], role: type[Any]) -> None:
    for name in sorted(_own(role)):
        declared = vars(role).get(name)
        if declared is None or isinstance(declared, property):
            continue  # an attribute or property: the instances below have it
        given = getattr(backend, name, None)
        assert callable(given), f"{backend.__name__} has no {name} ({role.__name__})"
        assert list(inspect.signature(given).parameters) == list(inspect.signature(declared).parameters), name


def test_each_backend_instance_has_every_role(store: AnyStore) -> None:
    missing = sorted(name for role in ROLES for name in _own(role) if not hasattr(store, name))
    assert missing == []
