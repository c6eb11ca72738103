// SPDX-License-Identifier: Apache-2.0
//! Errors: the kind mirrors the C status codes; the message is the one the
//! library stored for the failed call (or one written here when the Rust side
//! rejects arguments before calling the library).

use std::ffi::CStr;
use std::fmt;

use gqla_sys as ffi;

/// What went wrong, one variant per `gqla_status` error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// NULL pointer, bad shape/dtype/stride, out-of-range value.
    InvalidArgument,
    /// Host or device allocation failed.
    OutOfMemory,
    /// The page pool (token capacity) or a sized limit is exhausted.
    Capacity,
    /// A valid request this build or device cannot serve (e.g. CUDA absent).
    Unsupported,
    /// Unknown sequence id.
    NotFound,
    /// Call not allowed now (e.g. the weights of the layer are not set).
    InvalidState,
    /// The backend (oneDNN, CUDA driver, cuBLAS) reported a failure.
    Backend,
    /// A bug in gqla.
    Internal,
    /// A status code newer than these bindings.
    Unknown(u32),
}

impl ErrorKind {
    /// The kind of a non-OK status; `None` for `GQLA_OK`.
    pub fn from_status(status: ffi::gqla_status) -> Option<ErrorKind> {
        use ffi::gqla_status as S;
        Some(match status {
            S::GQLA_OK => return None,
            S::GQLA_ERR_INVALID_ARGUMENT => ErrorKind::InvalidArgument,
            S::GQLA_ERR_OUT_OF_MEMORY => ErrorKind::OutOfMemory,
            S::GQLA_ERR_CAPACITY => ErrorKind::Capacity,
            S::GQLA_ERR_UNSUPPORTED => ErrorKind::Unsupported,
            S::GQLA_ERR_NOT_FOUND => ErrorKind::NotFound,
            S::GQLA_ERR_INVALID_STATE => ErrorKind::InvalidState,
            S::GQLA_ERR_BACKEND => ErrorKind::Backend,
            S::GQLA_ERR_INTERNAL => ErrorKind::Internal,
            other => ErrorKind::Unknown(other.0),
        })
    }

    /// The C status code of this kind.
    pub fn status(self) -> ffi::gqla_status {
        use ffi::gqla_status as S;
        match self {
            ErrorKind::InvalidArgument => S::GQLA_ERR_INVALID_ARGUMENT,
            ErrorKind::OutOfMemory => S::GQLA_ERR_OUT_OF_MEMORY,
            ErrorKind::Capacity => S::GQLA_ERR_CAPACITY,
            ErrorKind::Unsupported => S::GQLA_ERR_UNSUPPORTED,
            ErrorKind::NotFound => S::GQLA_ERR_NOT_FOUND,
            ErrorKind::InvalidState => S::GQLA_ERR_INVALID_STATE,
            ErrorKind::Backend => S::GQLA_ERR_BACKEND,
            ErrorKind::Internal => S::GQLA_ERR_INTERNAL,
            ErrorKind::Unknown(code) => ffi::gqla_status(code),
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::OutOfMemory => "out of memory",
            ErrorKind::Capacity => "capacity exhausted",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::NotFound => "not found",
            ErrorKind::InvalidState => "invalid state",
            ErrorKind::Backend => "backend failure",
            ErrorKind::Internal => "internal error",
            ErrorKind::Unknown(code) => return write!(f, "unknown status {code}"),
        };
        f.write_str(name)
    }
}

/// An error of a gqla call: its [`ErrorKind`] and a message naming the
/// offending argument and what was expected.
///
/// ```
/// let err = gqla::Config::gqla().heads(6, 4).build().unwrap_err();
/// assert_eq!(err.kind(), gqla::ErrorKind::InvalidArgument);
/// assert!(!err.message().is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    /// An error with the given kind and message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The library's message (`gqla_last_error_message`) or the Rust-side one.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// A Rust-side argument error, worded like the library's: "`arg`: what".
    pub(crate) fn invalid_argument(argument: &str, what: impl fmt::Display) -> Error {
        Error::new(ErrorKind::InvalidArgument, format!("{argument}: {what}"))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "gqla: {}", self.kind)
        } else {
            write!(f, "gqla: {}: {}", self.kind, self.message)
        }
    }
}

impl std::error::Error for Error {}

/// `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Turns a status into a `Result`, reading the thread-local message right
/// away: it belongs to this thread's last call and the next call may replace it.
pub(crate) fn check(status: ffi::gqla_status) -> Result<()> {
    match ErrorKind::from_status(status) {
        None => Ok(()),
        Some(kind) => Err(Error::new(kind, last_error_message())),
    }
}

fn last_error_message() -> String {
    // SAFETY: the library returns a NUL-terminated string (never NULL per the
    // header; checked anyway) that stays valid until the next call on this thread.
    unsafe {
        let ptr = ffi::gqla_last_error_message();
        if ptr.is_null() {
            String::new()
        } else {
            CStr::from_ptr(ptr).to_string_lossy().into_owned()
        }
    }
}
