//! Rate-limited logging: [`LogLimit`], at most one line per interval from one call site,
//! with a count of the lines held back. Used by the IPC guard and sockets, the adapter and
//! the netstats poller; a module of its own so that none of them imports another for it.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most one log line per `every` from one call site; counts what it held back.
#[derive(Debug)]
pub struct LogLimit {
    every: Duration,
    state: Mutex<(Option<Instant>, u64)>,
}

impl LogLimit {
    pub const fn new(every: Duration) -> Self {
        Self {
            every,
            state: Mutex::new((None, 0)),
        }
    }

    /// `Some(lines held back since the last one)` if a line may be written now.
    pub fn allow(&self) -> Option<u64> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if st.0.is_none_or(|t| now.duration_since(t) >= self.every) {
            let held = st.1;
            *st = (Some(now), 0);
            Some(held)
        } else {
            st.1 += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_limit_holds_back_and_counts() {
        let l = LogLimit::new(Duration::from_secs(3600));
        assert_eq!(l.allow(), Some(0));
        for _ in 0..1000 {
            assert_eq!(l.allow(), None);
        }
    }
}
