// SPDX-License-Identifier: Apache-2.0
//! Installed-package check through the Rust crates: one GQA token in, its
//! value out, and the directory the library was found in.

use gqla::{Config, DType, Device, Session};

fn main() -> gqla::Result<()> {
    let (h, g, d) = (4, 2, 8);
    let config = Config::gqa()
        .heads(h, g)
        .head_dim(d)
        .cache_dtype(DType::F32)
        .device(Device::Cpu)
        .max_tokens(64)
        .build()?;
    let session = Session::new(&config)?;
    let k: Vec<f32> = (0..g * d).map(|i| (0.3 * i as f32 + 0.1).sin()).collect();
    let v: Vec<f32> = (0..g * d).map(|i| (0.7 * i as f32 + 0.2).cos()).collect();
    let q: Vec<f32> = (0..h * d).map(|i| (1.1 * i as f32 + 0.5).sin()).collect();
    let seq = session.add_sequence()?;
    session.append(0, seq, &k, &v)?;
    let mut o = vec![f32::NAN; h * d];
    session.decode(0, &[seq], &q, &mut o)?;
    for head in 0..h {
        for i in 0..d {
            let expected = v[(head / (h / g)) * d + i];
            assert!((o[head * d + i] - expected).abs() <= 1e-3, "o[{head}][{i}] wrong");
        }
    }
    let (major, minor, patch) = gqla::version();
    println!("OK rust consumer, gqla {major}.{minor}.{patch}, library from {}", env!("GQLA_FOUND_LIB_DIR"));
    Ok(())
}
