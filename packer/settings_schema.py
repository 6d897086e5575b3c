"""The declarative schema of gpupack.toml's tables: each setting is a dataclass field whose
type is its annotation and whose range or choices are its metadata (`setting(...)`).

`check_fields` checks every field of a settings object against both and raises a
`ConfigError` naming the table, the key, the value and what is allowed. Nothing is
coerced silently: `"false"` is not a boolean, `1` is not a boolean, `"8"` is not a number;
a whole number where a decimal is expected is taken as that decimal (TOML's `1` for
`1.0`), and a string where a path is expected becomes that path. Pure: no I/O.
"""
from __future__ import annotations

import functools
import re
import types
import typing
from dataclasses import MISSING, Field, field, fields
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A setting that cannot be used; the message names the key and the fix."""


def setting(default: Any = MISSING, *, factory: Any = MISSING, ge: float | None = None, gt: float | None = None,
            le: float | None = None, lt: float | None = None, choices: tuple | None = None,
            pattern: str | None = None, means: str | None = None) -> Any:
    """A settings field with its range (`ge`/`gt`/`le`/`lt`), its `choices`, or for a string
    the regular expression it must match whole (`pattern`, described to people as `means`)."""
    meta = {k: v for k, v in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt), ("choices", choices),
                              ("pattern", pattern), ("means", means)) if v is not None}
    if factory is not MISSING:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _options(tp: Any) -> tuple[Any, ...]:
    """The alternatives of a union annotation (`int | None` -> (int, NoneType)), else (tp,)."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        return typing.get_args(tp)
    return (tp,)


def type_text(tp: Any) -> str:
    """What a person may write for annotation `tp`, in TOML's words."""
    names = []
    for option in _options(tp):
        origin = typing.get_origin(option)
        if option is type(None):
            names.append("unset")
        elif option is bool:
            names.append("true or false")
        elif option is int:
            names.append("a whole number")
        elif option is float:
            names.append("a number")
        elif option is str:
            names.append("a string")
        elif option is Path:
            names.append("a path")
        elif origin in (list, tuple):
            names.append("a list of strings")
        elif origin is dict:
            names.append("a table of strings")
        else:
            names.append(str(option))
    return " or ".join(names)


def allowed_text(f: Field, tp: Any) -> str:
    """The field's type and range or choices, as one phrase (for errors and the reference)."""
    meta = f.metadata
    if "choices" in meta:
        return "one of " + ", ".join(_toml(c) for c in meta["choices"])
    if "pattern" in meta:
        return meta.get("means") or f"a string matching {meta['pattern']}"
    parts = [type_text(tp)]
    bounds = [f"{op} {_toml(meta[key])}" for key, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
              if key in meta]
    if bounds:
        parts.append(" and ".join(bounds))
    return ", ".join(parts)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def _converted(value: Any, tp: Any) -> tuple[bool, Any]:
    """(accepted, value as the field holds it) for a value and one alternative of its type."""
    origin = typing.get_origin(tp)
    if tp is type(None):
        return value is None, value
    if tp is bool:
        return isinstance(value, bool), value
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if tp is str:
        return isinstance(value, str), value
    if tp is Path:
        if isinstance(value, Path):
            return True, value
        return isinstance(value, str) and value != "", Path(value) if isinstance(value, str) else value
    if origin in (list, tuple):
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        return ok, (origin(value) if ok else value)
    if origin is dict:
        ok = isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
        return ok, value
    return isinstance(value, tp), value


def _in_range(value: Any, meta: typing.Mapping[str, Any]) -> bool:
    if "choices" in meta:
        return any(value == c and type(value) is type(c) for c in meta["choices"])
    if "pattern" in meta and isinstance(value, str):
        return re.fullmatch(meta["pattern"], value) is not None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return True  # None, strings, lists: their type said all
    return (("ge" not in meta or value >= meta["ge"]) and ("gt" not in meta or value > meta["gt"])
            and ("le" not in meta or value <= meta["le"]) and ("lt" not in meta or value < meta["lt"]))


def schema_fields(cls_or_obj: Any) -> list[Field]:
    """The fields that are keys of the table (not those marked `internal`, filled in by code)."""
    return [f for f in fields(cls_or_obj) if not f.metadata.get("internal")]


def check_fields(obj: Any, section: str) -> None:
    """Check (and, where TOML's form differs, convert) every field of the frozen dataclass
    `obj`, the `[section]` table; `ConfigError` for the first that is not allowed."""
    hints = _hints(type(obj))
    for f in schema_fields(obj):
        value = getattr(obj, f.name)
        tp = hints[f.name]
        for option in _options(tp):
            ok, converted = _converted(value, option)
            if ok:
                break
        if not ok or not _in_range(converted, f.metadata):
            shown = f'"{value}"' if isinstance(value, Path) else _toml(value)
            raise ConfigError(f"[{section}] {f.name} = {shown} is not allowed: {allowed_text(f, tp)}")
        if converted is not value:
            object.__setattr__(obj, f.name, converted)


def describe(cls: type) -> list[tuple[str, str, str]]:
    """(key, default as TOML, allowed) of each field of a settings class (the reference page)."""
    hints = _hints(cls)
    out = []
    for f in schema_fields(cls):
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:
            default = None
        if default is None:
            shown = "unset"
        elif isinstance(default, Path):
            shown = f'"{default}"'
        elif isinstance(default, (list, tuple)):
            shown = "[" + ", ".join(_toml(v) for v in default) + "]"
        elif isinstance(default, dict):
            shown = "{}" if not default else repr(default)
        else:
            shown = _toml(default)
        out.append((f.name, shown, allowed_text(f, hints[f.name])))
    return out
