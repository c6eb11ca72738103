// SPDX-License-Identifier: Apache-2.0
//! Bad inputs give the right error kind and a message naming the argument;
//! failed calls change nothing.

mod common;

use common::gqla_fixture::{gqla_config, GqlaFixture, Options, ODD_DIMS};
use gqla::{Config, DType, Device, ErrorKind, Path, SequenceId, Session};

fn assert_error<T: std::fmt::Debug>(result: gqla::Result<T>, kind: ErrorKind, mentions: &str) {
    let err = result.expect_err("the call should fail");
    assert_eq!(err.kind(), kind, "{err}");
    assert!(
        err.message().contains(mentions),
        "message {:?} should mention {mentions:?}",
        err.message()
    );
}

fn fixture_with_one_sequence(salt: u64) -> (GqlaFixture, SequenceId) {
    let mut fx = GqlaFixture::new(ODD_DIMS, Options::default(), salt);
    let i = fx.add_sequence();
    fx.append::<f32>(i, 3);
    let id = fx.seqs[i].id;
    (fx, id)
}

#[test]
fn invalid_configs_are_rejected_by_the_library() {
    let err = Config::gqla()
        .heads(6, 4)
        .latent_dim(64)
        .nope_dim(32)
        .rope_dim(16)
        .value_dim(32)
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("num_kv_heads"), "{err}");
    assert_error(
        Config::gqa().heads(8, 2).build(),
        ErrorKind::InvalidArgument,
        "head_dim",
    );
    assert_error(
        Config::gqa().heads(8, 2).head_dim(64).layers(0).build(),
        ErrorKind::InvalidArgument,
        "num_layers",
    );
    assert_error(
        Config::gqa()
            .heads(8, 2)
            .head_dim(64)
            .page_size(1 << 40)
            .build(),
        ErrorKind::InvalidArgument,
        "page_size",
    );
}

#[test]
fn wrong_buffer_lengths_name_the_argument() {
    let (fx, seq) = fixture_with_one_sequence(31);
    let (r, dr, h, dq, dv) = (
        ODD_DIMS.r,
        ODD_DIMS.dr,
        ODD_DIMS.heads,
        ODD_DIMS.dq(),
        ODD_DIMS.dv,
    );
    let s = &fx.session;
    assert_error(
        s.append(0, seq, &vec![0.5f32; r + 1], &vec![0.5f32; dr]),
        ErrorKind::InvalidArgument,
        "c:",
    );
    assert_error(
        s.append(0, seq, &vec![0.5f32; 2 * r], &vec![0.5f32; dr]),
        ErrorKind::InvalidArgument,
        "kr:",
    );
    assert_error(
        s.append::<f32>(0, seq, &[], &[]),
        ErrorKind::InvalidArgument,
        "c:",
    );
    assert_error(
        s.append(1, seq, &vec![0.5f32; r], &vec![0.5f32; dr]),
        ErrorKind::InvalidArgument,
        "layer",
    );
    assert_error(
        s.append_many(0, &[seq], &[2], &vec![0.5f32; r], &vec![0.5f32; dr]),
        ErrorKind::InvalidArgument,
        "counts",
    );
    assert_error(
        s.append_many(0, &[seq, seq], &[1, 0], &vec![0.5f32; r], &vec![0.5f32; dr]),
        ErrorKind::InvalidArgument,
        "seqs",
    );
    let mut o = vec![0.0f32; h * dv];
    assert_error(
        s.decode(0, &[seq], &vec![0.5f32; h * dq - 1], &mut o),
        ErrorKind::InvalidArgument,
        "q:",
    );
    assert_error(
        s.decode(0, &[seq], &vec![0.5f32; h * dq], &mut o[1..]),
        ErrorKind::InvalidArgument,
        "o:",
    );
    assert_error(
        s.decode(0, &[], &vec![0.5f32; h * dq], &mut o),
        ErrorKind::InvalidArgument,
        "seqs",
    );
    assert_error(
        s.decode(
            0,
            &[seq, seq],
            &vec![0.5f32; 2 * h * dq],
            &mut vec![0.0; 2 * h * dv],
        ),
        ErrorKind::InvalidArgument,
        "seqs",
    );
    let mut lse = vec![0.0f32; h + 1];
    assert_error(
        s.decode_with_lse(0, &[seq], &vec![0.5f32; h * dq], &mut o, &mut lse),
        ErrorKind::InvalidArgument,
        "lse:",
    );
    assert_error(
        s.set_weights(0, &[0.5f32; 3]),
        ErrorKind::InvalidArgument,
        "w_ukv",
    );
    // Nothing of the rejected calls reached the cache.
    assert_eq!(s.length(seq, 0).unwrap(), 3);
}

#[test]
fn element_type_must_match_io_dtype() {
    let (fx, seq) = fixture_with_one_sequence(32);
    let (r, dr) = (ODD_DIMS.r, ODD_DIMS.dr);
    let c = vec![gqla::Bf16::from_f32(0.5); r];
    let kr = vec![gqla::Bf16::from_f32(0.5); dr];
    assert_error(
        fx.session.append(0, seq, &c, &kr),
        ErrorKind::InvalidArgument,
        "io_dtype",
    );
}

#[test]
fn more_queries_than_cached_tokens_is_rejected() {
    let (fx, seq) = fixture_with_one_sequence(33); // length 3
    let (h, dq, dv) = (ODD_DIMS.heads, ODD_DIMS.dq(), ODD_DIMS.dv);
    let mut o = vec![0.0f32; 4 * h * dv];
    let err = fx
        .session
        .decode(0, &[seq], &vec![0.5f32; 4 * h * dq], &mut o)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(!err.message().is_empty());
    // s_q beyond max_q_len is caught before the call.
    let too_many = fx.session.config().max_q_len() + 1;
    let mut o = vec![0.0f32; too_many * h * dv];
    assert_error(
        fx.session
            .decode(0, &[seq], &vec![0.5f32; too_many * h * dq], &mut o),
        ErrorKind::InvalidArgument,
        "max_q_len",
    );
}

#[test]
fn unknown_and_released_sequences_are_not_found() {
    let (fx, seq) = fixture_with_one_sequence(34);
    let s = &fx.session;
    let (r, dr, h, dq, dv) = (
        ODD_DIMS.r,
        ODD_DIMS.dr,
        ODD_DIMS.heads,
        ODD_DIMS.dq(),
        ODD_DIMS.dv,
    );
    let ghost = SequenceId::from_raw(seq.raw() + 1000);
    assert_eq!(s.length(ghost, 0).unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(
        s.append(0, ghost, &vec![0.5f32; r], &vec![0.5f32; dr])
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    assert_eq!(s.fork(ghost).unwrap_err().kind(), ErrorKind::NotFound);
    s.release(seq).unwrap();
    assert_eq!(s.release(seq).unwrap_err().kind(), ErrorKind::NotFound);
    let mut o = vec![0.0f32; h * dv];
    assert_eq!(
        s.decode(0, &[seq], &vec![0.5f32; h * dq], &mut o)
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
}

#[test]
fn weights_are_required_before_append() {
    let session = Session::new(&gqla_config(ODD_DIMS, &Options::default())).unwrap();
    let seq = session.add_sequence().unwrap();
    let err = session
        .append(0, seq, &vec![0.5f32; ODD_DIMS.r], &[0.5f32; ODD_DIMS.dr])
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidState, "{err}");
    assert_eq!(session.length(seq, 0).unwrap(), 0);
}

#[test]
fn gqa_kind_has_no_weights_and_no_absorb_path() {
    let cfg = Config::gqa()
        .heads(4, 2)
        .head_dim(32)
        .device(Device::Cpu)
        .max_tokens(64)
        .build()
        .unwrap();
    let session = Session::new(&cfg).unwrap();
    assert_eq!(
        session.set_weights(0, &[0.5f32; 4]).unwrap_err().kind(),
        ErrorKind::InvalidState
    );
    assert_eq!(
        session.select_path(Path::Absorb).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn exhausted_pool_is_a_capacity_error_and_appends_nothing() {
    let cfg = Config::gqa()
        .heads(4, 2)
        .head_dim(32)
        .page_size(16)
        .max_tokens(32)
        .max_sequences(2)
        .cache_dtype(DType::F32)
        .device(Device::Cpu)
        .build()
        .unwrap();
    let session = Session::new(&cfg).unwrap();
    let a = session.add_sequence().unwrap();
    let row = 2 * 32;
    session
        .append(0, a, &vec![0.5f32; 20 * row], &vec![0.5f32; 20 * row])
        .unwrap();
    let err = session
        .append(0, a, &vec![0.5f32; 20 * row], &vec![0.5f32; 20 * row])
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Capacity, "{err}");
    assert_eq!(session.length(a, 0).unwrap(), 20, "all-or-nothing");
    let b = session.add_sequence().unwrap();
    assert_eq!(
        session.add_sequence().unwrap_err().kind(),
        ErrorKind::Capacity,
        "max_sequences 2"
    );
    // The batch as a whole does not fit: neither sequence grows.
    let err = session
        .append_many(
            0,
            &[a, b],
            &[4, 16],
            &vec![0.5f32; 20 * row],
            &vec![0.5f32; 20 * row],
        )
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Capacity, "{err}");
    assert_eq!(
        (session.length(a, 0).unwrap(), session.length(b, 0).unwrap()),
        (20, 0)
    );
}

#[test]
fn error_display_carries_kind_and_message() {
    let err = Config::gqa().heads(8, 3).head_dim(64).build().unwrap_err();
    let shown = err.to_string();
    assert!(
        shown.contains("invalid argument") && shown.contains(err.message()),
        "{shown}"
    );
    assert_eq!(
        ErrorKind::from_status(ErrorKind::Capacity.status()),
        Some(ErrorKind::Capacity)
    );
    assert_eq!(
        ErrorKind::from_status(gqla::sys::gqla_status(77)),
        Some(ErrorKind::Unknown(77))
    );
    assert_eq!(
        ErrorKind::from_status(gqla::sys::gqla_status::GQLA_OK),
        None
    );
}
