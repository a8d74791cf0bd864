"""What every event kind is built on: `AuditEvent` (tolerant `from_json`, `to_json`), the `event` decorator and the
registry `EVENT_TYPES` it fills. The kinds themselves live beside this module, one module per log they describe;
`pollwarden.events` imports them all, so the registry is complete wherever an event is parsed."""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar, dataclass_transform

if TYPE_CHECKING:
    from .words import Scene

Payload = dict[str, Any]
"""A JSON object as the audit log stores it: its values are whatever a provider or a person sent."""


@dataclass(frozen=True, kw_only=True)
class AuditEvent:
    KIND: ClassVar[str] = ""

    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """Keys of the payload that no field names: older shapes, or detail carried along (a record summary)."""

    def to_json(self) -> Payload:
        out: Payload = dict(self.extra)
        for name in _coercers(type(self)):
            out[name] = _plain(getattr(self, name))
        return out

    def line(self, scene: Scene) -> str | None:
        """This event's line of the story (`pollwarden story`), in an operator's words; None when another line
        tells it (a decision's line tells the observation before it). Every kind says, in its own class."""
        raise NotImplementedError(f"{type(self).__name__} tells no line of the story")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        coercers = _coercers(cls)
        values: dict[str, Any] = {name: coerce(data.get(name)) for name, coerce in coercers.items()}
        return cls(**values, extra={k: v for k, v in data.items() if k not in coercers})

    def new_event(self) -> tuple[str, Payload]:
        """The kind and payload the store seals: only the store calls this, producers hand it the event."""
        return self.KIND, self.to_json()

    @classmethod
    def prepared(cls, payload: Payload) -> Prepared:
        """This kind with a payload its producer built in the stored shape (what `from_json` would read back):
        the poll path writes its events so, since typing values the core just typed, then copying them back
        out, was a third of building a poll's trail."""
        return Prepared(cls, payload)


@dataclass(frozen=True, slots=True)
class Prepared:
    """An event of the kind `of`, its payload already in the stored shape (`AuditEvent.prepared`)."""

    of: type[AuditEvent]
    payload: Payload

    @property
    def KIND(self) -> str:
        return self.of.KIND

    def new_event(self) -> tuple[str, Payload]:
        return self.of.KIND, self.payload


NewEvent = AuditEvent | Prepared
"""What the store writes: an event object, whose class names its kind (no producer spells a kind)."""


def _plain(value: object) -> object:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return dict(value)
    return value


Coerce = Callable[[object], object]
_COERCERS: dict[type[AuditEvent], dict[str, Coerce]] = {}


def _coercers(cls: type[AuditEvent]) -> dict[str, Coerce]:
    """Field name -> its `_coerce`, in field order; the type hints are resolved and taken apart once per class
    (the annotations are strings here), not on each of the several events every poll writes."""
    found = _COERCERS.get(cls)
    if found is None:
        resolved = typing.get_type_hints(cls)
        found = {f.name: _coerce_to(resolved[f.name]) for f in fields(cls) if f.name != "extra"}
        _COERCERS[cls] = found
    return found


def _coerce_to(hint: object) -> Coerce:
    """For one hint: `value` if it has one of the hinted types, else None when the hint allows it, else the
    empty value."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    origins = tuple(typing.get_origin(option) or option for option in options)
    nullable = types.NoneType in options
    empty: dict[object, Callable[[], object]] = {
        str: str,
        int: int,
        float: float,
        bool: bool,
        tuple: tuple,
        Mapping: dict,
    }
    make_empty = empty.get(origins[0])

    def coerce(value: object) -> object:
        for origin in origins:
            if origin is tuple and isinstance(value, list | tuple):
                return tuple(v for v in value if isinstance(v, Mapping))  # tuples here only hold JSON objects
            if origin is Mapping and isinstance(value, Mapping):
                return value
            if origin is float and isinstance(value, int | float) and not isinstance(value, bool):
                return float(value)
            if origin is int and isinstance(value, bool):
                continue
            if isinstance(origin, type) and origin not in (tuple, Mapping) and isinstance(value, origin):
                return value
        if nullable or make_empty is None:
            return None
        return make_empty()

    return coerce


EVENT_TYPES: dict[str, type[AuditEvent]] = {}
"""Every kind the log holds, to its class: the story's table and `parse` look kinds up here."""


E = TypeVar("E", bound=type[AuditEvent])


@dataclass_transform(frozen_default=True, kw_only_default=True)
def event(cls: E) -> E:
    """A frozen, keyword-only dataclass for one kind, entered in `EVENT_TYPES` under its `KIND`."""
    dataclass(frozen=True, kw_only=True)(cls)  # a dataclass decorator returns the class it was given
    if not cls.KIND or cls.KIND in EVENT_TYPES:
        raise TypeError(f"{cls.__name__}: KIND {cls.KIND!r} is empty or already taken")
    EVENT_TYPES[cls.KIND] = cls
    return cls


def parse(kind: str, data: Mapping[str, Any]) -> AuditEvent | None:
    """The typed event of a stored record; None for a kind this version does not know."""
    cls = EVENT_TYPES.get(kind)
    return None if cls is None else cls.from_json(data)
