# SPDX-License-Identifier: Apache-2.0
"""gqla.Session: the KV cache of many sequences and decode attention over it."""

import numpy as np

from . import _enums, _errors, _frameworks, _gqla
from ._config import Config
from ._reports import cost_report, stats_report


class Session:
    """A KV cache of many sequences plus attention over it.

    Created from a :class:`gqla.Config`; allocates the page pool on the
    config's device. Use it as a context manager or call :meth:`close`.

    Tensors: numpy arrays, or any object with ``__dlpack__`` (torch, CuPy,
    JAX) or ``__cuda_array_interface__``, in the config's ``io_dtype``
    (float32, float16, or bfloat16 as uint16 bits / ml_dtypes.bfloat16).
    They are read and written in place, never copied: outer strides may be
    arbitrary (views of larger buffers work), the innermost dimension must be
    contiguous. On a CUDA session the work of torch/CuPy CUDA tensors is queued
    on the framework's current stream.

    One session may be used from several threads; its calls run one after
    another (the GIL is released while the library works).
    """

    def __init__(self, config):
        if not isinstance(config, Config):
            raise TypeError(f"Session: expected a gqla.Config, got {type(config).__name__}")
        self._s = _gqla.Session(config.to_c())
        self._config = Config.from_c(self._s.config())
        self._value_dim = self._config.output_dim
        self._on_cuda = self._config.device.startswith("cuda")

    # ----------------------------------------------------------- lifetime
    def close(self):
        """Free the cache and everything else the session owns. Idempotent;
        later calls raise gqla.InvalidState."""
        self._s.close()

    @property
    def closed(self):
        return self._s.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    @property
    def config(self):
        """The resolved config: device, threads, softmax_scale, max_tokens
        (whole pages) and path filled in by the library."""
        return self._config

    # ------------------------------------------------------------ weights
    def set_weights(self, layer, w_ukv):
        """GQLA only: W_UKV of `layer`, shape [G*(d_c+d_v), r], laid out like
        DeepSeek's kv_b_proj.weight (per group d_c rows of W_UK, then d_v rows
        of W_UV). Any supported dtype on host or device; float64 numpy arrays
        are converted to float32. Copied before return."""
        if isinstance(w_ukv, np.ndarray) and w_ukv.dtype == np.float64:
            w_ukv = w_ukv.astype(np.float32)
        self._follow_stream(w_ukv)
        self._s.set_weights(layer, w_ukv)

    # ---------------------------------------------------------- sequences
    def add_sequence(self):
        """A new empty sequence; returns its id (ids are never reused)."""
        return self._s.add_sequence()

    def release(self, seq):
        """Release a sequence and return its pages to the pool."""
        self._s.release(seq)

    def fork(self, seq):
        """A new sequence sharing all cached tokens of `seq` (copy-on-write
        pages); returns its id."""
        return self._s.fork(seq)

    def length(self, seq, layer=0):
        """Cached tokens of `seq` in `layer`."""
        return self._s.length(seq, layer)

    def export_size(self, seq):
        """Bytes :meth:`export_sequence` writes for `seq` now."""
        return self._s.export_size(seq)

    def export_sequence(self, seq, out=None):
        """The cache of `seq` (every layer's tokens of the always-kept cache,
        in the cache dtype) in a versioned, checksummed format
        (docs/sequence-format.md). :meth:`import_sequence` restores it in any
        session of the same kind, dims, layers and cache dtype, on any device.

        Without `out`, returns a new bytes object. With `out` (a writable,
        C-contiguous buffer: bytearray, memoryview, mmap, numpy array),
        writes into its first :meth:`export_size` bytes and returns that
        count: a reused buffer is not allocated and first touched again on
        every call. A smaller `out` raises gqla.CapacityError, naming the
        size needed, and writes nothing."""
        return self._s.export_sequence(seq, out)

    def import_sequence(self, data):
        """Restore a buffer from :meth:`export_sequence` (bytes or any
        C-contiguous buffer, read in place) as a new sequence and return its
        id. Truncated, corrupted or foreign buffers raise gqla.InvalidArgument
        and leave the session unchanged."""
        return self._s.import_sequence(data)

    # -------------------------------------------------------------- append
    def append(self, layer, seq, a, b):
        """Append n tokens of one layer to one sequence.

        GQA: ``a`` = k [n, G, D], ``b`` = v [n, G, Dv].
        GQLA: ``a`` = c [n, r], ``b`` = kr [n, d_r] (RoPE already applied).
        All-or-nothing: on an error nothing is appended.
        """
        self._follow_stream(a)
        self._s.append(layer, seq, a, b)

    def append_many(self, layer, seqs, a, b, counts):
        """Append to several sequences at once: sequence ``seqs[i]`` gets the
        next ``counts[i]`` rows of ``a``/``b`` (rows packed in the order of
        ``seqs``). All-or-nothing over the whole call."""
        self._follow_stream(a)
        self._s.append_batch(layer, seqs, counts, a, b)

    # -------------------------------------------------------------- decode
    def decode(self, layer, seqs, q, out=None, return_lse=False, lse=None):
        """Decode attention of one layer for a batch of sequences.

        ``q`` is [B, s_q, H, Dq] (Dq = D for GQA, nope_dim + rope_dim for
        GQLA, nope part first); the queries are the last ``s_q`` tokens of each
        sequence, so query i attends to cache positions <= L - s_q + i.
        Returns ``o`` [B, s_q, H, Dv], written into ``out`` when given (else
        allocated like ``q``: numpy, torch or CuPy, same device and dtype).
        With ``return_lse`` (or an ``lse`` buffer) also returns the float32
        natural-log log-sum-exp [B, s_q, H] of the scaled scores:
        ``(o, lse)``.
        """
        if out is None or (return_lse and lse is None):
            shape = getattr(q, "shape", None)
            if shape is None or len(shape) != 4:
                got = f"shape {tuple(shape)}" if shape is not None else type(q).__name__
                raise _errors.InvalidArgument(
                    f"q: expected an array of 4 dimensions [B, s_q, H, Dq], got {got}")
            if out is None:
                out = _frameworks.empty_like_framework(
                    q, (shape[0], shape[1], shape[2], self._value_dim))
            if return_lse and lse is None:
                lse = _frameworks.empty_like_framework(q, (shape[0], shape[1], shape[2]), float32=True)
        if self._on_cuda:
            self._follow_stream(q)
        self._s.decode(layer, seqs, q, out, lse)
        if lse is not None:
            return out, lse
        return out

    def attend(self, layer, seqs, q, *, q_lens=None, out=None, return_lse=False, lse=None,
               path=None, return_path=False, indices=None):
        """Attention of one layer for a batch of sequences with any mix of
        query counts: decoding sequences (1 query) beside prefill chunks.

        Without ``q_lens`` every sequence has ``s_q`` queries, exactly as
        :meth:`decode`: ``q`` [B, s_q, H, Dq] -> ``o`` [B, s_q, H, Dv], ``lse``
        [B, s_q, H]. With ``q_lens`` (one int per sequence) sequence i of
        length L has ``q_lens[i]`` queries, its last tokens, packed in the
        order of ``seqs``: ``q`` [N, H, Dq] -> ``o`` [N, H, Dv], ``lse``
        [N, H] with N = sum(q_lens); query k of sequence i attends to
        positions <= L - q_lens[i] + k.

        ``path`` is the form of THIS call (the session's path and its kept
        caches do not change): None or 'auto' (the fastest the cost model
        predicts), 'gqa' (over the kept expanded cache, else transient),
        'absorb', or 'gqa_transient' / 'transient' (latent rows up-projected
        for this call). GQA-kind sessions accept 'auto' and 'gqa'.

        Returns ``o``, written into ``out`` when given (else allocated like
        ``q``). Like :meth:`decode`, asking for more returns a tuple in the
        order ``(o, lse, path)``: ``(o, lse)`` with ``return_lse`` or an
        ``lse`` buffer, ``(o, path)`` with ``return_path``, ``(o, lse, path)``
        with both; ``path`` is the form the call ran on: 'gqa', 'absorb' or
        'gqa_transient'.

        ``indices`` (sparse top-k attention, docs/sparse-attention.md): an
        int32 array (numpy or DLPack) [N, K] with one row of cache positions
        per query row of ``q`` ([B, s_q, K] also for uniform calls). Every
        head of a query attends to the listed positions it may see; -1,
        invisible and out-of-range entries are skipped, a repeated position
        counts once per occurrence, and a query with none visible gets o = 0
        and lse = -inf. None (default): dense attention.
        """
        path_code = _enums.path_code("auto" if path is None else path)
        if out is None or (return_lse and lse is None):
            rank = 4 if q_lens is None else 3
            shape = getattr(q, "shape", None)
            if shape is None or len(shape) != rank:
                expected = "[B, s_q, H, Dq]" if q_lens is None else "[N, H, Dq] (q_lens given)"
                got = f"shape {tuple(shape)}" if shape is not None else type(q).__name__
                raise _errors.InvalidArgument(
                    f"q: expected an array of {rank} dimensions {expected}, got {got}")
            rows = tuple(shape[:-1])
            if out is None:
                out = _frameworks.empty_like_framework(q, rows + (self._value_dim,))
            if return_lse and lse is None:
                lse = _frameworks.empty_like_framework(q, rows, float32=True)
        if self._on_cuda:
            self._follow_stream(q)
        taken = self._s.attend(layer, seqs, q, out, lse, q_lens, path_code, indices)
        result = (out,)
        if lse is not None:
            result += (lse,)
        if return_path:
            result += (_enums.name_of(_enums.PATH, taken),)
        return result if len(result) > 1 else out

    # ---------------------------------------------------------------- path
    @property
    def path(self):
        """The path decode uses now: 'gqa' or 'absorb' (never 'auto')."""
        return _enums.name_of(_enums.PATH, self._s.get_path()[0])

    @property
    def requested_path(self):
        """What was asked for: 'auto', 'gqa' or 'absorb'."""
        return _enums.name_of(_enums.PATH, self._s.get_path()[1])

    def select_path(self, path):
        """Select the decode path: 'auto' (cost model), 'gqa' (expands the
        latent cache of every live sequence and layer) or 'absorb' (frees the
        expanded cache). GQA-kind sessions reject 'absorb'; 'gqa_transient' is
        a form of one :meth:`attend` call only. All-or-nothing."""
        self._s.select_path(_enums.path_code(path))

    def predict_cost(self, batch, context, s_q=1):
        """Predicted cost of one decode step per path on this session's device:
        ``{'gqa': {...}, 'absorb': {...} or None, 'transient': {...} or None,
        'chosen': 'gqa'|'absorb', 'call_chosen': 'gqa'|'absorb'|'gqa_transient',
        'expand_bytes', 'expand_flops', 'expand_s'}``; each path has bytes,
        flops, memory_s, compute_s, overhead_s, time_s and bound.
        ``transient`` is the GQA form over latent rows up-projected per call
        (GQLA; None for GQA kind), ``chosen`` what a session path of 'auto'
        picks, ``call_chosen`` what :meth:`attend` with path 'auto' picks
        when no expanded cache is kept."""
        return cost_report(self._s.predict_cost(batch, context, s_q), self._config.kind)

    # ------------------------------------------------------------ runtime
    def stats(self):
        """Pages, tokens and bytes in use: a dict of gqla_stats fields
        (device and path as strings)."""
        return stats_report(self._s.stats())

    def set_stream(self, stream):
        """CUDA: queue later work on ``stream`` (a raw cudaStream_t as int, or
        an object with ``cuda_stream``/``ptr``). Torch/CuPy tensors set it
        automatically to the framework's current stream."""
        raw = getattr(stream, "cuda_stream", getattr(stream, "ptr", stream))
        self._s.set_stream(int(raw or 0))

    def synchronize(self):
        """Block until all queued work has finished (CPU: returns at once)."""
        self._s.synchronize()

    def _follow_stream(self, tensor):
        # Run on the stream the caller's framework is using now, so no extra
        # synchronization is needed between their kernels and ours.
        if not self._on_cuda:
            return
        stream = _frameworks.current_cuda_stream(tensor)
        if stream is not None and stream != self._s.stream:
            self._s.set_stream(stream)

    def __repr__(self):
        state = "closed" if self.closed else f"path={self.path!r}"
        return f"<gqla.Session {self._config.kind} on {self._config.device}, {state}>"
