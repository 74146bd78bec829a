//! How many sessions one process keeps, and for how long without a call.

use std::time::Duration;

/// How many sessions may live, and for how long without a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Sessions alive at once. Default: 16.
    pub max: usize,
    /// A session with no call for this long is dropped. Default: 30 minutes.
    pub idle: Duration,
}

impl SessionLimits {
    pub const DEFAULT_MAX: usize = 16;
    pub const DEFAULT_IDLE: Duration = Duration::from_secs(30 * 60);
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            max: Self::DEFAULT_MAX,
            idle: Self::DEFAULT_IDLE,
        }
    }
}
