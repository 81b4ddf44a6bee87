use std::ffi::CStr;
use std::time::Duration;

/// What went wrong in a libfabric call, with the call's name and libfabric's own words for the error.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    #[error("{api} failed: {message} (error {code})")]
    Call { api: &'static str, code: i32, message: String },
    #[error("{api} completed with an error on channel {channel}: {message} (error {code}, provider error {prov_errno})")]
    Completion { api: &'static str, channel: usize, code: i32, prov_errno: i32, message: String },
    #[error("no {provider} interface offers {missing} here{hint}")]
    Unavailable { provider: String, missing: String, hint: String },
    #[error("{what} on channel {channel} did not complete within {} s", .timeout.as_secs_f64())]
    Timeout { what: &'static str, channel: usize, timeout: Duration },
    #[error("{0}")]
    Invalid(String),
    /// The wait was given up on purpose: another rank failed, or this rank was told to stop.
    #[error("{0}")]
    Abandoned(String),
}

pub type Result<T, E = FabricError> = std::result::Result<T, E>;

impl FabricError {
    /// Builds the error for a libfabric call that returned the negative error code `ret`.
    pub(crate) fn call(api: &'static str, ret: i64) -> Self {
        let code = i32::try_from(-ret).unwrap_or(i32::MAX);
        Self::Call { api, code, message: strerror(code) }
    }

    /// True when the error is a completion or call error with the given positive errno.
    pub fn is_code(&self, errno: u32) -> bool {
        match self {
            Self::Call { code, .. } | Self::Completion { code, .. } => *code == errno as i32,
            _ => false,
        }
    }
}

/// `fi_strerror` text for a positive error number.
pub(crate) fn strerror(code: i32) -> String {
    // SAFETY: fi_strerror returns a pointer to a static, NUL-terminated string for any input.
    let text = unsafe { CStr::from_ptr(efatop_libfabric_sys::fi_strerror(code)) };
    text.to_string_lossy().into_owned()
}

/// Turns a libfabric return value into a `Result`: negative values are errors.
pub(crate) fn check(api: &'static str, ret: impl Into<i64>) -> Result<()> {
    let ret = ret.into();
    if ret < 0 { Err(FabricError::call(api, ret)) } else { Ok(()) }
}
