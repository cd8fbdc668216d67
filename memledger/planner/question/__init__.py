"""The question a search answers: the request (spec) and its structural layouts (space)."""
