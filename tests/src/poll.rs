//! Waiting for a group of servers to reach a state, bounded in time.

use std::time::{Duration, Instant};

use crate::error::HarnessError;

/// Polls `check` every 50 ms until it answers `Ok(true)`, for at most
/// `timeout`. An `Err` counts as "not yet" (a node may be restarting);
/// the last one is quoted in the [`HarnessError::NotFormed`] that ends a
/// wait that timed out.
pub(crate) fn poll_until(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<bool, HarnessError>,
) -> Result<(), HarnessError> {
    let deadline = Instant::now() + timeout;
    let mut last_error = None;
    loop {
        match check() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last_error = Some(e),
        }
        if Instant::now() >= deadline {
            let what = match last_error {
                Some(e) => format!("{what} (last error: {e})"),
                None => what.to_owned(),
            };
            return Err(HarnessError::NotFormed {
                what,
                waited: timeout,
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
