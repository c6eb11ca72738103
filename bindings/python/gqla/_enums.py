# SPDX-License-Identifier: Apache-2.0
"""String names of the C enums, as the Python API spells them."""

from . import _errors

KIND = {"gqa": 1, "gqla": 2}
DTYPE = {"f32": 1, "f16": 2, "bf16": 3}
# Cache dtypes: the io dtypes plus the 8-bit float (a cache dtype only;
# docs/fp8-cache.md).
CACHE_DTYPE = {**DTYPE, "fp8_e4m3": 4}
DEVICE = {"auto": 0, "cpu": 1, "cuda": 2}
# "gqa_transient" is a form of one attend() call, never a session's path.
PATH = {"auto": 0, "gqa": 1, "absorb": 2, "gqa_transient": 3}
_PATH_ALIASES = {"transient": "gqa_transient"}

# Spellings users bring from numpy / torch.
_DTYPE_ALIASES = {
    "float32": "f32", "fp32": "f32", "float": "f32",
    "float16": "f16", "fp16": "f16", "half": "f16",
    "bfloat16": "bf16",
    "float8_e4m3fn": "fp8_e4m3", "e4m3": "fp8_e4m3",
}

def _lookup(table, value, what):
    key = str(value).lower()
    if key not in table:
        raise _errors.InvalidArgument(
            f"{what}: {value!r} is not one of {', '.join(sorted(table))}")
    return table[key]


def dtype_code(value, what):
    """'f32'/'f16'/'bf16' (or numpy/torch spellings) -> gqla_dtype."""
    name = str(value).lower().replace("torch.", "")
    return _lookup(DTYPE, _DTYPE_ALIASES.get(name, name), what)


def cache_dtype_code(value, what):
    """A cache dtype name: an io dtype's or 'fp8_e4m3' -> gqla_dtype."""
    name = str(value).lower().replace("torch.", "")
    return _lookup(CACHE_DTYPE, _DTYPE_ALIASES.get(name, name), what)


def path_code(value, what="path"):
    name = str(value).lower()
    return _lookup(PATH, _PATH_ALIASES.get(name, name), what)


def device_code(value, what="device"):
    """'auto', 'cpu', 'cuda' or 'cuda:N' -> (gqla_device_type, index)."""
    text = str(value).lower()
    name, _, index = text.partition(":")
    code = _lookup(DEVICE, name, what)
    if index and (code != DEVICE["cuda"] or not index.isdigit()):
        raise _errors.InvalidArgument(f"{what}: {value!r}; an index is written 'cuda:N'")
    return code, int(index or 0)


def name_of(table, code):
    """Reverse lookup: the string name of an integer code."""
    for name, value in table.items():
        if value == code:
            return name
    return str(code)
