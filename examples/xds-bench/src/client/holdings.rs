//! What a reconnecting client holds.

use std::hash::Hasher as _;

/// With `--reconnect`: what a client holds of each type, by cluster index, to resume a stream and
/// to recognise a resource sent again. The identity is the resource's version (delta) or a hash
/// of its body (SotW, whose resources carry no version of their own).
#[derive(Debug, Default)]
pub(super) struct Holdings {
    pub(super) cds: Vec<Option<Box<[u8]>>>,
    pub(super) eds: Vec<Option<Box<[u8]>>>,
}

/// Records that index `i` of `held` is now `identity` (`None`: not held); returns whether it was
/// already held at that identity.
pub(super) fn hold(held: &mut Vec<Option<Box<[u8]>>>, i: usize, identity: Option<&[u8]>) -> bool {
    if i >= held.len() {
        held.resize(i + 1, None);
    }
    let same = identity.is_some() && held[i].as_deref() == identity;
    if !same {
        held[i] = identity.map(Box::from);
    }
    same
}

/// The identity of a SotW resource: a hash of its body.
pub(super) fn body_hash(body: &[u8]) -> [u8; 8] {
    let mut h = std::hash::DefaultHasher::new();
    h.write(body);
    h.finish().to_le_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_held_at_the_same_identity_is_recognised() {
        let mut held = Vec::new();
        assert!(!hold(&mut held, 3, Some(b"v1")));
        assert!(hold(&mut held, 3, Some(b"v1")));
        assert!(!hold(&mut held, 3, Some(b"v2")));
        assert!(!hold(&mut held, 3, None));
        assert!(!hold(&mut held, 3, Some(b"v2")), "removed, then received again: not held");
        assert_eq!(held.len(), 4);
        assert_eq!(body_hash(b"x"), body_hash(b"x"));
        assert_ne!(body_hash(b"x"), body_hash(b"y"));
    }
}
