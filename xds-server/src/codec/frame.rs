//! The gRPC length-prefixed message: a one-byte compression flag and a four-byte big-endian
//! length before each message, the one header both directions use.

/// The header's length.
pub(crate) const HEADER: usize = 5;

/// The header of an uncompressed message of `len` bytes.
pub(crate) fn header(len: u32) -> [u8; HEADER] {
    let [a, b, c, d] = len.to_be_bytes();
    [0, a, b, c, d]
}

/// A header's compression flag and message length.
pub(crate) fn parse(header: [u8; HEADER]) -> (bool, usize) {
    let [flag, a, b, c, d] = header;
    (flag != 0, u32::from_be_bytes([a, b, c, d]) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back_as_written() {
        assert_eq!(header(0x0102_0304), [0, 1, 2, 3, 4]);
        assert_eq!(parse(header(70_000)), (false, 70_000));
        assert_eq!(parse([1, 0, 0, 0, 9]), (true, 9));
    }
}
