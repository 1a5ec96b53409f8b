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
    /// Its decimal digits, written without the formatting machinery of `to_string`, which cost
    /// more than the digits (one nonce per response).
    pub fn next_nonce(&mut self) -> crate::Text {
        self.next += 1;
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut rest = self.next;
        loop {
            at -= 1;
            digits[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        // Up to 20 digits: kept in place (see `Text`). The check costs less than a char at a
        // time.
        crate::Text::from(std::str::from_utf8(&digits[at..]).expect("decimal digits are ASCII"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn d01_nonces_count_up_from_one_in_decimal() {
        let mut nonces = Nonces::new();
        let first: Vec<crate::Text> = (0..11).map(|_| nonces.next_nonce()).collect();
        assert_eq!(first, ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"]);
        nonces.next = u64::MAX - 1;
        assert_eq!(nonces.next_nonce(), u64::MAX.to_string());
    }
}
