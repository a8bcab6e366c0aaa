"""Reading recipe files: strict safe YAML, ``base:`` inheritance and ``--set`` overrides.

The schema-independent half of :mod:`gpse_dgl.recipes` (:mod:`.fields` is the other): a file becomes a raw
mapping whose values remember where they were written (a base file, or a ``--set`` override), so that
validation (:func:`gpse_dgl.recipes.validate_recipe`) can name the right file and key in a one-line error.

Example
-------
>>> from gpse_dgl.recipes import merge_recipes
>>> merge_recipes({"model": {"name": "gps", "dim_hidden": 64}}, {"model": {"dim_hidden": 128}})
{'model': {'name': 'gps', 'dim_hidden': 128}}
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import yaml

from ..utils.errors import RecipeError
from ..utils.text import did_you_mean

__all__ = ["StrictSafeLoader", "BASE_KEY", "read_recipe_file", "merge_recipes", "apply_overrides",
           "check_keys"]


class StrictSafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (PyYAML keeps the last silently).

    Keys brought in by a merge (``<<: *anchor``) may still be overridden by an explicit key.
    """


class _DuplicateKey(Exception):
    pass


def _mapping_without_duplicates(loader: StrictSafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    first_line: dict = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            if key in first_line:
                raise _DuplicateKey(f"duplicate key {key!r} at lines {first_line[key]} and {line} "
                                    f"(YAML would silently keep the second)")
            first_line[key] = line
        except TypeError:  # an unhashable key: construct_mapping reports it
            pass
    return loader.construct_mapping(node, deep=deep)


StrictSafeLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


#: The key that names a recipe's base recipe (see the module docstring).
BASE_KEY = "base"


def read_recipe_file(path: str, schema: Mapping[str, Any] | None = None) -> dict:
    """The recipe in ``path`` with its chain of ``base:`` recipes merged in (the later file wins).

    The result has no ``base`` key. Values that come from a base file carry that file's name, so that
    :func:`validate_recipe` names it in an error; with ``schema``, the keys of every file are checked
    against it as the file is read (an unknown key is reported with the file it is in).
    """
    return _read_with_bases(str(path), schema, chain=())


@dataclass(frozen=True)
class FromBase:
    """A value written in the base recipe ``path`` (so errors about it can name that file)."""

    value: Any
    path: str


def _read_with_bases(path: str, schema: Mapping[str, Any] | None, chain: tuple[str, ...]) -> dict:
    raw = _read_yaml_mapping(path)
    base = raw.pop(BASE_KEY, None)
    if schema is not None:
        check_keys(raw, schema, path, prefix="", deep=True)
    if chain:  # a base of the recipe being read
        raw = _mark_origin(raw, path)
    if base is None:
        return raw
    if not isinstance(base, str) or not base.strip():
        raise RecipeError(f"{path}: {BASE_KEY}: expected the file name of a base recipe, got {show_value(base)}")
    base_path = os.path.join(os.path.dirname(path), base)
    visited = chain + (os.path.realpath(path),)
    if os.path.realpath(base_path) in visited:
        raise RecipeError(f"{path}: {BASE_KEY}: {base} is already in the chain of bases "
                          f"({' -> '.join(os.path.basename(p) for p in visited + (base_path,))}): a cycle")
    if not os.path.isfile(base_path):
        raise RecipeError(f"{path}: {BASE_KEY}: base recipe {base} not found (looked for {base_path})")
    return merge_recipes(_read_with_bases(base_path, schema, visited), raw)


def merge_recipes(base: Mapping[str, Any], child: Mapping[str, Any]) -> dict:
    """``base`` updated by ``child``: sections are merged key by key, any other value of ``child`` wins
    (``null`` included); a section left empty in ``child`` (YAML null) changes nothing.

    >>> merge_recipes({"model": {"name": "gps", "dim_hidden": 64}}, {"model": {"dim_hidden": 128}})
    {'model': {'name': 'gps', 'dim_hidden': 128}}
    """
    merged = copy.deepcopy(dict(base))
    for key, value in child.items():
        if isinstance(merged.get(key), Mapping) and (value is None or isinstance(value, Mapping)):
            merged[key] = merge_recipes(merged[key], value or {})
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _mark_origin(raw: Mapping[str, Any], path: str) -> dict:
    """``raw`` with every value that is not a section wrapped in :class:`FromBase`."""
    return {key: _mark_origin(value, path) if isinstance(value, Mapping) else FromBase(value, path)
            for key, value in raw.items()}


def _read_yaml_mapping(path: str) -> dict:
    """The YAML mapping in ``path`` (:class:`StrictSafeLoader`); empty files and repeated keys are errors."""
    if not os.path.exists(path):
        raise RecipeError(f"{path}: recipe file not found")
    if os.path.isdir(path):
        raise RecipeError(f"{path}: is a directory, expected a YAML recipe file")
    try:
        with open(path, encoding="utf-8") as handle:
            raw = yaml.load(handle, Loader=StrictSafeLoader)  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as exc:
        raise RecipeError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RecipeError(f"{path}: invalid YAML{where}: {problem}") from None
    except UnicodeDecodeError:
        raise RecipeError(f"{path}: not a text (UTF-8) file") from None
    if raw is None:
        raise RecipeError(f"{path}: empty recipe (no data / model / general_pipeline sections); start from "
                          f"recipes/quickstart.yaml")
    if not isinstance(raw, dict):
        raise RecipeError(f"{path}: expected a mapping with data / model / general_pipeline "
                          f"sections, got {type_name(raw)}")
    return raw


def apply_overrides(raw: dict, overrides: Iterable[str], source: str,
                    schema: Mapping[str, Any]) -> dict:
    """Apply ``key.path=value`` overrides to ``raw`` in place (values parsed as YAML scalars).

    Only the key path is checked here (so the message can say ``--set``); values are validated with
    the rest of the recipe by :func:`validate_recipe`, errors naming ``--set key.path``.
    """
    for item in overrides:
        key_path, value = _parse_override(item, source)
        node: Any = schema
        for depth, part in enumerate(key_path):
            if not isinstance(node, Mapping) or part not in node:
                prefix = ".".join(key_path[:depth])
                raise RecipeError(f"{source}: --set {'.'.join(key_path)}: "
                                  f"{unknown_key_text(part, node, prefix)}")
            node = node[part]
        if isinstance(node, Mapping):
            raise RecipeError(f"{source}: --set {'.'.join(key_path)}: is a section; set one of its "
                              f"keys ({', '.join(node)})")
        target = raw
        for part in key_path[:-1]:
            if not isinstance(target.get(part), dict):
                target[part] = {}
            target = target[part]
        target[key_path[-1]] = Override(value, ".".join(key_path))
    return raw


@dataclass(frozen=True)
class Override:
    """A value that came from ``--set`` (so errors about it can say so)."""

    value: Any
    key: str


def _parse_override(item: str, source: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise RecipeError(f"{source}: --set {item!r}: expected key.path=value")
    key, text = item.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise RecipeError(f"{source}: --set {item!r}: expected key.path=value")
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        # Not valid YAML (e.g. an unbalanced bracket): keep the text; the type check reports it.
        value = text
    return key.split("."), value




def check_keys(raw: Any, schema: Mapping[str, Any], source: str, prefix: str, deep: bool = False) -> None:
    """``raw`` is a section (or null) whose keys are all in ``schema``; with ``deep`` the same for its
    sections. Values are not looked at."""
    if raw is None:
        return
    if not isinstance(raw, Mapping):
        raise RecipeError(f"{source}: {prefix.rstrip('.') or '<top level>'}: expected a mapping "
                          f"(a section), got {type_name(raw)}")
    for key in raw:
        if key not in schema:
            raise RecipeError(f"{source}: {prefix}{key}: {unknown_key_text(key, schema, prefix)}")
        if deep and isinstance(schema[key], Mapping):
            check_keys(raw[key], schema[key], source, f"{prefix}{key}.", deep=True)



def unknown_key_text(key: str, section: Any, prefix: str) -> str:
    if not isinstance(section, Mapping):
        return f"{prefix.rstrip('.')} is not a section"
    hint = did_you_mean(str(key), [str(k) for k in section])
    where = f"in {prefix.rstrip('.')}" if prefix else "at the top level"
    return f"unknown key{hint}; known keys {where}: {', '.join(section)}"



def type_name(value: Any) -> str:
    return {list: "a list", dict: "a mapping", str: "a string"}.get(type(value), type(value).__name__)


def show_value(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
