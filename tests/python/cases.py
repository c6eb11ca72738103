# SPDX-License-Identifier: Apache-2.0
"""Builders shared by the tests: a session filled with random sequences and
the float64 reference of a decode over it."""

import numpy as np

import gqla
import reference as ref

# An odd GQLA shape: nothing is a power of two or a multiple of 64.
ODD_GQLA = dict(num_heads=6, num_groups=3, latent_dim=384, nope_dim=96, rope_dim=32, value_dim=80)
ODD_GQA = dict(num_heads=6, num_kv_heads=2, head_dim=96, value_dim=80)


class Filled:
    """A session plus the float32 source data of every sequence and layer
    (as given to append, i.e. rounded to the io dtype only), so the
    reference can be recomputed after any sequence of appends."""

    def __init__(self, session, rng):
        self.session = session
        self.config = session.config
        self.rng = rng
        self.tokens = {}    # (seq, layer) -> list of (a, b) float32 rows
        self.weights = {}   # layer -> float32 W_UKV

    @property
    def io_dtype(self):
        return self.config.io_dtype

    def row_shapes(self):
        c = self.config
        if c.kind == "gqla":
            return (c.latent_dim,), (c.rope_dim,)
        return (c.num_kv_heads, c.head_dim), (c.num_kv_heads, c.output_dim)

    def set_random_weights(self, layer=0):
        c = self.config
        rows = c.num_kv_heads * (c.nope_dim + c.value_dim)
        w = (self.rng.standard_normal((rows, c.latent_dim)) / np.sqrt(c.latent_dim)).astype(np.float32)
        w = ref.from_io(ref.to_io(w, self.io_dtype)).astype(np.float32)  # what the session sees
        self.weights[layer] = w
        self.session.set_weights(layer, ref.to_io(w, self.io_dtype))

    def random_rows(self, n):
        shape_a, shape_b = self.row_shapes()
        a = self.rng.standard_normal((n,) + shape_a).astype(np.float32)
        b = self.rng.standard_normal((n,) + shape_b).astype(np.float32)
        # Round to the io dtype now so the reference sees exactly the inputs.
        a = ref.from_io(ref.to_io(a, self.io_dtype)).astype(np.float32)
        b = ref.from_io(ref.to_io(b, self.io_dtype)).astype(np.float32)
        return a, b

    def new_sequence(self, length, layer=0, chunk=None):
        seq = self.session.add_sequence()
        self.append(seq, length, layer, chunk)
        return seq

    def append(self, seq, n, layer=0, chunk=None):
        chunk = chunk or n
        done = 0
        while done < n:
            step = min(chunk, n - done)
            a, b = self.random_rows(step)
            self.session.append(layer, seq, ref.to_io(a, self.io_dtype), ref.to_io(b, self.io_dtype))
            self.record(seq, layer, a, b)
            done += step

    def record(self, seq, layer, a, b):
        self.tokens.setdefault((seq, layer), []).append((a, b))

    def fork(self, parent, layers=(0,)):
        child = self.session.fork(parent)
        for layer in layers:
            self.tokens[(child, layer)] = list(self.tokens.get((parent, layer), []))
        return child

    def cache(self, seq, layer=0):
        parts = self.tokens[(seq, layer)]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def random_queries(self, batch, s_q):
        c = self.config
        q = self.rng.standard_normal((batch, s_q, c.num_heads, c.query_dim)).astype(np.float32)
        return ref.from_io(ref.to_io(q, self.io_dtype)).astype(np.float32)

    def reference(self, seqs, q, layer=0, as_stored=True):
        """float64 (o [B, s_q, H, Dv], lse [B, s_q, H]) on the cached rows as
        the cache stores them (rounded to the cache dtype) or as given."""
        c = self.config
        scale = c.softmax_scale or None
        outs, lses = [], []
        for i, seq in enumerate(seqs):
            a, b = self.cache(seq, layer)
            if as_stored:
                a, b = ref.as_stored(a, c.cache_dtype), ref.as_stored(b, c.cache_dtype)
            if c.kind == "gqla":
                o, lse = ref.gqla(q[i], a, b, self.weights[layer], c.num_kv_heads,
                                  c.nope_dim, c.value_dim, scale)
            else:
                o, lse = ref.gqa(q[i], a, b, c.num_kv_heads, scale)
            outs.append(o)
            lses.append(lse)
        return np.stack(outs), np.stack(lses)

    def decode(self, seqs, q, layer=0, return_lse=False):
        """Decode into a NaN-poisoned buffer; returns float64 results."""
        c = self.config
        out = ref.poison_like((len(seqs), q.shape[1], c.num_heads, c.output_dim), self.io_dtype)
        if return_lse:
            lse = np.full((len(seqs), q.shape[1], c.num_heads), np.nan, np.float32)
            o, lse = self.session.decode(layer, seqs, ref.to_io(q, self.io_dtype), out=out, lse=lse)
            return ref.from_io(o), lse.astype(np.float64)
        o = self.session.decode(layer, seqs, ref.to_io(q, self.io_dtype), out=out)
        assert o is out
        return ref.from_io(o)


def gqla_session(rng, num_layers=1, **overrides):
    fields = dict(ODD_GQLA, num_layers=num_layers, device="cpu", cache_dtype="f32")
    fields.update(overrides)
    filled = Filled(gqla.Session(gqla.Config.gqla(**fields)), rng)
    for layer in range(num_layers):
        filled.set_random_weights(layer)
    return filled


def gqa_session(rng, **overrides):
    fields = dict(ODD_GQA, device="cpu", cache_dtype="f32")
    fields.update(overrides)
    return Filled(gqla.Session(gqla.Config.gqa(**fields)), rng)
