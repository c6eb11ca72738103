// SPDX-License-Identifier: Apache-2.0
//! The optional arguments of [`Session::attend`](crate::Session::attend).

use crate::enums::Path;

/// Optional arguments of [`Session::attend`](crate::Session::attend): the
/// query count of each sequence, an lse output and the path of the call.
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
}

impl Default for AttendOptions<'_> {
    fn default() -> Self {
        AttendOptions {
            q_lens: None,
            lse: None,
            path: Path::Auto,
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
}
