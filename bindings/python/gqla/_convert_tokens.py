# SPDX-License-Identifier: Apache-2.0
"""The tokens a conversion measures its principal directions on.

The calibration hidden states (the input of the attention layer, after its
norm) come first, weight 1 each. A few hundred of them cannot pin down a
latent of several hundred directions, so synthetic isotropic tokens (a
prior: "every input direction matters a little") are added until there are
comfortably more tokens than directions to find. In the small PCAs the
prior carries `prior_weight` of the calibration's total weight; in the
latent PCA it only fills the directions the calibration leaves open. With
no calibration the synthetic tokens are the calibration.
"""

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ._convert_errors import ConversionError

# Tokens beyond the number of directions a PCA must find, so that the last
# directions are estimated from more than one token each.
OVERSAMPLE = 64


@dataclass
class TokenSet:
    tokens: np.ndarray      # [n + p, d]: calibration rows first
    weights: np.ndarray     # [n + p]
    calibrated: int         # n
    held_out: Optional[np.ndarray] = None   # calibration rows kept out of the fit, for the report

    @property
    def fitted(self):
        """The sequence the fit saw: the calibration, or (none given) the
        synthetic tokens."""
        return self.tokens[:self.calibrated] if self.calibrated else self.tokens

    @property
    def sequence(self):
        """The tokens the report attends over: the held-out rows when there
        are any, else the fitted sequence."""
        return self.fitted if self.held_out is None else self.held_out


def check_calibration(calibration, hidden_size, name="calibration"):
    if calibration is None:
        return None
    x = np.asarray(calibration)
    if x.ndim != 2 or x.shape[1] != hidden_size or x.shape[0] < 1:
        raise ConversionError(f"{name}: expected hidden states [n >= 1, {hidden_size}], got shape {x.shape}")
    if not np.issubdtype(x.dtype, np.floating) and not np.issubdtype(x.dtype, np.integer):
        raise ConversionError(f"{name}: expected a float array, got dtype {x.dtype}")
    if not np.isfinite(x).all():
        raise ConversionError(f"{name}: holds NaN or infinite values")
    return x


def token_set(calibration, hidden_size, directions, dtype, prior_weight=0.05, seed=0, holdout=0):
    """Calibration plus enough synthetic tokens to find `directions`
    principal directions; the last `holdout` calibration rows are kept out
    of the fit (the report measures on them)."""
    x = check_calibration(calibration, hidden_size)
    held = None
    if holdout:
        if x is None or isinstance(holdout, bool) or not 0 < int(holdout) < x.shape[0]:
            count = 0 if x is None else x.shape[0]
            raise ConversionError(f"holdout: expected 1..{count - 1} of the {count} calibration rows, got {holdout!r}")
        held = np.asarray(x[x.shape[0] - int(holdout):]).astype(dtype)
        x = x[:x.shape[0] - int(holdout)]
    n = 0 if x is None else x.shape[0]
    prior = max(0, directions + OVERSAMPLE - n)
    scale = float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if n else 1.0
    rng = np.random.default_rng(seed)
    synthetic = rng.standard_normal((prior, hidden_size)) * (scale if scale > 0 else 1.0)
    tokens = synthetic if x is None else np.concatenate([np.asarray(x, np.float64), synthetic])
    weights = np.ones(n + prior)
    if n and prior:
        weights[n:] = prior_weight * n / prior
    return TokenSet(tokens.astype(dtype), weights, n, held)
