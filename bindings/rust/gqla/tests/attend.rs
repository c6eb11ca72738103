// SPDX-License-Identifier: Apache-2.0
//! `Session::attend`: ragged query counts on every path against the float64
//! reference, uniform calls equal to decode, the GQA kind, refused
//! arguments, `max_q_tokens` and the cost report's per-call fields.

mod common;

use common::gqla_fixture::{GqlaFixture, Options, ODD_DIMS};
use common::reference::{self, GqlaDims};
use common::{lse_error, rel_l2, to_f64, Rng};
use gqla::{AttendOptions, Config, DType, Device, ErrorKind, Path, SequenceId, Session, Workload};

const TOLERANCE: f64 = 1e-5; // f32 cache and io

/// Lengths around the page size 16, and the query count of each: a decoding
/// sequence, whole prompts, prefill chunks ending mid-page.
const LENGTHS: [usize; 5] = [1, 15, 16, 17, 40];
const Q_LENS: [usize; 5] = [1, 15, 16, 5, 9];

fn ragged_fixture(dims: GqlaDims, salt: u64) -> GqlaFixture {
    let mut fx = GqlaFixture::new(dims, Options::default(), salt); // absorb, f32
    let all: Vec<usize> = LENGTHS.iter().map(|_| fx.add_sequence()).collect();
    fx.append_many::<f32>(&all, &LENGTHS);
    fx
}

/// Float64 o and lse of packed rows: q_lens[i] rows of sequence i in order.
fn reference_packed(fx: &GqlaFixture, q_lens: &[usize], q: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let d = fx.dims;
    let (mut o, mut lse) = (Vec::new(), Vec::new());
    let mut row = 0;
    for (seq, &n) in fx.seqs.iter().zip(q_lens) {
        let rows = &q[row * d.heads * d.dq()..][..n * d.heads * d.dq()];
        let r = reference::gqla(
            d,
            &fx.w,
            &seq.c,
            &seq.kr,
            rows,
            seq.len(d),
            n,
            d.default_scale(),
        );
        o.extend(r.o);
        lse.extend(r.lse);
        row += n;
    }
    (o, lse)
}

/// attend with `q_lens` on `path`: checks against the reference and returns
/// (o, the path taken).
fn attend_checked(fx: &GqlaFixture, q: &[f32], path: Path) -> (Vec<f32>, Path) {
    let d = fx.dims;
    let rows: usize = Q_LENS.iter().sum();
    let ids: Vec<SequenceId> = fx.seqs.iter().map(|s| s.id).collect();
    let mut o = vec![f32::NAN; rows * d.heads * d.dv];
    let mut lse = vec![f32::NAN; rows * d.heads];
    let options = AttendOptions::new()
        .q_lens(&Q_LENS)
        .lse(&mut lse)
        .path(path);
    let taken = fx
        .session
        .attend(0, &ids, q, &mut o, options)
        .expect("attend");
    let (ref_o, ref_lse) = reference_packed(fx, &Q_LENS, q);
    let context = format!("asked {path}, ran {taken}, {}", fx.rng.replay_hint());
    let err = rel_l2(&o, &ref_o);
    assert!(err <= TOLERANCE, "o: rel L2 {err:.3e} ({context})");
    let lse_err = lse_error(&lse, &ref_lse);
    assert!(lse_err <= TOLERANCE, "lse: error {lse_err:.3e} ({context})");
    (o, taken)
}

#[test]
fn ragged_q_lens_match_reference_on_every_path() {
    for groups in [2, 3] {
        let mut fx = ragged_fixture(GqlaDims { groups, ..ODD_DIMS }, 40 + groups as u64);
        let rows: usize = Q_LENS.iter().sum();
        let q = fx.random_queries(rows, 1);
        // No expanded cache is kept on the absorb path: GQA runs transient.
        let mut outputs = Vec::new();
        for (asked, expected) in [
            (Path::Absorb, Some(Path::Absorb)),
            (Path::Gqa, Some(Path::GqaTransient)),
            (Path::GqaTransient, Some(Path::GqaTransient)),
            (Path::Auto, None),
        ] {
            let (o, taken) = attend_checked(&fx, &q, asked);
            if let Some(expected) = expected {
                assert_eq!(taken, expected, "asked {asked}");
            }
            assert_ne!(taken, Path::Auto);
            // The call's path leaves the session's alone.
            assert_eq!(fx.session.paths().unwrap(), (Path::Absorb, Path::Absorb));
            assert_eq!(fx.session.stats().unwrap().expanded_bytes, 0);
            outputs.push(o);
        }
        for o in &outputs[1..] {
            let agreement = rel_l2(o, &to_f64(&outputs[0]));
            assert!(agreement <= TOLERANCE, "paths disagree: {agreement:.3e}");
        }
        // With the expanded cache kept, GQA runs over it.
        fx.session.select_path(Path::Gqa).unwrap();
        assert_eq!(attend_checked(&fx, &q, Path::Gqa).1, Path::Gqa);
        assert_eq!(
            attend_checked(&fx, &q, Path::GqaTransient).1,
            Path::GqaTransient
        );
    }
}

#[test]
fn uniform_attend_is_decode() {
    let mut fx = ragged_fixture(ODD_DIMS, 47);
    let d = fx.dims;
    let indices = [2, 3, 4]; // lengths 16, 17, 40
    let ids: Vec<SequenceId> = indices.iter().map(|&i| fx.seqs[i].id).collect();
    let s_q = 3;
    let q = fx.random_queries(ids.len(), s_q);
    let decoded = fx.decode_checked::<f32>(&indices, s_q, &q, TOLERANCE);
    let (mut o, mut lse) = (
        vec![f32::NAN; decoded.len()],
        vec![f32::NAN; ids.len() * s_q * d.heads],
    );
    let taken = fx
        .session
        .attend(
            0,
            &ids,
            &q,
            &mut o,
            AttendOptions::new().lse(&mut lse).path(Path::Absorb),
        )
        .unwrap();
    assert_eq!(taken, Path::Absorb);
    assert!(rel_l2(&o, &to_f64(&decoded)) <= 1e-6);
    assert!(lse.iter().all(|x| x.is_finite()));
}

#[test]
fn gqa_kind_attend() {
    let (h, g, dim) = (6, 3, 40);
    let mut rng = Rng::fresh(48);
    let cfg = Config::gqa()
        .heads(h, g)
        .head_dim(dim)
        .cache_dtype(DType::F32)
        .device(Device::Cpu)
        .max_tokens(1024)
        .build()
        .unwrap();
    let s = Session::new(&cfg).unwrap();
    let lengths = [3, 20];
    let q_lens = [1, 8];
    let ids = [s.add_sequence().unwrap(), s.add_sequence().unwrap()];
    let total: usize = lengths.iter().sum();
    let (k, v) = (rng.vec(total * g * dim, 1.0), rng.vec(total * g * dim, 1.0));
    s.append_many(0, &ids, &lengths, &k, &v).unwrap();
    let rows: usize = q_lens.iter().sum();
    let q = rng.vec(rows * h * dim, 2.0);
    let mut o = vec![f32::NAN; rows * h * dim];
    let taken = s
        .attend(0, &ids, &q, &mut o, AttendOptions::new().q_lens(&q_lens))
        .unwrap();
    assert_eq!(taken, Path::Gqa);
    let (mut ref_o, mut start, mut row) = (Vec::new(), 0, 0);
    for (&len, &n) in lengths.iter().zip(&q_lens) {
        let r = reference::gqa(
            &k[start * g * dim..(start + len) * g * dim],
            &v[start * g * dim..(start + len) * g * dim],
            &q[row * h * dim..(row + n) * h * dim],
            len,
            n,
            h,
            g,
            dim,
            dim,
            1.0 / (dim as f64).sqrt(),
        );
        ref_o.extend(r.o);
        start += len;
        row += n;
    }
    let err = rel_l2(&o, &ref_o);
    assert!(
        err <= TOLERANCE,
        "o: rel L2 {err:.3e} ({})",
        rng.replay_hint()
    );
    let absorb = s.attend(
        0,
        &ids,
        &q,
        &mut o,
        AttendOptions::new().q_lens(&q_lens).path(Path::Absorb),
    );
    assert_eq!(absorb.unwrap_err().kind(), ErrorKind::InvalidArgument);
}

#[test]
fn bad_arguments_are_refused_naming_them() {
    let mut fx = ragged_fixture(ODD_DIMS, 49);
    let d = fx.dims;
    let ids: Vec<SequenceId> = fx.seqs.iter().map(|s| s.id).collect();
    let rows: usize = Q_LENS.iter().sum();
    let q = fx.random_queries(rows, 1);
    let mut o = vec![0.0f32; rows * d.heads * d.dv];
    let attend = |q_lens: &[usize], q: &[f32], o: &mut [f32]| {
        fx.session
            .attend(0, &ids, q, o, AttendOptions::new().q_lens(q_lens))
            .unwrap_err()
    };
    let refused = [
        // One entry short (checked here: the C call reads one per sequence).
        (attend(&Q_LENS[..4], &q, &mut o), "q_lens"),
        // The same total, but sequence 1 holds 15 tokens, not 16.
        (attend(&[1, 16, 15, 5, 9], &q, &mut o), "q_lens"),
        // A sequence without queries.
        (attend(&[1, 15, 16, 0, 14], &q, &mut o), "q_lens"),
        // Buffers that do not match the sum.
        (attend(&[1, 15, 16, 5, 8], &q, &mut o), "q"),
        (attend(&Q_LENS, &q, &mut o[1..]), "o"),
    ];
    for (error, name) in refused {
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
        assert!(error.message().contains(name), "{name}: {error}");
    }
    let mut lse = vec![0.0f32; rows * d.heads - 1];
    let error = fx
        .session
        .attend(
            0,
            &ids,
            &q,
            &mut o,
            AttendOptions::new().q_lens(&Q_LENS).lse(&mut lse),
        )
        .unwrap_err();
    assert!(error.message().contains("lse"), "{error}");
    // Nothing changed: the lengths are as appended and attend still works.
    for (seq, &len) in fx.seqs.iter().zip(&LENGTHS) {
        assert_eq!(fx.session.length(seq.id, 0).unwrap(), len);
    }
    attend_checked(&fx, &q, Path::Auto);
}

#[test]
fn max_q_tokens_bounds_one_call() {
    let dims = GqlaDims {
        heads: 4,
        groups: 2,
        r: 64,
        dc: 32,
        dr: 16,
        dv: 24,
    };
    let cfg = Config::gqla()
        .heads(dims.heads, dims.groups)
        .latent_dim(dims.r)
        .nope_dim(dims.dc)
        .rope_dim(dims.dr)
        .value_dim(dims.dv)
        .cache_dtype(DType::F32)
        .device(Device::Cpu)
        .max_tokens(1024)
        .max_q_len(40)
        .max_q_tokens(48)
        .build()
        .unwrap();
    assert_eq!(cfg.max_q_tokens(), 48);
    let s = Session::new(&cfg).unwrap();
    assert_eq!(s.config().max_q_tokens(), 48);
    s.set_weights(0, &vec![0.01f32; dims.weight_len()]).unwrap();
    let ids = [s.add_sequence().unwrap(), s.add_sequence().unwrap()];
    s.append_many(
        0,
        &ids,
        &[40, 40],
        &vec![0.1f32; 80 * dims.r],
        &vec![0.1f32; 80 * dims.dr],
    )
    .unwrap();
    let call = |q_lens: &[usize]| {
        let rows: usize = q_lens.iter().sum();
        let q = vec![0.5f32; rows * dims.heads * dims.dq()];
        let mut o = vec![0.0f32; rows * dims.heads * dims.dv];
        s.attend(0, &ids, &q, &mut o, AttendOptions::new().q_lens(q_lens))
    };
    call(&[8, 40]).unwrap();
    let error = call(&[9, 40]).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    assert!(error.message().contains("max_q_tokens"), "{error}");
}

#[test]
fn cost_report_has_the_per_call_forms() {
    let fx = ragged_fixture(ODD_DIMS, 50);
    let report = fx
        .session
        .predict_cost(&Workload {
            batch: 1,
            context: 4096,
            q_len: 16,
        })
        .unwrap();
    assert!(report.transient.time_s > 0.0 && report.transient.flops > 0.0);
    assert!(
        matches!(report.call_chosen, Path::Absorb | Path::GqaTransient),
        "{:?}",
        report.call_chosen
    );

    let gqa = Config::gqa()
        .heads(8, 2)
        .head_dim(64)
        .device(Device::Cpu)
        .build()
        .unwrap();
    let report = gqla::predict_cost(
        &gqa,
        None,
        &Workload {
            batch: 4,
            context: 1000,
            q_len: 1,
        },
    )
    .unwrap();
    assert_eq!(report.call_chosen, Path::Gqa);
    assert_eq!(report.transient.time_s, 0.0);
}
