# SPDX-License-Identifier: Apache-2.0
"""The one exception the converter raises for bad input."""


class ConversionError(ValueError):
    """A checkpoint, config or argument the converter cannot use. The
    message names the argument (or tensor, or config field) and what was
    expected."""


def require(condition, message):
    if not condition:
        raise ConversionError(message)


def positive_int(name, value, minimum=1):
    """`value` as an int >= minimum, else ConversionError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise ConversionError(f"{name}: expected an integer, got {value!r}")
    value = int(value)
    if value < minimum:
        raise ConversionError(f"{name}: expected >= {minimum}, got {value}")
    return value
