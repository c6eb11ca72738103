// SPDX-License-Identifier: Apache-2.0
//! [`Session`] weights: uploading a GQLA layer's `W_UKV`.

use gqla_sys as ffi;

use super::Session;
use crate::enums::{Element, Kind};
use crate::error::{check, Error, ErrorKind, Result};
use crate::shapes::check_layer;
use crate::tensor::host_tensor;

impl Session {
    /// GQLA only: upload `W_UKV` of `layer`, shape `[G*(d_c+d_v), r]` row-major,
    /// laid out like DeepSeek's `kv_b_proj.weight`. Any element type.
    ///
    /// ```
    /// use gqla::{Config, Device, Session};
    /// let (h, g, r, dc, dr, dv) = (4, 2, 32, 16, 8, 16);
    /// let cfg = Config::gqla().heads(h, g).latent_dim(r).nope_dim(dc).rope_dim(dr).value_dim(dv)
    ///     .device(Device::Cpu).max_tokens(256).build()?;
    /// let session = Session::new(&cfg)?;
    /// let w_ukv: Vec<f32> = (0..g * (dc + dv) * r).map(|i| (i % 11) as f32 * 0.01).collect();
    /// session.set_weights(0, &w_ukv)?;
    ///
    /// // A buffer of the wrong length is refused, naming the argument.
    /// let err = session.set_weights(0, &w_ukv[1..]).unwrap_err();
    /// assert!(err.message().contains("w_ukv"));
    /// # Ok::<(), gqla::Error>(())
    /// ```
    pub fn set_weights<T: Element>(&self, layer: usize, w_ukv: &[T]) -> Result<()> {
        let c = &self.config;
        let layer = check_layer(c, layer)?;
        if c.kind() != Kind::Gqla {
            return Err(Error::new(
                ErrorKind::InvalidState,
                "w_ukv: a GQA-kind session has no weights (set_weights is for GQLA sessions)",
            ));
        }
        let (rows, cols) = (
            c.num_kv_heads() * (c.nope_dim() + c.value_dim()),
            c.latent_dim(),
        );
        // A shard takes the full W_UKV or its own groups' rows.
        let shard_rows = c.group_count() * (c.nope_dim() + c.value_dim());
        let rows = if w_ukv.len() == shard_rows * cols {
            shard_rows
        } else {
            rows
        };
        if w_ukv.len() != rows * cols {
            return Err(Error::invalid_argument(
                "w_ukv",
                format!(
                    "length {} is not [G*(d_c+d_v) {rows}, r {cols}] = {} (or the served groups' \
                     [{shard_rows}, {cols}])",
                    w_ukv.len(),
                    rows * cols
                ),
            ));
        }
        let tensor = host_tensor(w_ukv.as_ptr(), &[rows, cols]);
        // SAFETY: the tensor describes exactly w_ukv, alive for the call.
        check(unsafe { ffi::gqla_set_weights(self.raw.as_ptr(), layer, &tensor) })
    }
}
