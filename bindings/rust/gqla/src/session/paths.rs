// SPDX-License-Identifier: Apache-2.0
//! [`Session`] decode paths: selecting one, reading the active and requested
//! ones, and the cost model's prediction for both on the session's device.

use gqla_sys as ffi;

use super::Session;
use crate::cost::{CostReport, Workload};
use crate::enums::Path;
use crate::error::{check, Result};

impl Session {
    /// Select the decode path. [`Path::Gqa`] expands the latent cache of every
    /// live sequence; [`Path::Absorb`] frees the expanded cache; [`Path::Auto`]
    /// lets the cost model choose. All-or-nothing.
    pub fn select_path(&self, path: Path) -> Result<()> {
        // SAFETY: live session.
        check(unsafe { ffi::gqla_select_path(self.raw.as_ptr(), path.to_raw()) })
    }

    /// The path decode uses now (never [`Path::Auto`]).
    pub fn path(&self) -> Result<Path> {
        Ok(self.paths()?.0)
    }

    /// The active path and the requested one (which may be [`Path::Auto`]).
    pub fn paths(&self) -> Result<(Path, Path)> {
        let (mut active, mut requested) = (ffi::gqla_path(0), ffi::gqla_path(0));
        // SAFETY: live session, valid out-pointers.
        check(unsafe { ffi::gqla_get_path(self.raw.as_ptr(), &mut active, &mut requested) })?;
        Ok((Path::from_raw(active)?, Path::from_raw(requested)?))
    }

    /// Predicted cost of one decode step of both paths on this session's
    /// device, with its backend's measured efficiency.
    pub fn predict_cost(&self, workload: &Workload) -> Result<CostReport> {
        let w = workload.to_raw()?;
        let mut raw = CostReport::empty_raw();
        // SAFETY: live session, valid in and out structs.
        check(unsafe { ffi::gqla_session_predict_cost(self.raw.as_ptr(), &w, &mut raw) })?;
        CostReport::from_raw(&raw)
    }
}
