// SPDX-License-Identifier: Apache-2.0
//! A session: the KV cache of many sequences plus decode attention over it.
//!
//! This module holds the [`Session`] type, its lifecycle and state; its
//! methods are grouped by purpose in submodules:
//!
//! * `sequences`: adding, forking and releasing sequences, appending tokens;
//! * `attention`: decode and attention calls;
//! * `weights`: the GQLA weights;
//! * `paths`: the decode path and the cost model's prediction.

use std::mem::size_of;
use std::ptr::{self, NonNull};

use gqla_sys as ffi;

use crate::config::Config;
use crate::error::{check, Error, ErrorKind, Result};
use crate::stats::Stats;

mod attention;
mod paths;
mod sequences;
mod weights;

/// Id of a sequence in a [`Session`]. Ids are never reused within a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SequenceId(i64);

impl SequenceId {
    /// The id as the C API sees it.
    pub fn raw(self) -> i64 {
        self.0
    }

    /// An id from its C value (for ids obtained through the raw API).
    pub fn from_raw(raw: i64) -> SequenceId {
        SequenceId(raw)
    }
}

/// A gqla session: page pool, per-sequence caches, weights and decode.
///
/// All methods take `&self`: the library serializes calls on one session with
/// an internal lock, so a session can be shared between threads (it is
/// `Send + Sync`); calls then run one after another.
///
/// ```
/// use gqla::{Config, Device, Path, Session};
/// let (h, g, r, dc, dr, dv) = (4, 2, 32, 16, 8, 16);
/// let cfg = Config::gqla().heads(h, g).latent_dim(r).nope_dim(dc).rope_dim(dr).value_dim(dv)
///     .device(Device::Cpu).max_tokens(256).build()?;
/// let session = Session::new(&cfg)?;
/// session.set_weights(0, &vec![0.01f32; g * (dc + dv) * r])?;
///
/// let seq = session.add_sequence()?;
/// let tokens = 3;
/// session.append(0, seq, &vec![0.5f32; tokens * r], &vec![0.1f32; tokens * dr])?;
/// assert_eq!(session.length(seq, 0)?, 3);
///
/// let q = vec![1.0f32; h * (dc + dr)];       // batch 1, s_q 1
/// let mut o = vec![0.0f32; h * dv];
/// session.decode(0, &[seq], &q, &mut o)?;
/// assert!(matches!(session.path()?, Path::Gqa | Path::Absorb));
/// # Ok::<(), gqla::Error>(())
/// ```
pub struct Session {
    raw: NonNull<ffi::gqla_session>,
    config: Config,
}

// SAFETY: gqla.h ("Threading"): "A session serializes its own calls with an
// internal lock, so one session may be used from several threads", and the
// library has no thread-affine state except the thread-local error message,
// which `check` reads on the calling thread right after each call. Destroy
// must not race other calls; `Drop` takes `&mut self`, so it cannot.
unsafe impl Send for Session {}
unsafe impl Sync for Session {}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Session>();
};

impl Session {
    /// Create a session: validates `config`, picks the device, allocates the page pool.
    pub fn new(config: &Config) -> Result<Session> {
        let mut raw = ptr::null_mut();
        // SAFETY: a valid config pointer and a valid out-pointer.
        check(unsafe { ffi::gqla_session_create(config.as_raw(), &mut raw) })?;
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::new(
                ErrorKind::Internal,
                "gqla_session_create returned OK and a NULL session",
            )
        })?;
        // Own the handle before the next fallible call so that Drop frees it.
        let mut session = Session {
            raw,
            config: *config,
        };
        session.config = session.resolved_config()?;
        Ok(session)
    }

    fn resolved_config(&self) -> Result<Config> {
        let mut raw = ffi::gqla_config {
            struct_size: size_of::<ffi::gqla_config>(),
            ..Default::default()
        };
        // SAFETY: live session, writable out struct.
        check(unsafe { ffi::gqla_session_get_config(self.raw.as_ptr(), &mut raw) })?;
        Ok(Config::from_resolved(raw))
    }

    /// The session's resolved config (device, threads, scale, capacity and path filled in).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The raw handle, for calls this crate does not wrap. It stays owned by
    /// the session.
    pub fn as_raw(&self) -> *mut ffi::gqla_session {
        self.raw.as_ptr()
    }

    /// Pages, tokens and bytes in use.
    pub fn stats(&self) -> Result<Stats> {
        let mut raw = ffi::gqla_stats {
            struct_size: size_of::<ffi::gqla_stats>(),
            ..Default::default()
        };
        // SAFETY: live session, writable out struct.
        check(unsafe { ffi::gqla_session_stats(self.raw.as_ptr(), &mut raw) })?;
        Stats::from_raw(&raw, self.config.as_raw().device_index)
    }

    /// Block until all work queued by the session has finished (CPU sessions
    /// are synchronous and return at once).
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: live session.
        check(unsafe { ffi::gqla_session_synchronize(self.raw.as_ptr()) })
    }

    /// CUDA sessions: queue later work on `stream` (a `cudaStream_t`, NULL for
    /// the legacy default stream). CPU sessions ignore it.
    ///
    /// # Safety
    /// `stream` must be NULL or a CUDA stream of the session's device that
    /// outlives every call queued on it.
    pub unsafe fn set_stream(&self, stream: *mut std::ffi::c_void) -> Result<()> {
        check(ffi::gqla_session_set_stream(self.raw.as_ptr(), stream))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // SAFETY: we own the handle and `&mut self` excludes concurrent calls.
        unsafe { ffi::gqla_session_destroy(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("handle", &self.raw)
            .field("config", &self.config)
            .finish()
    }
}
