//! The HTTP body of a streaming xDS method: gRPC frames written lazily from encoded resources.
//!
//! tonic's own response body encodes each message whole into one per-stream buffer and keeps
//! that buffer's capacity for the life of the stream: after a 2 MB first response (10,000
//! endpoints), every connected client pins 2 MB it will never need again. This body instead
//! writes a message a chunk at a time, each chunk a fresh allocation of about [`CHUNK`] bytes
//! handed to HTTP/2 and freed once sent. hyper asks for the next chunk only when the client's
//! flow-control window has room, so a stream holds at most the chunks in flight, and a client
//! that stops reading holds one pending response (whose resources are shared handles into the
//! cache) rather than its encoding.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::StreamExt;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use tonic::Status;

use super::Framed;
use super::frame::{self, HEADER};
use crate::stream::ResponseStream;

/// About how many bytes one chunk carries: a chunk ends after the part that crosses it.
/// Measured against 64 and 256 KiB in a 300-client storm of 3 MB initial responses (see
/// `docs/benchmarks.md`): no difference in server CPU beyond the noise (the bytes are copied once
/// either way, and HTTP/2 cuts them into the client's frame size), so the smallest keeps what a
/// stalled stream pins smallest.
pub(crate) const CHUNK: usize = 16 * 1024;

/// A message's shared bytes ([`Framed::shared`]) go out as slices of themselves, without a
/// copy, at most this many bytes at a time; their first and last [`CHUNK`] are copied into
/// chunks with the head and with the parts and tail, so that no data frame is tiny.
const SLICE: usize = 256 * 1024;

/// A message being written, and how far.
struct Writing<W> {
    message: W,
    /// What to write next.
    next: Next,
    /// Bytes the message still owes (for the chunk capacity and a consistency check).
    remaining: usize,
}

/// How far a message is written.
#[derive(Clone, Copy)]
enum Next {
    /// The frame header and the head.
    Head,
    /// The shared bytes, from this offset.
    Shared(usize),
    /// The parts, from this one.
    Part(usize),
}

/// The response body of one stream: each message of `stream` as a gRPC frame, then trailers
/// with `grpc-status` (0 when the stream ends, the status when it yields an error).
pub(crate) struct StreamBody<W> {
    stream: ResponseStream<W>,
    writing: Option<Writing<W>>,
    done: bool,
}

// Nothing is pinned structurally: the stream is boxed and messages are moved freely.
impl<W> Unpin for StreamBody<W> {}

impl<W: Framed> StreamBody<W> {
    pub(crate) fn new(stream: ResponseStream<W>) -> Self {
        StreamBody { stream, writing: None, done: false }
    }

    /// The trailers that end the body.
    fn trailers(&mut self, status: &Status) -> Frame<Bytes> {
        self.done = true;
        self.writing = None;
        let mut trailers = HeaderMap::new();
        if let Err(e) = status.add_header(&mut trailers) {
            // Only a message that cannot go in a header fails; send the code alone.
            trailers.clear();
            let _ = Status::new(e.code(), "").add_header(&mut trailers);
        }
        Frame::trailers(trailers)
    }
}

impl<W: Framed> Writing<W> {
    /// Starts `message`, or refuses one too large for a gRPC frame.
    #[inline]
    fn start(message: W) -> Result<Self, Status> {
        let len = message.encoded_len();
        if u32::try_from(len).is_err() {
            return Err(Status::resource_exhausted(format!(
                "a response of {len} bytes does not fit a gRPC frame"
            )));
        }
        Ok(Writing { message, next: Next::Head, remaining: HEADER + len })
    }

    /// Makes room in `buf` for the rest of the chunk it is becoming: the bytes the message still
    /// owes, at most about a chunk's worth. `remaining` still counts what `buf` holds, so the
    /// room asked for is measured from the chunk's start: asking for `remaining` more after the
    /// head was written would grow (and copy) every small message's buffer.
    fn reserve(&self, buf: &mut BytesMut) {
        let chunk = self.remaining.min(CHUNK + CHUNK / 4);
        buf.reserve(chunk.saturating_sub(buf.len()));
    }

    /// The next chunk, and whether it is the message's last.
    #[inline]
    fn chunk(&mut self) -> (Bytes, bool) {
        let mut buf = BytesMut::new();
        if let Next::Head = self.next {
            self.reserve(&mut buf);
            // `start` checked that the length fits.
            let len = u32::try_from(self.remaining - HEADER).unwrap_or(u32::MAX);
            buf.put_slice(&frame::header(len));
            self.message.put_head(&mut buf);
            self.next = Next::Shared(0);
        }
        if let Next::Shared(at) = self.next {
            // A handle on the shared bytes (a reference count), not a copy.
            let shared = self.message.shared().cloned().unwrap_or_default();
            let rest = shared.len().saturating_sub(at);
            if rest > 2 * CHUNK {
                // The head goes out with a copy of the first chunk's worth, so that it is not a
                // frame of its own; after that, slices of the shared bytes as they are, the last
                // one stopping a chunk short so that the rest is copied in with the tail.
                let take = if !buf.is_empty() {
                    CHUNK
                } else if rest > SLICE + CHUNK {
                    SLICE
                } else {
                    rest - CHUNK
                };
                let chunk = if buf.is_empty() {
                    shared.slice(at..at + take)
                } else {
                    buf.put_slice(&shared[at..at + take]);
                    buf.freeze()
                };
                self.next = Next::Shared(at + take);
                self.remaining = self.remaining.saturating_sub(chunk.len());
                return (chunk, false);
            }
            self.reserve(&mut buf);
            buf.put_slice(&shared[at.min(shared.len())..]);
            self.next = Next::Part(0);
        }
        let mut i = match self.next {
            Next::Part(i) => i,
            Next::Head | Next::Shared(_) => 0,
        };
        // A chunk of parts only: its size up front, not grown by doubling as parts go in.
        self.reserve(&mut buf);
        let parts = self.message.parts();
        while i < parts && buf.len() < CHUNK {
            self.message.put_part(i, &mut buf);
            i += 1;
        }
        let last = i == parts;
        if last {
            self.message.put_tail(&mut buf);
        }
        self.next = Next::Part(i);
        self.remaining = self.remaining.saturating_sub(buf.len());
        debug_assert!(!last || self.remaining == 0, "encoded_len disagrees with the parts");
        (buf.freeze(), last)
    }
}

impl<W: Framed> Body for StreamBody<W> {
    type Data = Bytes;
    type Error = Status;

    // Inlined, with `Writing::start` and `chunk`, into the one place that polls it (tonic's body
    // wrapper): the compiler did so in some builds and not in others, and the calls were about
    // 350 of callgrind's cycle estimate per client and update (docs/benchmarks.md).
    #[inline]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        if this.writing.is_none() {
            match ready!(this.stream.poll_next_unpin(cx)) {
                Some(Ok(message)) => match Writing::start(message) {
                    Ok(w) => this.writing = Some(w),
                    Err(status) => return Poll::Ready(Some(Ok(this.trailers(&status)))),
                },
                Some(Err(status)) => return Poll::Ready(Some(Ok(this.trailers(&status)))),
                None => return Poll::Ready(Some(Ok(this.trailers(&Status::ok(""))))),
            }
        }
        let Some(writing) = this.writing.as_mut() else { return Poll::Ready(None) };
        let (chunk, last) = writing.chunk();
        if last {
            this.writing = None;
        }
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::stream;
    use http_body_util::BodyExt;
    use prost::Message;
    use xds_core::SotwResponse;
    use xds_proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
    use xds_proto::pb::envoy::service::discovery::v3::DiscoveryResponse;
    use xds_proto::{EncodedResource, ResourceType, TypeUrl};

    use crate::codec::SotwWire;

    fn response(n: usize, version: &str) -> SotwWire {
        let resources = (0..n)
            .map(|i| {
                let cla = ClusterLoadAssignment {
                    cluster_name: format!("cluster-{i:05}"),
                    ..Default::default()
                };
                EncodedResource::new(&cla).unwrap()
            })
            .collect();
        SotwWire::new(
            &TypeUrl::from(ResourceType::ClusterLoadAssignment),
            SotwResponse {
                version_info: version.into(),
                resources,
                shared: None,
                nonce: format!("n-{version}").into(),
                heartbeat: false,
                resource_errors: Vec::new(),
            },
            Some("cp-1"),
        )
    }

    /// Collects a body: the data chunks and the trailers.
    async fn collect(body: StreamBody<SotwWire>) -> (Vec<Bytes>, HeaderMap) {
        let mut body = std::pin::pin!(body);
        let mut chunks = Vec::new();
        let mut trailers = HeaderMap::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.expect("the body never fails; errors go in trailers");
            match frame.into_data() {
                Ok(data) => chunks.push(data),
                Err(frame) => trailers = frame.into_trailers().expect("data or trailers"),
            }
        }
        (chunks, trailers)
    }

    /// Splits concatenated gRPC frames into messages.
    fn messages(mut bytes: &[u8]) -> Vec<DiscoveryResponse> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            assert_eq!(bytes[0], 0, "uncompressed");
            let len = u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
            out.push(DiscoveryResponse::decode(&bytes[5..5 + len]).unwrap());
            bytes = &bytes[5 + len..];
        }
        out
    }

    #[tokio::test]
    async fn a_large_response_goes_out_in_chunks_that_concatenate_to_its_encoding() {
        let big = response(2_000, "v1");
        let expected = big.encode_to_vec();
        let small = response(1, "v2");
        let body = StreamBody::new(Box::pin(stream::iter([Ok(big), Ok(small)])));
        let (chunks, trailers) = collect(body).await;

        assert!(chunks.len() > 3, "2,000 resources are more than one chunk: {}", chunks.len());
        for c in &chunks[..chunks.len() - 2] {
            assert!(c.len() >= CHUNK && c.len() < CHUNK + 1024, "chunk of {} bytes", c.len());
        }
        let all: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        assert_eq!(&all[5..5 + expected.len()], &expected[..]);
        let decoded = messages(&all);
        assert_eq!(decoded.len(), 2);
        assert_eq!(decoded[0].resources.len(), 2_000);
        assert_eq!(decoded[0].control_plane.as_ref().unwrap().identifier, "cp-1");
        assert_eq!(decoded[1].version_info, "v2");
        assert_eq!(trailers.get("grpc-status").unwrap(), "0");
    }

    /// A whole set's shared encoding goes out as slices of itself, not copied.
    #[tokio::test]
    async fn a_shared_set_goes_out_as_slices_of_its_one_encoding() {
        let listed = response(3_000, "v1");
        let set = xds_core::ResourceSet::new(listed.resources.clone());
        let shared = SotwWire::new(
            &TypeUrl::from(ResourceType::ClusterLoadAssignment),
            SotwResponse {
                version_info: "v1".into(),
                resources: Vec::new(),
                shared: Some(set),
                nonce: "n-v1".into(),
                heartbeat: false,
                resource_errors: Vec::new(),
            },
            Some("cp-1"),
        );
        let encoding = shared.shared.as_ref().unwrap().bytes.clone();
        assert!(encoding.len() > 3 * CHUNK, "{} bytes", encoding.len());
        let expected = listed.encode_to_vec();
        let body = StreamBody::new(Box::pin(stream::iter([Ok(shared), Ok(response(1, "v2"))])));
        let (chunks, _) = collect(body).await;

        let range = encoding.as_ptr() as usize..encoding.as_ptr() as usize + encoding.len();
        let slices = chunks.iter().filter(|c| range.contains(&(c.as_ptr() as usize))).count();
        assert!(slices >= 1, "the shared bytes are written as they are");
        let sizes: Vec<usize> = chunks.iter().map(Bytes::len).collect();
        assert!(sizes[..sizes.len() - 1].iter().all(|&n| n >= CHUNK), "no tiny frame: {sizes:?}");
        let all: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        assert!(all[5..5 + expected.len()] == expected[..], "the same message as listed");
        let decoded = messages(&all);
        assert_eq!(decoded[0].resources.len(), 3_000);
        assert_eq!(decoded[1].version_info, "v2");
    }

    /// A small message is one chunk in one buffer of its exact size: the head and the parts go
    /// into the room reserved up front, with no second allocation and no copy.
    #[test]
    fn a_small_message_is_one_chunk_in_a_buffer_of_its_size() {
        let message = response(3, "v1");
        let expected = message.encoded_len() + HEADER;
        let mut writing = Writing::start(message).unwrap();
        let (chunk, last) = writing.chunk();
        assert!(last, "a small message is one chunk");
        assert_eq!(chunk.len(), expected);
        let buffer = chunk.try_into_mut().expect("the chunk owns its buffer");
        assert_eq!(buffer.capacity(), expected, "reserved once, for the whole message");
    }

    #[tokio::test]
    async fn an_error_ends_the_body_with_its_status_in_the_trailers() {
        let body = StreamBody::new(Box::pin(stream::iter([
            Ok(response(1, "v1")),
            Err(Status::resource_exhausted("too many requests")),
            Ok(response(1, "never sent")),
        ])));
        let (chunks, trailers) = collect(body).await;
        let all: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        assert_eq!(messages(&all).len(), 1);
        assert_eq!(trailers.get("grpc-status").unwrap(), "8");
        assert_eq!(trailers.get("grpc-message").unwrap(), "too%20many%20requests");
    }

    #[tokio::test]
    async fn an_empty_stream_is_trailers_only() {
        let body = StreamBody::<SotwWire>::new(Box::pin(stream::empty()));
        let (chunks, trailers) = collect(body).await;
        assert!(chunks.is_empty());
        assert_eq!(trailers.get("grpc-status").unwrap(), "0");
    }
}
