// SPDX-License-Identifier: Apache-2.0
//! [`Session`] attention calls: decode (with or without the log-sum-exp) and
//! attend, with mixed query counts, a per-call path and sparse indices.

use std::ptr;

use gqla_sys as ffi;

use super::{SequenceId, Session};
use crate::attend::AttendOptions;
use crate::enums::{Element, Path};
use crate::error::{check, Result};
use crate::shapes::{check_distinct, check_dtype, check_layer, to_i32, DecodeShape, PackedShape};
use crate::tensor::host_tensor;

impl Session {
    /// Decode attention of `layer` for the batch `seqs`: `q` is
    /// `[B, s_q, H, Dq]` (s_q taken from its length), `o` is `[B, s_q, H, Dv]`.
    /// Query i of a sequence of length L attends to positions `j <= L - s_q + i`.
    ///
    /// ```
    /// use gqla::{Config, DType, Device, Session};
    /// let (h, g, d) = (4, 2, 8); // H = 4 query heads in G = 2 groups, D = 8
    /// let cfg = Config::gqa().heads(h, g).head_dim(d).cache_dtype(DType::F32)
    ///     .device(Device::Cpu).max_tokens(256).build()?;
    /// let session = Session::new(&cfg)?;
    /// let seq = session.add_sequence()?;
    /// let k = vec![0.2f32; g * d];                                // 1 token: [1, G, D]
    /// let v: Vec<f32> = (0..g * d).map(|i| i as f32).collect();
    /// session.append(0, seq, &k, &v)?;
    ///
    /// let q = vec![0.3f32; h * d];   // [B = 1, s_q = 1, H, D]
    /// let mut o = vec![0.0f32; h * d];
    /// session.decode(0, &[seq], &q, &mut o)?;
    ///
    /// // With one cached token, every head returns the value row of its group.
    /// for head in 0..h {
    ///     let group = head / (h / g);
    ///     for i in 0..d {
    ///         assert!((o[head * d + i] - v[group * d + i]).abs() < 1e-5);
    ///     }
    /// }
    /// # Ok::<(), gqla::Error>(())
    /// ```
    pub fn decode<T: Element>(
        &self,
        layer: usize,
        seqs: &[SequenceId],
        q: &[T],
        o: &mut [T],
    ) -> Result<()> {
        self.decode_impl(layer, seqs, q, o, None)
    }

    /// [`decode`](Session::decode) that also writes `lse` `[B, s_q, H]`, the
    /// natural-log log-sum-exp of the scaled scores (to merge partial attentions).
    ///
    /// ```
    /// use gqla::{Config, DType, Device, Session};
    /// let (h, g, d) = (4, 2, 8); // H = 4 query heads in G = 2 groups, D = 8
    /// let cfg = Config::gqa().heads(h, g).head_dim(d).cache_dtype(DType::F32)
    ///     .device(Device::Cpu).max_tokens(256).build()?;
    /// let session = Session::new(&cfg)?;
    /// let seq = session.add_sequence()?;
    /// session.append(0, seq, &vec![0.5f32; g * d], &vec![1.0f32; g * d])?; // 1 token
    ///
    /// let q = vec![0.25f32; h * d];
    /// let (mut o, mut lse) = (vec![0.0f32; h * d], vec![0.0f32; h]); // lse: [B, s_q, H]
    /// session.decode_with_lse(0, &[seq], &q, &mut o, &mut lse)?;
    ///
    /// // One position: the log-sum-exp is its score q.k / sqrt(D).
    /// let score = (0.25 * 0.5 * d as f32) / (d as f32).sqrt();
    /// assert!(lse.iter().all(|l| (l - score).abs() < 1e-5));
    /// # Ok::<(), gqla::Error>(())
    /// ```
    pub fn decode_with_lse<T: Element>(
        &self,
        layer: usize,
        seqs: &[SequenceId],
        q: &[T],
        o: &mut [T],
        lse: &mut [f32],
    ) -> Result<()> {
        self.decode_impl(layer, seqs, q, o, Some(lse))
    }

    fn decode_impl<T: Element>(
        &self,
        layer: usize,
        seqs: &[SequenceId],
        q: &[T],
        o: &mut [T],
        lse: Option<&mut [f32]>,
    ) -> Result<()> {
        let layer = check_layer(&self.config, layer)?;
        check_dtype::<T>(&self.config, "q")?;
        let shape = DecodeShape::check(
            &self.config,
            seqs.len(),
            q.len(),
            o.len(),
            lse.as_ref().map(|l| l.len()),
        )?;
        check_distinct("seqs", seqs)?;
        let batch = to_i32("seqs", seqs.len())?;
        let ids: Vec<i64> = seqs.iter().map(|s| s.0).collect();
        let tq = host_tensor(q.as_ptr(), &shape.q_shape());
        let mut to = host_tensor(o.as_mut_ptr() as *const T, &shape.o_shape());
        let mut tlse = lse.map(|l| host_tensor(l.as_mut_ptr() as *const f32, &shape.lse_shape()));
        let lse_ptr = tlse
            .as_mut()
            .map_or(ptr::null_mut(), |t| t as *mut ffi::gqla_tensor);
        // SAFETY: ids holds batch entries; the tensors describe q, o and lse
        // exactly, and o/lse are exclusively borrowed for the call.
        check(unsafe {
            ffi::gqla_decode(
                self.raw.as_ptr(),
                layer,
                batch,
                ids.as_ptr(),
                &tq,
                &mut to,
                lse_ptr,
            )
        })
    }

    /// Attention of `layer` for the batch `seqs` with any mix of query counts
    /// (decoding sequences with 1 query beside prefill chunks), on the form
    /// the options ask for ([`Path::Auto`] by default); returns the form the
    /// call ran on: [`Path::Gqa`], [`Path::Absorb`] or [`Path::GqaTransient`].
    ///
    /// * without [`q_lens`](AttendOptions::q_lens): every sequence has s_q
    ///   queries, as in [`decode`](Session::decode): `q` `[B, s_q, H, Dq]`,
    ///   `o` `[B, s_q, H, Dv]`, lse `[B, s_q, H]`;
    /// * with `q_lens`: sequence i of length L has `q_lens[i]` queries, its
    ///   last tokens, packed in the order of `seqs`: `q` `[N, H, Dq]`, `o`
    ///   `[N, H, Dv]`, lse `[N, H]` with N = sum(q_lens); query k attends to
    ///   positions `j <= L - q_lens[i] + k`.
    ///
    /// The path applies to this call only: the session's path and its kept
    /// caches stay as they are.
    ///
    /// ```
    /// use gqla::{AttendOptions, Config, DType, Device, Path, Session};
    /// let (h, g, r, dc, dr, dv) = (4, 2, 32, 16, 8, 16);
    /// let cfg = Config::gqla().heads(h, g).latent_dim(r).nope_dim(dc).rope_dim(dr).value_dim(dv)
    ///     .cache_dtype(DType::F32).device(Device::Cpu).path(Path::Absorb).max_tokens(256)
    ///     .build()?;
    /// let session = Session::new(&cfg)?;
    /// session.set_weights(0, &vec![0.01f32; g * (dc + dv) * r])?;
    ///
    /// // A sequence decoding its 10th token beside a 6-token prompt prefilled at once.
    /// let (decoding, prompt) = (session.add_sequence()?, session.add_sequence()?);
    /// session.append_many(0, &[decoding, prompt], &[10, 6], &vec![0.1f32; 16 * r],
    ///                     &vec![0.2f32; 16 * dr])?;
    /// let q_lens = [1, 6];
    /// let n: usize = q_lens.iter().sum(); // q [N, H, Dq] -> o [N, H, Dv]
    /// let q = vec![0.3f32; n * h * (dc + dr)];
    /// let (mut o, mut lse) = (vec![f32::NAN; n * h * dv], vec![f32::NAN; n * h]);
    /// let taken = session.attend(0, &[decoding, prompt], &q, &mut o,
    ///     AttendOptions::new().q_lens(&q_lens).lse(&mut lse).path(Path::GqaTransient))?;
    /// assert_eq!(taken, Path::GqaTransient);
    /// assert!(o.iter().chain(&lse).all(|x| x.is_finite()));
    /// assert_eq!(session.path()?, Path::Absorb); // the session's path is unchanged
    /// # Ok::<(), gqla::Error>(())
    /// ```
    pub fn attend<T: Element>(
        &self,
        layer: usize,
        seqs: &[SequenceId],
        q: &[T],
        o: &mut [T],
        options: AttendOptions<'_>,
    ) -> Result<Path> {
        let layer = check_layer(&self.config, layer)?;
        check_dtype::<T>(&self.config, "q")?;
        let AttendOptions {
            q_lens,
            lse,
            path,
            indices,
        } = options;
        let lse_len = lse.as_ref().map(|l| l.len());
        // Slices carry no shape: derive it from the lengths, and check that
        // the library reads and writes nothing outside them.
        let (q_shape, o_shape, lse_shape, lens) = match q_lens {
            None => {
                let shape =
                    DecodeShape::check(&self.config, seqs.len(), q.len(), o.len(), lse_len)?;
                (
                    shape.q_shape().to_vec(),
                    shape.o_shape().to_vec(),
                    shape.lse_shape().to_vec(),
                    None,
                )
            }
            Some(q_lens) => {
                let shape = PackedShape::check(
                    &self.config,
                    seqs.len(),
                    q_lens,
                    q.len(),
                    o.len(),
                    lse_len,
                )?;
                (
                    shape.q_shape().to_vec(),
                    shape.o_shape().to_vec(),
                    shape.lse_shape().to_vec(),
                    Some(shape.q_lens),
                )
            }
        };
        let ids: Vec<i64> = seqs.iter().map(|s| s.0).collect();
        let tq = host_tensor(q.as_ptr(), &q_shape);
        let mut to = host_tensor(o.as_mut_ptr() as *const T, &o_shape);
        let mut tlse = lse.map(|l| host_tensor(l.as_mut_ptr() as *const f32, &lse_shape));
        // Query rows: all dims of q but the head and feature ones.
        let rows: usize = q_shape[..q_shape.len() - 2].iter().product();
        let tidx = indices
            .map(|i| crate::attend::index_tensor(i, rows))
            .transpose()?;
        let mut taken = ffi::gqla_path(0);
        let mut args = ffi::gqla_attention_args::default();
        // SAFETY: a writable args struct.
        check(unsafe { ffi::gqla_attention_args_default(&mut args) })?;
        args.layer = layer;
        args.batch = to_i32("seqs", seqs.len())?;
        args.seqs = ids.as_ptr();
        args.q_lens = lens.as_ref().map_or(ptr::null(), |l| l.as_ptr());
        args.q = &tq;
        args.o = &mut to;
        args.lse = tlse
            .as_mut()
            .map_or(ptr::null_mut(), |t| t as *mut ffi::gqla_tensor);
        args.path = path.to_raw();
        args.path_taken = &mut taken;
        args.indices = tidx
            .as_ref()
            .map_or(ptr::null(), |t| t as *const ffi::gqla_tensor);
        // SAFETY: ids (and q_lens when set) hold batch entries; the tensors
        // describe q, o and lse exactly, and o/lse are exclusively borrowed
        // for the call.
        check(unsafe { ffi::gqla_attention(self.raw.as_ptr(), &args) })?;
        Path::from_raw(taken)
    }
}
