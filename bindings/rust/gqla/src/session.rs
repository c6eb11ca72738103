// SPDX-License-Identifier: Apache-2.0
//! A session: the KV cache of many sequences plus decode attention over it.

use std::mem::size_of;
use std::ptr::{self, NonNull};

use gqla_sys as ffi;

use crate::attend::AttendOptions;
use crate::config::Config;
use crate::cost::{CostReport, Workload};
use crate::enums::{Element, Kind, Path};
use crate::error::{check, Error, ErrorKind, Result};
use crate::shapes::{
    check_distinct, check_dtype, check_layer, to_i32, AppendRows, DecodeShape, PackedShape,
};
use crate::stats::Stats;
use crate::tensor::host_tensor;

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
        let rows = if w_ukv.len() == shard_rows * cols { shard_rows } else { rows };
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

    /// Predicted cost of one decode step of both paths on this session's
    /// device, with its backend's measured efficiency.
    pub fn predict_cost(&self, workload: &Workload) -> Result<CostReport> {
        let w = workload.to_raw()?;
        let mut raw = CostReport::empty_raw();
        // SAFETY: live session, valid in and out structs.
        check(unsafe { ffi::gqla_session_predict_cost(self.raw.as_ptr(), &w, &mut raw) })?;
        CostReport::from_raw(&raw)
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
