// SPDX-License-Identifier: Apache-2.0
//! A session shared between threads (the header promises an internal lock).

mod common;

use std::sync::Arc;

use common::gqla_fixture::{GqlaFixture, Options, ODD_DIMS};
use common::{rel_l2, to_f64};
use gqla::{SequenceId, Session};

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Session>();
    assert_send_sync::<gqla::Error>();
    assert_send_sync::<gqla::Config>();
};

#[test]
fn concurrent_decodes_on_one_session_match_serial_ones() {
    let mut fx = GqlaFixture::new(ODD_DIMS, Options::default(), 41);
    let indices: Vec<usize> = (0..4).map(|_| fx.add_sequence()).collect();
    for (n, &i) in indices.iter().enumerate() {
        fx.append::<f32>(i, 10 + 7 * n);
    }
    let queries: Vec<Vec<f32>> = indices.iter().map(|_| fx.random_queries(1, 2)).collect();
    let serial: Vec<Vec<f32>> = indices
        .iter()
        .zip(&queries)
        .map(|(&i, q)| fx.decode_checked::<f32>(&[i], 2, q, 1e-5))
        .collect();

    let ids: Vec<SequenceId> = indices.iter().map(|&i| fx.seqs[i].id).collect();
    let out_len = 2 * ODD_DIMS.heads * ODD_DIMS.dv;
    let session = Arc::new(fx.session);
    let handles: Vec<_> = ids
        .into_iter()
        .zip(queries)
        .map(|(id, q)| {
            let session = Arc::clone(&session);
            std::thread::spawn(move || {
                let mut o = vec![f32::NAN; out_len];
                for _ in 0..20 {
                    session.decode(0, &[id], &q, &mut o).unwrap();
                }
                o
            })
        })
        .collect();
    for (handle, expected) in handles.into_iter().zip(serial) {
        let o = handle.join().unwrap();
        assert!(rel_l2(&o, &to_f64(&expected)) <= 1e-6);
    }
}
