// SPDX-License-Identifier: Apache-2.0
//! Rust-side checks of buffer lengths and arguments before a call crosses the
//! ABI, so that a mistake names the Rust argument and is caught even where a
//! slice length cannot be expressed to the library.

use std::collections::HashSet;

use crate::config::Config;
use crate::enums::{Element, Kind};
use crate::error::{Error, Result};
use crate::session::SequenceId;

/// Widths of one token row of the two appended tensors, and their names.
pub(crate) struct AppendRows {
    pub a_name: &'static str,
    pub b_name: &'static str,
    /// Trailing shape of `a` after the token axis.
    pub a_tail: Vec<usize>,
    pub b_tail: Vec<usize>,
}

impl AppendRows {
    pub fn of(config: &Config) -> AppendRows {
        match config.kind() {
            Kind::Gqa => AppendRows {
                a_name: "k",
                b_name: "v",
                a_tail: vec![config.group_count(), config.head_dim()],
                b_tail: vec![config.group_count(), config.value_dim()],
            },
            Kind::Gqla => AppendRows {
                a_name: "c",
                b_name: "kr",
                a_tail: vec![config.latent_dim()],
                b_tail: vec![config.rope_dim()],
            },
        }
    }

    pub fn a_row(&self) -> usize {
        self.a_tail.iter().product()
    }

    pub fn b_row(&self) -> usize {
        self.b_tail.iter().product()
    }

    /// Tokens in `a`/`b`, checking that both hold whole rows of the same count.
    pub fn tokens(&self, a_len: usize, b_len: usize) -> Result<usize> {
        let (a_row, b_row) = (self.a_row(), self.b_row());
        if a_row == 0 || a_len % a_row != 0 {
            return Err(Error::invalid_argument(
                self.a_name,
                format!(
                    "length {a_len} is not a whole number of rows of {a_row} elements ({:?} per token)",
                    self.a_tail
                ),
            ));
        }
        let n = a_len / a_row;
        if b_len != n * b_row {
            return Err(Error::invalid_argument(
                self.b_name,
                format!(
                    "length {b_len} does not match {n} tokens of {b_row} elements ({:?} per token) as given by {}",
                    self.b_tail, self.a_name
                ),
            ));
        }
        Ok(n)
    }

    pub fn a_shape(&self, n: usize) -> Vec<usize> {
        std::iter::once(n)
            .chain(self.a_tail.iter().copied())
            .collect()
    }

    pub fn b_shape(&self, n: usize) -> Vec<usize> {
        std::iter::once(n)
            .chain(self.b_tail.iter().copied())
            .collect()
    }
}

pub(crate) fn check_layer(config: &Config, layer: usize) -> Result<i32> {
    if layer >= config.num_layers() {
        return Err(Error::invalid_argument(
            "layer",
            format!("{layer} is out of range 0..{}", config.num_layers()),
        ));
    }
    Ok(layer as i32)
}

pub(crate) fn check_dtype<T: Element>(config: &Config, argument: &str) -> Result<()> {
    if T::DTYPE != config.io_dtype() {
        return Err(Error::invalid_argument(
            argument,
            format!(
                "element type {} does not match the session's io_dtype {}",
                T::DTYPE,
                config.io_dtype()
            ),
        ));
    }
    Ok(())
}

pub(crate) fn check_distinct(argument: &str, seqs: &[SequenceId]) -> Result<()> {
    let mut seen = HashSet::with_capacity(seqs.len());
    for seq in seqs {
        if !seen.insert(seq.raw()) {
            return Err(Error::invalid_argument(
                argument,
                format!("sequence {} appears more than once", seq.raw()),
            ));
        }
    }
    Ok(())
}

pub(crate) fn to_i32(argument: &str, value: usize) -> Result<i32> {
    i32::try_from(value).map_err(|_| {
        Error::invalid_argument(argument, format!("{value} exceeds the C int32 range"))
    })
}

/// Shape of one decode call.
pub(crate) struct DecodeShape {
    pub batch: usize,
    pub q_len: usize,
    pub heads: usize,
    pub query_dim: usize,
    pub value_dim: usize,
}

impl DecodeShape {
    /// Derive s_q from `q_len_elems` and check `o`/`lse` against it.
    pub fn check(
        config: &Config,
        batch: usize,
        q_elems: usize,
        o_elems: usize,
        lse_elems: Option<usize>,
    ) -> Result<DecodeShape> {
        let (heads, query_dim, value_dim) = (
            config.served_heads(),
            config.query_dim(),
            config.value_dim(),
        );
        if batch == 0 {
            return Err(Error::invalid_argument("seqs", "the batch is empty"));
        }
        if batch > config.max_batch() {
            return Err(Error::invalid_argument(
                "seqs",
                format!(
                    "batch {batch} exceeds config.max_batch {}",
                    config.max_batch()
                ),
            ));
        }
        let per_query_token = batch * heads * query_dim;
        if q_elems == 0 || q_elems % per_query_token != 0 {
            return Err(Error::invalid_argument(
                "q",
                format!(
                    "length {q_elems} is not [batch {batch}, s_q >= 1, H {heads}, Dq {query_dim}]"
                ),
            ));
        }
        let q_len = q_elems / per_query_token;
        if q_len > config.max_q_len() {
            return Err(Error::invalid_argument(
                "q",
                format!(
                    "s_q {q_len} exceeds config.max_q_len {}",
                    config.max_q_len()
                ),
            ));
        }
        let expected_o = batch * q_len * heads * value_dim;
        if o_elems != expected_o {
            return Err(Error::invalid_argument(
                "o",
                format!(
                    "length {o_elems} is not [batch {batch}, s_q {q_len}, H {heads}, Dv {value_dim}] = {expected_o}"
                ),
            ));
        }
        if let Some(lse_elems) = lse_elems {
            let expected = batch * q_len * heads;
            if lse_elems != expected {
                return Err(Error::invalid_argument(
                    "lse",
                    format!("length {lse_elems} is not [batch {batch}, s_q {q_len}, H {heads}] = {expected}"),
                ));
            }
        }
        Ok(DecodeShape {
            batch,
            q_len,
            heads,
            query_dim,
            value_dim,
        })
    }

    pub fn q_shape(&self) -> [usize; 4] {
        [self.batch, self.q_len, self.heads, self.query_dim]
    }

    pub fn o_shape(&self) -> [usize; 4] {
        [self.batch, self.q_len, self.heads, self.value_dim]
    }

    pub fn lse_shape(&self) -> [usize; 3] {
        [self.batch, self.q_len, self.heads]
    }
}

/// Shape of a call whose query rows are packed per sequence (`q_lens`).
pub(crate) struct PackedShape {
    /// N, the sum of the query counts.
    pub rows: usize,
    pub heads: usize,
    pub query_dim: usize,
    pub value_dim: usize,
    /// The query counts as the C call takes them.
    pub q_lens: Vec<i32>,
}

impl PackedShape {
    /// N from `q_lens` (one entry per sequence), and `q`/`o`/`lse` checked
    /// against it. The entries themselves are the library's to judge.
    pub fn check(
        config: &Config,
        batch: usize,
        q_lens: &[usize],
        q_elems: usize,
        o_elems: usize,
        lse_elems: Option<usize>,
    ) -> Result<PackedShape> {
        if q_lens.len() != batch {
            return Err(Error::invalid_argument(
                "q_lens",
                format!("{} entries for {batch} sequences", q_lens.len()),
            ));
        }
        let lens = q_lens
            .iter()
            .enumerate()
            .map(|(i, &n)| to_i32(&format!("q_lens[{i}]"), n))
            .collect::<Result<Vec<i32>>>()?;
        let (heads, query_dim, value_dim) = (
            config.served_heads(),
            config.query_dim(),
            config.value_dim(),
        );
        // Entries fit i32, so neither the sum nor the products below overflow
        // a 64-bit usize; checked anyway, for 32-bit targets.
        let too_many =
            || Error::invalid_argument("q_lens", "the query rows exceed the address space");
        let rows = q_lens
            .iter()
            .try_fold(0usize, |sum, &n| sum.checked_add(n))
            .ok_or_else(too_many)?;
        let elems = |width: usize| {
            rows.checked_mul(heads)
                .and_then(|x| x.checked_mul(width))
                .ok_or_else(too_many)
        };
        let expected_q = elems(query_dim)?;
        if q_elems != expected_q {
            return Err(Error::invalid_argument(
                "q",
                format!("length {q_elems} is not [N {rows} = sum(q_lens), H {heads}, Dq {query_dim}] = {expected_q}"),
            ));
        }
        let expected_o = elems(value_dim)?;
        if o_elems != expected_o {
            return Err(Error::invalid_argument(
                "o",
                format!("length {o_elems} is not [N {rows} = sum(q_lens), H {heads}, Dv {value_dim}] = {expected_o}"),
            ));
        }
        if let Some(lse_elems) = lse_elems {
            let expected = elems(1)?;
            if lse_elems != expected {
                return Err(Error::invalid_argument(
                    "lse",
                    format!("length {lse_elems} is not [N {rows} = sum(q_lens), H {heads}] = {expected}"),
                ));
            }
        }
        Ok(PackedShape {
            rows,
            heads,
            query_dim,
            value_dim,
            q_lens: lens,
        })
    }

    pub fn q_shape(&self) -> [usize; 3] {
        [self.rows, self.heads, self.query_dim]
    }

    pub fn o_shape(&self) -> [usize; 3] {
        [self.rows, self.heads, self.value_dim]
    }

    pub fn lse_shape(&self) -> [usize; 2] {
        [self.rows, self.heads]
    }
}
