//! A digest of a SotW request's name list, so that a list the client repeats is recognised
//! without being decoded.
//!
//! A SotW client repeats its whole subscription with every ACK: 10,000 names for the endpoints of
//! a large mesh, from each of a thousand proxies after every update. Decoding them into strings
//! only to find the set unchanged was most of the server's CPU per update. The server digests the
//! names' encoded bytes as it reads the request ([`NamesDigest::of_encoded_keyed`]), asks the
//! stream whether the sub-stream's last list had that digest
//! ([`Stream::repeats_names`](crate::Stream::repeats_names)), and if so passes
//! [`SotwNames::Repeated`](crate::SotwNames::Repeated) instead of the list; a changed list goes
//! as [`SotwNames::Digested`](crate::SotwNames::Digested), decoded, with the digest for next time.

const K: [u64; 4] =
    [0xa076_1d64_78bd_642f, 0xe703_7ed1_a0b4_28db, 0x8ebc_6af0_9c88_c6e3, 0x5899_65cc_7537_4cc3];

/// A 128-bit hash of bytes: wyhash's mixing step (a 64×64→128-bit multiply, its halves folded
/// together) over each 16-byte block, then one full 128-bit product of the state and the length,
/// so a short name takes two multiplies. It hashes every name of every SotW request that lists
/// names ([`NamesDigest::of`], and the subscription's own set digest), and names the interim
/// states of a SotW answer (`sotw::interim_version`: what every replica must name alike, so this
/// function's output must not change). SipHash took a quarter of the server's CPU in SotW runs.
/// The output has 64 bits of entropy spread over 128.
pub(crate) fn hash(bytes: &[u8]) -> u128 {
    let len = bytes.len() as u64;
    finish(blocks(K[0] ^ len, bytes), len)
}

/// [`hash`] from a starting state of the caller's, and over four lanes from 64 bytes on: each
/// block's multiply waits for its own lane's last one only, so a long input (a SotW list of
/// 10,000 names, ~140 KB) hashes at the multiplier's throughput rather than its latency, about
/// three times as fast. With a secret `key`, a peer cannot aim a collision at it: [`hash`] has
/// no secret, and its multiply by a word the input controls makes collisions easy to craft.
fn hash_keyed(key: u64, bytes: &[u8]) -> u128 {
    let len = bytes.len() as u64;
    let mut h = K[0] ^ key ^ len;
    // The second factor of each block's multiply carries a word of the key: with a constant
    // there, a block whose second word equals it made the product zero whatever came before,
    // the key included, and a peer could craft lists that collide under any key.
    let k2 = K[2] ^ fold(key ^ K[3], key.rotate_left(29) ^ K[1]);
    let mut rest = bytes;
    if bytes.len() >= 64 {
        let mut lanes = [h, h ^ K[1], h ^ K[2], h ^ K[3]];
        let mut chunks = bytes.chunks_exact(64);
        for chunk in &mut chunks {
            for (lane, block) in lanes.iter_mut().zip(chunk.chunks_exact(16)) {
                let (a, b) = block.split_at(8);
                *lane = fold(word(a) ^ K[1] ^ *lane, word(b) ^ k2);
            }
        }
        h = fold(lanes[0] ^ K[1], lanes[1] ^ k2) ^ fold(lanes[2] ^ K[3], lanes[3] ^ K[0]);
        rest = chunks.remainder();
    }
    finish(blocks_with(h, rest, k2), len)
}

/// Folds each 16-byte block of `bytes` (the last one padded with zeros) into the state `h`.
fn blocks(h: u64, bytes: &[u8]) -> u64 {
    blocks_with(h, bytes, K[2])
}

/// [`blocks`] with `k2` in each block's second factor (a word of the key, for [`hash_keyed`]).
fn blocks_with(mut h: u64, bytes: &[u8], k2: u64) -> u64 {
    let mut blocks = bytes.chunks_exact(16);
    for block in &mut blocks {
        let (a, b) = block.split_at(8);
        h = fold(word(a) ^ K[1] ^ h, word(b) ^ k2);
    }
    let rest = blocks.remainder();
    if !rest.is_empty() {
        let (a, b) = rest.split_at(rest.len().min(8));
        h = fold(word(a) ^ K[1] ^ h, word(b) ^ k2);
    }
    h
}

fn finish(h: u64, len: u64) -> u128 {
    u128::from(h ^ K[3]) * u128::from(h.rotate_left(32) ^ K[2] ^ len)
}

fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    // Truncation is the point: the low and high halves are folded together.
    (p as u64) ^ ((p >> 64) as u64)
}

/// Up to 8 bytes as a little-endian word, zero-padded. Read with fixed-size loads (two that
/// overlap for 4 to 7 bytes, three single bytes below 4) rather than copied into a zeroed word:
/// a copy of a length known only at run time is a call to `memcpy`, two per short name, which
/// made hashing a name (a SotW list's 10,000, as a joining proxy's request is read) three times
/// as slow. The output is the copy's, bit for bit (`word_reads_bytes_as_the_zero_padded_copy`).
#[inline]
fn word(bytes: &[u8]) -> u64 {
    let n = bytes.len();
    if let Ok(all) = <[u8; 8]>::try_from(bytes) {
        return u64::from_le_bytes(all);
    }
    let u32_at = |at: usize| {
        let four: [u8; 4] = bytes[at..at + 4].try_into().unwrap_or_default();
        u64::from(u32::from_le_bytes(four))
    };
    match n {
        // The last four bytes, shifted down past those the first four already gave.
        4..=7 => u32_at(0) | ((u32_at(n - 4) >> (8 * (8 - n))) << 32),
        // Bytes 0, n/2 and n-1: each of the one to three bytes at least once, in its place.
        1..=3 => {
            let byte = |at: usize| u64::from(bytes[at]) << (8 * at);
            byte(0) | byte(n / 2) | byte(n - 1)
        }
        _ => 0,
    }
}

/// What identifies a list of names for [`Stream::repeats_names`](crate::Stream::repeats_names):
/// how many there are and a 128-bit hash of them.
///
/// Ways to make one, not comparable with each other (a sub-stream compares a request's digest
/// with the last one it was given, so a caller uses one way throughout):
/// - [`of_encoded_keyed`](Self::of_encoded_keyed), what the server uses: one hash over the
///   names' encoded bytes under a key of the process's, as fast as reading them.
///   Order-sensitive: the same names in another order are decoded and found to be the same set,
///   one request later than they could have been. [`of_encoded`](Self::of_encoded) is the same
///   without a key.
/// - [`of`](Self::of): a hash of each name, summed, so the same names in any order (a SotW list
///   is a set, rule S9) make the same digest; for callers that hold the names, not their bytes.
///
/// Between honest lists the chance of a collision is about 2^-64. Without a key the hash does
/// not resist an attacker: a crafted collision makes a client's own changed list look like its
/// previous one, which leaves that client's subscription as it was. Under a secret key a client
/// cannot aim one, which matters to a server that also takes a list it recognises by its digest
/// as that list's length and place in the message (a stream's reader remembering its lists).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NamesDigest {
    count: usize,
    hash: u128,
}

impl NamesDigest {
    /// The digest of `names`, in any order.
    pub fn of(names: impl IntoIterator<Item = impl AsRef<[u8]>>) -> Self {
        let mut digest = NamesDigest::default();
        for name in names {
            digest.push(name.as_ref());
        }
        digest
    }

    /// The digest of `count` names from their encoding: the bytes of their fields in order (for
    /// a protobuf `repeated string`, each name's tag, length and bytes), in one or more runs
    /// (fields of the list may be interleaved with other fields of the message). The same as
    /// [`of_encoded_keyed`](Self::of_encoded_keyed) with the key 0, which is no secret.
    pub fn of_encoded<'a>(count: usize, runs: impl IntoIterator<Item = &'a [u8]>) -> Self {
        Self::of_encoded_keyed(0, count, runs)
    }

    /// [`of_encoded`](Self::of_encoded) under a secret `key` (what the server uses, with a key
    /// drawn at random for the process): a client cannot craft a list whose digest is another's.
    /// A long list hashes in four lanes, about three times as fast as name by name. Digests made
    /// with different keys are not comparable.
    pub fn of_encoded_keyed<'a>(
        key: u64,
        count: usize,
        runs: impl IntoIterator<Item = &'a [u8]>,
    ) -> Self {
        let hash =
            runs.into_iter().fold(0u128, |acc, run| acc.rotate_left(17) ^ hash_keyed(key, run));
        NamesDigest { count, hash }
    }

    /// Adds one name to a digest made as [`of`](Self::of) makes it: `of(names)` is the same as
    /// [`push`](Self::push)ing each name onto `NamesDigest::default()`, for a caller that reads
    /// the names one at a time from a request's bytes.
    pub fn push(&mut self, name: &[u8]) {
        self.count += 1;
        self.hash = self.hash.wrapping_add(hash(name));
    }

    /// How many names the list has (duplicates counted).
    pub fn count(&self) -> usize {
        self.count
    }

    /// The hash itself, as a subscription keys its shared set by it.
    pub(crate) fn hash(&self) -> u128 {
        self.hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_of_names_ignores_order_but_not_names_or_duplicates() {
        let a = NamesDigest::of(["x", "y", "z"]);
        assert_eq!(a, NamesDigest::of(["z", "x", "y"]));
        assert_ne!(a, NamesDigest::of(["x", "y"]));
        assert_ne!(a, NamesDigest::of(["x", "y", "z", "z"]));
        assert_ne!(a, NamesDigest::of(["x", "y", "w"]));
        assert_eq!(a.count(), 3);
        assert_ne!(NamesDigest::default(), NamesDigest::of([""]), "an empty name is a name");
    }

    #[test]
    fn a_digest_of_encoded_names_follows_the_bytes_and_their_runs() {
        let one = NamesDigest::of_encoded(2, [&b"\x1a\x01a\x1a\x01b"[..]]);
        assert_eq!(one, NamesDigest::of_encoded(2, [&b"\x1a\x01a\x1a\x01b"[..]]));
        assert_ne!(one, NamesDigest::of_encoded(2, [&b"\x1a\x01b\x1a\x01a"[..]]), "order");
        assert_ne!(one, NamesDigest::of_encoded(3, [&b"\x1a\x01a\x1a\x01b"[..]]), "count");
        let (a, b) = (&b"\x1a\x01a"[..], &b"\x1a\x01b"[..]);
        assert_ne!(NamesDigest::of_encoded(2, [a, b]), NamesDigest::of_encoded(2, [b, a]));
        // Under a key: the same for the same bytes, another for another key.
        let long = b"\x1a\x0acluster-00".repeat(20);
        let keyed = NamesDigest::of_encoded_keyed(1, 20, [&long[..]]);
        assert_eq!(keyed, NamesDigest::of_encoded_keyed(1, 20, [&long[..]]));
        assert_ne!(keyed, NamesDigest::of_encoded_keyed(2, 20, [&long[..]]), "key");
        assert_ne!(keyed, NamesDigest::of_encoded(20, [&long[..]]), "no key");
    }

    #[test]
    fn word_reads_bytes_as_the_zero_padded_copy() {
        let reference = |bytes: &[u8]| {
            let mut w = [0u8; 8];
            w[..bytes.len()].copy_from_slice(bytes);
            u64::from_le_bytes(w)
        };
        let bytes: Vec<u8> = (1..=8u8).map(|b| b.wrapping_mul(37) | 0x80).collect();
        for n in 0..=8 {
            assert_eq!(word(&bytes[..n]), reference(&bytes[..n]), "{n} bytes");
            assert_eq!(word(&[0xff; 8][..n]), reference(&[0xff; 8][..n]), "{n} bytes of ones");
        }
        // The hash of a name is what it was with the copy: replicas name interim states alike.
        // Values from the copying `word` (this module before the change).
        let before: [(&str, u128); 5] = [
            ("cluster-00042", 0x51a7_bea7_5f24_e219_f3a7_5f55_741f_07a7),
            ("", 0xef37_2557_222e_0f57_86ec_c274_3f05_7874),
            ("a", 0xcdaf_3ba0_a6b4_23cf_a216_7825_419e_87d1),
            ("abcdefgh", 0x970c_a89e_a474_99e7_4592_d13c_a067_eaa1),
            ("abcdefghijklmnopqrstu", 0x5aa5_0692_5140_a164_6da6_b879_acca_7d64),
        ];
        for (name, hashed) in before {
            assert_eq!(hash(name.as_bytes()), hashed, "{name:?}");
        }
    }

    #[test]
    fn hashes_differ_for_near_identical_names() {
        let mut seen = std::collections::HashSet::new();
        // Names that differ in one byte, in length only (trailing zeros), or across the 8- and
        // 16-byte boundaries: every one hashes differently.
        for i in 0..100_000 {
            assert!(seen.insert(hash(format!("cluster-{i:05}").as_bytes())));
            assert!(
                seen.insert(hash(format!("outbound|80||svc-{i}.ns.svc.cluster.local").as_bytes()))
            );
        }
        let edges = [
            "",
            "\0",
            "\0\0",
            "a",
            "a\0",
            "abcdefgh",
            "abcdefgh\0",
            "abcdefghi",
            "bacdefgh",
            "abcdefghijklmnop",
            "abcdefghijklmnop\0",
            "abcdefghijklmnoq",
            "abcdefghijklmnopq",
            "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
            "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
        ];
        for n in edges {
            assert!(seen.insert(hash(n.as_bytes())), "{n:?}");
        }
        // Long inputs, hashed in lanes: one byte changed anywhere, or two 16-byte blocks
        // swapped (within a 64-byte chunk, across chunks, into the tail), changes the hash; so
        // does the key.
        let hash = |bytes: &[u8]| hash_keyed(7, bytes);
        let long: Vec<u8> = (0..216u8).collect();
        assert!(seen.insert(hash(&long)));
        assert!(seen.insert(hash_keyed(8, &long)));
        for i in 0..long.len() {
            let mut changed = long.clone();
            changed[i] ^= 1;
            assert!(seen.insert(hash(&changed)), "byte {i}");
        }
        for (a, b) in [(0, 1), (0, 4), (1, 5), (3, 8), (2, 12)] {
            let mut swapped = long.clone();
            let block = |k: usize| 16 * k..16 * (k + 1);
            let (x, y) = (swapped[block(a)].to_vec(), swapped[block(b)].to_vec());
            swapped[block(a)].copy_from_slice(&y);
            swapped[block(b)].copy_from_slice(&x);
            assert!(seen.insert(hash(&swapped)), "blocks {a} and {b}");
        }
        assert!(seen.insert(hash(&long[..64])) && seen.insert(hash(&long[..63])));
    }

    /// A block whose second word is the constant the unkeyed hash multiplies by does not wipe
    /// what came before it, the key included: lists that differ before it hash differently.
    #[test]
    fn a_keyed_hash_keeps_what_came_before_a_block_a_peer_chose() {
        let zeroing = K[2].to_le_bytes();
        // A 16-byte tail: the first words differ, the second is the constant.
        let (mut x, mut y) = (vec![1u8; 16], vec![2u8; 16]);
        x[8..].copy_from_slice(&zeroing);
        y[8..].copy_from_slice(&zeroing);
        assert_ne!(hash_keyed(7, &x), hash_keyed(7, &y));
        // In the lanes: block 4 (lane 0 again) ends with the constant; block 0 differs.
        let mut long = vec![3u8; 128];
        long[64 + 8..64 + 16].copy_from_slice(&zeroing);
        let mut other = long.clone();
        other[0] ^= 1;
        assert_ne!(hash_keyed(7, &long), hash_keyed(7, &other));
        assert_ne!(hash_keyed(7, &long), hash_keyed(8, &long), "the key still counts");
    }

    /// The plain hash names a SotW answer's interim states (`sotw::interim_version`): replicas
    /// of different builds must name them alike, so its output is pinned.
    #[test]
    fn the_plain_hash_does_not_change() {
        let long: Vec<u8> = (0..200u8).collect();
        assert_eq!(hash(&long), 0x46e1_7cf9_1bfa_5b66_cedf_1577_0603_7113);
        assert_eq!(hash(b"cluster-1"), 0x22da_7a94_b8ca_8d06_6df7_3e73_7bde_bb18);
    }
}
