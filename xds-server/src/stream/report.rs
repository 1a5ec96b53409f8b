//! What a stream reports of the core's events: status, metrics, and the user's callbacks.

use std::sync::Mutex;

use tokio::runtime::{Handle, RuntimeFlavor};
use xds_core::Event;
use xds_proto::TypeUrl;

use crate::callbacks::{Nack, StreamInfo};
use crate::metrics::StreamCounters;
use crate::server::Shared;
use crate::status::{
    EventLog, MAX_NACK_TEXT, NackStatus, StreamEventKind, StreamStatus, bounded_text, event_text,
    lock, now_ms,
};

/// Records events in the stream's status, its event log and the server's metrics. Runs no user
/// code.
pub(super) fn record(
    shared: &Shared,
    variant: &'static str,
    counters: &mut StreamCounters,
    status: &Mutex<StreamStatus>,
    log: &Mutex<EventLog>,
    events: &[Event<TypeUrl>],
) {
    let mut status = lock(status);
    let mut log = lock(log);
    for event in events {
        // Each event keeps when it happened (an answer: its request's time), read from the
        // wall clock here.
        match event {
            Event::Request { type_key, subscribed, unsubscribed } => {
                let now = now_ms();
                status.types.entry(type_key).last_request_ms = now;
                if !subscribed.is_empty() || !unsubscribed.is_empty() {
                    let what = StreamEventKind::subscribed(subscribed, unsubscribed.len());
                    log.push(now, Some(shared.label(type_key)), what);
                }
            }
            Event::Ack { type_key, version, nonce, latency } => {
                let label = shared.label(type_key);
                counters.of(&shared.metrics, variant, type_key, || label).ack(*latency);
                let ts = status.types.entry(type_key);
                // An answer that changed no name comes without a `Request`: it is the request.
                ts.last_request_ms = now_ms();
                ts.nack = None;
                // A delta ACK carries no version: it accepts the response it names.
                if !version.is_empty() {
                    ts.acked_version = Some(bounded_text(version, MAX_NACK_TEXT));
                } else if ts.sent_nonce.as_deref() == Some(nonce.as_str()) {
                    ts.acked_version.clone_from(&ts.sent_version);
                }
                log.acked(label, latency.map(|l| l.as_millis() as u64));
            }
            Event::Nack { type_key, rejected_version, kept_version, nonce, error } => {
                let now = now_ms();
                shared.metrics.nack(variant, shared.label(type_key));
                // The driver asked the cache for the group again before this NACK was recorded.
                shared.metrics.group_nack(status.group.as_deref(), shared.label(type_key));
                let nack = NackStatus::new(
                    kept_version.into(),
                    rejected_version.into(),
                    nonce.into(),
                    &error.message,
                    now,
                );
                let what = StreamEventKind::Nacked {
                    rejected_version: event_text(rejected_version),
                    error: event_text(&error.message),
                };
                log.push(now, Some(shared.label(type_key)), what);
                tracing::info!(
                    node = %status.node_id,
                    group = status.group.as_deref(),
                    type_url = %type_key,
                    rejected_version = %nack.rejected_version,
                    version = %nack.version,
                    error = %nack.error,
                    error_bytes = nack.error_bytes,
                    "NACK"
                );
                let ts = status.types.entry(type_key);
                ts.last_request_ms = now;
                ts.nack = Some(Box::new(nack));
            }
            Event::Stale { type_key } => {
                let now = now_ms();
                status.types.entry(type_key).last_request_ms = now;
                let label = shared.label(type_key);
                shared.metrics.stale(variant, label);
                log.push(now, Some(label), StreamEventKind::Stale);
            }
            Event::Sent { type_key, version, nonce, resources, heartbeat } => {
                let now = now_ms();
                let ts = status.types.entry(type_key);
                ts.sent_version = Some(version.clone());
                ts.sent_nonce = Some(nonce.clone());
                ts.sent_ms = now;
                // A TTL heartbeat renews what the client holds: the history would be nothing
                // else for a quiet stream.
                if !heartbeat {
                    log.push_sent(now, Some(shared.label(type_key)), version, *resources);
                }
            }
        }
    }
}

/// Calls the user's callbacks for `events`, in order. The caller holds no lock: a callback may
/// call anything on the server, `status()` included.
///
/// A callback may also block for a while (a log write, a remote audit call). User callbacks run
/// inside [`tokio::task::block_in_place`] on a multi-thread runtime: the worker thread hands its
/// other tasks, the other streams, to another thread first, so they go on while this one waits.
/// (On a current-thread runtime there is no other thread: there a blocking callback stalls the
/// runtime, as any blocking code does.) The no-op default callbacks are called inline.
pub(super) fn deliver(shared: &Shared, stream: &StreamInfo, events: &[Event<TypeUrl>]) {
    let owed = |e: &Event<TypeUrl>| !matches!(e, Event::Request { .. } | Event::Stale { .. });
    if !shared.custom_callbacks || !events.iter().any(owed) {
        return;
    }
    let call = || {
        let callbacks = &shared.callbacks;
        for event in events {
            match event {
                Event::Ack { type_key, version, nonce, .. } => {
                    callbacks.on_ack(stream, type_key, version, nonce);
                }
                Event::Nack { type_key, rejected_version, kept_version, nonce, error } => {
                    let nack =
                        Nack { type_url: type_key, rejected_version, nonce, kept_version, error };
                    callbacks.on_nack(stream, &nack);
                }
                Event::Sent { type_key, version, nonce, resources, .. } => {
                    callbacks.on_response(stream, type_key, version, nonce, *resources);
                }
                Event::Request { .. } | Event::Stale { .. } => {}
            }
        }
    };
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(call);
        }
        _ => call(),
    }
}

#[cfg(test)]
mod tests {
    use xds_proto::{ResourceType, TypeUrl};

    use super::StreamStatus;

    /// Each type finds its own status, whichever order the types came in and whether or not its
    /// status existed; the first lookup creates it, once.
    #[test]
    fn a_type_finds_its_own_status_and_creates_it_once() {
        let mut status = StreamStatus {
            stream: 1,
            variant: "delta",
            node_id: String::new(),
            node_cluster: String::new(),
            opened_ms: 0,
            types: Default::default(),
            group: None,
            unserved_since_ms: None,
            unserved_types: Vec::new(),
            events: Vec::new(),
            node: None,
        };
        let types = [ResourceType::Listener, ResourceType::Cluster, ResourceType::Secret]
            .map(TypeUrl::from);
        for (i, type_url) in types.iter().enumerate() {
            status.types.entry(type_url).sent_ms = i as u64 + 1;
        }
        for (i, type_url) in types.iter().enumerate().rev() {
            assert_eq!(status.types.entry(type_url).sent_ms, i as u64 + 1, "{type_url}");
        }
        assert_eq!(status.types.len(), 3);
        assert_eq!(status.types[types[2].as_str()].sent_ms, 3);
    }
}
