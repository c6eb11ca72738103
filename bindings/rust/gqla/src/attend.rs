// SPDX-License-Identifier: Apache-2.0
//! The optional arguments of [`Session::attend`](crate::Session::attend).

use std::mem::size_of;

use gqla_sys as ffi;

use crate::enums::Path;
use crate::error::{Error, Result};

/// Optional arguments of [`Session::attend`](crate::Session::attend): the
/// query count of each sequence, an lse output, the path of the call and
/// the positions of sparse (top-k) attention.
/// Unset, the call has s_q queries per sequence (as `decode`), no lse and
/// [`Path::Auto`]. Built with chained setters, so that arguments the C call
/// gains later can be added without breaking callers.
///
/// ```
/// use gqla::{AttendOptions, Path};
/// let q_lens = [1, 512];
/// let mut lse = vec![0.0f32; 513 * 8];
/// let _options = AttendOptions::new().q_lens(&q_lens).lse(&mut lse).path(Path::GqaTransient);
/// ```
#[derive(Debug)]
pub struct AttendOptions<'a> {
    pub(crate) q_lens: Option<&'a [usize]>,
    pub(crate) lse: Option<&'a mut [f32]>,
    pub(crate) path: Path,
    pub(crate) indices: Option<&'a [i32]>,
}

impl Default for AttendOptions<'_> {
    fn default() -> Self {
        AttendOptions {
            q_lens: None,
            lse: None,
            path: Path::Auto,
            indices: None,
        }
    }
}

impl<'a> AttendOptions<'a> {
    /// No query counts (uniform s_q), no lse, [`Path::Auto`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Query tokens of each sequence, one entry per sequence of the batch:
    /// the rows of q, o and lse are then packed in sequence order
    /// (`[N, H, ...]`, N = the sum).
    pub fn q_lens(mut self, q_lens: &'a [usize]) -> Self {
        self.q_lens = Some(q_lens);
        self
    }

    /// Also write the natural-log log-sum-exp of the scaled scores, one per
    /// query row and head.
    pub fn lse(mut self, lse: &'a mut [f32]) -> Self {
        self.lse = Some(lse);
        self
    }

    /// The form of this call: [`Path::Auto`] (the fastest the cost model
    /// predicts among those available now), [`Path::Gqa`] (over the kept
    /// expanded cache, else transient), [`Path::Absorb`] or
    /// [`Path::GqaTransient`]. GQA-kind sessions accept Auto and Gqa.
    pub fn path(mut self, path: Path) -> Self {
        self.path = path;
        self
    }

    /// Sparse (top-k) attention: cache positions for every query row,
    /// row-major `[N, K]` with N the query rows of the call (`batch * s_q`,
    /// or the sum of `q_lens`) and K = `indices.len() / N`. Every head of a
    /// query attends to the listed positions it may see; -1, invisible and
    /// out-of-range entries are skipped, a repeated position counts once per
    /// occurrence, and a query with none visible gets o = 0 and lse = -inf.
    pub fn indices(mut self, indices: &'a [i32]) -> Self {
        self.indices = Some(indices);
        self
    }
}

/// The `[rows, K]` I32 host tensor over `indices`; K must be a whole number
/// of entries per row (the C call checks the rest).
pub(crate) fn index_tensor(indices: &[i32], rows: usize) -> Result<ffi::gqla_tensor> {
    if rows == 0 || indices.is_empty() || indices.len() % rows != 0 {
        return Err(Error::invalid_argument(
            "indices",
            format!(
                "{} entries are not K >= 1 per each of the {rows} query rows",
                indices.len()
            ),
        ));
    }
    let k = indices.len() / rows;
    let mut shape = [0i64; ffi::GQLA_MAX_DIMS as usize];
    let mut strides = [0i64; ffi::GQLA_MAX_DIMS as usize];
    shape[0] = rows as i64;
    shape[1] = k as i64;
    strides[0] = k as i64;
    strides[1] = 1;
    Ok(ffi::gqla_tensor {
        struct_size: size_of::<ffi::gqla_tensor>(),
        // The library only reads index tensors.
        data: indices.as_ptr() as *mut std::ffi::c_void,
        dtype: ffi::gqla_dtype::GQLA_DTYPE_I32,
        device: ffi::gqla_device_type::GQLA_DEVICE_CPU,
        device_index: 0,
        ndim: 2,
        shape,
        strides,
    })
}
