//! Response nonces.

/// Hands out the nonces of one stream's responses.
///
/// Rule D1: every response carries a fresh, unique nonce. One `Nonces` serves every sub-stream
/// of a stream, so a nonce names exactly one response on the stream whatever its type; the server
/// keeps one per stream and passes it to each `poll_response`.
#[derive(Debug, Default, Clone)]
pub struct Nonces {
    next: u64,
}

impl Nonces {
    /// A fresh source, starting at 1.
    pub fn new() -> Self {
        Self::default()
    }

    /// The next nonce: never empty (an empty nonce means "no response seen"), never repeated.
    pub fn next_nonce(&mut self) -> String {
        self.next += 1;
        self.next.to_string()
    }
}
