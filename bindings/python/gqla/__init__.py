# SPDX-License-Identifier: Apache-2.0
"""gqla: KV cache and attention for GQA and GQLA (DeepSeek MLA).

    import gqla, numpy as np
    cfg = gqla.Config.gqla(num_heads=16, num_groups=4, latent_dim=512, nope_dim=128,
                           rope_dim=64, value_dim=128, device="cpu")
    with gqla.Session(cfg) as s:
        s.set_weights(0, w_ukv)                # [G*(d_c+d_v), r], like kv_b_proj.weight
        seq = s.add_sequence()
        s.append(0, seq, c, kr)                # c [n, r], kr [n, d_r]
        o = s.decode(0, [seq], q)              # q [1, 1, H, d_c+d_r] -> o [1, 1, H, d_v]
        o = s.attend(0, [seq, other], q8, q_lens=[1, 7])  # 1 + 7 rows [8, H, d_c+d_r] -> [8, H, d_v]

A thin layer over the C library libgqla (gqla.h); see bindings/python/README.md.
"""

from . import _enums, _frameworks, _gqla
from ._config import Config
from ._errors import (
    BackendError, CapacityError, Error, InternalError, InvalidArgument, InvalidState,
    NotFound, OutOfMemory, Unsupported,
)
from ._reports import cost_report, probe_fields, probe_report
from ._session import Session

__version__ = _gqla.version_string()
"""Version of the loaded libgqla ('major.minor.patch')."""

__all__ = [
    "Config", "Session", "probe", "device_count", "predict_cost", "merge_attention_states", "__version__",
    "Error", "InvalidArgument", "OutOfMemory", "CapacityError", "Unsupported", "NotFound",
    "InvalidState", "BackendError", "InternalError",
]


def probe(device="cpu", calibrate=False):
    """Describe a device ('cpu', 'cuda' or 'cuda:N') as a dict: vendor, name,
    cores, ISA features ('isa' list and raw 'isa_flags'), caches, CUDA
    properties, and the roofline numbers the cost model uses (read_gbps,
    peak_gflops_f32, peak_gflops_bf16). With ``calibrate`` the bandwidth and
    peaks are measured once per process (a few hundred ms) instead of
    estimated from specs. Raises gqla.Unsupported for an absent device."""
    code, index = _enums.device_code(device)
    return probe_report(_gqla.probe(code, index, bool(calibrate)))


def device_count(device="cuda"):
    """Devices of a type visible now ('cpu': 1; 'cuda': 0 without the CUDA
    module or a GPU)."""
    code, _ = _enums.device_code(device)
    return _gqla.device_count(code)


def predict_cost(config, batch, context, s_q=1, probe=None):
    """Predicted cost of one decode step per path for `config`, without
    creating a session. `probe` is a dict like ``gqla.probe()`` returns (e.g.
    edited to another machine's read_gbps / peak_gflops_bf16); None uses the
    probe of the config's device. Returns the dict of Session.predict_cost."""
    raw_probe = None if probe is None else probe_fields(probe)
    raw = _gqla.predict_cost(config.to_c(), raw_probe, batch, context, s_q)
    return cost_report(raw, config.kind)


def merge_attention_states(outputs, lses, out=None, out_lse=None):
    """Merge partial attentions of the same queries over disjoint sets of
    positions (e.g. ``decode(..., return_lse=True)`` over two parts of a
    sequence) into the attention over their union.

    ``outputs`` is a list of arrays [rows..., Dv] of equal shape, ``lses`` the
    matching list of float32 arrays [rows...]. Per row:
    ``lse = log(sum_i exp(lse_i))`` and ``o = sum_i exp(lse_i - lse) * o_i``,
    computed in double precision. A part with lse = -inf attended to nothing
    and is skipped. Host arrays (numpy, CPU torch) only in this version.
    Returns ``(out, out_lse)``, allocated like ``outputs[0]`` unless given.
    """
    outputs, lses = list(outputs), list(lses)
    if not outputs:
        raise InvalidArgument("outputs: expected at least one partial output")
    shape = getattr(outputs[0], "shape", None)
    if shape is None or len(shape) < 2:
        raise InvalidArgument("outputs[0]: expected an array of at least 2 dimensions [rows..., Dv]")
    if out is None:
        out = _frameworks.empty_like_framework(outputs[0], tuple(shape))
    if out_lse is None:
        out_lse = _frameworks.empty_like_framework(outputs[0], tuple(shape[:-1]), float32=True)
    _gqla.merge_attention_states(outputs, lses, out, out_lse)
    return out, out_lse
