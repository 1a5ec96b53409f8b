//! The part of etcd's v3 gRPC API this crate speaks (`etcdserverpb.KV` Range/Txn/Compact and
//! `etcdserverpb.Watch`), written out as prost messages by hand.
//!
//! Why not the `etcd-client` crate: its build script compiles etcd's `.proto` files with
//! `tonic-prost-build`, which needs the `protoc` binary on the build machine; the project builds
//! with the Rust toolchain alone. The messages below carry only the fields this crate reads or
//! writes, with etcd's field numbers (protobuf skips unknown fields, so a newer etcd's additions
//! are ignored), and the client is tonic's generic [`Grpc`] over the same channel type as the
//! rest of the workspace.

use std::time::Duration;

use tonic::client::Grpc;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};
use tonic_prost::ProstCodec;

/// Every response's header: the store revision the response reflects.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResponseHeader {
    /// The etcd cluster.
    #[prost(uint64, tag = "1")]
    pub cluster_id: u64,
    /// The member that answered.
    #[prost(uint64, tag = "2")]
    pub member_id: u64,
    /// The store's revision when the request was served.
    #[prost(int64, tag = "3")]
    pub revision: i64,
}

/// One key and its value (`mvccpb.KeyValue`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    /// The key.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// The revision that created the key.
    #[prost(int64, tag = "2")]
    pub create_revision: i64,
    /// The revision that last changed the key.
    #[prost(int64, tag = "3")]
    pub mod_revision: i64,
    /// The value.
    #[prost(bytes = "vec", tag = "5")]
    pub value: Vec<u8>,
}

/// Reads the keys in `[key, range_end)`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeRequest {
    /// The first key.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// One past the last key (see [`prefix_end`]).
    #[prost(bytes = "vec", tag = "2")]
    pub range_end: Vec<u8>,
    /// At most this many keys (0: no limit).
    #[prost(int64, tag = "3")]
    pub limit: i64,
    /// The revision to read at (0: the newest).
    #[prost(int64, tag = "4")]
    pub revision: i64,
    /// Only the keys, not their values.
    #[prost(bool, tag = "8")]
    pub keys_only: bool,
}

/// The keys read.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeResponse {
    /// The revision the keys were read at.
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    /// The keys.
    #[prost(message, repeated, tag = "2")]
    pub kvs: Vec<KeyValue>,
    /// Whether more keys were left out (never, without a limit).
    #[prost(bool, tag = "3")]
    pub more: bool,
}

/// Writes one key.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PutRequest {
    /// The key.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// The value.
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// Deletes the keys in `[key, range_end)` (just `key` when `range_end` is empty).
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteRangeRequest {
    /// The key.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// One past the last key, or empty.
    #[prost(bytes = "vec", tag = "2")]
    pub range_end: Vec<u8>,
}

/// One operation of a transaction.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RequestOp {
    /// The operation.
    #[prost(oneof = "request_op::Request", tags = "1, 2, 3")]
    pub request: Option<request_op::Request>,
}

/// [`RequestOp`]'s variants.
pub mod request_op {
    /// One operation.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Request {
        /// Read keys.
        #[prost(message, tag = "1")]
        RequestRange(super::RangeRequest),
        /// Write a key.
        #[prost(message, tag = "2")]
        RequestPut(super::PutRequest),
        /// Delete keys.
        #[prost(message, tag = "3")]
        RequestDeleteRange(super::DeleteRangeRequest),
    }
}

/// A transaction's guard: compares a key's (or every key of a range's) creation or modification
/// revision with a number. A key that does not exist compares as revision 0.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Compare {
    /// 0 EQUAL, 1 GREATER, 2 LESS, 3 NOT_EQUAL.
    #[prost(int32, tag = "1")]
    pub result: i32,
    /// 0 VERSION, 1 CREATE, 2 MOD, 3 VALUE, 4 LEASE.
    #[prost(int32, tag = "2")]
    pub target: i32,
    /// The key (the first of the range).
    #[prost(bytes = "vec", tag = "3")]
    pub key: Vec<u8>,
    /// The revision compared with, for target CREATE.
    #[prost(int64, optional, tag = "5")]
    pub create_revision: Option<i64>,
    /// The revision compared with, for target MOD.
    #[prost(int64, optional, tag = "6")]
    pub mod_revision: Option<i64>,
    /// One past the last key: the comparison holds for every key of the range.
    #[prost(bytes = "vec", tag = "64")]
    pub range_end: Vec<u8>,
}

/// `Compare::result` EQUAL.
pub const COMPARE_EQUAL: i32 = 0;
/// `Compare::result` LESS.
pub const COMPARE_LESS: i32 = 2;
/// `Compare::target` CREATE.
pub const TARGET_CREATE: i32 = 1;
/// `Compare::target` MOD.
pub const TARGET_MOD: i32 = 2;

/// An atomic transaction: `success` runs if every `compare` holds, else `failure`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnRequest {
    /// The guards.
    #[prost(message, repeated, tag = "1")]
    pub compare: Vec<Compare>,
    /// What runs when every guard holds.
    #[prost(message, repeated, tag = "2")]
    pub success: Vec<RequestOp>,
    /// What runs otherwise.
    #[prost(message, repeated, tag = "3")]
    pub failure: Vec<RequestOp>,
}

/// What a transaction did.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnResponse {
    /// The revision after the transaction.
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    /// Whether the guards held (and `success` ran).
    #[prost(bool, tag = "2")]
    pub succeeded: bool,
    /// One answer per operation that ran (`success`'s or `failure`'s).
    #[prost(message, repeated, tag = "3")]
    pub responses: Vec<ResponseOp>,
}

/// The answer to one operation of a transaction (only reads are decoded).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResponseOp {
    /// The answer to a [`request_op::Request::RequestRange`].
    #[prost(message, optional, tag = "1")]
    pub response_range: Option<RangeResponse>,
}

/// Discards the history before `revision`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CompactionRequest {
    /// The first revision kept.
    #[prost(int64, tag = "1")]
    pub revision: i64,
    /// Wait until the compaction is applied to the backend.
    #[prost(bool, tag = "2")]
    pub physical: bool,
}

/// A compaction's answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CompactionResponse {
    /// The revision when compacted.
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
}

/// A message on the watch stream from the client.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchRequest {
    /// What to do.
    #[prost(oneof = "watch_request::RequestUnion", tags = "1, 3")]
    pub request_union: Option<watch_request::RequestUnion>,
}

/// [`WatchRequest`]'s variants.
pub mod watch_request {
    /// What to do.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum RequestUnion {
        /// Start a watch.
        #[prost(message, tag = "1")]
        CreateRequest(super::WatchCreateRequest),
        /// Ask for a progress notification: etcd answers with a response of no events whose
        /// header revision every event up to has been sent, once the watch has caught up.
        #[prost(message, tag = "3")]
        ProgressRequest(super::WatchProgressRequest),
    }
}

/// Asks etcd where a caught-up watch stands (etcd 3.4 and later).
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchProgressRequest {}

/// Starts watching `[key, range_end)` from `start_revision`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchCreateRequest {
    /// The first key.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// One past the last key.
    #[prost(bytes = "vec", tag = "2")]
    pub range_end: Vec<u8>,
    /// The first revision whose events are sent (0: from now).
    #[prost(int64, tag = "3")]
    pub start_revision: i64,
    /// Ask etcd for periodic empty responses carrying the current revision while idle.
    #[prost(bool, tag = "4")]
    pub progress_notify: bool,
}

/// A message on the watch stream from etcd: events, or the watch's creation or cancellation.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchResponse {
    /// The store's revision.
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    /// The watch this is about.
    #[prost(int64, tag = "2")]
    pub watch_id: i64,
    /// The watch was created.
    #[prost(bool, tag = "3")]
    pub created: bool,
    /// The watch was cancelled (see `compact_revision` and `cancel_reason`).
    #[prost(bool, tag = "4")]
    pub canceled: bool,
    /// Non-zero: the start revision was compacted; history begins here.
    #[prost(int64, tag = "5")]
    pub compact_revision: i64,
    /// Why the watch was cancelled.
    #[prost(string, tag = "6")]
    pub cancel_reason: String,
    /// The events, in revision order; one revision's events never straddle two responses.
    #[prost(message, repeated, tag = "11")]
    pub events: Vec<Event>,
}

/// One key's change.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    /// 0 PUT, 1 DELETE.
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    /// The key after the change (for a delete: the key and the deleting revision).
    #[prost(message, optional, tag = "2")]
    pub kv: Option<KeyValue>,
}

/// `Event::type` DELETE.
pub const EVENT_DELETE: i32 = 1;

/// The largest etcd response decoded: a Range of the whole prefix is one message.
pub const MAX_RESPONSE_BYTES: usize = 1 << 30;

/// One past the last key starting with `prefix`: the `range_end` that makes a range a prefix.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff (or empty): every key from `prefix` on.
    vec![0]
}

/// What one [`EtcdClient::probe`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probed {
    /// The store's newest revision.
    pub store_revision: i64,
    /// The revision the probed key was last written at (0 when it does not exist).
    pub key_revision: i64,
}

/// A connection to an etcd cluster: the KV and Watch services over one HTTP/2 channel.
#[derive(Clone, Debug)]
pub struct EtcdClient {
    grpc: Grpc<Channel>,
}

/// The request timeout of unary calls: an etcd that accepted the connection but does not answer
/// must not hang a publish or a reload.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

impl EtcdClient {
    /// A client for `endpoints` (`http://host:port`, several for a cluster: requests are spread
    /// over the ones that answer). Connects lazily: the first call fails if no endpoint answers.
    /// HTTP/2 keepalive detects an etcd that vanished without closing the connection.
    ///
    /// # Errors
    ///
    /// An endpoint that is not a valid URI.
    pub fn new(endpoints: &[String]) -> Result<EtcdClient, tonic::transport::Error> {
        let endpoints = endpoints
            .iter()
            .map(|e| {
                let uri = if e.contains("://") { e.clone() } else { format!("http://{e}") };
                Endpoint::from_shared(uri).map(|e| {
                    e.connect_timeout(Duration::from_secs(3))
                        .http2_keep_alive_interval(Duration::from_secs(5))
                        .keep_alive_timeout(Duration::from_secs(5))
                        .keep_alive_while_idle(true)
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        // One endpoint: a lazy channel fails fast while etcd is down (a balanced one would wait
        // for an endpoint to come back).
        let channel = match <[Endpoint; 1]>::try_from(endpoints) {
            Ok([one]) => one.connect_lazy(),
            Err(many) => Channel::balance_list(many.into_iter()),
        };
        // tonic decodes at most 4 MiB per message by default, and one Range of the whole prefix (or
        // one watch response of a big transaction) carries the whole configuration: a replica
        // could not load more than ~4 MiB of resources. etcd is the trusted source; its own
        // default database quota (2 GiB) is what bounds it, and this bound sits at half that.
        let grpc = Grpc::new(channel).max_decoding_message_size(MAX_RESPONSE_BYTES);
        Ok(EtcdClient { grpc })
    }

    async fn unary<Q, R>(&self, path: &'static str, request: Q) -> Result<R, tonic::Status>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = self.grpc.clone();
        let call = async move {
            grpc.ready().await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
            let response = grpc
                .unary(
                    tonic::Request::new(request),
                    PathAndQuery::from_static(path),
                    ProstCodec::<Q, R>::default(),
                )
                .await?;
            Ok(response.into_inner())
        };
        tokio::time::timeout(CALL_TIMEOUT, call).await.unwrap_or_else(|_| {
            Err(tonic::Status::deadline_exceeded("etcd did not answer in 10 s"))
        })
    }

    /// Every key starting with `prefix`, read at one revision.
    pub async fn range_prefix(&self, prefix: &[u8]) -> Result<RangeResponse, tonic::Status> {
        let request = RangeRequest {
            key: prefix.to_vec(),
            range_end: prefix_end(prefix),
            ..RangeRequest::default()
        };
        self.unary("/etcdserverpb.KV/Range", request).await
    }

    /// One key (none in the answer when it does not exist).
    pub async fn get(&self, key: &[u8]) -> Result<RangeResponse, tonic::Status> {
        let request = RangeRequest { key: key.to_vec(), ..RangeRequest::default() };
        self.unary("/etcdserverpb.KV/Range", request).await
    }

    /// A cheap read that etcd answers only when its raft log serves reads (a linearizable Range
    /// of at most one key, keys only), failing after `timeout`: whether the store answers now,
    /// its newest revision and the revision `key` was last written at (0 when it does not
    /// exist). The connection's keepalive notices a hung etcd only after its own timeout; this
    /// notices it within `timeout`.
    pub async fn probe(&self, key: &[u8], timeout: Duration) -> Result<Probed, tonic::Status> {
        let request = RangeRequest {
            key: key.to_vec(),
            limit: 1,
            keys_only: true,
            ..RangeRequest::default()
        };
        let read = self.unary::<_, RangeResponse>("/etcdserverpb.KV/Range", request);
        match tokio::time::timeout(timeout, read).await {
            Ok(answer) => {
                let answer = answer?;
                Ok(Probed {
                    store_revision: answer.header.map_or(0, |h| h.revision),
                    key_revision: answer.kvs.first().map_or(0, |kv| kv.mod_revision),
                })
            }
            Err(_) => Err(tonic::Status::deadline_exceeded(format!(
                "etcd did not answer a probe in {} ms",
                timeout.as_millis()
            ))),
        }
    }

    /// Runs a transaction.
    pub async fn txn(&self, request: TxnRequest) -> Result<TxnResponse, tonic::Status> {
        self.unary("/etcdserverpb.KV/Txn", request).await
    }

    /// Discards history before `revision` (tests and operators: a replica whose watch revision
    /// was compacted reloads in full).
    pub async fn compact(&self, revision: i64) -> Result<CompactionResponse, tonic::Status> {
        self.unary("/etcdserverpb.KV/Compact", CompactionRequest { revision, physical: true }).await
    }

    /// Opens a watch stream on `prefix` from `start_revision`; responses arrive on the returned
    /// stream. The request side stays open as long as the returned sender lives.
    pub async fn watch_prefix(
        &self,
        prefix: &[u8],
        start_revision: i64,
    ) -> Result<
        (tokio::sync::mpsc::Sender<WatchRequest>, tonic::codec::Streaming<WatchResponse>),
        tonic::Status,
    > {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let create = WatchRequest {
            request_union: Some(watch_request::RequestUnion::CreateRequest(WatchCreateRequest {
                key: prefix.to_vec(),
                range_end: prefix_end(prefix),
                start_revision,
                progress_notify: true,
            })),
        };
        tx.send(create).await.map_err(|_| tonic::Status::internal("watch request channel"))?;
        let mut grpc = self.grpc.clone();
        let open = async move {
            grpc.ready().await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
            grpc.streaming(
                tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx)),
                PathAndQuery::from_static("/etcdserverpb.Watch/Watch"),
                ProstCodec::<WatchRequest, WatchResponse>::default(),
            )
            .await
        };
        let response = tokio::time::timeout(CALL_TIMEOUT, open).await.unwrap_or_else(|_| {
            Err(tonic::Status::deadline_exceeded("etcd did not answer in 10 s"))
        })?;
        Ok((tx, response.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_one_past_the_prefix() {
        assert_eq!(prefix_end(b"/xds/"), b"/xds0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }
}
