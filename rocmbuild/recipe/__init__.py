"""Recipes: the model, parsing and validation, the search path, overrides and lock files."""
