//! Whole-set encodings: the entries of a shared [`ResourceSet`] as every response that carries
//! the set writes them, made once for all of those responses, and the few a server used last.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use bytes::Bytes;
use xds_core::{DeltaResource, ResourceSet};
use xds_proto::EncodedResource;

use super::encode::{
    delta_resource_len, len_delimited, put_delta_resource, put_sotw_any, sotw_any_len,
};

/// The entries of a whole [`ResourceSet`] as they go on the wire: the same bytes for every
/// client that gets the set, written without a copy (`codec::body`).
#[derive(Clone, Debug)]
pub struct EncodedSet {
    /// The entries, each with its field key and length.
    pub bytes: Bytes,
    /// The resource bodies they carry, in bytes (for metrics).
    pub body_bytes: usize,
}

/// A set's encodings, made when a response carries the set whole and kept only while responses
/// use them: in a storm every joining client of a view gets the same set, so it is encoded once
/// for all of them, not once per client (measured: the copy and the framing were a third of the
/// storm's CPU). Held weakly, so that a set kept for a long time (a node group's view between
/// its changes) does not keep a second copy of its resources once no response is being written
/// from it and it is not among the few its server used last ([`RecentEncodings`]); the next
/// joiner encodes it again.
#[derive(Default)]
pub(crate) struct SetEncoding {
    pub(super) sotw: Mutex<Weak<Encoded>>,
    pub(super) delta: Mutex<Weak<Encoded>>,
}

/// The encoded entries of one set: what every [`EncodedSet`] made from it shares.
pub(super) struct Encoded {
    entries: Vec<u8>,
    /// The resource bodies among them, in bytes.
    body_bytes: usize,
}

/// A handle that keeps an [`Encoded`] alive for as long as bytes made from it are.
struct Owner(Arc<Encoded>);

impl AsRef<[u8]> for Owner {
    fn as_ref(&self) -> &[u8] {
        &self.0.entries
    }
}

/// Which response's entries.
#[derive(Clone, Copy)]
pub(super) enum SetVariant {
    Sotw,
    Delta,
}

/// `set`'s entries for `variant`, shared with every response being written from the same set;
/// `None` if the set keeps a memo of another type.
///
/// The encoding is made with no lock held: streams that find none at once each make their own
/// (the same bytes), rather than park their runtime threads while one does.
pub(super) fn encoded_set(
    set: &ResourceSet<EncodedResource>,
    variant: SetVariant,
    recent: Option<&RecentEncodings>,
) -> Option<EncodedSet> {
    let memo = set.memo::<SetEncoding>()?;
    let cell = match variant {
        SetVariant::Sotw => &memo.sotw,
        SetVariant::Delta => &memo.delta,
    };
    let lock = || cell.lock().unwrap_or_else(PoisonError::into_inner);
    let kept = lock().upgrade();
    let encoded = match kept {
        Some(encoded) => encoded,
        None => {
            let encoded = Arc::new(encode_set(set, variant));
            let mut kept = lock();
            match kept.upgrade() {
                Some(theirs) => theirs,
                None => {
                    *kept = Arc::downgrade(&encoded);
                    encoded
                }
            }
        }
    };
    if let Some(recent) = recent {
        recent.keep(&encoded);
    }
    let body_bytes = encoded.body_bytes;
    Some(EncodedSet { bytes: Bytes::from_owner(Owner(encoded)), body_bytes })
}

/// How many of the set encodings a server used last are kept alive beyond their responses.
pub(super) const RECENT: usize = 8;

/// How many bytes of encodings [`RECENT`] may keep at most (the newest is kept whatever its size).
const RECENT_BYTES: usize = 64 << 20;

/// The set encodings one server used last, newest first, kept alive so that joiners of one view
/// in a storm, who come one after another through the join gate, reuse one encoding instead of
/// each making it again in the moment between two of them when no response holds it (measured:
/// that gap made the 1,000-client storm cost a third more CPU). Bounded by count and bytes, so
/// that views of many node groups never keep more than this between them beyond what is being
/// written. Owned by the server: servers in one process (tests, a process serving two meshes)
/// neither share nor evict each other's.
#[derive(Default)]
pub(crate) struct RecentEncodings(Mutex<VecDeque<Arc<Encoded>>>);

impl RecentEncodings {
    /// Marks `encoded` as used now, and lets go of what falls out.
    fn keep(&self, encoded: &Arc<Encoded>) {
        let mut recent = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if recent.front().is_some_and(|e| Arc::ptr_eq(e, encoded)) {
            return;
        }
        recent.retain(|e| !Arc::ptr_eq(e, encoded));
        recent.push_front(encoded.clone());
        let mut bytes = 0;
        let mut keep = 0;
        for e in recent.iter() {
            bytes += e.entries.len();
            if keep > 0 && (keep == RECENT || bytes > RECENT_BYTES) {
                break;
            }
            keep += 1;
        }
        // Dropped after the lock: freeing megabytes need not hold up other streams.
        let dropped: Vec<_> = recent.drain(keep..).collect();
        drop(recent);
        drop(dropped);
    }
}

/// Every entry of `set`, as `variant`'s responses write them, in one buffer of the exact size.
fn encode_set(set: &ResourceSet<EncodedResource>, variant: SetVariant) -> Encoded {
    let none = BTreeMap::new();
    let entry =
        |r: &EncodedResource| DeltaResource::Present { resource: r.clone(), aliases: vec![] };
    let len = |r: &EncodedResource| match variant {
        SetVariant::Sotw => len_delimited(2, sotw_any_len(r, false)),
        SetVariant::Delta => len_delimited(2, delta_resource_len(&entry(r), false, &none)),
    };
    let mut buf = Vec::with_capacity(set.iter().map(len).sum());
    for r in set.iter() {
        match variant {
            SetVariant::Sotw => put_sotw_any(r, false, &mut buf),
            SetVariant::Delta => put_delta_resource(&entry(r), false, &none, &mut buf),
        }
    }
    Encoded { entries: buf, body_bytes: set.iter().map(|r| r.value().len()).sum() }
}
