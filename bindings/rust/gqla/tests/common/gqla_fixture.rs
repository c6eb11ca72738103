// SPDX-License-Identifier: Apache-2.0
//! A GQLA session together with host copies of everything appended to it, so
//! that any decode can be checked against the float64 reference.

use gqla::{Config, DType, Device, Path, SequenceId, Session};

use super::io::{as_stored, decode, encode, poisoned, rounded, TestElement};
use super::reference::{self, GqlaDims};
use super::{lse_error, quantization_tolerance, rel_l2, Rng};

/// Odd sizes: H=6, G=2, d_c=96, d_r=32, r=384, d_v=80.
pub const ODD_DIMS: GqlaDims = GqlaDims {
    heads: 6,
    groups: 2,
    r: 384,
    dc: 96,
    dr: 32,
    dv: 80,
};

pub struct Sequence {
    pub id: SequenceId,
    /// Latents and rope keys as the library received them (after io
    /// rounding, before rounding into the cache).
    pub c: Vec<f32>,
    pub kr: Vec<f32>,
}

impl Sequence {
    pub fn len(&self, dims: GqlaDims) -> usize {
        self.c.len() / dims.r
    }
}

pub struct GqlaFixture {
    pub dims: GqlaDims,
    pub session: Session,
    pub w: Vec<f32>,
    pub seqs: Vec<Sequence>,
    pub rng: Rng,
    pub cache: DType,
    pub io: DType,
}

pub struct Options {
    pub cache: DType,
    pub io: DType,
    pub page_size: usize,
    pub path: Path,
    pub max_tokens: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            cache: DType::F32,
            io: DType::F32,
            page_size: 16,
            path: Path::Absorb,
            max_tokens: 16384,
        }
    }
}

pub fn gqla_config(dims: GqlaDims, options: &Options) -> Config {
    Config::gqla()
        .heads(dims.heads, dims.groups)
        .latent_dim(dims.r)
        .nope_dim(dims.dc)
        .rope_dim(dims.dr)
        .value_dim(dims.dv)
        .cache_dtype(options.cache)
        .io_dtype(options.io)
        .page_size(options.page_size)
        .max_tokens(options.max_tokens)
        .path(options.path)
        .device(Device::Cpu)
        .build()
        .expect("a valid GQLA config")
}

impl GqlaFixture {
    /// A session with fresh random weights (uploaded as f32).
    pub fn new(dims: GqlaDims, options: Options, salt: u64) -> GqlaFixture {
        let mut rng = Rng::fresh(salt);
        let session = Session::new(&gqla_config(dims, &options)).expect("session");
        // Entries ~ U(-1,1)/sqrt(r) keep projected keys and values O(1).
        let w = rng.vec(dims.weight_len(), 1.0 / (dims.r as f32).sqrt());
        session.set_weights(0, &w).expect("set_weights");
        GqlaFixture {
            dims,
            session,
            w,
            seqs: Vec::new(),
            rng,
            cache: options.cache,
            io: options.io,
        }
    }

    pub fn add_sequence(&mut self) -> usize {
        let id = self.session.add_sequence().expect("add_sequence");
        self.seqs.push(Sequence {
            id,
            c: Vec::new(),
            kr: Vec::new(),
        });
        self.seqs.len() - 1
    }

    /// Append `n` fresh random tokens to sequence `index` with one `append`.
    pub fn append<T: TestElement>(&mut self, index: usize, n: usize) {
        let (c, kr) = (
            self.rng.vec(n * self.dims.r, 1.0),
            self.rng.vec(n * self.dims.dr, 1.0),
        );
        self.session
            .append(0, self.seqs[index].id, &encode::<T>(&c), &encode::<T>(&kr))
            .expect("append");
        self.seqs[index].c.extend(rounded::<T>(&c));
        self.seqs[index].kr.extend(rounded::<T>(&kr));
    }

    /// Append `counts[i]` fresh tokens to sequence `indices[i]` with one `append_many`.
    pub fn append_many<T: TestElement>(&mut self, indices: &[usize], counts: &[usize]) {
        let total: usize = counts.iter().sum();
        let (c, kr) = (
            self.rng.vec(total * self.dims.r, 1.0),
            self.rng.vec(total * self.dims.dr, 1.0),
        );
        let ids: Vec<SequenceId> = indices.iter().map(|&i| self.seqs[i].id).collect();
        self.session
            .append_many(0, &ids, counts, &encode::<T>(&c), &encode::<T>(&kr))
            .expect("append_many");
        let (c, kr) = (rounded::<T>(&c), rounded::<T>(&kr));
        let mut row = 0;
        for (&i, &count) in indices.iter().zip(counts) {
            self.seqs[i]
                .c
                .extend_from_slice(&c[row * self.dims.r..(row + count) * self.dims.r]);
            self.seqs[i]
                .kr
                .extend_from_slice(&kr[row * self.dims.dr..(row + count) * self.dims.dr]);
            row += count;
        }
    }

    pub fn random_queries(&mut self, batch: usize, s_q: usize) -> Vec<f32> {
        // Larger queries sharpen the softmax so that errors are not averaged away.
        self.rng
            .vec(batch * s_q * self.dims.heads * self.dims.dq(), 3.0)
    }

    /// Decode `q` (f32 values, sent as T) for the sequences `indices`, check o
    /// (rel. L2) and lse (`lse_error`) within `tolerance` of the reference on
    /// the inputs as the cache stores them, and within the quantization bound
    /// of the reference on the inputs as given; return o.
    pub fn decode_checked<T: TestElement>(
        &self,
        indices: &[usize],
        s_q: usize,
        q: &[f32],
        tolerance: f64,
    ) -> Vec<f32> {
        let d = self.dims;
        let batch = indices.len();
        let ids: Vec<SequenceId> = indices.iter().map(|&i| self.seqs[i].id).collect();
        let q_sent = encode::<T>(q);
        let mut o = poisoned::<T>(batch * s_q * d.heads * d.dv);
        let mut lse = vec![f32::NAN; batch * s_q * d.heads];
        self.session
            .decode_with_lse(0, &ids, &q_sent, &mut o, &mut lse)
            .expect("decode");
        let o = decode(&o);

        let q = decode(&q_sent);
        let lens: Vec<usize> = indices.iter().map(|&i| self.seqs[i].len(d)).collect();
        let path = self.session.path().expect("path");
        let context = format!(
            "path {path}, s_q {s_q}, lengths {lens:?}, {}",
            self.rng.replay_hint()
        );
        let unchanged_by_cache = self.cache == DType::F32 || self.cache == self.io;
        for stored in [true, false] {
            if !stored && unchanged_by_cache {
                break;
            }
            let (bound, against) = if stored {
                (tolerance, "stored inputs")
            } else {
                (quantization_tolerance(self.cache, self.io), "given inputs")
            };
            let (ref_o, ref_lse) = self.reference(indices, s_q, &q, stored);
            let err = rel_l2(&o, &ref_o);
            let lse_err = lse_error(&lse, &ref_lse);
            assert!(
                err <= bound,
                "o: rel L2 {err:.3e} > {bound:.0e} against the {against} ({context})"
            );
            assert!(
                lse_err <= bound,
                "lse: error {lse_err:.3e} > {bound:.0e} against the {against} ({context})"
            );
        }
        o
    }

    /// Reference o and lse of the sequences `indices` for queries `q`, on
    /// the cached rows as stored (rounded to the cache dtype) or as given.
    fn reference(
        &self,
        indices: &[usize],
        s_q: usize,
        q: &[f32],
        stored: bool,
    ) -> (Vec<f64>, Vec<f64>) {
        let d = self.dims;
        let scale = d.default_scale();
        let (mut ref_o, mut ref_lse) = (Vec::new(), Vec::new());
        for (b, &i) in indices.iter().enumerate() {
            let seq = &self.seqs[i];
            let qb = &q[b * s_q * d.heads * d.dq()..][..s_q * d.heads * d.dq()];
            let (c, kr) = if stored {
                (
                    as_stored(&seq.c, self.cache),
                    as_stored(&seq.kr, self.cache),
                )
            } else {
                (seq.c.clone(), seq.kr.clone())
            };
            let r = reference::gqla(d, &self.w, &c, &kr, qb, seq.len(d), s_q, scale);
            ref_o.extend(r.o);
            ref_lse.extend(r.lse);
        }
        (ref_o, ref_lse)
    }
}
