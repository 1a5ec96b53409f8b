//! The type version of a set of resources, from their names and versions alone.

use std::fmt;

/// The version of a resource type's whole content (SotW `version_info`), kept up to date one
/// resource at a time: an order-independent combination of every (name, resource version) pair.
///
/// The same resources give the same version in every process, after restarts and on every
/// replica (rule S16), because resource versions are content hashes and the combination uses a
/// specified hash (XXH3-64). A counter would not: two replicas (or one after a restart) would
/// give different versions to the same content, and a client moving between them would be
/// resent everything, or worse, skip a change whose counter value it had seen elsewhere.
///
/// Adding and removing are O(1), so a cache can keep the version current as resources change.
///
/// ```
/// use xds_cache::TypeVersion;
///
/// let mut a = TypeVersion::default();
/// a.insert("web", "v1");
/// a.insert("api", "v7");
/// let mut b = TypeVersion::default();
/// b.insert("api", "v7");
/// b.insert("web", "v1");
/// assert_eq!(a, b); // order does not matter
///
/// b.remove("web", "v1");
/// b.insert("web", "v2");
/// assert_ne!(a, b);
/// assert_eq!(a.to_string().len(), 16); // 16 hex digits
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TypeVersion(u64);

impl TypeVersion {
    /// The version of exactly these `(name, version)` pairs.
    pub fn of<'a>(resources: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut version = TypeVersion::default();
        for (name, resource_version) in resources {
            version.insert(name, resource_version);
        }
        version
    }

    /// Accounts for a resource that is now part of the type.
    pub fn insert(&mut self, name: &str, version: &str) {
        self.0 ^= entry_hash(name, version);
    }

    /// Accounts for a resource that is no longer part of the type (`version`: the one that was
    /// inserted). XOR is its own inverse, so removing undoes inserting exactly.
    pub fn remove(&mut self, name: &str, version: &str) {
        self.0 ^= entry_hash(name, version);
    }

    /// The version as text, kept in place (16 bytes: see [`xds_core::Text`]), without the
    /// formatting machinery of `to_string`, which costs more than the digits: a table is asked
    /// for its version at each response.
    pub fn text(self) -> xds_core::Text {
        // The check costs less than a char at a time.
        xds_core::Text::from(std::str::from_utf8(&self.hex()).expect("hex digits are ASCII"))
    }

    /// The 16 lower-case hex digits, written without the formatting machinery: a delta response
    /// names its type's version, so this is done once per response.
    fn hex(self) -> [u8; 16] {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 16];
        for (i, digit) in out.iter_mut().enumerate() {
            *digit = DIGITS[((self.0 >> (60 - 4 * i)) & 0xf) as usize];
        }
        out
    }
}

impl fmt::Display for TypeVersion {
    /// 16 lower-case hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = self.hex();
        // Hex digits are ASCII.
        f.pad(std::str::from_utf8(&hex).map_err(|_| fmt::Error)?)
    }
}

/// The hash of one (name, version) pair. The separator keeps `("ab", "c")` and `("a", "bc")`
/// apart.
fn entry_hash(name: &str, version: &str) -> u64 {
    let mut buf = Vec::with_capacity(name.len() + version.len() + 1);
    buf.extend_from_slice(name.as_bytes());
    buf.push(0);
    buf.extend_from_slice(version.as_bytes());
    xxhash_rust::xxh3::xxh3_64(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_reads_as_sixteen_hex_digits_whichever_way_it_is_written() {
        for value in [0, 1, 0xf, 0x1234_5678_9abc_def0, u64::MAX, 1 << 63] {
            let version = TypeVersion(value);
            let expected = format!("{value:016x}");
            assert_eq!(version.to_string(), expected);
            assert_eq!(version.text(), expected);
            assert!(version.text().is_inline(), "no allocation");
            assert_eq!(format!("{version:>18}"), format!("  {expected}"));
        }
    }
}
