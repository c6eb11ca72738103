# SPDX-License-Identifier: Apache-2.0
"""Framework-aware helpers: allocating outputs next to the query tensor and
finding the CUDA stream the caller's framework is working on.

Frameworks are recognized by the module of the tensor's type and imported
lazily, so gqla itself depends on numpy only.
"""

import numpy as np

from . import _errors


def _framework(tensor):
    if type(tensor) is np.ndarray:
        return "numpy"
    root = type(tensor).__module__.partition(".")[0]
    if root in ("torch", "cupy"):
        return root
    if isinstance(tensor, np.ndarray):
        return "numpy"
    return "other"


def empty_like_framework(tensor, shape, float32=False):
    """An uninitialized array of `shape` in the framework and on the device of
    `tensor`, with its dtype (or float32 for lse)."""
    kind = _framework(tensor)
    if kind == "numpy":
        return np.empty(shape, np.float32 if float32 else tensor.dtype)
    if kind == "torch":
        import torch
        return torch.empty(shape, dtype=torch.float32 if float32 else tensor.dtype,
                           device=tensor.device)
    if kind == "cupy":
        import cupy
        with tensor.device:
            return cupy.empty(shape, cupy.float32 if float32 else tensor.dtype)
    if hasattr(tensor, "__array_interface__"):
        return np.empty(shape, np.float32 if float32 else np.asarray(tensor).dtype)
    raise _errors.InvalidArgument(
        f"out: cannot allocate an output like a {type(tensor).__name__}; pass out= "
        "(and lse= when return_lse is set)")


def current_cuda_stream(tensor):
    """The raw cudaStream_t the framework of a CUDA `tensor` queues work on,
    or None when `tensor` is not a CUDA tensor of a known framework."""
    kind = _framework(tensor)
    if kind == "torch":
        if tensor.is_cuda:
            import torch
            return torch.cuda.current_stream(tensor.device).cuda_stream
        return None
    if kind == "cupy":
        import cupy
        return cupy.cuda.get_current_stream().ptr
    return None
