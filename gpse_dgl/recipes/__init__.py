"""Recipes: the machinery both training pipelines declare their schema on, and the reading of recipe files.

A recipe is a YAML file of ``data``, ``model`` and ``general_pipeline`` sections plus ``seed`` and ``device``.
:mod:`.fields` declares keys (:class:`Field`), validates a recipe against a schema with one-line errors and
dumps it back; :mod:`.files` reads files (strict safe YAML, ``base:`` inheritance, ``--set`` overrides). Each
pipeline keeps its schema beside its code (``train/pretraining/schema.py``, ``train/downstream/schema.py``).

Example
-------
>>> from gpse_dgl.recipes import Field, validate_recipe
>>> validate_recipe({"seed": 3}, schema={"seed": Field("int", 0, "seed")})
{'seed': 3}
"""
from .fields import CrossCheck, Field, describe_schema, dump_recipe, get, key_origin, load_recipe, validate_recipe
from .files import BASE_KEY, StrictSafeLoader, apply_overrides, merge_recipes, read_recipe_file

__all__ = ["BASE_KEY", "CrossCheck", "Field", "StrictSafeLoader", "apply_overrides", "describe_schema",
           "dump_recipe", "get", "key_origin", "load_recipe", "merge_recipes", "read_recipe_file", "validate_recipe"]
