//! Whole-set encodings: the entries of a shared [`ResourceSet`] as every response that carries
//! the set writes them, made once for all of those responses, and the few a server used last.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use bytes::Bytes;
use xds_core::ResourceSet;
use xds_proto::EncodedResource;

use super::encode::{len_delimited, plain_delta_len, put_plain_delta, put_sotw_any, sotw_any_len};

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
    /// Where the buffer goes back to once the last response written from it is gone.
    buffers: Option<Arc<Buffers>>,
}

impl Drop for Encoded {
    fn drop(&mut self) {
        if let Some(buffers) = &self.buffers {
            buffers.put(std::mem::take(&mut self.entries));
        }
    }
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
            let encoded = Arc::new(encode_set(set, variant, recent.map(|r| &r.buffers)));
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

/// How many of the set encodings a server used last are kept alive beyond their responses: so
/// many of [`SMALL`] or more, and so many smaller ones.
pub(super) const RECENT: usize = 8;

/// How many bytes of encodings [`RECENT`] may keep at most (the newest is kept whatever its size).
const RECENT_BYTES: usize = 64 << 20;

/// Encodings below this size (a few resources: an update's change) are kept, [`RECENT`] of them,
/// apart from the larger ones, and do not count in [`RECENT_BYTES`].
const SMALL: usize = 64 << 10;

/// The set encodings one server used last, newest first, kept alive so that joiners of one view
/// in a storm, who come one after another through the join gate, reuse one encoding instead of
/// each making it again in the moment between two of them when no response holds it (measured:
/// that gap made the 1,000-client storm cost a third more CPU). Bounded by count and bytes, so
/// that views of many node groups never keep more than this between them beyond what is being
/// written. Owned by the server: servers in one process (tests, a process serving two meshes)
/// neither share nor evict each other's.
#[derive(Default)]
pub(crate) struct RecentEncodings {
    recent: Mutex<VecDeque<Arc<Encoded>>>,
    /// The address of the newest of `recent`, written under its lock: the encoding used last
    /// is most often the one used again (an update's change, the same set for every client of
    /// it), and is then known newest with no lock taken, a line every worker writes. Compared,
    /// never read through: while it is the newest, `recent` holds it, so no other encoding
    /// can have its address.
    newest: std::sync::atomic::AtomicPtr<Encoded>,
    /// Buffers of encodings no longer used, for the next ones.
    buffers: Arc<Buffers>,
}

impl RecentEncodings {
    /// Marks `encoded` as used now, and lets go of what falls out.
    fn keep(&self, encoded: &Arc<Encoded>) {
        let address = Arc::as_ptr(encoded).cast_mut();
        if self.newest.load(Ordering::Acquire) == address {
            return;
        }
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        if recent.front().is_some_and(|e| Arc::ptr_eq(e, encoded)) {
            return;
        }
        recent.retain(|e| !Arc::ptr_eq(e, encoded));
        recent.push_front(encoded.clone());
        self.newest.store(address, Ordering::Release);
        // Small and large encodings are kept in counts of their own: every update's change is
        // a small set of its own (a step's), and they would push out, a few updates into a
        // storm, the large encoding of the view's set that the storm's joiners share.
        let (mut small, mut large, mut bytes) = (0, 0, 0);
        let mut kept = VecDeque::with_capacity(recent.len());
        let mut dropped = Vec::new();
        for (i, e) in recent.drain(..).enumerate() {
            let size = e.entries.capacity();
            let keep = if size < SMALL {
                small += 1;
                small <= RECENT
            } else {
                large += 1;
                bytes += size;
                large <= RECENT && bytes <= RECENT_BYTES
            };
            // The newest is kept whatever its size.
            if keep || i == 0 { kept.push_back(e) } else { dropped.push(e) }
        }
        *recent = kept;
        // Dropped after the lock: freeing megabytes need not hold up other streams.
        drop(recent);
        drop(dropped);
    }
}

/// How many bytes of freed encodings' buffers a server keeps for the next ones ([`Buffers`]).
const SPARE_BYTES: usize = 16 << 20;

/// How many freed buffers a server keeps at most.
const SPARE: usize = 8;

/// The smallest buffer worth keeping: a set of a few resources (a listener, its routes) is
/// encoded into memory the allocator reuses anyway.
const SPARE_MIN: usize = 64 << 10;

/// The buffers of set encodings that no response uses any more, kept (up to [`SPARE`] of them
/// and [`SPARE_BYTES`] in all) for the next encodings. Where every node has its own view (a
/// snapshot per node), each joining client's sets are encoded for it alone, about 1.5 MB per
/// type at 10,000 resources: a fresh buffer of that size is memory the allocator maps (or
/// trims and takes back) every time, and the kernel zeroes each of its pages as the encoding
/// first writes it. Measured in a 1,000-node storm: that zeroing was a fifth of the server's
/// CPU (`docs/benchmarks.md`, "Per-node snapshots"). A buffer that was written before is
/// written again at the speed of a copy.
#[derive(Default)]
pub(crate) struct Buffers(Mutex<Vec<Vec<u8>>>);

impl Buffers {
    /// An empty buffer of at least `capacity`: the smallest spare one that is large enough and
    /// at most twice that (a small set never holds a large buffer), else a new one. Below
    /// [`SPARE_MIN`], always a new one: the allocator keeps such sizes on its own.
    fn take(&self, capacity: usize) -> Vec<u8> {
        if capacity < SPARE_MIN {
            return Vec::with_capacity(capacity);
        }
        let mut spare = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let fits = spare
            .iter()
            .enumerate()
            .filter(|(_, b)| (capacity..=capacity.saturating_mul(2)).contains(&b.capacity()))
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        let buf = fits.map(|i| spare.swap_remove(i));
        drop(spare);
        match buf {
            Some(mut buf) => {
                buf.clear();
                buf
            }
            None => Vec::with_capacity(capacity),
        }
    }

    /// Keeps `buf` for a later encoding, unless the spare buffers would exceed their bounds; then
    /// the smallest ones go first, as they save the least.
    fn put(&self, buf: Vec<u8>) {
        if buf.capacity() < SPARE_MIN || buf.capacity() > SPARE_BYTES {
            return;
        }
        let mut spare = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        spare.push(buf);
        spare.sort_unstable_by_key(|b| std::cmp::Reverse(b.capacity()));
        let mut bytes = 0;
        let keep = spare
            .iter()
            .take(SPARE)
            .take_while(|b| {
                bytes += b.capacity();
                bytes <= SPARE_BYTES
            })
            .count();
        // Freed after the lock.
        let dropped: Vec<_> = spare.drain(keep..).collect();
        drop(spare);
        drop(dropped);
    }

    #[cfg(test)]
    fn spare_capacities(&self) -> Vec<usize> {
        let spare = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        spare.iter().map(Vec::capacity).collect()
    }
}

/// Every entry of `set`, as `variant`'s responses write them, in one buffer of at least the exact
/// size (taken from `buffers` when given).
fn encode_set(
    set: &ResourceSet<EncodedResource>,
    variant: SetVariant,
    buffers: Option<&Arc<Buffers>>,
) -> Encoded {
    let len = |r: &EncodedResource| match variant {
        SetVariant::Sotw => len_delimited(2, sotw_any_len(r, false)),
        SetVariant::Delta => len_delimited(2, plain_delta_len(r)),
    };
    let capacity = set.iter().map(len).sum();
    let mut buf = match buffers {
        Some(buffers) => buffers.take(capacity),
        None => Vec::with_capacity(capacity),
    };
    // One pass over the resources after the sizing one: a set's 10,000 resources do not stay in
    // the processor's caches between two passes.
    let mut body_bytes = 0;
    for r in set.iter() {
        match variant {
            SetVariant::Sotw => put_sotw_any(r, false, &mut buf),
            SetVariant::Delta => put_plain_delta(r, &mut buf),
        }
        body_bytes += r.value().len();
    }
    Encoded { entries: buf, body_bytes, buffers: buffers.cloned() }
}

#[cfg(test)]
mod tests {
    use xds_proto::pb::envoy::config::cluster::v3::Cluster;

    use super::*;

    /// `count` clusters of about 400 bytes each.
    fn set(prefix: &str, count: usize) -> ResourceSet<EncodedResource> {
        let cluster = |i| Cluster {
            name: format!("{prefix}-{i:04}"),
            alt_stat_name: "x".repeat(300),
            ..Default::default()
        };
        ResourceSet::new((0..count).map(|i| EncodedResource::new(&cluster(i)).unwrap()).collect())
    }

    /// A freed encoding's buffer is written again by the next one of about its size, which reads
    /// the same as an encoding into a new buffer; a much smaller or a larger set gets its own.
    #[test]
    fn a_freed_encodings_buffer_is_reused_for_the_next_one_of_its_size() {
        let buffers = Arc::new(Buffers::default());
        for variant in [SetVariant::Delta, SetVariant::Sotw] {
            let first = encode_set(&set("first", 600), variant, Some(&buffers));
            let (address, capacity) = (first.entries.as_ptr(), first.entries.capacity());
            assert!(capacity >= SPARE_MIN);
            drop(first);
            assert_eq!(buffers.spare_capacities(), [capacity], "kept once no response uses it");

            let other = set("other", 400);
            let second = encode_set(&other, variant, Some(&buffers));
            assert_eq!(second.entries.as_ptr(), address, "the same buffer");
            assert!(buffers.spare_capacities().is_empty());
            let fresh = encode_set(&other, variant, None);
            assert_eq!(second.entries, fresh.entries, "the same bytes as in a new buffer");
            assert_eq!(second.body_bytes, fresh.body_bytes);
            drop(fresh);
            assert!(buffers.spare_capacities().is_empty(), "an encoding with no server keeps none");
            drop(second);
            assert_eq!(buffers.spare_capacities(), [capacity]);

            // Less than half of the spare buffer, or more than it: a buffer of its own, and the
            // spare one stays.
            for count in [250, 3_000] {
                let own = encode_set(&set("own", count), variant, Some(&buffers));
                assert_ne!(own.entries.as_ptr(), address);
                assert_eq!(buffers.spare_capacities(), [capacity]);
                drop(own);
                assert!(buffers.spare_capacities().contains(&capacity));
                buffers.0.lock().unwrap().retain(|b| b.as_ptr() == address);
            }
            buffers.0.lock().unwrap().clear();
        }
        // A set of a few resources neither takes a spare buffer nor gives its own back.
        buffers.put(Vec::with_capacity(SPARE_MIN));
        let small = encode_set(&set("small", 2), SetVariant::Delta, Some(&buffers));
        assert!(small.entries.capacity() < SPARE_MIN);
        drop(small);
        assert_eq!(buffers.spare_capacities(), [SPARE_MIN]);
    }

    /// The encodings a server used last: the newest first, known without a lock once it is;
    /// small ones (an update's change) kept apart from large ones (a view's set that a storm's
    /// joiners share), which they do not push out.
    #[test]
    fn recent_encodings_keep_the_newest_and_small_ones_apart() {
        let recent = RecentEncodings::default();
        let encoded =
            |set: &ResourceSet<EncodedResource>| Arc::new(encode_set(set, SetVariant::Delta, None));
        let view = encoded(&set("view", 600));
        assert!(view.entries.capacity() >= SMALL);
        let changes: Vec<_> = (0..RECENT + 2).map(|i| encoded(&set(&format!("c{i}"), 1))).collect();
        let front = |recent: &RecentEncodings| {
            let list = recent.recent.lock().unwrap();
            list.iter().map(Arc::as_ptr).collect::<Vec<_>>()
        };
        recent.keep(&view);
        recent.keep(&changes[0]);
        recent.keep(&view);
        assert_eq!(
            front(&recent),
            [Arc::as_ptr(&view), Arc::as_ptr(&changes[0])],
            "used again: first"
        );
        recent.keep(&view);
        assert_eq!(front(&recent).len(), 2, "the newest kept again: nothing moves");
        for change in &changes {
            recent.keep(change);
        }
        let kept = front(&recent);
        assert!(kept.contains(&Arc::as_ptr(&view)), "small encodings push out no large one");
        assert_eq!(kept.len(), RECENT + 1, "RECENT small ones and the large one");
        assert_eq!(kept[0], Arc::as_ptr(&changes[RECENT + 1]));
        assert!(!kept.contains(&Arc::as_ptr(&changes[0])), "the oldest small ones went");
        let larger: Vec<_> = (0..RECENT).map(|i| encoded(&set(&format!("v{i}"), 600))).collect();
        for view in &larger {
            recent.keep(view);
        }
        assert!(!front(&recent).contains(&Arc::as_ptr(&view)), "large ones push out large ones");
    }

    /// The spare buffers stay within their count and their bytes; the smallest go first.
    #[test]
    fn spare_buffers_are_bounded_in_count_and_bytes() {
        let buffers = Buffers::default();
        let unit = SPARE_MIN * 2;
        for n in 1..=SPARE + 3 {
            buffers.put(Vec::with_capacity(n * unit));
        }
        let kept = buffers.spare_capacities();
        assert_eq!(kept.len(), SPARE);
        assert_eq!(kept.iter().min(), Some(&(4 * unit)), "the three smallest went");

        buffers.put(Vec::with_capacity(SPARE_BYTES + 1));
        buffers.put(Vec::with_capacity(SPARE_MIN - 1));
        assert_eq!(buffers.spare_capacities(), kept, "a buffer beyond the bounds is not kept");
        buffers.put(Vec::with_capacity(SPARE_BYTES - unit));
        let kept = buffers.spare_capacities();
        assert!(kept.iter().sum::<usize>() <= SPARE_BYTES, "{kept:?}");
        assert_eq!(kept[0], SPARE_BYTES - unit, "the largest kept first");
    }
}
