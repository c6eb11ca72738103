// SPDX-License-Identifier: Apache-2.0
//! Safe Rust interface to gqla: the KV cache of LLM decoding and decode
//! attention for GQA and GQLA (group-query latent attention; DeepSeek's MLA is
//! the case G = H), the latter through two equivalent paths over the same
//! weights — the per-group expanded *GQA path* and the latent *absorb path* —
//! chosen by a roofline cost model from a hardware probe.
//!
//! Built on the C ABI through [`gqla_sys`]; every fallible call returns
//! [`Result`], whose [`Error`] carries an [`ErrorKind`] mirroring the C status
//! codes and the library's message. Buffer lengths are checked here before a
//! call so that mistakes name the Rust argument.
//!
//! ```
//! use gqla::{Config, DType, Device, Path, Session};
//!
//! // A small GQLA layer: H = 4 query heads in G = 2 groups.
//! let (h, g, r, dc, dr, dv) = (4, 2, 64, 32, 16, 32);
//! let cfg = Config::gqla()
//!     .heads(h, g).latent_dim(r).nope_dim(dc).rope_dim(dr).value_dim(dv)
//!     .cache_dtype(DType::F32).device(Device::Cpu).max_tokens(1024)
//!     .build()?;
//! let session = Session::new(&cfg)?;
//! let w_ukv: Vec<f32> = (0..g * (dc + dv) * r).map(|i| ((i % 7) as f32 - 3.0) * 0.05).collect();
//! session.set_weights(0, &w_ukv)?;
//!
//! let seq = session.add_sequence()?;
//! let n = 5; // prompt tokens: latents c [n, r] and RoPE keys kr [n, d_r]
//! let c: Vec<f32> = (0..n * r).map(|i| (i % 5) as f32 * 0.1).collect();
//! let kr: Vec<f32> = (0..n * dr).map(|i| (i % 3) as f32 * 0.1).collect();
//! session.append(0, seq, &c, &kr)?;
//!
//! // One query token: q [B=1, s_q=1, H, d_c + d_r] -> o [1, 1, H, d_v].
//! let q = vec![0.2f32; h * (dc + dr)];
//! let mut on_absorb = vec![f32::NAN; h * dv];
//! session.select_path(Path::Absorb)?;
//! session.decode(0, &[seq], &q, &mut on_absorb)?;
//!
//! let mut on_gqa = vec![f32::NAN; h * dv];
//! session.select_path(Path::Gqa)?;
//! session.decode(0, &[seq], &q, &mut on_gqa)?;
//! for (a, b) in on_absorb.iter().zip(&on_gqa) {
//!     assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0)); // same math, f32 cache
//! }
//! # Ok::<(), gqla::Error>(())
//! ```
//!
//! Threading: a [`Session`] is `Send + Sync`; the library serializes calls on
//! one session with an internal lock, and distinct sessions run concurrently.

mod attend;
mod config;
mod cost;
mod enums;
mod error;
mod half;
mod merge;
mod probe;
mod sequence_state;
mod session;
mod shapes;
mod stats;
mod tensor;

pub use gqla_sys as sys;

pub use attend::AttendOptions;
pub use config::{Config, GqaConfigBuilder, GqlaConfigBuilder};
pub use cost::{predict_cost, Bound, CostReport, PathCost, Workload};
pub use enums::{DType, Device, Element, Kind, Path};
pub use error::{Error, ErrorKind, Result};
pub use half::{Bf16, F16};
pub use merge::{merge_attention_states, PartialState};
pub use probe::{device_count, probe, Isa, ProbeInfo};
pub use session::{SequenceId, Session};
pub use stats::Stats;

/// Runtime version of the loaded library as (major, minor, patch).
///
/// ```
/// let (major, _, _) = gqla::version();
/// assert_eq!(major, gqla::sys::GQLA_VERSION_MAJOR);
/// ```
pub fn version() -> (u32, u32, u32) {
    // SAFETY: a trivial getter.
    let encoded = unsafe { gqla_sys::gqla_version() }.max(0) as u32;
    (encoded / 10000, encoded / 100 % 100, encoded % 100)
}
