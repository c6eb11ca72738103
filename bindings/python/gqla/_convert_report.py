# SPDX-License-Identifier: Apache-2.0
"""What a conversion reports per layer, and the shared measurement helpers."""

from dataclasses import dataclass, field

import numpy as np

from ._convert_errors import ConversionError

_DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2}


def dtype_bytes(cache_dtype):
    try:
        return _DTYPE_BYTES[cache_dtype]
    except KeyError:
        raise ConversionError(f"cache_dtype: expected one of {sorted(_DTYPE_BYTES)}, got {cache_dtype!r}") from None


@dataclass
class LayerReport:
    """One converted layer.

    ``relative_error``: ||o' - o|| / ||o|| of the per-head attention outputs
    (the input of o_proj, the converted one mapped back to the source's value
    coordinates) of ``eval_rows`` query rows spread over the calibration
    tokens (the held-out ones when ``details['held_out_tokens']`` > 0; the
    synthetic ones without calibration), float64 attention; None when not
    evaluated. Measured on tokens the fit saw, it is optimistic once r
    exceeds their number. ``kv_bytes_before`` /
    ``kv_bytes_after``: cache bytes per token and layer by path at
    ``cache_dtype``. ``details``: method facts (fold, kept energies, ...).
    """

    layer: int
    direction: str
    relative_error: object
    kv_bytes_before: dict
    kv_bytes_after: dict
    cache_dtype: str
    seconds: float
    eval_seconds: float = 0.0
    eval_rows: int = 0
    details: dict = field(default_factory=dict)

    def line(self):
        error = "not evaluated" if self.relative_error is None else f"{self.relative_error:.3e}"
        before = ", ".join(f"{k} {v}" for k, v in self.kv_bytes_before.items())
        after = ", ".join(f"{k} {v}" for k, v in self.kv_bytes_after.items())
        return (f"layer {self.layer}: rel. error {error}; KV bytes/token ({self.cache_dtype}) "
                f"{before} -> {after}; {self.seconds:.2f} s")

    def as_dict(self):
        return {"layer": self.layer, "direction": self.direction, "relative_error": self.relative_error,
                "kv_bytes_before": self.kv_bytes_before, "kv_bytes_after": self.kv_bytes_after,
                "cache_dtype": self.cache_dtype, "seconds": round(self.seconds, 3),
                "eval_seconds": round(self.eval_seconds, 3), "eval_rows": self.eval_rows,
                "details": _plain(self.details)}


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def relative_error(actual, expected):
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    scale = np.linalg.norm(expected)
    return float(np.linalg.norm(actual - expected) / scale) if scale > 0 else float(np.linalg.norm(actual))


def eval_rows(count, limit):
    """Up to `limit` query rows spread over 0..count-1, always the last."""
    if count <= limit:
        return np.arange(count)
    return np.unique(np.linspace(0, count - 1, limit).round().astype(np.int64))
