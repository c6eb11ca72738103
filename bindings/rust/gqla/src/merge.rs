// SPDX-License-Identifier: Apache-2.0
//! Merging partial attention states by their log-sum-exps.

use gqla_sys as ffi;

use crate::enums::Element;
use crate::error::{check, Error, Result};
use crate::tensor::host_tensor;

/// One partial attention: outputs `[rows, dim]` and their `lse` `[rows]`, e.g.
/// the `o` and `lse` of [`Session::decode_with_lse`](crate::Session::decode_with_lse)
/// over one part of the positions.
#[derive(Clone, Copy, Debug)]
pub struct PartialState<'a, T> {
    /// Outputs, `rows * dim` values, row-major.
    pub output: &'a [T],
    /// Natural-log log-sum-exp of each row's scaled scores; `-inf` marks a
    /// part that attended to nothing (its output is then ignored).
    pub lse: &'a [f32],
}

/// Merges partial attentions of the same queries over disjoint sets of
/// positions into the attention over their union (`gqla_merge_attention_states`):
/// per row, `lse = ln(sum_i exp(lse_i))` and `o = sum_i exp(lse_i - lse) o_i`,
/// computed in double precision. `out` receives `rows * dim` values and
/// `out_lse` (if given) `rows` values, where `rows = parts[i].lse.len()`.
///
/// ```
/// use gqla::{merge_attention_states, PartialState};
///
/// // Two parts of one row of width 2: equal weights average the outputs.
/// let (a, b) = ([1.0f32, 2.0], [3.0f32, 6.0]);
/// let lse = [0.5f32.ln()];
/// let parts = [
///     PartialState { output: &a, lse: &lse },
///     PartialState { output: &b, lse: &lse },
/// ];
/// let mut out = [0.0f32; 2];
/// let mut out_lse = [0.0f32; 1];
/// merge_attention_states(&parts, 2, &mut out, Some(&mut out_lse))?;
/// assert_eq!(out, [2.0, 4.0]);
/// assert!(out_lse[0].abs() < 1e-6); // ln(0.5 + 0.5)
/// # Ok::<(), gqla::Error>(())
/// ```
pub fn merge_attention_states<T: Element>(
    parts: &[PartialState<'_, T>],
    dim: usize,
    out: &mut [T],
    out_lse: Option<&mut [f32]>,
) -> Result<()> {
    let first = parts
        .first()
        .ok_or_else(|| Error::invalid_argument("parts", "at least one partial state"))?;
    if dim == 0 {
        return Err(Error::invalid_argument("dim", "at least 1"));
    }
    let rows = first.lse.len();
    for (i, part) in parts.iter().enumerate() {
        if part.lse.len() != rows {
            return Err(Error::invalid_argument(
                &format!("parts[{i}].lse"),
                format!("{rows} values (as parts[0].lse), got {}", part.lse.len()),
            ));
        }
        if part.output.len() != rows * dim {
            return Err(Error::invalid_argument(
                &format!("parts[{i}].output"),
                format!(
                    "{} values (rows {rows} x dim {dim}), got {}",
                    rows * dim,
                    part.output.len()
                ),
            ));
        }
    }
    if out.len() != rows * dim {
        return Err(Error::invalid_argument(
            "out",
            format!(
                "{} values (rows {rows} x dim {dim}), got {}",
                rows * dim,
                out.len()
            ),
        ));
    }
    let num_states = i32::try_from(parts.len())
        .map_err(|_| Error::invalid_argument("parts", "at most i32::MAX partial states"))?;
    let outputs: Vec<ffi::gqla_tensor> = parts
        .iter()
        .map(|p| host_tensor(p.output.as_ptr(), &[rows, dim]))
        .collect();
    let lses: Vec<ffi::gqla_tensor> = parts
        .iter()
        .map(|p| host_tensor(p.lse.as_ptr(), &[rows]))
        .collect();
    let mut to = host_tensor(out.as_mut_ptr() as *const T, &[rows, dim]);
    let mut tl = match out_lse {
        Some(l) => {
            if l.len() != rows {
                return Err(Error::invalid_argument(
                    "out_lse",
                    format!("{rows} values, got {}", l.len()),
                ));
            }
            Some(host_tensor(l.as_mut_ptr() as *const f32, &[rows]))
        }
        None => None,
    };
    let tl_ptr = tl
        .as_mut()
        .map_or(std::ptr::null_mut(), |t| t as *mut ffi::gqla_tensor);
    // SAFETY: the tensors describe slices whose lengths were checked above;
    // out and out_lse are exclusive borrows, so they overlap no input.
    check(unsafe {
        ffi::gqla_merge_attention_states(
            num_states,
            outputs.as_ptr(),
            lses.as_ptr(),
            &mut to,
            tl_ptr,
        )
    })
}
