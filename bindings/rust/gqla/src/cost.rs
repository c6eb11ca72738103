// SPDX-License-Identifier: Apache-2.0
//! The roofline cost model: predicted bytes, FLOPs and time of one decode
//! step on each path, so that callers see why a path is chosen.

use std::mem::size_of;

use gqla_sys as ffi;

use crate::config::Config;
use crate::enums::Path;
use crate::error::{check, Error, Result};
use crate::probe::ProbeInfo;

/// The decode shape a prediction is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workload {
    /// Sequences per decode call.
    pub batch: usize,
    /// Cached tokens per sequence (mean).
    pub context: usize,
    /// Query tokens per sequence (s_q).
    pub q_len: usize,
}

impl Workload {
    pub(crate) fn to_raw(self) -> Result<ffi::gqla_workload> {
        let field = |name: &str, v: usize| {
            i32::try_from(v).map_err(|_| {
                Error::invalid_argument(&format!("workload.{name}"), format!("{v} exceeds int32"))
            })
        };
        Ok(ffi::gqla_workload {
            struct_size: size_of::<ffi::gqla_workload>(),
            batch: field("batch", self.batch)?,
            context: i64::try_from(self.context).map_err(|_| {
                Error::invalid_argument(
                    "workload.context",
                    format!("{} exceeds int64", self.context),
                )
            })?,
            q_len: field("q_len", self.q_len)?,
            topk: 0, // dense
        })
    }
}

/// Whether a path's predicted time is set by memory traffic or by arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bound {
    /// bytes / bandwidth dominates.
    Memory,
    /// flops / peak dominates.
    Compute,
}

/// Predicted cost of one decode step on one path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PathCost {
    /// Bytes read and written.
    pub bytes: f64,
    /// Floating-point operations.
    pub flops: f64,
    /// bytes / bandwidth, seconds.
    pub memory_s: f64,
    /// flops / peak, seconds.
    pub compute_s: f64,
    /// Fixed per-call overhead, seconds.
    pub overhead_s: f64,
    /// Predicted time, seconds.
    pub time_s: f64,
    /// What limits it.
    pub bound: Bound,
}

impl PathCost {
    fn from_raw(raw: &ffi::gqla_path_cost) -> PathCost {
        PathCost {
            bytes: raw.bytes,
            flops: raw.flops,
            memory_s: raw.memory_s,
            compute_s: raw.compute_s,
            overhead_s: raw.overhead_s,
            time_s: raw.time_s,
            bound: if raw.bound == ffi::gqla_bound::GQLA_BOUND_COMPUTE {
                Bound::Compute
            } else {
                Bound::Memory
            },
        }
    }
}

/// Both paths' predicted cost and the path [`Path::Auto`] picks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostReport {
    /// The GQA path (the only path of a GQA-kind config).
    pub gqa: PathCost,
    /// The absorb path (zeros for a GQA-kind config).
    pub absorb: PathCost,
    /// What the cost model picks for this workload.
    pub chosen: Path,
    /// One-time cost of building the expanded cache: bytes.
    pub expand_bytes: f64,
    /// One-time cost of building the expanded cache: FLOPs.
    pub expand_flops: f64,
    /// One-time cost of building the expanded cache: seconds.
    pub expand_s: f64,
    /// GQLA: the GQA form over latent rows up-projected per call
    /// ([`Path::GqaTransient`]), the expansion of the batch's context
    /// included (zeros for a GQA-kind config).
    pub transient: PathCost,
    /// What [`Session::attend`](crate::Session::attend) with [`Path::Auto`]
    /// picks for this workload when no expanded cache is kept:
    /// [`Path::Gqa`] (GQA kind), [`Path::Absorb`] or [`Path::GqaTransient`].
    pub call_chosen: Path,
}

impl CostReport {
    pub(crate) fn empty_raw() -> ffi::gqla_cost_report {
        ffi::gqla_cost_report {
            struct_size: size_of::<ffi::gqla_cost_report>(),
            ..Default::default()
        }
    }

    pub(crate) fn from_raw(raw: &ffi::gqla_cost_report) -> Result<CostReport> {
        Ok(CostReport {
            gqa: PathCost::from_raw(&raw.gqa),
            absorb: PathCost::from_raw(&raw.absorb),
            chosen: Path::from_raw(raw.chosen)?,
            expand_bytes: raw.expand_bytes,
            expand_flops: raw.expand_flops,
            expand_s: raw.expand_s,
            transient: PathCost::from_raw(&raw.transient),
            call_chosen: Path::from_raw(raw.call_chosen)?,
        })
    }
}

/// Predict both paths' cost of one decode step of one layer for `workload`
/// on `probe` (`None`: the probe of the config's device). Creates nothing.
///
/// The probe can describe a machine other than this one, e.g. to see what
/// the model picks on an H20-like GPU:
///
/// ```
/// use gqla::{Config, DType, Path, Workload};
/// let cfg = Config::gqla().heads(32, 8).latent_dim(512).nope_dim(64).rope_dim(64)
///     .value_dim(128).cache_dtype(DType::Bf16).build()?;
/// let mut h20 = gqla::probe(gqla::Device::Cpu, false)?;
/// h20.read_gbps = 4000.0;
/// h20.peak_gflops_bf16 = 148_000.0;
/// h20.peak_gflops_f32 = 148_000.0;
/// let one = gqla::predict_cost(&cfg, Some(&h20), &Workload { batch: 64, context: 4096, q_len: 1 })?;
/// assert!(one.gqa.bytes > one.absorb.bytes); // the latent cache is smaller
/// # Ok::<(), gqla::Error>(())
/// ```
pub fn predict_cost(
    config: &Config,
    probe: Option<&ProbeInfo>,
    workload: &Workload,
) -> Result<CostReport> {
    let w = workload.to_raw()?;
    let probe_raw = probe.map(ProbeInfo::to_raw);
    let probe_ptr = probe_raw
        .as_ref()
        .map_or(std::ptr::null(), |p| p as *const ffi::gqla_probe_info);
    let mut raw = CostReport::empty_raw();
    // SAFETY: valid config, optional probe, workload and writable report.
    check(unsafe { ffi::gqla_predict_cost(config.as_raw(), probe_ptr, &w, &mut raw) })?;
    CostReport::from_raw(&raw)
}
