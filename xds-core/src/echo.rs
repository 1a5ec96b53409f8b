//! Repeating a peer's string in an error message, bounded.
//!
//! Errors that quote what a client sent (a type URL, a resource type) end up in `grpc-message`
//! headers, HTTP bodies, logs and the status a server keeps per stream. A 10 KB type URL quoted
//! whole makes each of those 10 KB (and, percent-encoded in `grpc-message`, up to three times
//! that, past the 8 to 16 KiB header list many clients accept, so the client sees a protocol
//! error instead of the reason). Convention 18: what a peer controls is bounded before it is
//! echoed.

use std::fmt;

/// The most bytes of a peer's string an error message repeats.
pub const MAX_ECHO_BYTES: usize = 256;

/// A peer's string as an error message shows it: whole up to [`MAX_ECHO_BYTES`], else its
/// first bytes (cut on a character boundary) followed by `...` and its full length.
#[derive(Clone, Copy, Debug)]
pub struct Echo<'a>(pub &'a str);

/// Wraps `s` for display in an error message; see [`Echo`].
pub fn echo(s: &str) -> Echo<'_> {
    Echo(s)
}

impl fmt::Display for Echo<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        if s.len() <= MAX_ECHO_BYTES {
            return f.write_str(s);
        }
        let mut end = MAX_ECHO_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        write!(f, "{}... ({} bytes)", &s[..end], s.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_strings_are_shown_whole_and_long_ones_cut() {
        assert_eq!(echo("type.googleapis.com/x.Y").to_string(), "type.googleapis.com/x.Y");
        let long = "é".repeat(10_000);
        let shown = echo(&long).to_string();
        assert!(shown.len() < MAX_ECHO_BYTES + 32, "{}", shown.len());
        assert!(shown.ends_with("... (20000 bytes)"), "{shown}");
    }
}
