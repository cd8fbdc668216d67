"""The one exception type the core raises for bad input.

Every message names the field, the offending value and what would be valid, so that the CLI,
the app and a hand-edited share link can show it verbatim.
"""


class SpecError(ValueError):
    """An invalid specification: `field` is the user-facing parameter name."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def require(condition: bool, field: str, message: str) -> None:
    if not condition:
        raise SpecError(field, message)


def require_positive(field: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise SpecError(field, f"must be an integer, got {value!r}")
    if value <= 0:
        raise SpecError(field, f"must be a positive integer, got {value}")


def require_non_negative(field: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise SpecError(field, f"must be an integer, got {value!r}")
    if value < 0:
        raise SpecError(field, f"must be >= 0, got {value}")


def require_choice(field: str, value: str, choices) -> None:
    if value not in choices:
        raise SpecError(field, f"unknown value {value!r}; valid: {', '.join(sorted(choices))}")


def lookup(field: str, table, name: str, what: str = "preset", ordered: bool = True):
    """`table[name]`, or a SpecError naming the valid keys (in table order, or sorted)."""
    try:
        return table[name]
    except KeyError:
        keys = table if ordered else sorted(table)
        raise SpecError(field, f"unknown {what} {name!r}; valid: {', '.join(keys)}") from None
