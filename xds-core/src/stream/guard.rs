//! Stream-level checks that come before any sub-stream: who the client is (rule S2) and which
//! type a request is for (rule S3).

/// A request the stream refuses. The server answers `InvalidArgument` with this message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// Rule S2: the first request of a stream carried no node and anonymous nodes are not allowed.
    #[error("the first request of a stream must carry a node")]
    MissingNode,
    /// Rule S3: an aggregated (ADS) request without `type_url`.
    #[error("an aggregated (ADS) request must carry a type_url")]
    MissingTypeUrl,
    /// A stream sent requests faster than its rate limit allows.
    #[error("too many requests: a stream may send {rate} per second (burst {burst})")]
    RateLimited {
        /// Requests per second allowed on average.
        rate: u32,
        /// Requests allowed at once.
        burst: u32,
    },
    /// A request named more resources than a request may.
    #[error("a request may name at most {max} resources, this one names {got}")]
    TooManyNames {
        /// The limit.
        max: usize,
        /// How many the request named.
        got: usize,
    },
    /// A sub-stream's subscription grew past the stream's limit.
    #[error(
        "a stream may subscribe to at most {max} names of one type; {} now has {got}",
        crate::echo(type_url)
    )]
    TooManySubscribed {
        /// The limit.
        max: usize,
        /// How many names the subscription holds.
        got: usize,
        /// The sub-stream's type.
        type_url: String,
    },
    /// Rule S3: a per-type request whose `type_url` is not the service's.
    #[error("type_url {} does not match the service's type {expected}", crate::echo(got))]
    TypeUrlMismatch {
        /// The service's type URL.
        expected: String,
        /// The request's type URL.
        got: String,
    },
}

/// The stream-level state: the node, remembered from the first request, and the type a per-type
/// stream serves.
///
/// Call [`check`](Self::check) with every request before handing it to its sub-stream.
#[derive(Clone, Debug)]
pub struct StreamGuard<N> {
    node: Option<N>,
    started: bool,
    allow_anonymous: bool,
    service_type: Option<String>,
}

impl<N> StreamGuard<N> {
    /// The guard of an aggregated (ADS) stream: every request names its type.
    pub fn aggregated(allow_anonymous: bool) -> Self {
        StreamGuard { node: None, started: false, allow_anonymous, service_type: None }
    }

    /// The guard of a per-type stream (`StreamClusters`, `DeltaListeners`, ...) serving `type_url`.
    pub fn per_type(type_url: impl Into<String>, allow_anonymous: bool) -> Self {
        StreamGuard {
            node: None,
            started: false,
            allow_anonymous,
            service_type: Some(type_url.into()),
        }
    }

    /// Checks one request and returns the type URL it is for.
    ///
    /// Rule S2: only the first request is sure to carry the node; it is remembered, and later
    /// requests may leave it out (a later node is ignored: a stream belongs to one node). Rule S3:
    /// on ADS the type URL is required; on a per-type stream it may be empty and is implied, and a
    /// different one is refused.
    pub fn check<'a>(
        &'a mut self,
        node: Option<N>,
        type_url: &'a str,
    ) -> Result<&'a str, StreamError> {
        if !self.started {
            if node.is_none() && !self.allow_anonymous {
                return Err(StreamError::MissingNode);
            }
            self.node = node;
            self.started = true;
        }
        match &self.service_type {
            None if type_url.is_empty() => Err(StreamError::MissingTypeUrl),
            None => Ok(type_url),
            Some(expected) if type_url.is_empty() || type_url == expected => Ok(expected),
            Some(expected) => Err(StreamError::TypeUrlMismatch {
                expected: expected.clone(),
                got: type_url.to_owned(),
            }),
        }
    }

    /// Whether a first request was accepted: the node is known.
    pub fn is_started(&self) -> bool {
        self.started
    }

    /// Whether the stream is aggregated (ADS): each request names its type.
    pub fn is_aggregated(&self) -> bool {
        self.service_type.is_none()
    }

    /// The node of the stream's first request (`None` before it, or for an anonymous client).
    pub fn node(&self) -> Option<&N> {
        self.node.as_ref()
    }

    /// The node, by value: a one-shot fetch checks its one request and keeps only the node.
    pub fn into_node(self) -> Option<N> {
        self.node
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s02_node_is_remembered_from_the_first_request() {
        let mut g = StreamGuard::aggregated(false);
        assert_eq!(g.check(None, "t"), Err(StreamError::MissingNode));
        // Refused requests do not start the stream.
        assert_eq!(g.node(), None);
        assert_eq!(g.check(Some("envoy-1"), "t"), Ok("t"));
        // Later requests may leave the node out; a different one does not replace it.
        assert_eq!(g.check(None, "t"), Ok("t"));
        assert_eq!(g.check(Some("other"), "t"), Ok("t"));
        assert_eq!(g.node(), Some(&"envoy-1"));
    }

    #[test]
    fn s02_anonymous_nodes_when_allowed() {
        let mut g = StreamGuard::<&str>::aggregated(true);
        assert_eq!(g.check(None, "t"), Ok("t"));
        assert_eq!(g.node(), None);
    }

    #[test]
    fn s03_type_url_required_on_ads_implied_per_type() {
        let mut ads = StreamGuard::aggregated(false);
        assert_eq!(ads.check(Some(1), ""), Err(StreamError::MissingTypeUrl));
        assert_eq!(ads.check(Some(1), "a.B"), Ok("a.B"));
        let mut cds = StreamGuard::per_type("x.Cluster", false);
        assert_eq!(cds.check(Some(1), ""), Ok("x.Cluster"));
        assert_eq!(cds.check(None, "x.Cluster"), Ok("x.Cluster"));
        let err = cds.check(None, "x.Listener").unwrap_err();
        assert_eq!(
            err.to_string(),
            "type_url x.Listener does not match the service's type x.Cluster"
        );
    }
}
