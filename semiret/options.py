"""Options as dataclasses, declared once: the Python API takes them as keyword arguments, the CLI turns the
same fields into flags (:func:`command_with_options`), and bad names get one generated message.

A field's help text is its attribute docstring (the string literal under it, as Sphinx reads it); a flag
other than ``--field-name`` is given with ``field(metadata={"flag": "--other"})``. A field that may name a file,
directory or model on the machine that runs the code is declared with :func:`local_field`.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import json
import math
import os
import types
import typing
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import numpy as np

from semiret.errors import SemiretError


LOCAL = "local"
"""Field metadata: the field may name a file, directory or model of the machine that runs the code; its value
is the names it also takes that are none of those (e.g. 'corpus' and 'msmarco' for an IDF table)."""


def local_field(default=None, names: tuple[str, ...] = ()) -> Any:
    """A field whose value may name a local file, directory or model (:data:`LOCAL`): a server takes only
    ``names`` for it from its clients, never a path or a model to load."""
    return dataclasses.field(default=default, metadata={LOCAL: tuple(names)})


class OptionValueError(SemiretError):
    """An option value of the wrong JSON type, or one a client may not give (:func:`check_json_values`);
    ``name`` is the option's."""

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.name = name


def with_local_paths_absolute(classes: Iterable[type], values: dict) -> dict:
    """``values`` with each local field's (:func:`local_field`) value that names an existing file or directory
    relative to the working directory, written as a path (a folder in it, or a file name with a suffix: "rules.txt",
    "./models/mine"; a bare name, "minilm", is left to the registry first), made absolute: what another process,
    started elsewhere, opens alike."""
    local = {f.name: f.metadata[LOCAL] for cls in classes for f in dataclasses.fields(cls) if LOCAL in f.metadata}
    return {name: _absolute(value, local[name]) if name in local else value for name, value in values.items()}


def _absolute(value, names: tuple[str, ...]):
    if not isinstance(value, (str, os.PathLike)) or str(value) in names or not str(value):
        return value
    path = Path(value)
    try:
        written_as_path = len(path.parts) > 1 or bool(path.suffix)
        return str(path.resolve()) if written_as_path and not path.is_absolute() and path.exists() else value
    except OSError:  # a name too long for a path: no file of it
        return value


def check_json_values(classes: Iterable[type], values: dict, owner: str = "") -> None:
    """Options that arrive as JSON from a client (the HTTP API) checked against the fields of ``classes`` (of
    ``owner``) before anything is made from them: every name a field's (a null too), every value of its
    field's JSON type (true is no number, an integer is a float, numbers are finite), and local fields
    (:func:`local_field`) given one of their names only. Raises :class:`OptionValueError`.

    By hand rather than with pydantic's strict mode: the fields are plain dataclasses shared with the CLI and the
    Python API, ``local_field``'s name rule is no type, and one message per option names it as the server answers."""
    found = {name: entry for cls in classes for name, entry in _json_fields(cls).items()}
    for name, value in values.items():
        if name not in found:
            known = ", ".join(sorted(found)) or "none"
            where = f" to {owner}" if owner else ""
            raise OptionValueError(name, f"option {name!r} does not apply{where} (its options: {known})")
        f, annotation = found[name]
        if value is None:
            continue  # null: the default
        kinds = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
        if not any(_json_is(value, kind) for kind in kinds):
            wanted = " or ".join(getattr(kind, "__name__", str(kind)) for kind in kinds)
            raise OptionValueError(name, f"option {name!r} must be a {_JSON_NAMES.get(wanted, wanted)}, "
                                         f"got {_json_repr(value)}")
        if LOCAL in f.metadata and value not in f.metadata[LOCAL]:
            allowed = " or ".join(repr(n) for n in f.metadata[LOCAL])
            raise OptionValueError(name, f"option {name!r} names a file or model of the server, which a request "
                                         f"may not choose" + (f": give {allowed}, or leave it out" if allowed else ""))


@functools.lru_cache(maxsize=None)
def _json_fields(cls: type) -> dict:
    """``{name: (field, resolved annotation)}`` of an options dataclass: its string annotations resolved once
    (``typing.get_type_hints`` compiles each of them on every call)."""
    hints = typing.get_type_hints(cls)
    return {f.name: (f, hints[f.name]) for f in dataclasses.fields(cls)}


_JSON_NAMES = {"int": "JSON integer", "float": "JSON number", "str": "JSON string", "bool": "JSON boolean"}


def _json_is(value, kind) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind is str:
        return isinstance(value, str)
    return True  # other types: the option's own checks


def _json_repr(value) -> str:
    """A value as JSON writes it, shortened (for messages)."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def option_names(classes: Iterable[type]) -> list[str]:
    """Field names of several option dataclasses, each once, in declaration order."""
    return list(dict.fromkeys(f.name for cls in classes for f in dataclasses.fields(cls)))


def build(cls, values: dict, owner: str = "") -> Any:
    """An instance of option dataclass ``cls`` from ``values`` (None means unset: the default applies);
    unknown names are an error that lists the known ones."""
    known = _field_kinds(cls)
    unknown = sorted(k for k, v in values.items() if v is not None and k not in known)
    where = f" for {owner}" if owner else ""
    if unknown:
        raise SemiretError(f"unknown option(s) {', '.join(unknown)}{where} (its options: {', '.join(sorted(known)) or 'none'})")
    for name, value in values.items():
        kinds = known.get(name, ())
        if value is not None and kinds and not any(_python_is(value, kind) for kind in kinds):
            wanted = " or ".join(kind.__name__ for kind in kinds)
            article = "an" if wanted[0] in "aeiou" else "a"
            raise SemiretError(f"option {name!r}{where} must be {article} {wanted}, got {value!r}")
    return cls(**{k: v.item() if isinstance(v, np.generic) else v  # numpy's numbers as Python's (JSON records them)
                  for k, v in values.items() if v is not None and k in known})


@functools.cache
def _field_kinds(cls) -> dict[str, tuple[type, ...]]:
    """Each field of option dataclass ``cls`` and the plain types (bool, int, float, str) its annotation allows;
    empty where it allows any other type too (a path, a list, an object: the option's own checks)."""
    kinds = {}
    for name, annotation in typing.get_type_hints(cls).items():
        allowed = tuple(a for a in typing.get_args(annotation) if a is not type(None)) or (annotation,)
        kinds[name] = allowed if all(a in (bool, int, float, str) for a in allowed) else ()
    return {f.name: kinds.get(f.name, ()) for f in dataclasses.fields(cls)}


def _python_is(value, kind) -> bool:
    """``value`` fits ``kind`` as a Python caller may give it: numpy's numbers as numbers, a path as a string."""
    if kind is bool:
        return isinstance(value, (bool, np.bool_))
    if isinstance(value, (bool, np.bool_)):
        return False  # True is no number
    if kind is int:
        return isinstance(value, (int, np.integer))
    if kind is float:
        return isinstance(value, (int, float, np.integer, np.floating))
    return isinstance(value, (str, os.PathLike))


def pick(values: dict, cls) -> dict:
    """The set (not None) entries of ``values`` that are fields of ``cls``."""
    known = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in values.items() if v is not None and k in known}


@functools.cache
def _class_definitions(source_file: str) -> dict[str, ast.ClassDef]:
    """Every class statement of a source file by qualified name, the file parsed once (``inspect.getsource``
    parses the whole module again for each class: a third of a second of every CLI start)."""
    found: dict[str, ast.ClassDef] = {}

    def visit(nodes: list[ast.stmt], prefix: str) -> None:
        for node in nodes:
            if isinstance(node, ast.ClassDef):
                found.setdefault(prefix + node.name, node)
                visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(node.body, f"{prefix}{node.name}.<locals>.")

    visit(ast.parse(Path(source_file).read_text(encoding="utf-8")).body, "")
    return found


@functools.cache
def field_docs(cls) -> dict[str, str]:
    """Attribute docstrings of a dataclass and its bases: ``{field: first paragraph}``."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass is object:
            continue
        try:
            definition = _class_definitions(inspect.getsourcefile(klass) or "").get(klass.__qualname__)
        except (OSError, TypeError):  # classes made at run time have no source
            continue
        if definition is None:  # made at run time (exec, type()): no statement of its own
            continue
        body = definition.body
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[node.target.id] = " ".join(after.value.value.strip().split("\n\n")[0].split())
    return docs


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _flag_type(annotation):
    """What typer can parse for a field's type: ``X | None`` -> ``Optional[X]``, ``list[X]`` kept."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return Optional[_flag_type(args[0])] if len(args) == 1 else str
    return annotation


def _none_or(kind: type) -> Callable:
    """A flag's parser: ``none`` (any case) is None, anything else a ``kind`` (typer hands defaults in parsed)."""
    def parse(text):
        if not isinstance(text, str):
            return text
        return None if text.strip().lower() == "none" else kind(text)

    return parse


FLAG_ALIASES = {"output": ("--output", "--out", "-o")}
"""Flags a field answers to besides ``--field-name``: a run's folder is ``--output``, ``--out`` or ``-o`` on every
command, as an index's or a file's is (``semiret index --out``)."""


def flag_parameters(classes: Iterable[type], unset_defaults: bool, help_suffix: Callable[[str], str] | None = None,
                    skip: Iterable[str] = ()) -> list[inspect.Parameter]:
    """One keyword-only typer option per field of ``classes`` (each name once, help from the first class that
    documents it). ``unset_defaults``: every flag defaults to None, so a value reaches the code only when given
    (options shared by several owners whose defaults may differ; the help shows a default only where they
    agree); otherwise the field's default is the flag's."""
    import typer

    skipped = set(skip)
    found: dict[str, list[tuple[dataclasses.Field, type]]] = {}
    for cls in classes:
        for f in dataclasses.fields(cls):
            if f.init and f.name not in skipped:
                found.setdefault(f.name, []).append((f, cls))
    params = []
    for name, owners in found.items():
        f, cls = owners[0]
        kind = _flag_type(_json_fields(cls)[name][1])
        help_text = next((field_docs(c)[name] for _, c in owners if name in field_docs(c)), "")
        default = _default(f)
        if unset_defaults:
            defaults = {repr(_default(g)) for g, _ in owners}
            if len(defaults) == 1 and default not in (None, dataclasses.MISSING, "") and not isinstance(default, list):
                help_text += f" (default: {default})"
            if typing.get_origin(kind) is not list and typing.get_origin(kind) is not typing.Union:
                kind = Optional[kind]
            default = [] if typing.get_origin(kind) is list else None
        if help_suffix is not None:
            help_text += help_suffix(name)
        declarations = [f.metadata["flag"]] if "flag" in f.metadata else list(FLAG_ALIASES.get(name, ()))
        parsing = {}
        if default is not None and typing.get_origin(kind) is typing.Union and typing.get_args(kind)[0] in (int, float):
            # an optional number with a default of its own: "none" is how the command line leaves it unset
            parsing = {"parser": _none_or(typing.get_args(kind)[0]), "metavar": f"<{typing.get_args(kind)[0].__name__}|none>"}
        info = typer.Option(... if default is dataclasses.MISSING else default, *declarations, help=help_text,
                            show_default=not unset_defaults, **parsing)
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=kind))
    return params


def command_with_options(function: Callable, classes: Iterable[type], unset_defaults: bool = True,
                         help_suffix: Callable[[str], str] | None = None, skip: Iterable[str] = ()) -> Callable:
    """``function(..., options: dict)`` as a typer command whose flags are the fields of ``classes``: the
    generated flags' values arrive together as ``options`` (unset ones left out when ``unset_defaults``)."""
    hints = typing.get_type_hints(function)
    own = [p.replace(annotation=hints.get(p.name, p.annotation))
           for p in inspect.signature(function).parameters.values() if p.name != "options"]
    generated = flag_parameters(classes, unset_defaults, help_suffix, skip)
    names = {p.name for p in generated}

    @functools.wraps(function)
    def command(**kwargs):
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
        if unset_defaults:
            options = {k: v for k, v in options.items() if v is not None and v != []}
        return function(**kwargs, options=options)

    positional = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
    command.__signature__ = inspect.Signature(positional + generated)
    command.__annotations__ = {p.name: p.annotation for p in positional + generated}
    del command.__wrapped__  # typer must read the generated signature, not the original's
    return command
