//! Limits and options of the server, with safe defaults.

use std::time::Duration;

use xds_proto::CustomType;
use xds_proto::pb::envoy::config::core::v3::Node;

/// Limits that keep one client from hurting the server or other clients. Each limit hit ends
/// only the offending stream or request, with a status that names the limit.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Limits {
    /// The largest request message accepted, in bytes (`ResourceExhausted` beyond; default 4 MiB).
    pub max_request_bytes: usize,
    /// The most resource names one request may carry (`InvalidArgument` beyond; default
    /// 262,144, as `max_subscribed_names`: an Envoy of 100,000 clusters subscribes to all their
    /// endpoints in one request, and `max_request_bytes` bounds the request's size anyway).
    pub max_names_per_request: usize,
    /// The most streams open at once across the server, REST and unary fetches included (a held
    /// long poll costs what a stream does) (`ResourceExhausted`, or HTTP 429, beyond; default
    /// 100,000).
    pub max_streams: usize,
    /// Requests per second one stream may send on average (`ResourceExhausted` beyond; default
    /// 100). A client spinning requests cannot burn the server's CPU.
    pub max_requests_per_second: u32,
    /// Requests one stream may send in a burst above the average (default 1,000: a proxy
    /// subscribing to many types at start-up stays well inside).
    pub request_burst: u32,
    /// How many names one stream may be subscribed to for one type (`ResourceExhausted` beyond;
    /// default 262,144). Delta subscriptions add up across requests, so this, not
    /// `max_names_per_request`, bounds what a stream holds.
    pub max_subscribed_names: usize,
    /// The longest node id, and the longest node cluster, accepted in bytes (`InvalidArgument`
    /// beyond; default 4 KiB). A node is kept for the stream's life and shown in status, CSDS and
    /// logs, so what a peer puts there is bounded like everything else it sends.
    pub max_node_id_bytes: usize,
    /// The largest `Node` accepted, encoded, in bytes: metadata, locality, extensions and all
    /// (`InvalidArgument` beyond; default 64 KiB, well above what Envoy or Istio send).
    pub max_node_bytes: usize,
}

/// Chainable setters, one per field: the struct is `#[non_exhaustive]` (a new knob is not a
/// breaking change), so code outside this crate builds one from `Limits::default()`.
impl Limits {
    /// Sets `max_request_bytes` (see the field).
    #[must_use]
    pub fn max_request_bytes(mut self, value: usize) -> Self {
        self.max_request_bytes = value;
        self
    }

    /// Sets `max_names_per_request` (see the field).
    #[must_use]
    pub fn max_names_per_request(mut self, value: usize) -> Self {
        self.max_names_per_request = value;
        self
    }

    /// Sets `max_streams` (see the field).
    #[must_use]
    pub fn max_streams(mut self, value: usize) -> Self {
        self.max_streams = value;
        self
    }

    /// Sets `max_requests_per_second` (see the field).
    #[must_use]
    pub fn max_requests_per_second(mut self, value: u32) -> Self {
        self.max_requests_per_second = value;
        self
    }

    /// Sets `request_burst` (see the field).
    #[must_use]
    pub fn request_burst(mut self, value: u32) -> Self {
        self.request_burst = value;
        self
    }

    /// Sets `max_subscribed_names` (see the field).
    #[must_use]
    pub fn max_subscribed_names(mut self, value: usize) -> Self {
        self.max_subscribed_names = value;
        self
    }

    /// Sets `max_node_id_bytes` (see the field).
    #[must_use]
    pub fn max_node_id_bytes(mut self, value: usize) -> Self {
        self.max_node_id_bytes = value;
        self
    }

    /// Sets `max_node_bytes` (see the field).
    #[must_use]
    pub fn max_node_bytes(mut self, value: usize) -> Self {
        self.max_node_bytes = value;
        self
    }
}

impl Limits {
    /// Checks a client's node against `max_node_id_bytes` and `max_node_bytes`; the error names
    /// the field and the limit.
    pub fn check_node(&self, node: &Node) -> Result<(), String> {
        for (field, value) in [("id", &node.id), ("cluster", &node.cluster)] {
            if value.len() > self.max_node_id_bytes {
                return Err(format!(
                    "node.{field} is {} bytes, more than the limit of {}",
                    value.len(),
                    self.max_node_id_bytes
                ));
            }
        }
        let size = prost::Message::encoded_len(node);
        if size > self.max_node_bytes {
            return Err(format!(
                "the node is {size} bytes encoded, more than the limit of {}",
                self.max_node_bytes
            ));
        }
        Ok(())
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_bytes: 4 << 20,
            max_names_per_request: 1 << 18,
            max_streams: 100_000,
            max_requests_per_second: 100,
            request_burst: 1_000,
            max_subscribed_names: 1 << 18,
            max_node_id_bytes: 4 << 10,
            max_node_bytes: 64 << 10,
        }
    }
}

/// How the server behaves.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Limits per request and stream.
    pub limits: Limits,
    /// Serve streams whose first request carries no node (rule S2; default: refuse them).
    pub allow_anonymous: bool,
    /// `ControlPlane.identifier` put in every response, if set.
    pub control_plane_id: Option<String>,
    /// Custom resource types with their protocol traits (wildcard, full state); any other
    /// unknown type URL is passed to the cache as a plain custom type.
    pub custom_types: Vec<CustomType>,
    /// How long a REST long poll (or unary fetch) at the current version waits for a change
    /// (default 30 s).
    pub fetch_timeout: Duration,
    /// How long [`XdsServer::drain`](crate::XdsServer::drain) waits for streams to end after
    /// shutdown before it returns (default 5 s).
    pub shutdown_grace: Duration,
    /// The join gate: how many joining streams the server computes and writes responses for at
    /// once; the others wait, streams partway through their join first, then new ones in
    /// arrival order (0: no gate). In a storm, when every client reconnects at once, served
    /// round-robin every joiner finishes last; served a few at a time, the first to arrive are
    /// done first and the median client holds its configuration in a fraction of the storm.
    /// A permit covers the server's work, not the client's answer: it is given back once the
    /// stream's responses were taken by the transport, so a client that never acknowledges
    /// holds nobody up. Default: twice the cores. Streams that hold their configuration
    /// (updates) never wait on the gate.
    pub join_permits: usize,
    /// The longest a stream holds a permit (default 5 s): a client that stops reading blocks
    /// its write, and after this the stream goes on ungated.
    pub join_timeout: Duration,
    /// Rule C4: responses carry `resource_errors` (default: on). A subscribed name that does not
    /// exist is answered `NOT_FOUND` there (on delta beside rule D6's bodiless resource), a name
    /// the policy refuses `PERMISSION_DENIED`, a malformed one `INVALID_ARGUMENT`, and a cache's
    /// own errors go with them. TP3 has the server send the field to every client: one that
    /// does not know it skips it as an unknown field, and gRPC (A88) reads it whenever present.
    /// Turn it off only for a client known to break on the field; none is known (Envoy and
    /// grpcio 1.85 ignore it). Off, a missing name gets rule D6 (delta) or silence (SotW), and a
    /// refused name no answer.
    pub resource_errors: bool,
    /// The longest a stream waits for a permit (default 10 s); it then goes on ungated (counted
    /// in `xds_join_gate_passed_total`). Whatever other streams do, no client waits longer than
    /// this for its turn. Keep it above the time the largest storm takes to serve: past it, the
    /// rest of a storm is served all at once, round-robin.
    pub join_max_wait: Duration,
    /// How long a stream waits while the cache serves its node nothing of a type it asked for
    /// (a node whose group has no configuration: a typo in a node id, a group not published
    /// yet) before it ends with `FAILED_PRECONDITION` naming the node and group; the client
    /// retries, on another replica or once the group exists. `None` (the default): it waits
    /// until the configuration arrives. Either way the wait is visible: `unserved_since_ms` in
    /// the stream's status and the `xds_streams_unserved` gauge. Keep it above the time the
    /// configuration takes to arrive after a restart (`Duration::ZERO` refuses at once).
    pub unserved_timeout: Option<Duration>,
    /// How many of its latest events each stream keeps for its status page and the operator
    /// console's detail view (default 16; 0 keeps none): subscriptions, responses sent (and
    /// whether ACKed), NACKs with their text, regroups. Each costs ~100 bytes per stream once the ring fills,
    /// so 16 add ~1.6 KiB to a client's ~55 KiB.
    pub stream_events: usize,
}

/// Chainable setters, one per field: the struct is `#[non_exhaustive]` (a new knob is not a
/// breaking change), so code outside this crate builds one from `ServerConfig::default()`.
impl ServerConfig {
    /// Sets `limits` (see the field).
    #[must_use]
    pub fn limits(mut self, value: Limits) -> Self {
        self.limits = value;
        self
    }

    /// Sets `allow_anonymous` (see the field).
    #[must_use]
    pub fn allow_anonymous(mut self, value: bool) -> Self {
        self.allow_anonymous = value;
        self
    }

    /// Sets `control_plane_id` (see the field) to `Some(value)`.
    #[must_use]
    pub fn control_plane_id(mut self, value: impl Into<String>) -> Self {
        self.control_plane_id = Some(value.into());
        self
    }

    /// Sets `custom_types` (see the field), replacing the list.
    #[must_use]
    pub fn custom_types(mut self, values: impl IntoIterator<Item = CustomType>) -> Self {
        self.custom_types = values.into_iter().collect();
        self
    }

    /// Sets `fetch_timeout` (see the field).
    #[must_use]
    pub fn fetch_timeout(mut self, value: Duration) -> Self {
        self.fetch_timeout = value;
        self
    }

    /// Sets `shutdown_grace` (see the field).
    #[must_use]
    pub fn shutdown_grace(mut self, value: Duration) -> Self {
        self.shutdown_grace = value;
        self
    }

    /// Sets `join_permits` (see the field).
    #[must_use]
    pub fn join_permits(mut self, value: usize) -> Self {
        self.join_permits = value;
        self
    }

    /// Sets `join_timeout` (see the field).
    #[must_use]
    pub fn join_timeout(mut self, value: Duration) -> Self {
        self.join_timeout = value;
        self
    }

    /// Sets `resource_errors` (see the field).
    #[must_use]
    pub fn resource_errors(mut self, value: bool) -> Self {
        self.resource_errors = value;
        self
    }

    /// Sets `join_max_wait` (see the field).
    #[must_use]
    pub fn join_max_wait(mut self, value: Duration) -> Self {
        self.join_max_wait = value;
        self
    }

    /// Sets `unserved_timeout` (see the field): a `Duration`, or `None` to wait.
    #[must_use]
    pub fn unserved_timeout(mut self, value: impl Into<Option<Duration>>) -> Self {
        self.unserved_timeout = value.into();
        self
    }

    /// Sets `stream_events` (see the field).
    #[must_use]
    pub fn stream_events(mut self, value: usize) -> Self {
        self.stream_events = value;
        self
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            limits: Limits::default(),
            allow_anonymous: false,
            control_plane_id: None,
            custom_types: Vec::new(),
            fetch_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(5),
            join_permits: std::thread::available_parallelism().map_or(2, |n| n.get()) * 2,
            join_timeout: Duration::from_secs(5),
            resource_errors: true,
            join_max_wait: Duration::from_secs(10),
            unserved_timeout: None,
            stream_events: 16,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builder_sets_every_knob_and_the_server_reads_it_back() {
        let cache = xds_cache::SnapshotCache::by_node_id();
        let server = crate::XdsServer::builder(cache)
            .config(ServerConfig::default().fetch_timeout(Duration::from_secs(1)))
            .allow_anonymous(true)
            .control_plane_id("cp-1")
            .limits(Limits::default().max_streams(7).max_node_bytes(1 << 10))
            .custom_types([CustomType::new("type.googleapis.com/x.Y")])
            .shutdown_grace(Duration::from_secs(2))
            .join_permits(3)
            .join_timeout(Duration::from_secs(4))
            .resource_errors(false)
            .join_max_wait(Duration::from_secs(6))
            .stream_events(3)
            .build();
        let config = server.config();
        assert!(config.allow_anonymous && !config.resource_errors);
        assert_eq!(config.control_plane_id.as_deref(), Some("cp-1"));
        assert_eq!((config.limits.max_streams, config.limits.max_node_bytes), (7, 1 << 10));
        // What the setters left alone keeps its default.
        assert_eq!(config.limits.max_request_bytes, Limits::default().max_request_bytes);
        assert_eq!(config.custom_types.len(), 1);
        assert_eq!(config.fetch_timeout, Duration::from_secs(1));
        assert_eq!(config.shutdown_grace, Duration::from_secs(2));
        assert_eq!((config.join_permits, config.join_timeout), (3, Duration::from_secs(4)));
        assert_eq!(config.join_max_wait, Duration::from_secs(6));
        assert_eq!(config.stream_events, 3);
    }
}
