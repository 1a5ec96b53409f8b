//! A token bucket: how many requests a stream may send (and, in the server, how many reports a
//! load- or health-reporting stream may).

use std::time::Instant;

/// Allows `rate` requests per second on average and `burst` at once. Time is a parameter.
#[derive(Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket at `now` (a `burst` of 0 allows 1).
    pub fn new(rate: u32, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        TokenBucket { rate: f64::from(rate), burst, tokens: burst, last: now }
    }

    /// Takes one token; `false` when the bucket is empty.
    pub fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn bursts_then_refills_at_the_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10, 3, t0);
        assert!(b.take(t0) && b.take(t0) && b.take(t0));
        assert!(!b.take(t0));
        assert!(b.take(t0 + Duration::from_millis(100)));
        assert!(!b.take(t0 + Duration::from_millis(100)));
    }
}
