// SPDX-License-Identifier: Apache-2.0
//! [`Session`] methods on sequences: adding, forking and releasing them,
//! their lengths, and appending tokens to one or several at once.

use gqla_sys as ffi;

use super::{SequenceId, Session};
use crate::enums::Element;
use crate::error::{check, Error, Result};
use crate::shapes::{check_distinct, check_dtype, check_layer, to_i32, AppendRows};
use crate::tensor::host_tensor;

impl Session {
    /// A new, empty sequence.
    pub fn add_sequence(&self) -> Result<SequenceId> {
        let mut id = 0;
        // SAFETY: live session, valid out-pointer.
        check(unsafe { ffi::gqla_sequence_add(self.raw.as_ptr(), &mut id) })?;
        Ok(SequenceId(id))
    }

    /// Release a sequence and return its pages to the pool.
    pub fn release(&self, seq: SequenceId) -> Result<()> {
        // SAFETY: live session.
        check(unsafe { ffi::gqla_sequence_release(self.raw.as_ptr(), seq.0) })
    }

    /// A new sequence sharing every cached token of `parent` (pages are shared
    /// and copied on write).
    pub fn fork(&self, parent: SequenceId) -> Result<SequenceId> {
        let mut child = 0;
        // SAFETY: live session, valid out-pointer.
        check(unsafe { ffi::gqla_sequence_fork(self.raw.as_ptr(), parent.0, &mut child) })?;
        Ok(SequenceId(child))
    }

    /// Cached tokens of `seq` in `layer`.
    pub fn length(&self, seq: SequenceId, layer: usize) -> Result<usize> {
        let layer = check_layer(&self.config, layer)?;
        let mut length = 0;
        // SAFETY: live session, valid out-pointer.
        check(unsafe { ffi::gqla_sequence_length(self.raw.as_ptr(), seq.0, layer, &mut length) })?;
        Ok(length.max(0) as usize)
    }

    /// Append n >= 1 tokens of `layer` to `seq`; n is taken from the lengths.
    ///
    /// * GQA: `a` = k `[n, G, D]`, `b` = v `[n, G, Dv]`
    /// * GQLA: `a` = c `[n, r]`, `b` = kr `[n, d_r]` (RoPE already applied)
    ///
    /// All-or-nothing: on error nothing is appended.
    ///
    /// ```
    /// use gqla::{Config, DType, Device, Session};
    /// let (h, g, d) = (4, 2, 8); // H = 4 query heads in G = 2 groups, D = 8
    /// let cfg = Config::gqa().heads(h, g).head_dim(d).cache_dtype(DType::F32)
    ///     .device(Device::Cpu).max_tokens(256).build()?;
    /// let session = Session::new(&cfg)?;
    /// let seq = session.add_sequence()?;
    ///
    /// let n = 3; // k and v of 3 tokens: [n, G, D] each
    /// session.append(0, seq, &vec![0.5f32; n * g * d], &vec![1.0f32; n * g * d])?;
    /// assert_eq!(session.length(seq, 0)?, 3);
    ///
    /// // k of 1 token with v of 2: refused, and nothing appended.
    /// assert!(session.append(0, seq, &vec![0.5f32; g * d], &vec![1.0f32; 2 * g * d]).is_err());
    /// assert_eq!(session.length(seq, 0)?, 3);
    /// # Ok::<(), gqla::Error>(())
    /// ```
    pub fn append<T: Element>(
        &self,
        layer: usize,
        seq: SequenceId,
        a: &[T],
        b: &[T],
    ) -> Result<()> {
        let rows = AppendRows::of(&self.config);
        let layer = check_layer(&self.config, layer)?;
        check_dtype::<T>(&self.config, rows.a_name)?;
        let n = rows.tokens(a.len(), b.len())?;
        if n == 0 {
            return Err(Error::invalid_argument(
                rows.a_name,
                "no tokens to append (n must be >= 1)",
            ));
        }
        let (ta, tb) = (
            host_tensor(a.as_ptr(), &rows.a_shape(n)),
            host_tensor(b.as_ptr(), &rows.b_shape(n)),
        );
        // SAFETY: the tensors describe exactly a and b, alive for the call.
        check(unsafe { ffi::gqla_append(self.raw.as_ptr(), layer, seq.0, &ta, &tb) })
    }

    /// Append to several sequences at once: `seqs[i]` receives `counts[i]`
    /// consecutive token rows of `a`/`b` (rows packed in the order of `seqs`).
    /// All-or-nothing over the whole call.
    ///
    /// ```
    /// use gqla::{Config, DType, Device, Session};
    /// let (h, g, d) = (4, 2, 8); // H = 4 query heads in G = 2 groups, D = 8
    /// let cfg = Config::gqa().heads(h, g).head_dim(d).cache_dtype(DType::F32)
    ///     .device(Device::Cpu).max_tokens(256).build()?;
    /// let session = Session::new(&cfg)?;
    /// let (first, second) = (session.add_sequence()?, session.add_sequence()?);
    ///
    /// // 2 tokens for `first`, then 1 for `second`: k and v are [3, G, D].
    /// let k: Vec<f32> = (0..3 * g * d).map(|i| i as f32 * 0.01).collect();
    /// let v = k.clone();
    /// session.append_many(0, &[first, second], &[2, 1], &k, &v)?;
    /// assert_eq!(session.length(first, 0)?, 2);
    /// assert_eq!(session.length(second, 0)?, 1);
    /// # Ok::<(), gqla::Error>(())
    /// ```
    pub fn append_many<T: Element>(
        &self,
        layer: usize,
        seqs: &[SequenceId],
        counts: &[usize],
        a: &[T],
        b: &[T],
    ) -> Result<()> {
        let rows = AppendRows::of(&self.config);
        let layer = check_layer(&self.config, layer)?;
        check_dtype::<T>(&self.config, rows.a_name)?;
        if seqs.len() != counts.len() {
            return Err(Error::invalid_argument(
                "counts",
                format!("{} entries for {} sequences", counts.len(), seqs.len()),
            ));
        }
        if seqs.is_empty() {
            return Err(Error::invalid_argument("seqs", "no sequences"));
        }
        check_distinct("seqs", seqs)?;
        let n = rows.tokens(a.len(), b.len())?;
        let total: usize = counts.iter().sum();
        if total != n {
            return Err(Error::invalid_argument(
                "counts",
                format!("they sum to {total} tokens but {} holds {n}", rows.a_name),
            ));
        }
        let num_seqs = to_i32("seqs", seqs.len())?;
        let ids: Vec<i64> = seqs.iter().map(|s| s.0).collect();
        let counts: Vec<i64> = counts.iter().map(|&c| c as i64).collect();
        let (ta, tb) = (
            host_tensor(a.as_ptr(), &rows.a_shape(n)),
            host_tensor(b.as_ptr(), &rows.b_shape(n)),
        );
        // SAFETY: ids/counts hold num_seqs entries; the tensors describe a and b.
        check(unsafe {
            ffi::gqla_append_batch(
                self.raw.as_ptr(),
                layer,
                num_seqs,
                ids.as_ptr(),
                counts.as_ptr(),
                &ta,
                &tb,
            )
        })
    }
}
