//! Per-node status: for every connected stream and type, what was subscribed, sent, ACKed and
//! NACKed. Queryable from Rust, as JSON, and through CSDS.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use xds_proto::TypeUrl;
use xds_proto::pb::envoy::config::core::v3::Node;

/// The status of one type on one stream. Read it; the server fills it in (fields may be added).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[non_exhaustive]
pub struct TypeStatus {
    /// Whether the subscription is a wildcard.
    pub wildcard: bool,
    /// The explicitly subscribed names.
    pub names: Vec<String>,
    /// The version of the latest response sent: the response's own text (see
    /// [`xds_core::Text`]), as the nonce and the version ACKed are, so that recording them per
    /// response and ACK copies no string.
    pub sent_version: Option<xds_core::Text>,
    /// The nonce of the latest response sent.
    pub sent_nonce: Option<xds_core::Text>,
    /// When the latest response was sent (milliseconds since the Unix epoch; 0 before the
    /// first): how long a response has waited for its ACK.
    pub sent_ms: u64,
    /// The version the client last ACKed.
    pub acked_version: Option<xds_core::Text>,
    /// The latest NACK, if the client rejected a response since its last ACK. Boxed: a NACK's
    /// four texts would otherwise take 112 of this status's bytes, kept for every type of every
    /// connected client, most of which never NACK.
    pub nack: Option<Box<NackStatus>>,
    /// When the latest request arrived (milliseconds since the Unix epoch).
    pub last_request_ms: u64,
    /// The resources last sent, name -> version (`None`: told it does not exist). This is what
    /// the client holds once it accepts them; after a NACK it kept older versions (see `nack`).
    pub resources: BTreeMap<String, Option<String>>,
    /// How many of those the stream keeps its own state for; the rest it shares with every
    /// stream that holds the same resources (see `xds_core::View::resource_set`): what this
    /// client costs the server per resource.
    pub held_exceptions: usize,
    /// Rule C4: the per-resource errors the client was sent (`resource_errors`) that still
    /// stand, by name: `NOT_FOUND` for a subscribed name that does not exist, `PERMISSION_DENIED`
    /// for one the policy refused, a cache's own errors (`*` or a glob names a collection's).
    /// An entry goes when the resource comes or the name is unsubscribed.
    pub errors: BTreeMap<String, ResourceErrorStatus>,
}

/// A per-resource error sent to a client (rule C4).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ResourceErrorStatus {
    /// The `google.rpc.Code`.
    pub code: i32,
    /// The message, at most [`MAX_NACK_TEXT`] bytes.
    pub message: String,
}

/// A rejected response.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct NackStatus {
    /// The version the client kept (SotW; empty on delta).
    pub version: String,
    /// The version of the response it rejected.
    pub rejected_version: String,
    /// The nonce of the rejected response.
    pub nonce: String,
    /// The client's reason, at most [`MAX_NACK_TEXT`] bytes (cut at a character boundary).
    pub error: String,
    /// The length in bytes of the reason the client sent (more than `error.len()` when cut).
    pub error_bytes: usize,
    /// When (milliseconds since the Unix epoch).
    pub at_ms: u64,
}

/// The most bytes of a NACK's text kept in status and CSDS: a client controls the text, and a
/// stream keeps it until the next ACK (conventions 18).
pub const MAX_NACK_TEXT: usize = 4096;

impl NackStatus {
    /// A NACK's status with its text cut to [`MAX_NACK_TEXT`] bytes.
    pub(crate) fn new(
        version: String,
        rejected_version: String,
        nonce: String,
        error: &str,
        at_ms: u64,
    ) -> Self {
        NackStatus {
            version: bounded_owned(&version),
            rejected_version,
            nonce,
            error: truncate(error, MAX_NACK_TEXT).to_owned(),
            error_bytes: error.len(),
            at_ms,
        }
    }
}

/// `s` cut to at most `max` bytes, on a character boundary: how every text a peer controls is
/// bounded before it is kept or shown.
pub(crate) fn truncate(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `text` cut to `max` bytes: itself (no copy) when short enough, as a version of this server's
/// always is.
pub(crate) fn bounded_text(text: &xds_core::Text, max: usize) -> xds_core::Text {
    match truncate(text, max) {
        cut if cut.len() < text.len() => xds_core::Text::from(cut),
        _ => text.clone(),
    }
}

/// A version string a client echoes back, cut like a NACK text.
pub(crate) fn bounded_owned(s: &str) -> String {
    truncate(s, MAX_NACK_TEXT).to_owned()
}

/// A stream's status of each of its types, in type URL order; as JSON, an object by type URL.
///
/// A short list, made to measure: a stream has a few types. A map kept a B-tree node with room
/// for eleven (368 bytes), a key string and a box per type, for every connected client.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TypeStatuses(Vec<(TypeUrl, TypeStatus)>);

/// The iterator of [`TypeStatuses::iter`]: each type URL with its status, in type URL order.
#[derive(Clone, Debug)]
pub struct TypeStatusIter<'a>(std::slice::Iter<'a, (TypeUrl, TypeStatus)>);

impl<'a> Iterator for TypeStatusIter<'a> {
    type Item = (&'a str, &'a TypeStatus);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(t, status)| (t.as_str(), status))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for TypeStatusIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(|(t, status)| (t.as_str(), status))
    }
}

impl ExactSizeIterator for TypeStatusIter<'_> {}

impl TypeStatuses {
    /// The status of `type_url`, if the stream has that type.
    pub fn get(&self, type_url: &str) -> Option<&TypeStatus> {
        self.0.iter().find(|(t, _)| t.as_str() == type_url).map(|(_, status)| status)
    }

    /// Whether the stream has `type_url`.
    pub fn contains_key(&self, type_url: &str) -> bool {
        self.get(type_url).is_some()
    }

    /// Each type URL with its status, in type URL order.
    pub fn iter(&self) -> TypeStatusIter<'_> {
        TypeStatusIter(self.0.iter())
    }

    /// The type URLs, in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &str> + ExactSizeIterator {
        self.iter().map(|(t, _)| t)
    }

    /// The statuses, in type URL order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &TypeStatus> + ExactSizeIterator {
        self.iter().map(|(_, status)| status)
    }

    /// How many types the stream has.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the stream has no type yet.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each type URL with its status, to cut or fill in.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&str, &mut TypeStatus)> {
        self.0.iter_mut().map(|(t, status)| (t.as_str(), status))
    }

    /// The status of `type_url`, added in its place if the stream did not have it. Found by a
    /// scan of the few types, comparing built-in types without their strings; grown by one
    /// place at a time, as a stream opens its types one by one.
    pub(crate) fn entry(&mut self, type_url: &TypeUrl) -> &mut TypeStatus {
        let at = match self.0.iter().position(|(t, _)| t == type_url) {
            Some(at) => at,
            None => {
                let at = self.0.partition_point(|(t, _)| t.as_str() < type_url.as_str());
                self.0.reserve_exact(1);
                self.0.insert(at, (type_url.clone(), TypeStatus::default()));
                at
            }
        };
        &mut self.0[at].1
    }
}

impl FromIterator<(TypeUrl, TypeStatus)> for TypeStatuses {
    /// In type URL order; of a type listed twice, the last status is kept (as a map's collect
    /// keeps it).
    fn from_iter<I: IntoIterator<Item = (TypeUrl, TypeStatus)>>(iter: I) -> Self {
        let mut statuses = TypeStatuses::default();
        for (type_url, status) in iter {
            *statuses.entry(&type_url) = status;
        }
        statuses
    }
}

impl<Q: AsRef<str> + ?Sized> std::ops::Index<&Q> for TypeStatuses {
    type Output = TypeStatus;

    /// The status of `type_url` (a `&str`, a `&String`). Panics if the stream does not have
    /// that type, as a map's index does.
    fn index(&self, type_url: &Q) -> &TypeStatus {
        let type_url = type_url.as_ref();
        self.get(type_url).unwrap_or_else(|| panic!("the stream has no type {type_url}"))
    }
}

impl<'a> IntoIterator for &'a TypeStatuses {
    type Item = (&'a str, &'a TypeStatus);
    type IntoIter = TypeStatusIter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl Serialize for TypeStatuses {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

/// The status of one stream.
#[derive(Clone, Debug, Serialize)]
pub struct StreamStatus {
    /// The stream's id.
    pub stream: u64,
    /// `sotw` or `delta`.
    pub variant: &'static str,
    /// The node id (empty for an anonymous client or before the first request).
    pub node_id: String,
    /// The node cluster.
    pub node_cluster: String,
    /// When the stream opened (milliseconds since the Unix epoch).
    pub opened_ms: u64,
    /// Per type URL.
    pub types: TypeStatuses,
    /// The group the cache serves the node from, when the cache groups nodes: as of the stream's
    /// first request, asked again at each NACK (a regroup moves streams).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Since when the cache has served the node nothing of some type it asked for
    /// (milliseconds since the Unix epoch): its group has no configuration, and the client
    /// waits (see `ServerConfig::unserved_timeout`). Absent while everything asked is served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unserved_since_ms: Option<u64>,
    /// The types served nothing (their labels), while `unserved_since_ms` is set.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unserved_types: Vec<String>,
    /// The stream's latest events, oldest first (at most `ServerConfig::stream_events`).
    /// Filled in when one stream's status is read ([`StatusRegistry::streams`],
    /// [`StatusRegistry::node`], a status page); empty in the summaries of many streams.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<StreamEvent>,
    /// The node, shared with the stream's callbacks.
    #[serde(skip)]
    pub(crate) node: Option<Arc<Node>>,
}

/// Something that happened on a stream, as its history shows it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamEvent {
    /// When (milliseconds since the Unix epoch).
    pub at_ms: u64,
    /// The label of the type it concerns (`cluster`, a configured custom type's label,
    /// `unknown` for any other), if it concerns one.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_label: Option<&'static str>,
    /// What happened.
    #[serde(flatten)]
    pub what: StreamEventKind,
}

/// What happened on a stream. Every text in it is the client's or the cache's, cut to
/// [`MAX_EVENT_TEXT`] bytes.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum StreamEventKind {
    /// The client changed its subscription.
    Subscribed {
        /// How many names it added (`*` counts for a wildcard).
        added: usize,
        /// How many it removed.
        removed: usize,
        /// The first few names added.
        names: Vec<Box<str>>,
    },
    /// A response went out (TTL heartbeats are not listed), and whether the client ACKed it:
    /// the ACK is the response's answer, kept with it rather than as an event of its own, so
    /// that a stream's history holds twice as many changes.
    Sent {
        /// Its version: the response's own text (see [`xds_core::Text`]), so that recording it
        /// takes no allocation.
        version: xds_core::Text,
        /// How many resource entries it carried.
        resources: usize,
        /// Whether the client ACKed it.
        acked: bool,
        /// Milliseconds from the response to its ACK.
        #[serde(skip_serializing_if = "Option::is_none")]
        latency_ms: Option<u64>,
    },
    /// The client rejected a response.
    Nacked {
        /// The rejected version.
        rejected_version: Box<str>,
        /// The client's reason.
        error: Box<str>,
    },
    /// A request named an older response's nonce (it answered a response overtaken by a newer
    /// one).
    Stale,
    /// The cache moved the node to another group.
    Regrouped {
        /// The group before (`None`: none).
        from: Option<Box<str>>,
        /// The group now.
        to: Option<Box<str>>,
    },
    /// The cache serves the node nothing of a type it asked for (its group has no
    /// configuration), or serves it everything again.
    Unserved {
        /// Whether it is unserved from now on (`false`: served again).
        unserved: bool,
    },
}

/// The most bytes of a client's or cache's text an event keeps (a NACK's whole text stays in
/// the type's status, up to [`MAX_NACK_TEXT`]).
pub const MAX_EVENT_TEXT: usize = 256;

/// The most names a [`StreamEventKind::Subscribed`] event lists.
const MAX_EVENT_NAMES: usize = 3;

/// A text cut to [`MAX_EVENT_TEXT`] bytes at a character boundary.
pub(crate) fn event_text(s: &str) -> Box<str> {
    truncate(s, MAX_EVENT_TEXT).into()
}

impl StreamEventKind {
    /// A change of subscription, listing at most [`MAX_EVENT_NAMES`] of the added names.
    pub(crate) fn subscribed(added: &xds_core::AddedNames, removed: usize) -> Self {
        let names = added.iter().take(MAX_EVENT_NAMES).map(event_text).collect();
        StreamEventKind::Subscribed { added: added.len(), removed, names }
    }
}

/// A stream's latest events, a ring of at most `capacity` (`ServerConfig::stream_events`).
/// It allocates on the first event, not when the stream opens.
#[derive(Debug)]
pub(crate) struct EventLog {
    events: VecDeque<StreamEvent>,
    capacity: usize,
}

impl EventLog {
    pub(crate) fn new(capacity: usize) -> Self {
        EventLog { events: VecDeque::new(), capacity }
    }

    /// Adds `what` at `at_ms`, dropping the oldest event when full.
    pub(crate) fn push(
        &mut self,
        at_ms: u64,
        type_label: Option<&'static str>,
        what: StreamEventKind,
    ) {
        if self.capacity == 0 {
            return;
        }
        if self.events.len() >= self.capacity {
            self.events.pop_front();
        }
        self.events.push_back(StreamEvent { at_ms, type_label, what });
    }

    /// Adds a response sent, at `at_ms`, as [`push`](Self::push) adds an event: with the
    /// response's own version text, which every client's every update records, copied without
    /// an allocation (a longer text than the log keeps is cut, in a text of its own).
    pub(crate) fn push_sent(
        &mut self,
        at_ms: u64,
        type_label: Option<&'static str>,
        version: &xds_core::Text,
        resources: usize,
    ) {
        let version = bounded_text(version, MAX_EVENT_TEXT);
        let what = StreamEventKind::Sent { version, resources, acked: false, latency_ms: None };
        self.push(at_ms, type_label, what);
    }

    /// Marks the type's latest response ACKed, if it is the type's latest response or answer
    /// and not ACKed yet. (A request that ACKs may change the subscription too: its
    /// `Subscribed` comes first. The ACK of a TTL heartbeat finds its response ACKed already.)
    pub(crate) fn acked(&mut self, type_label: &'static str, latency: Option<u64>) {
        let latest = self.events.iter_mut().rev().find(|e| {
            e.type_label == Some(type_label)
                && !matches!(e.what, StreamEventKind::Subscribed { .. } | StreamEventKind::Stale)
        });
        if let Some(StreamEvent {
            what: StreamEventKind::Sent { acked: acked @ false, latency_ms, .. },
            ..
        }) = latest
        {
            *acked = true;
            *latency_ms = latency;
        }
    }

    /// The events, oldest first.
    pub(crate) fn to_vec(&self) -> Vec<StreamEvent> {
        self.events.iter().cloned().collect()
    }
}

/// What a stream can tell about itself when asked: the details too costly to copy after every
/// response (subscriptions, the versions each client holds).
pub(crate) trait Detail: Send + Sync {
    /// Fills in the details, at most `limit` names, resources and errors per type (all of them
    /// for `None`). Returns, per type URL, how many of each there are in all.
    fn fill(&self, status: &mut StreamStatus, limit: Option<usize>) -> BTreeMap<String, Listed>;

    /// Wakes the stream to see that the server shuts down ([`StatusRegistry::stop_all`]).
    fn stop(&self);
}

/// How many subscribed names, held resources and standing errors one type of a stream has, of
/// which a page lists at most [`MAX_LISTED`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Listed {
    pub(crate) names: usize,
    pub(crate) resources: usize,
    pub(crate) errors: usize,
}

struct Entry {
    status: Arc<Mutex<StreamStatus>>,
    detail: Option<Weak<dyn Detail>>,
}

/// Every open stream's status.
#[derive(Default)]
pub struct StatusRegistry {
    streams: Mutex<BTreeMap<u64, Entry>>,
}

impl std::fmt::Debug for StatusRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusRegistry").field("streams", &self.len()).finish()
    }
}

/// The wall clock in milliseconds since the Unix epoch, for the status's and the history's
/// times. Read twice for every client at every update (its response, its ACK): on Linux from the
/// kernel's coarse clock (`CLOCK_REALTIME_COARSE`, updated every tick, 1 to 10 ms: finer than
/// any of these times needs), which the vDSO reads with no counter and no conversion; the
/// precise clock's conversion to milliseconds was 1.2 % of callgrind's cycle estimate per
/// client and update (docs/benchmarks.md). Elsewhere, or if the call fails, the precise clock.
pub(crate) fn now_ms() -> u64 {
    #[cfg(target_os = "linux")]
    {
        // Not a struct literal: some 32-bit targets' `timespec` has a private padding field.
        let mut now = std::mem::MaybeUninit::<libc::timespec>::uninit();
        // SAFETY: `now` is a valid timespec to write into; it is read only once written.
        if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, now.as_mut_ptr()) } == 0 {
            // SAFETY: written by the successful call.
            let now = unsafe { now.assume_init() };
            if let (Ok(seconds), Ok(nanos)) =
                (u64::try_from(now.tv_sec), u64::try_from(now.tv_nsec))
            {
                return seconds.saturating_mul(1_000).saturating_add(nanos / 1_000_000);
            }
        }
    }
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Status is bookkeeping: a panic elsewhere must not make it unreadable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl StatusRegistry {
    pub(crate) fn open(&self, stream: u64, variant: &'static str) -> Arc<Mutex<StreamStatus>> {
        let status = Arc::new(Mutex::new(StreamStatus {
            stream,
            variant,
            node_id: String::new(),
            node_cluster: String::new(),
            opened_ms: now_ms(),
            types: TypeStatuses::default(),
            group: None,
            unserved_since_ms: None,
            unserved_types: Vec::new(),
            events: Vec::new(),
            node: None,
        }));
        lock(&self.streams).insert(stream, Entry { status: status.clone(), detail: None });
        status
    }

    /// Lets `stream` be asked for its details when its status is read.
    pub(crate) fn attach(&self, stream: u64, detail: Weak<dyn Detail>) {
        if let Some(entry) = lock(&self.streams).get_mut(&stream) {
            entry.detail = Some(detail);
        }
    }

    /// Wakes every open xDS stream to see that the server shuts down (it then ends with
    /// `UNAVAILABLE`). Their own code runs after the registry's lock is released.
    pub(crate) fn stop_all(&self) {
        let details: Vec<_> =
            lock(&self.streams).values().filter_map(|e| e.detail.clone()).collect();
        for detail in details.iter().filter_map(Weak::upgrade) {
            detail.stop();
        }
    }

    pub(crate) fn close(&self, stream: u64) {
        lock(&self.streams).remove(&stream);
    }

    /// A copy of every open stream's status, by stream id.
    pub fn streams(&self) -> Vec<StreamStatus> {
        let entries: Vec<_> =
            lock(&self.streams).values().map(|e| (e.status.clone(), e.detail.clone())).collect();
        entries
            .into_iter()
            .map(|(status, detail)| {
                let mut copy = lock(&status).clone();
                if let Some(detail) = detail.and_then(|d| d.upgrade()) {
                    detail.fill(&mut copy, None);
                }
                copy
            })
            .collect()
    }

    /// The status of the streams of one node id.
    pub fn node(&self, node_id: &str) -> Vec<StreamStatus> {
        self.streams().into_iter().filter(|s| s.node_id == node_id).collect()
    }

    /// The number of open streams.
    pub fn len(&self) -> usize {
        lock(&self.streams).len()
    }

    /// Whether no stream is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Open streams by the `label` of their group (`None`: a stream with no group), for the
    /// admin router's `xds_group_streams`. Reads the group only: no details are filled in, and
    /// a label is copied once, not per stream.
    pub(crate) fn group_counts(
        &self,
        label: impl for<'a> Fn(Option<&'a str>) -> &'a str,
    ) -> BTreeMap<String, u64> {
        let entries: Vec<_> = lock(&self.streams).values().map(|e| e.status.clone()).collect();
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        for status in entries {
            let status = lock(&status);
            let label = label(status.group.as_deref());
            match counts.get_mut(label) {
                Some(n) => *n += 1,
                None => {
                    counts.insert(label.to_owned(), 1);
                }
            }
        }
        counts
    }

    /// Every open stream's status without its details (no subscribed names, no held
    /// resources): the versions sent and ACKed, the NACKs, the group, for a view of many streams
    /// at once (the operator console) that must not copy what each client holds.
    pub(crate) fn summaries(&self) -> Vec<StreamStatus> {
        let entries: Vec<_> = lock(&self.streams).values().map(|e| e.status.clone()).collect();
        entries.into_iter().map(|status| lock(&status).clone()).collect()
    }

    /// Every stream's status as JSON: `{"streams": [...]}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "streams": self.streams() })
    }

    /// One page of the streams' status as JSON, for a status page that must stay bounded with
    /// many clients: the streams of `node` (every node when `None`), by stream id, skipping
    /// `offset` and showing at most `limit` streams and about 1 MiB (at least one stream, so
    /// paging always moves on). Per type, a stream shows at most 100 subscribed names and
    /// 100 held resources (`names_total`, `resources_total` count them all
    /// when the list is cut), each name cut to [`MAX_NACK_TEXT`] bytes: a client subscribes to
    /// up to 262,144 names per type, and a page of 100 such streams would otherwise be
    /// gigabytes. `{"streams": [...], "total": N, "offset": O, "next_offset": O2}`: `total`
    /// counts the matching streams, `next_offset` is present when more follow.
    pub fn page_json(&self, node: Option<&str>, offset: usize, limit: usize) -> serde_json::Value {
        let entries: Vec<_> =
            lock(&self.streams).values().map(|e| (e.status.clone(), e.detail.clone())).collect();
        let mut total = 0;
        let mut page = Vec::new();
        let mut bytes = 0;
        let mut full = false;
        for (status, detail) in entries {
            if let Some(node) = node
                && lock(&status).node_id != node
            {
                continue;
            }
            total += 1;
            if total <= offset || page.len() >= limit || full {
                continue;
            }
            // Only the page's streams are copied with their details, and of those only what
            // the page shows: a stream holding 10,000 resources copies 100 of them.
            let mut copy = lock(&status).clone();
            let listed = match detail.and_then(|d| d.upgrade()) {
                Some(detail) => detail.fill(&mut copy, Some(MAX_LISTED)),
                None => BTreeMap::new(),
            };
            let shown = bounded_stream(copy, &listed);
            let size = shown.to_string().len();
            if !page.is_empty() && bytes + size > MAX_PAGE_BYTES {
                full = true;
                continue;
            }
            bytes += size;
            page.push(shown);
        }
        let next = offset.saturating_add(page.len());
        let mut body = serde_json::json!({ "streams": page, "total": total, "offset": offset });
        if next < total {
            body["next_offset"] = serde_json::json!(next);
        }
        body
    }
}

/// The most streams one `/status` page shows (`?limit=` may ask for fewer), and the console's
/// detail view of one node.
pub const MAX_STATUS_PAGE: usize = 100;

/// The most bytes of streams one [`StatusRegistry::page_json`] page holds (past the first
/// stream).
pub(crate) const MAX_PAGE_BYTES: usize = 1 << 20;

/// The most subscribed names, and the most held resources, a status page shows per stream and
/// type.
pub(crate) const MAX_LISTED: usize = 100;

/// A stream's status as JSON with its lists cut to [`MAX_LISTED`] and their names to
/// [`MAX_NACK_TEXT`] bytes; `listed` has the lists' whole lengths where they were filled in
/// cut already.
fn bounded_stream(
    mut status: StreamStatus,
    listed: &BTreeMap<String, Listed>,
) -> serde_json::Value {
    let mut totals = BTreeMap::new();
    for (type_url, t) in status.types.iter_mut() {
        let counts = match listed.get(type_url) {
            Some(all) => (all.names, all.resources, all.errors),
            None => (t.names.len(), t.resources.len(), t.errors.len()),
        };
        t.names.truncate(MAX_LISTED);
        for name in &mut t.names {
            if name.len() > MAX_NACK_TEXT {
                *name = bounded_owned(name);
            }
        }
        if t.resources.len() > MAX_LISTED || t.resources.keys().any(|n| n.len() > MAX_NACK_TEXT) {
            t.resources = std::mem::take(&mut t.resources)
                .into_iter()
                .take(MAX_LISTED)
                .map(|(n, v)| (bounded_owned(&n), v))
                .collect();
        }
        // A client holds one standing error per name it subscribes to that does not exist or
        // is refused: as many as the names it sends, so cut like them.
        if t.errors.len() > MAX_LISTED || t.errors.keys().any(|n| n.len() > MAX_NACK_TEXT) {
            t.errors = std::mem::take(&mut t.errors)
                .into_iter()
                .take(MAX_LISTED)
                .map(|(n, e)| (bounded_owned(&n), e))
                .collect();
        }
        if counts.0 > MAX_LISTED || counts.1 > MAX_LISTED || counts.2 > MAX_LISTED {
            totals.insert(type_url.to_owned(), counts);
        }
    }
    let mut value = serde_json::to_value(&status).unwrap_or_default();
    for (type_url, (names, resources, errors)) in totals {
        if let Some(t) = value.get_mut("types").and_then(|t| t.get_mut(&type_url)) {
            t["names_total"] = names.into();
            t["resources_total"] = resources.into();
            t["errors_total"] = errors.into();
        }
    }
    value
}

impl StreamStatus {
    /// The node of the stream's first request.
    pub fn node(&self) -> Option<&Node> {
        self.node.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(v: &str) -> StreamEventKind {
        StreamEventKind::Sent { version: v.into(), resources: 1, acked: false, latency_ms: None }
    }

    fn latest(log: &EventLog) -> StreamEventKind {
        log.to_vec().pop().unwrap().what
    }

    /// The status's clock (the kernel's coarse one, on Linux) is the wall clock: never ahead of
    /// the precise one, and behind it by a tick or so (a second allows for a VM whose ticks
    /// stall), and it does not go back between two reads.
    #[test]
    fn the_status_clock_is_the_wall_clock_within_a_tick() {
        let precise = || SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
        for _ in 0..100 {
            let before = precise();
            let coarse = now_ms();
            let after = precise();
            assert!(coarse + 1_000 >= before && coarse <= after, "{before} <= {coarse} <= {after}");
            assert!(now_ms() >= coarse);
        }
    }

    /// A stream's types are kept in type URL order whatever order they open in, read by URL,
    /// and written as JSON as the map they replaced was: an object by type URL, in that order.
    #[test]
    fn a_streams_types_are_in_type_url_order_and_read_as_a_map() {
        use xds_proto::ResourceType;
        let custom = TypeUrl::parse("type.googleapis.com/acme.Widget");
        let mut types = TypeStatuses::default();
        for (t, at) in [
            (TypeUrl::from(ResourceType::Listener), 1),
            (custom.clone(), 2),
            (TypeUrl::from(ResourceType::Cluster), 3),
        ] {
            types.entry(&t).sent_ms = at;
        }
        types.entry(&TypeUrl::from(ResourceType::Cluster)).last_request_ms = 9;
        let order: Vec<(&str, u64)> = types.iter().map(|(t, s)| (t, s.sent_ms)).collect();
        assert_eq!(
            order,
            [
                ("type.googleapis.com/acme.Widget", 2),
                ("type.googleapis.com/envoy.config.cluster.v3.Cluster", 3),
                ("type.googleapis.com/envoy.config.listener.v3.Listener", 1),
            ]
        );
        assert_eq!(types.len(), 3);
        assert_eq!(types["type.googleapis.com/envoy.config.cluster.v3.Cluster"].last_request_ms, 9);
        assert_eq!(types.get(custom.as_str()).map(|s| s.sent_ms), Some(2));
        assert!(
            types.get("type.googleapis.com/envoy.config.route.v3.RouteConfiguration").is_none()
        );
        let json = serde_json::to_string(&types).unwrap();
        let as_map: BTreeMap<&str, &TypeStatus> = types.iter().collect();
        assert_eq!(json, serde_json::to_string(&as_map).unwrap());
        // Collected, the last status of a type listed twice is kept, as a map's collect keeps it.
        let cds = TypeUrl::from(ResourceType::Cluster);
        let twice: TypeStatuses =
            [(cds.clone(), TypeStatus::default()), (cds, types[custom.as_str()].clone())]
                .into_iter()
                .collect();
        assert_eq!(twice.len(), 1);
        assert_eq!(twice.iter().next().map(|(_, s)| s.sent_ms), Some(2));
    }

    #[test]
    fn the_event_log_keeps_the_latest_events_only() {
        let mut log = EventLog::new(3);
        for i in 0..5 {
            log.push(i, Some("cluster"), sent(&i.to_string()));
        }
        let kept: Vec<u64> = log.to_vec().iter().map(|e| e.at_ms).collect();
        assert_eq!(kept, [2, 3, 4]);
        let mut off = EventLog::new(0);
        off.push(1, None, StreamEventKind::Stale);
        assert!(off.to_vec().is_empty());
    }

    /// A response sent goes in as any event, evicting the oldest from a full ring, with the
    /// response's own version text: a short one kept in place, a long one shared with the
    /// response (no allocation either way), one longer than the log keeps cut.
    #[test]
    fn a_response_sent_is_recorded_with_the_responses_own_text() {
        let text_at = |log: &EventLog, i: usize| match &log.events[i].what {
            StreamEventKind::Sent { version, .. } => version.clone(),
            _ => xds_core::Text::new(),
        };
        let mut log = EventLog::new(2);
        log.push_sent(1, Some("cluster"), &"aaaa".into(), 1);
        log.push_sent(2, Some("cluster"), &"bbbb".into(), 1);
        log.push_sent(3, Some("cluster"), &"cccc".into(), 2);
        let kept: Vec<(u64, StreamEventKind)> =
            log.to_vec().into_iter().map(|e| (e.at_ms, e.what)).collect();
        let sent2 = |v: &str| StreamEventKind::Sent {
            version: v.into(),
            resources: 2,
            acked: false,
            latency_ms: None,
        };
        assert_eq!(kept, [(2, sent("bbbb")), (3, sent2("cccc"))]);
        let long = xds_core::Text::from("v".repeat(MAX_EVENT_TEXT));
        log.push_sent(4, Some("cluster"), &long, 1);
        assert_eq!(text_at(&log, 1).as_ptr(), long.as_ptr(), "a long one shared, not copied");
        let longer = xds_core::Text::from("w".repeat(MAX_EVENT_TEXT + 10));
        log.push_sent(5, Some("cluster"), &longer, 1);
        assert_eq!(latest(&log), sent(&longer[..MAX_EVENT_TEXT]));
        let mut off = EventLog::new(0);
        off.push_sent(1, None, &"1".into(), 1);
        assert!(off.to_vec().is_empty());
    }

    /// A version a client echoes is kept as it came (shared, not copied) unless it is longer
    /// than a status keeps; then it is cut at a character boundary.
    #[test]
    fn an_echoed_version_is_kept_as_it_came_or_cut() {
        let long = xds_core::Text::from("v".repeat(MAX_NACK_TEXT));
        assert_eq!(bounded_text(&long, MAX_NACK_TEXT).as_ptr(), long.as_ptr());
        let longer = xds_core::Text::from("é".repeat(MAX_NACK_TEXT));
        let cut = bounded_text(&longer, MAX_NACK_TEXT);
        assert!(cut.len() <= MAX_NACK_TEXT && longer.starts_with(cut.as_str()));
        assert_ne!(cut.len(), longer.len());
    }

    #[test]
    fn an_ack_marks_the_response_it_answers() {
        let mut log = EventLog::new(16);
        log.acked("cluster", Some(5));
        assert!(log.to_vec().is_empty(), "nothing sent: nothing to mark");
        log.push(1, Some("cluster"), sent("1"));
        log.acked("listener", Some(5));
        assert_eq!(latest(&log), sent("1"), "per type");
        // The request that ACKs also changes the subscription: still the response's answer.
        log.push(2, Some("cluster"), StreamEventKind::subscribed(&vec!["a".to_owned()].into(), 0));
        log.acked("cluster", Some(7));
        let marked = StreamEventKind::Sent {
            version: "1".into(),
            resources: 1,
            acked: true,
            latency_ms: Some(7),
        };
        assert_eq!(log.to_vec()[0].what, marked);
        // A TTL heartbeat's ACK (the heartbeat is not listed) leaves it as it was.
        log.acked("cluster", Some(9));
        assert_eq!(log.to_vec()[0].what, marked);
        // A NACKed response is not ACKed later by the next response's ACK.
        log.push(3, Some("cluster"), sent("2"));
        let nack = StreamEventKind::Nacked { rejected_version: "2".into(), error: "no".into() };
        log.push(4, Some("cluster"), nack.clone());
        log.acked("cluster", None);
        assert_eq!(latest(&log), nack);
        assert_eq!(log.to_vec()[2].what, sent("2"));
    }

    #[test]
    fn event_texts_are_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_EVENT_TEXT);
        let cut = event_text(&long);
        assert!(cut.len() <= MAX_EVENT_TEXT && long.starts_with(&*cut), "{}", cut.len());
        let names: Vec<String> = (0..10).map(|i| format!("n{i}")).collect();
        let StreamEventKind::Subscribed { added, removed, names } =
            StreamEventKind::subscribed(&names.clone().into(), 2)
        else {
            unreachable!()
        };
        assert_eq!((added, removed, names.len()), (10, 2, MAX_EVENT_NAMES));
        let event = StreamEvent { at_ms: 5, type_label: Some("cluster"), what: sent("7") };
        assert_eq!(
            serde_json::to_value(&event).unwrap(),
            serde_json::json!({"at_ms": 5, "type": "cluster", "event": "sent", "version": "7",
                "resources": 1, "acked": false})
        );
    }
}
