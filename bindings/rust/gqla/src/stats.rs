// SPDX-License-Identifier: Apache-2.0
//! Memory and capacity of a session (`gqla_stats`).

use gqla_sys as ffi;

use crate::enums::{Device, Path};
use crate::error::Result;

/// Pages, tokens and bytes a session uses; see [`Session::stats`](crate::Session::stats).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Device the session runs on.
    pub device: Device,
    /// Active decode path.
    pub path: Path,
    /// Tokens per page.
    pub page_size: usize,
    /// Pages in the pool.
    pub pages_total: u64,
    /// Pages holding tokens.
    pub pages_used: u64,
    /// Pages free.
    pub pages_free: u64,
    /// Live sequences.
    pub sequences: u64,
    /// Sum over live sequences of their longest layer.
    pub tokens_cached: u64,
    /// `pages_free * page_size`.
    pub token_capacity_left: u64,
    /// Bytes of the always-kept cache (K/V, or latent + kr), all layers.
    pub latent_bytes: u64,
    /// Bytes of the expanded cache now allocated (0 on the absorb path).
    pub expanded_bytes: u64,
    /// Bytes of stored weights.
    pub weight_bytes: u64,
    /// Scratch memory owned by the session.
    pub workspace_bytes: u64,
    /// Bytes one token costs in one layer of the always-kept cache (GQA: K
    /// and V; GQLA: the latent when kept, and kr), of the served groups.
    pub kept_bytes_per_token: u64,
    /// Bytes one token costs in one layer of the expanded cache (GQLA; 0
    /// for the GQA kind), allocated or not.
    pub expanded_bytes_per_token: u64,
}

impl Stats {
    /// `device_index` completes `raw.device`, which has no ordinal of its own.
    pub(crate) fn from_raw(raw: &ffi::gqla_stats, device_index: i32) -> Result<Stats> {
        let count = |v: i64| v.max(0) as u64;
        Ok(Stats {
            device: Device::from_raw(raw.device, device_index)?,
            path: Path::from_raw(raw.path)?,
            page_size: raw.page_size.max(0) as usize,
            pages_total: count(raw.pages_total),
            pages_used: count(raw.pages_used),
            pages_free: count(raw.pages_free),
            sequences: count(raw.sequences),
            tokens_cached: count(raw.tokens_cached),
            token_capacity_left: count(raw.token_capacity_left),
            latent_bytes: count(raw.latent_bytes),
            expanded_bytes: count(raw.expanded_bytes),
            weight_bytes: count(raw.weight_bytes),
            workspace_bytes: count(raw.workspace_bytes),
            kept_bytes_per_token: count(raw.kept_bytes_per_token),
            expanded_bytes_per_token: count(raw.expanded_bytes_per_token),
        })
    }
}
