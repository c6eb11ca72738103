// SPDX-License-Identifier: Apache-2.0
//! Session configuration: builders for the two kinds, starting from the
//! library's own defaults (`gqla_config_default`) and validated by it.

use std::fmt;
use std::mem::size_of;

use gqla_sys as ffi;

use crate::enums::{DType, Device, Kind, Path};
use crate::error::{check, Error, Result};

/// A validated session configuration (a `gqla_config`).
///
/// Build one with [`Config::gqa`] or [`Config::gqla`]:
///
/// ```
/// use gqla::{Config, DType, Device};
/// let cfg = Config::gqla()
///     .heads(32, 8)
///     .latent_dim(512)
///     .nope_dim(64)
///     .rope_dim(64)
///     .value_dim(128)
///     .layers(2)
///     .cache_dtype(DType::Bf16)
///     .device(Device::Cpu)
///     .max_tokens(4096)
///     .build()?;
/// assert_eq!(cfg.query_dim(), 128);
/// assert_eq!(cfg.value_dim(), 128);
/// # Ok::<(), gqla::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct Config {
    raw: ffi::gqla_config,
}

impl Config {
    /// Builder for grouped-query attention (set `heads` and `head_dim`).
    pub fn gqa() -> GqaConfigBuilder {
        GqaConfigBuilder {
            common: CommonFields::new(Kind::Gqa),
        }
    }

    /// Builder for group-query latent attention (set `heads`, `latent_dim`,
    /// `nope_dim`, `rope_dim` and `value_dim`). G = H is DeepSeek's MLA.
    pub fn gqla() -> GqlaConfigBuilder {
        GqlaConfigBuilder {
            common: CommonFields::new(Kind::Gqla),
        }
    }

    /// Wrap a raw config, checking it with `gqla_config_validate`.
    pub fn from_raw(raw: ffi::gqla_config) -> Result<Config> {
        let config = Config { raw };
        config.validate()?;
        Ok(config)
    }

    /// Trusted raw configs: those the library itself resolved.
    pub(crate) fn from_resolved(raw: ffi::gqla_config) -> Config {
        Config { raw }
    }

    /// The underlying C struct.
    pub fn as_raw(&self) -> &ffi::gqla_config {
        &self.raw
    }

    /// Check the config with the library (`gqla_config_validate`).
    pub fn validate(&self) -> Result<()> {
        // SAFETY: a pointer to a live, fully initialized config.
        check(unsafe { ffi::gqla_config_validate(&self.raw) })
    }

    /// GQA or GQLA.
    pub fn kind(&self) -> Kind {
        // Validated configs only hold known kinds.
        Kind::from_raw(self.raw.kind).unwrap_or(Kind::Gqa)
    }
    /// H, query heads.
    pub fn num_heads(&self) -> usize {
        to_usize(self.raw.num_heads)
    }
    /// G, KV heads (GQA) or latent groups (GQLA).
    pub fn num_kv_heads(&self) -> usize {
        to_usize(self.raw.num_kv_heads)
    }
    /// D of a GQA config (0 for GQLA).
    pub fn head_dim(&self) -> usize {
        to_usize(self.raw.head_dim)
    }
    /// r of a GQLA config.
    pub fn latent_dim(&self) -> usize {
        to_usize(self.raw.latent_dim)
    }
    /// d_c of a GQLA config.
    pub fn nope_dim(&self) -> usize {
        to_usize(self.raw.nope_dim)
    }
    /// d_r of a GQLA config.
    pub fn rope_dim(&self) -> usize {
        to_usize(self.raw.rope_dim)
    }
    /// Per-head query width Dq: D (GQA) or d_c + d_r (GQLA).
    pub fn query_dim(&self) -> usize {
        match self.kind() {
            Kind::Gqa => self.head_dim(),
            Kind::Gqla => self.nope_dim() + self.rope_dim(),
        }
    }
    /// Per-head output width: Dv (GQA, defaulting to D) or d_v (GQLA).
    pub fn value_dim(&self) -> usize {
        match (self.kind(), self.raw.value_dim) {
            (Kind::Gqa, 0) => self.head_dim(),
            (_, dv) => to_usize(dv),
        }
    }
    /// Layers of the cache.
    pub fn num_layers(&self) -> usize {
        to_usize(self.raw.num_layers)
    }
    /// Storage type of the cache.
    pub fn cache_dtype(&self) -> DType {
        DType::from_raw(self.raw.cache_dtype).unwrap_or(DType::F32)
    }
    /// Element type of the k, v, c, kr, q and o buffers.
    pub fn io_dtype(&self) -> DType {
        DType::from_raw(self.raw.io_dtype).unwrap_or(DType::F32)
    }
    /// Softmax scale; 0 means the default, which a session's config resolves.
    pub fn softmax_scale(&self) -> f32 {
        self.raw.softmax_scale
    }
    /// Tokens per page.
    pub fn page_size(&self) -> usize {
        to_usize(self.raw.page_size)
    }
    /// Token capacity of the page pool (0: derived from the memory budget).
    pub fn max_tokens(&self) -> usize {
        self.raw.max_tokens.max(0) as usize
    }
    /// Live sequences at once.
    pub fn max_sequences(&self) -> usize {
        to_usize(self.raw.max_sequences)
    }
    /// Largest decode batch.
    pub fn max_batch(&self) -> usize {
        to_usize(self.raw.max_batch)
    }
    /// Largest number of query tokens per sequence in one call.
    pub fn max_q_len(&self) -> usize {
        to_usize(self.raw.max_q_len)
    }
    /// Largest number of query tokens in one call, summed over its sequences
    /// (0 in a built config: max_batch * max_q_len).
    pub fn max_q_tokens(&self) -> usize {
        self.raw.max_q_tokens.max(0) as usize
    }
    /// Device (a session's config names the one it runs on).
    pub fn device(&self) -> Device {
        Device::from_raw(self.raw.device, self.raw.device_index).unwrap_or(Device::Auto)
    }
    /// Requested decode path.
    pub fn path(&self) -> Path {
        Path::from_raw(self.raw.path).unwrap_or(Path::Auto)
    }
    /// CPU threads (0: one per available core).
    pub fn num_threads(&self) -> usize {
        to_usize(self.raw.num_threads)
    }
    /// First group this session serves (tensor parallelism; 0 unsharded).
    pub fn group_begin(&self) -> usize {
        to_usize(self.raw.group_begin)
    }
    /// Groups this session serves (a session's config resolves 0 to all).
    pub fn group_count(&self) -> usize {
        match self.raw.group_count {
            0 => self.num_kv_heads(),
            n => to_usize(n),
        }
    }
    /// GQLA: whether the latent is kept (false: only the expanded cache of
    /// the served groups, GQA path only).
    pub fn keep_latent(&self) -> bool {
        self.raw.keep_latent != 0
    }
    /// Query heads this session serves: group_count * H / G. q, o and lse
    /// carry these heads.
    pub fn served_heads(&self) -> usize {
        match self.num_kv_heads() {
            0 => 0,
            g => self.group_count() * (self.num_heads() / g),
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("kind", &self.kind())
            .field("num_heads", &self.num_heads())
            .field("num_kv_heads", &self.num_kv_heads())
            .field("query_dim", &self.query_dim())
            .field("value_dim", &self.value_dim())
            .field("latent_dim", &self.latent_dim())
            .field("num_layers", &self.num_layers())
            .field("cache_dtype", &self.cache_dtype())
            .field("io_dtype", &self.io_dtype())
            .field("device", &self.device())
            .field("path", &self.path())
            .finish_non_exhaustive()
    }
}

fn to_usize(value: i32) -> usize {
    value.max(0) as usize
}

/// Fields both kinds share, and the first error a setter met (setters cannot
/// fail, so an out-of-range value is reported by `build`).
struct CommonFields {
    raw: ffi::gqla_config,
    error: Option<Error>,
}

impl CommonFields {
    fn new(kind: Kind) -> CommonFields {
        let mut raw = ffi::gqla_config {
            struct_size: size_of::<ffi::gqla_config>(),
            ..Default::default()
        };
        // SAFETY: raw is a valid, writable gqla_config.
        let error = check(unsafe { ffi::gqla_config_default(&mut raw, kind.to_raw()) }).err();
        CommonFields { raw, error }
    }

    fn set_i32(&mut self, field: &str, value: usize, slot: fn(&mut ffi::gqla_config) -> &mut i32) {
        match i32::try_from(value) {
            Ok(v) => *slot(&mut self.raw) = v,
            Err(_) => self.fail(field, value),
        }
    }

    fn set_i64(&mut self, field: &str, value: usize, slot: fn(&mut ffi::gqla_config) -> &mut i64) {
        match i64::try_from(value) {
            Ok(v) => *slot(&mut self.raw) = v,
            Err(_) => self.fail(field, value),
        }
    }

    fn fail(&mut self, field: &str, value: usize) {
        if self.error.is_none() {
            self.error = Some(Error::invalid_argument(
                &format!("config.{field}"),
                format!("{value} does not fit the C field"),
            ));
        }
    }

    fn build(self) -> Result<Config> {
        if let Some(error) = self.error {
            return Err(error);
        }
        Config::from_raw(self.raw)
    }
}

/// The setters both builders offer.
macro_rules! common_setters {
    () => {
        /// H query heads and G KV heads / latent groups (H % G == 0).
        pub fn heads(mut self, num_heads: usize, num_kv_heads: usize) -> Self {
            self.common
                .set_i32("num_heads", num_heads, |c| &mut c.num_heads);
            self.common
                .set_i32("num_kv_heads", num_kv_heads, |c| &mut c.num_kv_heads);
            self
        }
        /// Layers of the cache (default 1).
        pub fn layers(mut self, num_layers: usize) -> Self {
            self.common
                .set_i32("num_layers", num_layers, |c| &mut c.num_layers);
            self
        }
        /// Storage type of the cache (default bf16).
        pub fn cache_dtype(mut self, dtype: DType) -> Self {
            self.common.raw.cache_dtype = dtype.to_raw();
            self
        }
        /// Element type of k, v, c, kr, q and o buffers (default f32).
        pub fn io_dtype(mut self, dtype: DType) -> Self {
            self.common.raw.io_dtype = dtype.to_raw();
            self
        }
        /// Softmax scale (0: the default 1/sqrt of the query-key dim).
        pub fn softmax_scale(mut self, scale: f32) -> Self {
            self.common.raw.softmax_scale = scale;
            self
        }
        /// Tokens per page (default 64).
        pub fn page_size(mut self, tokens: usize) -> Self {
            self.common
                .set_i32("page_size", tokens, |c| &mut c.page_size);
            self
        }
        /// Token capacity of the page pool, summed over sequences.
        pub fn max_tokens(mut self, tokens: usize) -> Self {
            self.common
                .set_i64("max_tokens", tokens, |c| &mut c.max_tokens);
            self
        }
        /// Bytes for the always-kept cache over all layers; used when `max_tokens` is 0.
        pub fn memory_budget_bytes(mut self, bytes: usize) -> Self {
            self.common
                .set_i64("memory_budget_bytes", bytes, |c| &mut c.memory_budget_bytes);
            self
        }
        /// Live sequences at once (default 256).
        pub fn max_sequences(mut self, sequences: usize) -> Self {
            self.common
                .set_i32("max_sequences", sequences, |c| &mut c.max_sequences);
            self
        }
        /// Largest decode batch (default 256).
        pub fn max_batch(mut self, batch: usize) -> Self {
            self.common
                .set_i32("max_batch", batch, |c| &mut c.max_batch);
            self
        }
        /// Largest number of query tokens per sequence in one call (default 16).
        pub fn max_q_len(mut self, q_len: usize) -> Self {
            self.common
                .set_i32("max_q_len", q_len, |c| &mut c.max_q_len);
            self
        }
        /// Largest number of query tokens in one call, summed over its
        /// sequences (0, the default: max_batch * max_q_len). The workspaces
        /// scale with it: set it when `max_q_len` is large (prefill chunks).
        pub fn max_q_tokens(mut self, tokens: usize) -> Self {
            self.common
                .set_i64("max_q_tokens", tokens, |c| &mut c.max_q_tokens);
            self
        }
        /// Serve only the groups `[begin, begin + count)` of the layer and
        /// their query heads (tensor parallelism: one session per rank,
        /// outputs gathered over heads); `count` 0 = all groups (default).
        pub fn groups(mut self, begin: usize, count: usize) -> Self {
            self.common
                .set_i32("group_begin", begin, |c| &mut c.group_begin);
            self.common
                .set_i32("group_count", count, |c| &mut c.group_count);
            self
        }
        /// Device to run on (default [`Device::Auto`]).
        pub fn device(mut self, device: Device) -> Self {
            let (device_type, index) = device.to_raw();
            self.common.raw.device = device_type;
            self.common.raw.device_index = index;
            self
        }
        /// Initial decode path (default [`Path::Auto`]).
        pub fn path(mut self, path: Path) -> Self {
            self.common.raw.path = path.to_raw();
            self
        }
        /// CPU threads (0, the default: one per available core).
        pub fn threads(mut self, num_threads: usize) -> Self {
            self.common
                .set_i32("num_threads", num_threads, |c| &mut c.num_threads);
            self
        }
        /// Validate with the library and return the config.
        pub fn build(self) -> Result<Config> {
            self.common.build()
        }
    };
}

/// Builder of a GQA config; see [`Config::gqa`].
///
/// ```
/// let cfg = gqla::Config::gqa().heads(8, 2).head_dim(64).build()?;
/// assert_eq!(cfg.value_dim(), 64); // Dv defaults to D
/// # Ok::<(), gqla::Error>(())
/// ```
pub struct GqaConfigBuilder {
    common: CommonFields,
}

impl GqaConfigBuilder {
    common_setters!();

    /// D, the query/key dim per head.
    pub fn head_dim(mut self, dim: usize) -> Self {
        self.common.set_i32("head_dim", dim, |c| &mut c.head_dim);
        self
    }

    /// Dv, the value dim per head (default D).
    pub fn value_dim(mut self, dim: usize) -> Self {
        self.common.set_i32("value_dim", dim, |c| &mut c.value_dim);
        self
    }
}

/// Builder of a GQLA config; see [`Config::gqla`].
pub struct GqlaConfigBuilder {
    common: CommonFields,
}

impl GqlaConfigBuilder {
    common_setters!();

    /// r, the latent rank (kv_lora_rank).
    pub fn latent_dim(mut self, dim: usize) -> Self {
        self.common
            .set_i32("latent_dim", dim, |c| &mut c.latent_dim);
        self
    }

    /// d_c, the no-RoPE part of the query/key dim (qk_nope_head_dim).
    pub fn nope_dim(mut self, dim: usize) -> Self {
        self.common.set_i32("nope_dim", dim, |c| &mut c.nope_dim);
        self
    }

    /// d_r, the RoPE part of the query/key dim (qk_rope_head_dim).
    pub fn rope_dim(mut self, dim: usize) -> Self {
        self.common.set_i32("rope_dim", dim, |c| &mut c.rope_dim);
        self
    }

    /// d_v, the value dim per head.
    pub fn value_dim(mut self, dim: usize) -> Self {
        self.common.set_i32("value_dim", dim, |c| &mut c.value_dim);
        self
    }

    /// Keep the latent (default true). false keeps only the expanded cache
    /// of the served groups: the GQA path only, no export, weights fixed
    /// once a layer holds tokens.
    pub fn keep_latent(mut self, keep: bool) -> Self {
        self.common.raw.keep_latent = i32::from(keep);
        self
    }
}
