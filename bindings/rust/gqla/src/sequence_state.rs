// SPDX-License-Identifier: Apache-2.0
//! Saving and restoring one sequence's cache as bytes.

use gqla_sys as ffi;

use crate::error::{check, Result};
use crate::session::{SequenceId, Session};

impl Session {
    /// Serializes `seq`'s cache (every layer's tokens of the always-kept
    /// cache, in the cache dtype, with a versioned header and a checksum;
    /// `gqla_sequence_export`). [`import_sequence`](Session::import_sequence)
    /// restores it in any session of the same kind, dims, layers and cache
    /// dtype, on any device and page size.
    ///
    /// ```
    /// use gqla::{Config, DType, Device, Session};
    ///
    /// let cfg = Config::gqa().heads(4, 2).head_dim(16).cache_dtype(DType::F32)
    ///     .device(Device::Cpu).max_tokens(256).build()?;
    /// let (a, b) = (Session::new(&cfg)?, Session::new(&cfg)?);
    /// let seq = a.add_sequence()?;
    /// let k: Vec<f32> = (0..3 * 2 * 16).map(|i| (i % 7) as f32 * 0.1).collect();
    /// a.append(0, seq, &k, &k)?; // 3 tokens: k and v [3, G=2, 16]
    ///
    /// let bytes = a.export_sequence(seq)?;
    /// let restored = b.import_sequence(&bytes)?;
    /// assert_eq!(b.length(restored, 0)?, 3);
    /// assert_eq!(b.export_sequence(restored)?, bytes); // stored elements are identical
    /// # Ok::<(), gqla::Error>(())
    /// ```
    pub fn export_sequence(&self, seq: SequenceId) -> Result<Vec<u8>> {
        let mut bytes = vec![0u8; self.export_sequence_size(seq)?];
        let written = self.export_sequence_into(seq, &mut bytes)?;
        bytes.truncate(written);
        Ok(bytes)
    }

    /// Bytes [`export_sequence`](Session::export_sequence) writes for `seq`
    /// now.
    pub fn export_sequence_size(&self, seq: SequenceId) -> Result<usize> {
        let mut needed = 0usize;
        // SAFETY: a size query writes only `needed`.
        check(unsafe {
            ffi::gqla_sequence_export(
                self.as_raw(),
                seq.raw(),
                std::ptr::null_mut(),
                0,
                &mut needed,
            )
        })?;
        Ok(needed)
    }

    /// [`export_sequence`](Session::export_sequence) into the caller's
    /// buffer (a reused staging buffer, a mapped file): writes its first
    /// [`export_sequence_size`](Session::export_sequence_size) bytes and
    /// returns that count. A smaller buffer is refused with
    /// [`ErrorKind::Capacity`](crate::ErrorKind::Capacity), whose message
    /// names the size needed, and nothing is written.
    ///
    /// ```
    /// use gqla::{Config, Device, ErrorKind, Session};
    ///
    /// let cfg = Config::gqa().heads(2, 1).head_dim(8).device(Device::Cpu).max_tokens(64).build()?;
    /// let s = Session::new(&cfg)?;
    /// let seq = s.add_sequence()?;
    /// s.append(0, seq, &[0.5f32; 8], &[0.25f32; 8])?;
    /// let mut staging = vec![0u8; 4096];
    /// let n = s.export_sequence_into(seq, &mut staging)?;
    /// assert_eq!(&staging[..n], &s.export_sequence(seq)?[..]);
    /// let err = s.export_sequence_into(seq, &mut staging[..n - 1]).unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::Capacity);
    /// # Ok::<(), gqla::Error>(())
    /// ```
    pub fn export_sequence_into(&self, seq: SequenceId, buffer: &mut [u8]) -> Result<usize> {
        let mut needed = 0usize;
        // SAFETY: `buffer` holds buffer.len() writable bytes.
        check(unsafe {
            ffi::gqla_sequence_export(
                self.as_raw(),
                seq.raw(),
                buffer.as_mut_ptr().cast(),
                buffer.len(),
                &mut needed,
            )
        })?;
        Ok(needed)
    }

    /// Restores a sequence exported by [`export_sequence`](Session::export_sequence)
    /// as a new sequence (`gqla_sequence_import`). A truncated, corrupted,
    /// newer-format or foreign-shape buffer is refused with
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) and
    /// the session unchanged.
    ///
    /// ```
    /// use gqla::{Config, Device, ErrorKind, Session};
    ///
    /// let cfg = Config::gqa().heads(2, 1).head_dim(8).device(Device::Cpu).max_tokens(64).build()?;
    /// let s = Session::new(&cfg)?;
    /// let err = s.import_sequence(b"not a sequence").unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    /// # Ok::<(), gqla::Error>(())
    /// ```
    pub fn import_sequence(&self, bytes: &[u8]) -> Result<SequenceId> {
        let mut id = 0i64;
        // SAFETY: the pointer covers bytes.len() readable bytes; id is written.
        check(unsafe {
            ffi::gqla_sequence_import(self.as_raw(), bytes.as_ptr().cast(), bytes.len(), &mut id)
        })?;
        Ok(SequenceId::from_raw(id))
    }
}
