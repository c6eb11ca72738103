# SPDX-License-Identifier: Apache-2.0
"""RoPE for the converter: frequencies from a config, applying the rotation,
and RoRoPE, the plan that gathers the rotary part of all key heads into one
shared rope key of d_r dims.

Hugging Face's LLaMA layout ("half"): in each head the first rotary_dim dims
rotate; dim f and dim f + rotary_dim/2 form pair f, turned by the angle
position * inv_freq[f] like the complex number x_f + i x_{f+F}. DeepSeek's
checkpoints pair dims 2f and 2f+1 instead ("interleaved").

RoRoPE. Every key head rotates pair f by the same angle, so an orthogonal
matrix that mixes the G copies of pair f across heads (the same mix for both
components of the pair) commutes with the rotation: rotating then mixing
equals mixing then rotating. Mixing with the principal directions of the
G copies (a PCA across heads, per pair) packs the pair's energy into the
first few mixed copies. The plan keeps the d_r/2 mixed copies that matter
most as the rope key; the rest lose their rotation and join the NoPE key.
With FreqFold, m adjacent pairs are mixed together (mG copies) and a kept
direction turns at the first (highest) frequency of its m pairs: an
approximation that lets one kept pair serve m frequencies when d_r is
smaller than the number of frequencies.
"""

from dataclasses import dataclass, field

import numpy as np

from ._convert_errors import ConversionError

# Scaling types whose frequencies are fixed at load time (the rotation stays
# a pure function of position, which the conversion needs).
_STATIC_SCALING = ("default", "linear", "llama3")


@dataclass
class RopeSpec:
    """The rotary embedding of a head: inv_freq [F] (radians per position,
    scaling applied), rotary dims 2F (the first 2F dims of the head) and the
    pair layout ('half' or 'interleaved')."""

    inv_freq: np.ndarray
    layout: str = "half"

    @property
    def rotary_dim(self):
        return 2 * len(self.inv_freq)


def llama_inv_freq(base, rotary_dim, scaling=None):
    """Hugging Face's inv_freq for a LLaMA-family config, with the 'linear'
    and 'llama3' scalings; any other scaling type raises ConversionError."""
    if rotary_dim <= 0 or rotary_dim % 2:
        raise ConversionError(f"rotary dim: expected a positive even number, got {rotary_dim}")
    if not base or base <= 0:
        raise ConversionError(f"rope_theta: expected a positive number, got {base!r}")
    inv_freq = 1.0 / (float(base) ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim))
    if not scaling:
        return inv_freq
    if not isinstance(scaling, dict):
        raise ConversionError(f"rope_scaling: expected an object or null, got {scaling!r}")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in _STATIC_SCALING:
        raise ConversionError(
            f"rope_scaling: unknown or unsupported RoPE scaling type {kind!r} "
            f"(supported: {', '.join(_STATIC_SCALING)})")
    if kind == "default":
        return inv_freq
    factor = float(scaling.get("factor", 1.0))
    if factor <= 0:
        raise ConversionError(f"rope_scaling.factor: expected > 0, got {factor}")
    if kind == "linear":
        return inv_freq / factor
    try:
        low = float(scaling["low_freq_factor"])
        high = float(scaling["high_freq_factor"])
        old_context = float(scaling["original_max_position_embeddings"])
    except KeyError as e:
        raise ConversionError(f"rope_scaling: llama3 scaling needs {e.args[0]!r}") from None
    if high <= low:
        raise ConversionError(f"rope_scaling: high_freq_factor ({high}) must exceed low_freq_factor ({low})")
    wavelen = 2 * np.pi / inv_freq
    scaled = np.where(wavelen > old_context / low, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_context / high) & (wavelen <= old_context / low)
    return np.where(medium, smoothed, scaled)


def pair_index(rotary_dim, layout):
    """(first, second) component dims of every pair, each [F]."""
    half = rotary_dim // 2
    if layout == "half":
        return np.arange(half), np.arange(half) + half
    if layout == "interleaved":
        return np.arange(0, rotary_dim, 2), np.arange(1, rotary_dim, 2)
    raise ConversionError(f"rope layout: expected 'half' or 'interleaved', got {layout!r}")


def apply_rope(x, positions, inv_freq, layout="half"):
    """Rotate the first 2F dims of x [n, ..., dim] (F = len(inv_freq)) by
    position * inv_freq; positions [n]. Returns a new float64 array."""
    x = np.array(x, np.float64)
    inv_freq = np.asarray(inv_freq, np.float64)
    first, second = pair_index(2 * len(inv_freq), layout)
    angle = np.asarray(positions, np.float64)[:, None] * inv_freq[None, :]   # [n, F]
    shape = (angle.shape[0],) + (1,) * (x.ndim - 2) + (angle.shape[1],)
    cos, sin = np.cos(angle).reshape(shape), np.sin(angle).reshape(shape)
    a, b = x[..., first].copy(), x[..., second].copy()
    x[..., first] = a * cos - b * sin
    x[..., second] = b * cos + a * sin
    return x


# --------------------------------------------------------------- RoRoPE
@dataclass
class RopePlan:
    """Which mixed pairs keep their rotation.

    ``fold`` pairs of adjacent frequencies are mixed together; fold group p
    covers pairs p*fold .. p*fold+fold-1, and its mixed copies are indexed
    (local pair, head) -> local*G + head. ``kept`` lists (group, unit vector
    over the fold*G copies, inv_freq) of every kept pair, highest frequency
    first; ``dropped[p]`` is the projector onto the copies of group p that
    lose their rotation.
    """

    fold: int
    kept: list
    dropped: list
    inv_freq: np.ndarray
    kept_energy: float = 0.0
    proxy_error: float = 0.0
    candidates: dict = field(default_factory=dict)


DROPPED_MODES = ("nope", "mean")


def rotation_average(inv_freq, context):
    """(a, b) = the mean of (cos, sin)(inv_freq * t) over the distances
    t = 0..context-1 between a query and the keys it sees."""
    theta = np.asarray(inv_freq, np.float64)
    z = np.exp(1j * theta)
    small = np.abs(1 - z) < 1e-9
    denom = np.where(small, 1.0, 1 - z)
    mean = np.where(small, 1.0 + 0j, (1 - z ** context) / denom / context)
    return mean.real, mean.imag


def _rotation_error(delta, context):
    """Mean of |exp(i*delta*t) - 1|^2 over the distances: what a pair loses
    when it turns by delta per position less than it should."""
    a, _ = rotation_average(np.abs(delta), context)
    return 2.0 - 2.0 * a


def _dropped_error(theta, context, mode):
    """What a pair at inv_freq theta loses when it leaves the rope key:
    'nope' keeps it unrotated (error |R(t) - I|^2); 'mean' replaces its
    rotation by the average rotation over the distances, the best
    position-independent stand-in (error |R(t) - mean R|^2)."""
    a, b = rotation_average(theta, context)
    if mode == "nope":
        return 2.0 - 2.0 * a
    return 2.0 - 2.0 * (a * a + b * b)


def dropped_pair_map(theta, context, mode):
    """The 2x2 map [F, 2, 2] a dropped key pair gets (acting on its two
    components): identity for 'nope'; the mean of R(-theta t) over the
    distances t for 'mean' (q . R(-theta t) k is the score term of a query
    t positions after the key)."""
    theta = np.asarray(theta, np.float64)
    if mode == "nope":
        return np.broadcast_to(np.eye(2), theta.shape + (2, 2)).copy()
    a, b = rotation_average(theta, context)
    return np.stack([np.stack([a, b], -1), np.stack([-b, a], -1)], -2)


def fold_covariances(pairs, weights, fold):
    """Covariances of the mixed copies per fold group: pairs [n, G, F, 2]
    (unrotated key pairs of n tokens), weights [n] -> [F/fold, fold*G, fold*G]
    with copies ordered (local pair, head)."""
    n, heads, freqs, _ = pairs.shape
    groups = freqs // fold
    # [n, G, groups, fold, 2] -> [groups, n, 2, fold, G] -> rows of mixed copies
    z = pairs.reshape(n, heads, groups, fold, 2).transpose(2, 0, 4, 3, 1)
    z = z.reshape(groups, n * 2, fold * heads) * np.repeat(np.sqrt(weights), 2)[None, :, None]
    cov = np.einsum("gti,gtj->gij", z, z)
    return (cov + cov.transpose(0, 2, 1)) * 0.5


def plan_rope(pairs, weights, inv_freq, rope_dim, query_energy=None, context_length=4096, fold="auto",
              dropped="nope", one_per_group=False):
    """Choose the kept mixed pairs (RoRoPE, with FreqFold where it lowers
    the estimated score error).

    pairs [n, G, F, 2]: unrotated key pairs of the calibration tokens;
    query_energy [G, F]: mean squared query norm per group and pair (None:
    equal). The estimate of a plan: for every mixed copy, its key energy
    times the query energy of its pair times the rotation error it is left
    with over `context_length` positions (none when kept at its own
    frequency; the frequency mismatch when kept at its fold's frequency;
    what ``dropped`` leaves of the rotation when it joins the NoPE key).
    ``one_per_group`` folds F/(d_r/2) pairs and keeps the first principal
    direction of each fold: frequencies base^(-2i/d_r), as DeepSeek's RoPE
    computes them.
    """
    if dropped not in DROPPED_MODES:
        raise ConversionError(f"dropped_rope: expected one of {DROPPED_MODES}, got {dropped!r}")
    n, heads, freqs, _ = pairs.shape
    keep = rope_dim // 2
    if query_energy is None:
        query_energy = np.ones((heads, freqs))
    query_energy = np.asarray(query_energy, np.float64)
    query_energy = query_energy / max(query_energy.mean(), 1e-300)
    folds = [m for m in (1, 2, 4, 8) if freqs % m == 0]
    if one_per_group:
        if freqs % keep:
            raise ConversionError(f"rope_dim: {rope_dim} must divide the {2 * freqs} rotary dims of a head for "
                                  f"one rope pair per fold of frequencies (DeepSeek's RoPE)")
        folds = [freqs // keep]
    elif fold != "auto":
        if isinstance(fold, bool) or not isinstance(fold, (int, np.integer)) or fold < 1 or freqs % fold:
            raise ConversionError(f"fold: expected 'auto' or a divisor of the {freqs} rotary pairs, got {fold!r}")
        folds = [int(fold)]
    widest = fold_covariances(pairs, weights, max(folds))
    total_energy = float(np.trace(widest, axis1=1, axis2=2).sum())
    plans = {}
    for m in folds:
        plans[m] = _plan_for_fold(widest, max(folds), m, heads, inv_freq, keep, query_energy, context_length,
                                  dropped, one_per_group)
    best = folds[0]
    for m in folds[1:]:  # a wider fold must lower the estimate clearly to win
        if plans[m].proxy_error < plans[best].proxy_error * (1 - 1e-6):
            best = m
    plan = plans[best]
    plan.candidates = {m: plans[m].proxy_error for m in folds}
    plan.kept_energy = plan.kept_energy / total_energy if total_energy > 0 else 1.0
    return plan


def _plan_for_fold(widest, widest_fold, fold, heads, inv_freq, keep, query_energy, context, dropped,
                   one_per_group=False):
    freqs = len(inv_freq)
    groups = freqs // fold
    per_wide = widest_fold // fold
    candidates = []   # (benefit, cost kept, cost dropped, group, vector, freq, energy)
    bases = []
    for p in range(groups):
        wide, part = divmod(p, per_wide)
        span = slice(part * fold * heads, (part + 1) * fold * heads)
        cov = widest[wide][span, span]
        values, vectors = np.linalg.eigh(cov)
        values, vectors = np.maximum(values[::-1], 0.0), vectors[:, ::-1]
        bases.append(vectors)
        members = p * fold + np.arange(fold)                          # global pair ids
        rep = inv_freq[members[0]]
        member_freq = np.repeat(inv_freq[members], heads)             # per copy (local pair, head)
        member_query = query_energy[:, members].T.reshape(-1)         # same order
        lose_kept = _rotation_error(member_freq - rep, context)
        lose_dropped = _dropped_error(member_freq, context, dropped)
        weight = member_query[:, None] * vectors ** 2 * values[None, :]   # [copies, directions]
        cost_kept = (weight * lose_kept[:, None]).sum(0)
        cost_dropped = (weight * lose_dropped[:, None]).sum(0)
        for j in range(len(values)):
            candidates.append((cost_dropped[j] - cost_kept[j], cost_kept[j], cost_dropped[j], p, j,
                               rep, values[j]))
    if one_per_group:  # the first direction of every fold
        chosen = {i for i, c in enumerate(candidates) if c[4] == 0}
    else:
        order = sorted(range(len(candidates)), key=lambda i: (-candidates[i][0], -candidates[i][6], i))
        chosen = set(order[:keep])
    kept, proxy, energy = [], 0.0, 0.0
    kept_by_group = [[] for _ in range(groups)]
    for i, (benefit, c_kept, c_dropped, p, j, rep, value) in enumerate(candidates):
        if i in chosen:
            kept.append((p, bases[p][:, j].copy(), rep))
            kept_by_group[p].append(j)
            proxy += c_kept
            energy += value
        else:
            proxy += c_dropped
    kept.sort(key=lambda item: (-item[2], item[0]))
    dropped = []
    for p in range(groups):
        rest = [j for j in range(bases[p].shape[1]) if j not in kept_by_group[p]]
        v = bases[p][:, rest]
        dropped.append(v @ v.T)
    return RopePlan(fold=fold, kept=kept, dropped=dropped,
                    inv_freq=np.array([rep for _, _, rep in kept], np.float64),
                    kept_energy=energy, proxy_error=float(proxy))


def copy_rows(group, fold, heads, head_dim, rotary_dim, component, layout="half", head_of=None):
    """Row indices (in a [heads*head_dim] projection) of the mixed copies of
    fold group `group`, ordered (local pair, head), for pair component 0/1.
    `head_of` maps the copy's head index to a projection head (default:
    identity)."""
    first, second = pair_index(rotary_dim, layout)
    dims = (first if component == 0 else second)[group * fold:(group + 1) * fold]
    head_ids = np.arange(heads) if head_of is None else np.asarray(head_of)
    return (head_ids[None, :] * head_dim + dims[:, None]).reshape(-1)
