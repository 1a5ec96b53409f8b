//! Counters in Prometheus text format.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use xds_proto::TypeUrl;

use crate::status::lock;

/// One rendered series: name, kind, help and how to read it.
type Series = (&'static str, &'static str, &'static str, fn(&PerType) -> f64);

/// The counters of one variant and type. Atomics, each counted with one relaxed add: a stream
/// holds a handle on the counters of each type it uses ([`StreamCounters`]) and counts its
/// requests, responses and ACKs without a lock. (The map of them behind one lock, taken three
/// times per client and update by every stream on every core, was a point of contention that
/// grows with the cores.) A scrape reads each counter on its own: two of them may be a count
/// apart, as with any Prometheus client library.
///
/// The counts are spread over [`SHARDS`] shards, each on cache lines of its own, and a thread
/// counts in its own ([`thread_shard`]): every stream of a type counts seven times per update
/// (a request, a response and its bytes, an ACK, its latency in three), and in one set of atomics
/// each of those adds waited for the line the other workers had just written. A scrape adds the
/// shards up.
#[derive(Debug, Default)]
pub(crate) struct PerType {
    /// Counted when a stream opens or closes a type, not per update: one place.
    streams: AtomicI64,
    shards: [Shard; SHARDS],
}

/// How many shards [`PerType`] spreads its counts over: a worker thread's counts share a
/// shard only with one thread in `SHARDS`.
const SHARDS: usize = 8;

/// The shard the calling thread counts in: threads take shards in turn as they first count.
fn thread_shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Relaxed) % SHARDS;
    }
    SHARD.with(|shard| *shard)
}

/// One shard of a [`PerType`]'s counts, on cache lines of its own (128 bytes: the pair of lines
/// a core fetches together).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard {
    requests: AtomicU64,
    responses: AtomicU64,
    response_bytes: AtomicU64,
    acks: AtomicU64,
    nacks: AtomicU64,
    stale: AtomicU64,
    /// Time from a response to its ACK: sum (in microseconds: an integer adds atomically and
    /// exactly, and 2^64 µs is 584,000 years of latency summed, where nanoseconds would wrap
    /// after some 10^10 seconds, weeks of a busy server), count, and how many fell in each of
    /// [`ACK_BUCKETS`] (not cumulative; rendering adds them up).
    ack_micros_sum: AtomicU64,
    ack_count: AtomicU64,
    ack_buckets: [AtomicU64; ACK_BUCKETS.len()],
}

impl PerType {
    pub(crate) fn opened(&self) {
        self.streams.fetch_add(1, Relaxed);
    }

    pub(crate) fn closed(&self) {
        self.streams.fetch_sub(1, Relaxed);
    }

    /// The calling thread's shard.
    fn shard(&self) -> &Shard {
        &self.shards[thread_shard()]
    }

    /// A counter's total over the shards.
    fn total(&self, counter: impl Fn(&Shard) -> &AtomicU64) -> u64 {
        self.shards.iter().map(|s| counter(s).load(Relaxed)).fold(0, u64::wrapping_add)
    }

    pub(crate) fn request(&self) {
        self.shard().requests.fetch_add(1, Relaxed);
    }

    pub(crate) fn response(&self, bytes: usize) {
        let shard = self.shard();
        shard.responses.fetch_add(1, Relaxed);
        shard.response_bytes.fetch_add(bytes as u64, Relaxed);
    }

    pub(crate) fn ack(&self, latency: Option<Duration>) {
        let shard = self.shard();
        shard.acks.fetch_add(1, Relaxed);
        if let Some(l) = latency {
            let micros = u64::try_from(l.as_micros()).unwrap_or(u64::MAX);
            shard.ack_micros_sum.fetch_add(micros, Relaxed);
            shard.ack_count.fetch_add(1, Relaxed);
            let seconds = l.as_secs_f64();
            if let Some(i) = ACK_BUCKETS.iter().position(|&le| seconds <= le) {
                shard.ack_buckets[i].fetch_add(1, Relaxed);
            }
        }
    }

    fn nack(&self) {
        self.shard().nacks.fetch_add(1, Relaxed);
    }

    fn stale(&self) {
        self.shard().stale.fetch_add(1, Relaxed);
    }

    fn ack_seconds_sum(&self) -> f64 {
        self.total(|s| &s.ack_micros_sum) as f64 / 1e6
    }

    /// The ACKs per bucket of [`ACK_BUCKETS`] (not cumulative) and how many were measured,
    /// read so that the count is never below the buckets: it is read first (an ACK counted
    /// meanwhile may be in a bucket read after it) and raised to their sum.
    fn ack_buckets(&self) -> ([u64; ACK_BUCKETS.len()], u64) {
        let count = self.total(|s| &s.ack_count);
        let buckets: [u64; ACK_BUCKETS.len()] =
            std::array::from_fn(|i| self.total(|s| &s.ack_buckets[i]));
        (buckets, count.max(buckets.iter().sum()))
    }
}

/// A stream's handles on the counters of the types it uses, each looked up once (a stream uses
/// a few types: a short list, searched in order, as the stream's watches are).
#[derive(Debug, Default)]
pub(crate) struct StreamCounters {
    types: Vec<(TypeUrl, Arc<PerType>)>,
}

impl StreamCounters {
    /// The counters of `type_key` on `variant`, found in `metrics` the first time (under the
    /// label `label` gives: asked only then).
    pub(crate) fn of(
        &mut self,
        metrics: &Metrics,
        variant: &'static str,
        type_key: &TypeUrl,
        label: impl FnOnce() -> &'static str,
    ) -> &PerType {
        let at = match self.types.iter().position(|(t, _)| t == type_key) {
            Some(at) => at,
            None => {
                self.types.push((type_key.clone(), metrics.per_type(variant, label())));
                self.types.len() - 1
            }
        };
        &self.types[at].1
    }
}

/// Upper bounds (seconds) of the ACK latency histogram's buckets: a proxy ACKs a small update in
/// a millisecond or two and a large or warming one in seconds; past 10 s only `+Inf` counts.
const ACK_BUCKETS: [f64; 12] =
    [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// The ACK latency histogram over every stream: see [`Metrics::ack_histogram`].
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AckHistogram {
    /// Upper bounds (seconds) of the finite buckets.
    pub(crate) bounds: &'static [f64],
    /// ACKs per bucket (not cumulative): one per bound, then the `+Inf` bucket.
    pub(crate) counts: Vec<u64>,
    /// ACKs measured.
    pub(crate) count: u64,
    /// Their latencies summed, in seconds.
    pub(crate) sum_seconds: f64,
}

/// The server's counters. Render them with [`Metrics::render`] (served at `GET /metrics` by
/// [`XdsServer::admin_router`](crate::XdsServer::admin_router), with per-group series).
#[derive(Debug, Default)]
pub struct Metrics {
    /// Variant -> type label -> counters. Labels are `&'static str` from a bounded set (the
    /// built-in types, the configured custom types, `unknown`): nothing a peer sends becomes a
    /// series (conventions 18).
    per_type: Mutex<BTreeMap<&'static str, BTreeMap<&'static str, Arc<PerType>>>>,
    refused: Mutex<BTreeMap<&'static str, u64>>,
    /// Streams that waited for a join permit for `join_max_wait` and went on ungated.
    join_gate_passed: std::sync::atomic::AtomicU64,
    /// Streams the cache serves nothing of some type they asked for (their group has none).
    unserved: std::sync::atomic::AtomicI64,
    /// NACKs by group and type, for the admin router's `xds_group_nacks_total`.
    group_nacks: Mutex<GroupNacks>,
}

/// NACKs by group label ([`group_label`]) and type. A group keeps the slot it got at its first
/// NACK for the life of the server, so the groups shown under their own label never change
/// between scrapes (a counter that moved to `(other)` and back would look reset). Groups past
/// [`MAX_GROUP_LABELS`] are counted in `overflow` only: with a cache that groups by node id, a
/// client picks its group, and the map must not grow with the clients.
#[derive(Debug, Default)]
struct GroupNacks {
    /// Label -> (slot, type label -> NACKs).
    groups: BTreeMap<String, (usize, BTreeMap<&'static str, u64>)>,
    /// The NACKs of streams with no group (`(none)`), which take no slot.
    ungrouped: BTreeMap<&'static str, u64>,
    overflow: BTreeMap<&'static str, u64>,
}

/// The most groups with a series of their own that the admin router's `/metrics` can show
/// ([`Admin::max_group_labels`](crate::admin::Admin::max_group_labels) is clamped to it): the
/// bound on the server's per-group NACK counters, kept whatever is shown.
pub const MAX_GROUP_LABELS: usize = 1000;

/// The most bytes of a group name a label value keeps (cut at a character boundary): a group
/// can be a node id, which a client chooses.
pub const MAX_GROUP_LABEL_BYTES: usize = 128;

/// The label value of streams whose cache does not group nodes (or that sent no request yet).
pub const NO_GROUP_LABEL: &str = "(none)";

/// The label value that sums the groups past the bound.
pub const OTHER_GROUP_LABEL: &str = "(other)";

/// The label value of a group: `(none)` for no group, the name cut to
/// [`MAX_GROUP_LABEL_BYTES`], and `(other)` for a group whose name is one of these two reserved
/// values (so that no series is written twice). Not escaped yet.
pub(crate) fn group_label(group: Option<&str>) -> &str {
    let Some(group) = group else { return NO_GROUP_LABEL };
    if group == NO_GROUP_LABEL || group == OTHER_GROUP_LABEL {
        return OTHER_GROUP_LABEL;
    }
    crate::status::truncate(group, MAX_GROUP_LABEL_BYTES)
}

impl Metrics {
    /// The counters of `variant` and `type_label`, made on first use. A stream keeps the handle
    /// ([`StreamCounters`]); other callers count through the methods below, which look it up.
    fn per_type(&self, variant: &'static str, type_label: &'static str) -> Arc<PerType> {
        let mut map = lock(&self.per_type);
        map.entry(variant).or_default().entry(type_label).or_default().clone()
    }

    #[cfg(test)]
    pub(crate) fn stream_opened(&self, variant: &'static str, type_label: &'static str) {
        self.per_type(variant, type_label).opened();
    }

    pub(crate) fn request(&self, variant: &'static str, type_label: &'static str) {
        self.per_type(variant, type_label).request();
    }

    pub(crate) fn response(&self, variant: &'static str, type_label: &'static str, bytes: usize) {
        self.per_type(variant, type_label).response(bytes);
    }

    #[cfg(test)]
    pub(crate) fn ack(
        &self,
        variant: &'static str,
        type_label: &'static str,
        latency: Option<Duration>,
    ) {
        self.per_type(variant, type_label).ack(latency);
    }

    pub(crate) fn nack(&self, variant: &'static str, type_label: &'static str) {
        self.per_type(variant, type_label).nack();
    }

    /// A NACK from a stream served from `group` (as of the NACK: a regroup moves streams).
    pub(crate) fn group_nack(&self, group: Option<&str>, type_label: &'static str) {
        let label = group_label(group);
        let mut guard = lock(&self.group_nacks);
        let nacks = &mut *guard;
        let counts = if label == NO_GROUP_LABEL {
            &mut nacks.ungrouped
        } else if nacks.groups.contains_key(label)
            || (nacks.groups.len() < MAX_GROUP_LABELS && label != OTHER_GROUP_LABEL)
        {
            let slot = nacks.groups.len();
            &mut nacks.groups.entry(label.to_owned()).or_insert((slot, BTreeMap::new())).1
        } else {
            &mut nacks.overflow
        };
        *counts.entry(type_label).or_default() += 1;
    }

    /// The per-group series of the admin router: `xds_group_streams` from `streams` (label ->
    /// open streams, labels from [`group_label`]) and `xds_group_nacks_total`. At most `max`
    /// groups get a label of their own, besides `(none)`: for streams the `max` with the most
    /// streams (then by name), for NACKs the first `max` groups that NACKed; the rest are summed
    /// under `(other)`. Sorted by label.
    pub(crate) fn render_groups(&self, streams: BTreeMap<String, u64>, max: usize) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP xds_group_streams xDS streams open, by the group the cache serves their node \
             from ((none): not grouped; (other): the groups past the label bound).\n\
             # TYPE xds_group_streams gauge"
        );
        let mut ranked: Vec<(&String, u64)> = streams
            .iter()
            .filter(|(g, _)| *g != NO_GROUP_LABEL && *g != OTHER_GROUP_LABEL)
            .map(|(g, n)| (g, *n))
            .collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let mut shown: BTreeMap<&str, u64> = BTreeMap::new();
        for (i, (group, n)) in ranked.into_iter().enumerate() {
            let label = if i < max { group.as_str() } else { OTHER_GROUP_LABEL };
            *shown.entry(label).or_default() += n;
        }
        for reserved in [NO_GROUP_LABEL, OTHER_GROUP_LABEL] {
            if let Some(n) = streams.get(reserved) {
                *shown.entry(reserved).or_default() += n;
            }
        }
        for (group, n) in shown {
            let _ = writeln!(out, "xds_group_streams{{group=\"{}\"}} {n}", escape(group));
        }
        let _ = writeln!(
            out,
            "# HELP xds_group_nacks_total Responses NACKed, by the group the stream was served \
             from and type.\n# TYPE xds_group_nacks_total counter"
        );
        let nacks = lock(&self.group_nacks);
        let mut shown: BTreeMap<&str, BTreeMap<&'static str, u64>> = BTreeMap::new();
        for (group, (slot, counts)) in &nacks.groups {
            let label = if *slot < max { group.as_str() } else { OTHER_GROUP_LABEL };
            let sums = shown.entry(label).or_default();
            for (t, n) in counts {
                *sums.entry(t).or_default() += n;
            }
        }
        for (label, extra) in
            [(NO_GROUP_LABEL, &nacks.ungrouped), (OTHER_GROUP_LABEL, &nacks.overflow)]
        {
            if extra.is_empty() {
                continue;
            }
            let sums = shown.entry(label).or_default();
            for (t, n) in extra {
                *sums.entry(t).or_default() += n;
            }
        }
        for (group, counts) in shown {
            let group = escape(group);
            for (t, n) in counts {
                let t = escape(t);
                let _ =
                    writeln!(out, "xds_group_nacks_total{{group=\"{group}\",type=\"{t}\"}} {n}");
            }
        }
        out
    }

    pub(crate) fn stale(&self, variant: &'static str, type_label: &'static str) {
        self.per_type(variant, type_label).stale();
    }

    pub(crate) fn refused(&self, reason: &'static str) {
        *lock(&self.refused).entry(reason).or_default() += 1;
    }

    /// A stream became unserved (`1`) or served again or ended (`-1`).
    pub(crate) fn unserved(&self, delta: i64) {
        self.unserved.fetch_add(delta, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn join_gate_passed(&self) {
        self.join_gate_passed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The ACK latency histogram summed over every variant and type, for the console's chart:
    /// one count per bucket of [`ACK_BUCKETS`] and a last one for `+Inf` (not cumulative).
    pub(crate) fn ack_histogram(&self) -> AckHistogram {
        let map = lock(&self.per_type);
        let mut h = AckHistogram {
            bounds: &ACK_BUCKETS,
            counts: vec![0; ACK_BUCKETS.len() + 1],
            count: 0,
            sum_seconds: 0.0,
        };
        for m in map.values().flat_map(|types| types.values()) {
            let ((buckets, count), mut bucketed) = (m.ack_buckets(), 0);
            for (total, n) in h.counts.iter_mut().zip(buckets) {
                *total += n;
                bucketed += n;
            }
            h.counts[ACK_BUCKETS.len()] += count - bucketed;
            h.count += count;
            h.sum_seconds += m.ack_seconds_sum();
        }
        h
    }

    /// The counters in Prometheus text exposition format.
    pub fn render(&self) -> String {
        let map = lock(&self.per_type);
        let mut out = String::new();
        let series: [Series; 7] = [
            (
                "xds_streams",
                "gauge",
                "Streams open, by variant and type (ADS streams count once per type they use).",
                |m| m.streams.load(Relaxed) as f64,
            ),
            ("xds_requests_total", "counter", "Requests received.", |m| {
                m.total(|s| &s.requests) as f64
            }),
            ("xds_responses_total", "counter", "Responses sent.", |m| {
                m.total(|s| &s.responses) as f64
            }),
            ("xds_response_bytes_total", "counter", "Bytes of resource bodies sent.", |m| {
                m.total(|s| &s.response_bytes) as f64
            }),
            ("xds_acks_total", "counter", "Responses ACKed.", |m| m.total(|s| &s.acks) as f64),
            ("xds_nacks_total", "counter", "Responses NACKed.", |m| m.total(|s| &s.nacks) as f64),
            ("xds_stale_requests_total", "counter", "Requests with a stale nonce.", |m| {
                m.total(|s| &s.stale) as f64
            }),
        ];
        for (name, kind, help, get) in series {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (variant, types) in map.iter() {
                for (t, m) in types {
                    let t = escape(t);
                    let _ =
                        writeln!(out, "{name}{{variant=\"{variant}\",type=\"{t}\"}} {}", get(m));
                }
            }
        }
        let _ = writeln!(
            out,
            "# HELP xds_ack_latency_seconds Seconds from sending a response to its ACK.\n\
             # TYPE xds_ack_latency_seconds histogram"
        );
        for (variant, t, m) in
            map.iter().flat_map(|(v, types)| types.iter().map(move |(t, m)| (v, t, m)))
        {
            let labels = format!("variant=\"{variant}\",type=\"{}\"", escape(t));
            // `+Inf` is the count: never below the buckets it contains.
            let (buckets, count) = m.ack_buckets();
            let mut cumulative = 0;
            for (le, n) in ACK_BUCKETS.iter().zip(buckets) {
                cumulative += n;
                let _ = writeln!(
                    out,
                    "xds_ack_latency_seconds_bucket{{{labels},le=\"{le}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                out,
                "xds_ack_latency_seconds_bucket{{{labels},le=\"+Inf\"}} {count}\n\
                 xds_ack_latency_seconds_sum{{{labels}}} {}\n\
                 xds_ack_latency_seconds_count{{{labels}}} {count}",
                m.ack_seconds_sum(),
            );
        }
        let _ = writeln!(
            out,
            "# HELP xds_refused_total Streams or requests refused, by reason.\n# TYPE xds_refused_total counter"
        );
        for (reason, n) in lock(&self.refused).iter() {
            let _ = writeln!(out, "xds_refused_total{{reason=\"{reason}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP xds_join_gate_passed_total Streams that waited for a join permit for \
             join_max_wait and went on ungated.\n# TYPE xds_join_gate_passed_total counter\n\
             xds_join_gate_passed_total {}",
            self.join_gate_passed.load(std::sync::atomic::Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP xds_streams_unserved Streams whose node is served nothing of a type it asked \
             for (its group has no configuration): they wait, or end after unserved_timeout.\n\
             # TYPE xds_streams_unserved gauge\nxds_streams_unserved {}",
            self.unserved.load(std::sync::atomic::Ordering::Relaxed).max(0)
        );
        out
    }
}

/// A label value in Prometheus text: backslash, quote and newline escaped (the values come from
/// a bounded set already; this keeps a custom type's configured name from breaking the format).
fn escape(v: &str) -> std::borrow::Cow<'_, str> {
    if !v.contains(['\\', '"', '\n']) {
        return v.into();
    }
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n").into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ack_histogram_sums_every_variant_and_type_with_an_overflow_bucket() {
        let m = Metrics::default();
        assert_eq!(m.ack_histogram().counts, vec![0; ACK_BUCKETS.len() + 1]);
        m.ack("sotw", "cluster", Some(Duration::from_millis(5)));
        m.ack("delta", "listener", Some(Duration::from_millis(4)));
        m.ack("sotw", "listener", Some(Duration::from_secs(60)));
        // An ACK with no measured latency counts on /metrics as an ACK, not in the histogram.
        m.ack("sotw", "cluster", None);
        let h = m.ack_histogram();
        assert_eq!(h.count, 3);
        assert_eq!(h.counts[1], 2, "5 ms and 4 ms fall in the 0.005 bucket");
        assert_eq!(h.counts[ACK_BUCKETS.len()], 1, "60 s is past the last bound");
        assert_eq!(h.counts.iter().sum::<u64>(), 3);
        assert!((h.sum_seconds - 60.009).abs() < 1e-9);
    }

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.stream_opened("sotw", "cluster");
        m.response("sotw", "cluster", 120);
        m.ack("sotw", "cluster", Some(Duration::from_millis(5)));
        m.nack("sotw", "cluster");
        m.refused("rate_limit");
        let text = m.render();
        assert!(text.contains("xds_streams{variant=\"sotw\",type=\"cluster\"} 1"));
        // The ACK latency is a histogram: 5 ms falls in the 0.005 bucket and every one above.
        assert!(text.contains("# TYPE xds_ack_latency_seconds histogram"));
        let bucket = |le: &str| {
            format!(
                "xds_ack_latency_seconds_bucket{{variant=\"sotw\",type=\"cluster\",le=\"{le}\"}}"
            )
        };
        assert!(text.contains(&format!("{} 0", bucket("0.001"))), "{text}");
        assert!(text.contains(&format!("{} 1", bucket("0.005"))), "{text}");
        assert!(text.contains(&format!("{} 1", bucket("+Inf"))), "{text}");
        assert!(
            text.contains("xds_ack_latency_seconds_count{variant=\"sotw\",type=\"cluster\"} 1")
        );
        assert!(text.contains("xds_response_bytes_total{variant=\"sotw\",type=\"cluster\"} 120"));
        assert!(text.contains("xds_nacks_total{variant=\"sotw\",type=\"cluster\"} 1"));
        assert!(
            text.contains("xds_ack_latency_seconds_count{variant=\"sotw\",type=\"cluster\"} 1")
        );
        assert!(text.contains("xds_refused_total{reason=\"rate_limit\"} 1"));
    }

    /// Counts made on many threads, each in its thread's shard, add up in a scrape: every
    /// request, response, byte, ACK and latency counted once, whichever shard took it.
    #[test]
    fn counts_from_many_threads_add_up_over_the_shards() {
        let m = Metrics::default();
        let threads = 2 * SHARDS + 3;
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    for _ in 0..100 {
                        m.request("delta", "cluster");
                        m.response("delta", "cluster", 10);
                        m.ack("delta", "cluster", Some(Duration::from_millis(2)));
                    }
                    m.nack("delta", "cluster");
                    m.stale("delta", "cluster");
                });
            }
        });
        let per_type = m.per_type("delta", "cluster");
        let used = per_type.shards.iter().filter(|s| s.requests.load(Relaxed) > 0).count();
        assert!(used > 1, "the threads counted in more than one shard");
        let n = 100 * threads;
        let text = m.render();
        for (series, value) in [
            ("xds_requests_total", n),
            ("xds_responses_total", n),
            ("xds_response_bytes_total", 10 * n),
            ("xds_acks_total", n),
            ("xds_nacks_total", threads),
            ("xds_stale_requests_total", threads),
            ("xds_ack_latency_seconds_count", n),
        ] {
            let line = format!("{series}{{variant=\"delta\",type=\"cluster\"}} {value}\n");
            assert!(text.contains(&line), "{line} in {text}");
        }
        let h = m.ack_histogram();
        assert_eq!((h.count, h.counts[1]), (n as u64, n as u64), "2 ms: the 0.005 bucket");
        assert!((h.sum_seconds - 0.002 * n as f64).abs() < 1e-6);
    }

    /// A thread keeps its shard: its counts are all in one, so that the counting itself writes
    /// nothing another thread writes (a shard picked at each count would be a shared write
    /// again).
    #[test]
    fn a_thread_counts_in_one_shard() {
        let m = Metrics::default();
        std::thread::scope(|scope| {
            scope.spawn(|| (0..100).for_each(|_| m.request("delta", "listener")));
        });
        let per_type = m.per_type("delta", "listener");
        let counts: Vec<u64> = per_type.shards.iter().map(|s| s.requests.load(Relaxed)).collect();
        assert_eq!(counts.iter().filter(|&&n| n > 0).count(), 1, "{counts:?}");
        assert_eq!(counts.iter().sum::<u64>(), 100);
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(escape("cluster"), "cluster");
    }

    #[test]
    fn group_labels_are_bounded_cut_and_reserved() {
        assert_eq!(group_label(None), NO_GROUP_LABEL);
        assert_eq!(group_label(Some("edge")), "edge");
        assert_eq!(group_label(Some(NO_GROUP_LABEL)), OTHER_GROUP_LABEL);
        assert_eq!(group_label(Some(OTHER_GROUP_LABEL)), OTHER_GROUP_LABEL);
        let long = "é".repeat(MAX_GROUP_LABEL_BYTES);
        let cut = group_label(Some(&long));
        assert!(cut.len() <= MAX_GROUP_LABEL_BYTES && long.starts_with(cut), "{cut}");
    }

    #[test]
    fn group_nacks_keep_their_slot_and_stop_growing() {
        let m = Metrics::default();
        m.group_nack(None, "cluster");
        for i in 0..MAX_GROUP_LABELS + 5 {
            m.group_nack(Some(&format!("g{i:04}")), "cluster");
        }
        // The first groups keep their slot whatever comes later; (none) takes none.
        m.group_nack(Some("g0000"), "listener");
        let nacks = lock(&m.group_nacks);
        assert_eq!(nacks.groups.len(), MAX_GROUP_LABELS);
        assert_eq!(nacks.groups["g0000"].0, 0);
        assert_eq!(nacks.overflow["cluster"], 5);
        assert_eq!(nacks.ungrouped["cluster"], 1);
        drop(nacks);
        let text = m.render_groups(BTreeMap::new(), 2);
        let lines: Vec<&str> =
            text.lines().filter(|l| l.starts_with("xds_group_nacks_total")).collect();
        assert_eq!(
            lines,
            [
                "xds_group_nacks_total{group=\"(none)\",type=\"cluster\"} 1",
                "xds_group_nacks_total{group=\"(other)\",type=\"cluster\"} 1003",
                "xds_group_nacks_total{group=\"g0000\",type=\"cluster\"} 1",
                "xds_group_nacks_total{group=\"g0000\",type=\"listener\"} 1",
                "xds_group_nacks_total{group=\"g0001\",type=\"cluster\"} 1",
            ]
        );
    }
}
