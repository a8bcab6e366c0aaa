"""Recipe schemas: declared keys with defaults, validation with one-line errors, and dumping.

A recipe has the shape of a dglgo recipe: top-level ``data``, ``model`` and ``general_pipeline``
sections plus the optional scalars ``seed`` and ``device``. A *schema* is a nested dict whose sections
are dicts and whose keys are :class:`Field` declarations (type, default, a one-line description and
the constraints checked on load); a recipe that leaves a key out gets the default. Each pipeline
declares its schema beside its code: :data:`~gpse_dgl.train.pretraining.schema.PRETRAIN_SCHEMA`
(``gpse-dgl pretrain``) and :data:`~gpse_dgl.train.downstream.schema.DOWNSTREAM_SCHEMA`
(``gpse-dgl train``); this module is the machinery they share, and :mod:`gpse_dgl.recipes.files` reads
the files (strict YAML, ``base:`` recipes, ``--set`` overrides).

Everything is checked before any work starts, and every problem is reported as one line that names
the file and the dotted key path, e.g.::

    recipes/x.yaml: general_pipeline.optimizer.lr: expected a number, got 'fast'

``--set key.path=value`` overrides are parsed as YAML scalars and validated in exactly the same way.
Constraints between keys are a schema's ``cross_check(recipe, raw, source)``, run after the keys.

Example
-------
>>> from gpse_dgl.recipes import Field, describe_schema, validate_recipe
>>> schema = {"seed": Field("int", 0, "seed"), "model": {"width": Field("int", 8, "width", minimum=1)}}
>>> validate_recipe({"model": {"width": 16}}, schema=schema)
{'seed': 0, 'model': {'width': 16}}
>>> validate_recipe({"model": {"width": 0}}, "x.yaml", schema=schema)
Traceback (most recent call last):
    ...
gpse_dgl.utils.errors.RecipeError: x.yaml: model.width: expected a value >= 1, got 0
>>> describe_schema(schema)
['seed (default 0): seed', 'model.width (default 8): width']
"""
from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import yaml

from ..utils.errors import RecipeError
from ..utils.text import did_you_mean
from .files import (BASE_KEY, FromBase, Override, StrictSafeLoader, apply_overrides, check_keys, merge_recipes,
                    read_recipe_file, show_value)

__all__ = ["Field", "CrossCheck", "load_recipe", "validate_recipe", "key_origin", "get", "dump_recipe",
           "describe_schema"]

#: ``cross_check(recipe, raw, source)``: constraints between the keys of a validated recipe (raises
#: :class:`RecipeError`); ``raw`` tells which values came from ``--set`` (:func:`key_origin`).
CrossCheck = Callable[[dict, Mapping[str, Any], str], None]


@dataclass(frozen=True)
class Field:
    """One recipe key: its type, default and the constraints checked on load.

    ``kind`` is one of ``"int"``, ``"number"``, ``"bool"``, ``"str"``, ``"choice"``, ``"str_list"``,
    ``"number_list"``. ``check`` is an extra callable returning an error text or ``None``.
    """

    kind: str
    default: Any
    help: str
    nullable: bool = False
    choices: tuple = ()
    minimum: float | None = None
    exclusive_minimum: bool = False
    maximum: float | None = None
    length: int | None = None
    check: Callable[[Any], str | None] | None = field(default=None, compare=False)


# ----------------------------------------------------------------------------------------------
# loading


def load_recipe(path: str | os.PathLike, overrides: Iterable[str] = (), *, schema: Mapping[str, Any],
                cross_check: CrossCheck | None = None) -> dict:
    """Read, override (``key.path=value`` strings) and validate a recipe; return it with defaults filled.

    Raises :class:`RecipeError` (one line naming the file and the key) on any problem.
    """
    source = str(path)
    raw = read_recipe_file(source, schema)
    apply_overrides(raw, overrides, source, schema)
    return validate_recipe(raw, source, schema=schema, cross_check=cross_check)


# ----------------------------------------------------------------------------------------------
# validation


def validate_recipe(raw: Mapping[str, Any], source: str = "<recipe>", *, schema: Mapping[str, Any],
                    cross_check: CrossCheck | None = None) -> dict:
    """Check ``raw`` against ``schema``; return a new plain dict with every default filled in.

    ``cross_check(recipe, raw, source)`` then checks constraints between keys.
    """
    recipe = _validate_section(raw, schema, source, prefix="")
    if cross_check is not None:
        cross_check(recipe, raw, source)
    return recipe


def key_origin(raw: Mapping[str, Any], dotted_key: str) -> str:
    """How to name ``dotted_key`` in an error: ``--set KEY`` if its value came from an override."""
    node: Any = raw
    for part in dotted_key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return f"--set {node.key}" if isinstance(node, Override) else dotted_key


def _validate_section(raw: Any, schema: Mapping[str, Any], source: str, prefix: str) -> dict:
    if isinstance(raw, FromBase):
        source, raw = raw.path, raw.value
    if raw is None:
        raw = {}
    check_keys(raw, schema, source, prefix)
    result = {}
    for key, spec in schema.items():
        value = raw.get(key)
        if isinstance(spec, Mapping):
            result[key] = _validate_section(value, spec, source, f"{prefix}{key}.")
        else:
            result[key] = _validate_value(value, key in raw, spec, source, f"{prefix}{key}")
    return result


def _validate_value(value: Any, present: bool, spec: Field, source: str, key: str) -> Any:
    if isinstance(value, FromBase):
        source, value = value.path, value.value
    where = key
    if isinstance(value, Override):
        where, value = f"--set {value.key}", value.value
    if not present:
        return copy.deepcopy(spec.default)
    if value is None:
        if spec.nullable:
            return None
        raise RecipeError(f"{source}: {where}: expected {_expected(spec)}, got null")
    try:
        value = _convert(value, spec)
        _check_seed(value, key)
        return value
    except _Invalid as exc:
        raise RecipeError(f"{source}: {where}: {exc}") from None


SEED_LIMIT = 2 ** 63  # seeds are 63-bit (derive_seed, numpy's SeedSequence words): larger ones would wrap


def _check_seed(value: Any, key: str) -> None:
    if key.rsplit(".", 1)[-1].endswith("seed") and isinstance(value, int) and not 0 <= value < SEED_LIMIT:
        raise _Invalid(f"expected a seed in [0, 2**63), got {value}")


class _Invalid(Exception):
    pass


def _convert(value: Any, spec: Field) -> Any:
    if spec.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(f"expected an integer, got {show_value(value)}")
        _check_range(value, spec)
    elif spec.kind == "number":
        value = _as_number(value)
        _check_range(value, spec)
    elif spec.kind == "bool":
        if not isinstance(value, bool):
            raise _Invalid(f"expected true or false, got {show_value(value)}")
    elif spec.kind in ("str", "choice"):
        if not isinstance(value, str) or not value:
            raise _Invalid(f"expected {_expected(spec)}, got {show_value(value)}")
        if spec.kind == "choice" and value not in spec.choices:
            raise _Invalid(f"expected one of {', '.join(spec.choices)}, got {value!r}"
                           f"{did_you_mean(value, spec.choices)}")
    elif spec.kind == "str_list":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _Invalid(f"expected a list of names, got {show_value(value)}")
    elif spec.kind == "number_list":
        if not isinstance(value, list):
            raise _Invalid(f"expected a list of numbers, got {show_value(value)}")
        value = [_as_number(v) for v in value]
        if spec.length is not None and len(value) != spec.length:
            raise _Invalid(f"expected {spec.length} numbers, got {len(value)}")
    else:  # pragma: no cover - schema bug
        raise AssertionError(f"unknown field kind {spec.kind!r}")
    if spec.check is not None and (problem := spec.check(value)):
        raise _Invalid(problem)
    return value


def _as_number(value: Any) -> float | int:
    # PyYAML follows YAML 1.1, where "5e-3" (no dot) is a string, not a float: accept such text.
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise _Invalid(f"expected a number, got {value!r}") from None
        if not math.isfinite(number):
            raise _Invalid(f"expected a finite number, got {value!r}")
        return number
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Invalid(f"expected a number, got {show_value(value)}")
    if not math.isfinite(value):
        raise _Invalid(f"expected a finite number, got {value!r}")
    return value


def _check_range(value: float, spec: Field) -> None:
    if spec.minimum is not None:
        if value < spec.minimum or (spec.exclusive_minimum and value == spec.minimum):
            relation = ">" if spec.exclusive_minimum else ">="
            raise _Invalid(f"expected a value {relation} {spec.minimum:g}, got {value!r}")
    if spec.maximum is not None and value > spec.maximum:
        raise _Invalid(f"expected a value <= {spec.maximum:g}, got {value!r}")


# ----------------------------------------------------------------------------------------------
# helpers: messages, dumping


def _expected(spec: Field) -> str:
    return {
        "int": "an integer", "number": "a number", "bool": "true or false",
        "str": "a non-empty string", "choice": f"one of {', '.join(spec.choices)}",
        "str_list": "a list of names", "number_list": "a list of numbers",
    }[spec.kind]


def get(recipe: Mapping[str, Any], dotted_key: str) -> Any:
    """``get(recipe, "general_pipeline.optimizer.lr")``."""
    node: Any = recipe
    for part in dotted_key.split("."):
        node = node[part]
    return node


def dump_recipe(recipe: Mapping[str, Any]) -> str:
    """The recipe as YAML text (sections in schema order)."""
    return yaml.safe_dump(dict(recipe), sort_keys=False, default_flow_style=None)


def describe_schema(schema: Mapping[str, Any], prefix: str = "") -> list[str]:
    """One line per key: ``path (default): help`` (used by docs and ``--help``)."""
    lines = []
    for key, spec in schema.items():
        if isinstance(spec, Mapping):
            lines += describe_schema(spec, f"{prefix}{key}.")
        else:
            lines.append(f"{prefix}{key} (default {spec.default!r}): {spec.help}")
    return lines
