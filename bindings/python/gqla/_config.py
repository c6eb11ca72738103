# SPDX-License-Identifier: Apache-2.0
"""Session configuration."""

from . import _enums, _gqla

# Python keyword -> gqla_config field, for the fields whose names differ.
_RENAMED = {"threads": "num_threads", "num_groups": "num_kv_heads"}

_PLAIN_FIELDS = (
    "num_heads", "num_kv_heads", "head_dim", "value_dim", "latent_dim", "nope_dim",
    "rope_dim", "num_layers", "page_size", "max_tokens", "memory_budget_bytes",
    "max_sequences", "max_batch", "max_q_len", "max_q_tokens", "num_threads", "softmax_scale",
    "group_begin", "group_count", "keep_latent",
)


class Config:
    """Everything a :class:`gqla.Session` is created from.

    Build one with :meth:`Config.gqa` or :meth:`Config.gqla`. Attributes mirror
    the fields of the C ``gqla_config`` (``threads`` is ``num_threads``); enum
    fields are strings: ``kind`` ('gqa'/'gqla'), ``cache_dtype`` and
    ``io_dtype`` ('f32'/'f16'/'bf16'; the cache also 'fp8_e4m3'), ``device`` ('auto'/'cpu'/'cuda'/
    'cuda:N'), ``path`` ('auto'/'gqa'/'absorb'). A field left ``None`` takes
    the library default (``gqla_config_default``). Attributes may be changed
    before the session is created.

    ``max_q_len`` bounds the queries of one sequence in a call and
    ``max_q_tokens`` those of the whole call (the sum of ``Session.attend``'s
    ``q_lens``; None: max_batch * max_q_len); the workspaces scale with the
    latter, so set it when ``max_q_len`` is large (prefill chunks).

    Tensor parallelism (docs/sharding.md): ``group_begin`` and
    ``group_count`` make the session serve only the groups [group_begin,
    group_begin + group_count) of the layer and their query heads (q, o and
    lse then carry group_count * H/G heads; GQA-kind k/v group_count KV
    heads); ``set_weights`` takes the full W_UKV or the shard's rows. GQLA
    only: ``keep_latent=0`` keeps only the expanded cache of those groups
    (GQA path only). None: the library default (all groups, latent kept).
    """

    def __init__(self, kind, **fields):
        self.kind = kind
        self.cache_dtype = "bf16"
        self.io_dtype = "f32"
        self.device = "auto"
        self.path = "auto"
        for name in _PLAIN_FIELDS:
            setattr(self, name, None)
        for key, value in fields.items():
            name = _RENAMED.get(key, key)
            if not hasattr(self, name):
                raise TypeError(f"Config: unknown field {key!r}")
            setattr(self, name, value)

    @classmethod
    def gqa(cls, num_heads, num_kv_heads, head_dim, value_dim=None, num_layers=1,
            max_tokens=None, page_size=None, cache_dtype="bf16", device="auto", threads=0,
            softmax_scale=None, io_dtype="f32", **more):
        """Grouped-query attention: H query heads share G KV heads.

        Cache per token and layer: K [G, head_dim] and V [G, value_dim]
        (value_dim defaults to head_dim). ``softmax_scale`` None or 0 means
        1/sqrt(head_dim). ``threads`` 0 uses every available core. Further
        keywords (``max_sequences``, ``max_batch``, ``max_q_len``,
        ``max_q_tokens``, ``memory_budget_bytes``) pass through.
        """
        return cls("gqa", num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                   value_dim=value_dim, num_layers=num_layers, max_tokens=max_tokens,
                   page_size=page_size, cache_dtype=cache_dtype, device=device,
                   threads=threads, softmax_scale=softmax_scale, io_dtype=io_dtype, **more)

    @classmethod
    def gqla(cls, num_heads, num_groups, latent_dim, nope_dim, rope_dim, value_dim,
             num_layers=1, max_tokens=None, page_size=None, cache_dtype="bf16", device="auto",
             path="auto", threads=0, softmax_scale=None, io_dtype="f32", **more):
        """Group-query latent attention (DeepSeek MLA when num_groups == num_heads).

        Cache per token and layer: the latent c [latent_dim] and the rope key
        kr [rope_dim]; each layer needs ``Session.set_weights`` (W_UKV, laid
        out like DeepSeek's kv_b_proj.weight). Queries are
        [nope_dim | rope_dim] per head; ``softmax_scale`` None or 0 means
        1/sqrt(nope_dim + rope_dim). ``path`` picks the initial decode path.
        """
        return cls("gqla", num_heads=num_heads, num_kv_heads=num_groups, latent_dim=latent_dim,
                   nope_dim=nope_dim, rope_dim=rope_dim, value_dim=value_dim,
                   num_layers=num_layers, max_tokens=max_tokens, page_size=page_size,
                   cache_dtype=cache_dtype, device=device, path=path, threads=threads,
                   softmax_scale=softmax_scale, io_dtype=io_dtype, **more)

    @property
    def num_groups(self):
        """G, the number of latent groups (GQLA) or KV heads (GQA)."""
        return self.num_kv_heads

    @num_groups.setter
    def num_groups(self, value):
        self.num_kv_heads = value

    @property
    def threads(self):
        """CPU threads (0: one per available core); the C field num_threads."""
        return self.num_threads

    @threads.setter
    def threads(self, value):
        self.num_threads = value

    @property
    def query_dim(self):
        """Per-head query width Dq: head_dim (GQA) or nope_dim + rope_dim (GQLA)."""
        if self.kind == "gqla":
            return self.nope_dim + self.rope_dim
        return self.head_dim

    @property
    def output_dim(self):
        """Per-head output width Dv."""
        if self.kind == "gqa" and not self.value_dim:
            return self.head_dim
        return self.value_dim

    def to_c(self):
        """The config as the dict of gqla_config fields the extension takes."""
        fields = {name: getattr(self, name) for name in _PLAIN_FIELDS
                  if getattr(self, name) is not None}
        fields["kind"] = _enums._lookup(_enums.KIND, self.kind, "config.kind")
        fields["cache_dtype"] = _enums.cache_dtype_code(self.cache_dtype, "config.cache_dtype")
        fields["io_dtype"] = _enums.dtype_code(self.io_dtype, "config.io_dtype")
        fields["device"], fields["device_index"] = _enums.device_code(self.device, "config.device")
        fields["path"] = _enums.path_code(self.path, "config.path")
        return fields

    @classmethod
    def from_c(cls, fields):
        """A Config from a dict of gqla_config fields (e.g. a session's resolved config)."""
        fields = dict(fields)
        kind = _enums.name_of(_enums.KIND, fields.pop("kind"))
        config = cls(kind)
        config.cache_dtype = _enums.name_of(_enums.CACHE_DTYPE, fields.pop("cache_dtype"))
        config.io_dtype = _enums.name_of(_enums.DTYPE, fields.pop("io_dtype"))
        device = _enums.name_of(_enums.DEVICE, fields.pop("device"))
        index = fields.pop("device_index", 0)
        config.device = f"cuda:{index}" if device == "cuda" else device
        config.path = _enums.name_of(_enums.PATH, fields.pop("path"))
        for name, value in fields.items():
            setattr(config, name, value)
        return config

    def validate(self):
        """Check the config without creating anything; raises gqla.InvalidArgument
        (naming the first bad field) or gqla.Unsupported."""
        _gqla.validate_config(self.to_c())

    def __repr__(self):
        shown = {k: v for k, v in vars(self).items() if v is not None}
        return "Config(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"
