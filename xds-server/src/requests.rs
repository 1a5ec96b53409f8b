//! The request side of a streaming xDS method: gRPC frames read from the HTTP body and decoded.
//!
//! tonic's request stream copies every message into one buffer per stream and keeps that
//! buffer's capacity for the life of the stream: after a proxy subscribes to the endpoints of
//! 10,000 clusters in one request (~150 KB), every connected proxy pins 150 KB it will not need
//! again, which was the largest single cost of an idle connected client. [`Requests`] reads a
//! message into a buffer sized for it and lets the buffer go once the message is decoded: between
//! requests a stream holds nothing.

use std::future::poll_fn;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{BufMut, BytesMut};
use http_body::Body;
use tonic::Status;

/// The gRPC length-prefixed frame header: a compression flag and a big-endian length.
const HEADER: usize = 5;

/// The messages of one request body, each at most `max` bytes.
pub(crate) struct Requests<T> {
    body: axum::body::Body,
    /// What arrived and is not decoded yet: a frame header, part of a message, or whole ones.
    buf: BytesMut,
    max: usize,
    /// The body ended (the client closed its side).
    ended: bool,
    message: PhantomData<fn() -> T>,
}

impl<T: prost::Message + Default> Requests<T> {
    pub(crate) fn new(body: axum::body::Body, max: usize) -> Self {
        Requests { body, buf: BytesMut::new(), max, ended: false, message: PhantomData }
    }

    /// The next message; `None` once the client closed its side. Errors as tonic's request
    /// stream gives them: `OutOfRange` for a message over the limit, `Internal` for one that does
    /// not decode, the transport's status for a broken connection.
    ///
    /// Cancel-safe: everything read is kept in `self`, so a `select!` may drop the future.
    pub(crate) async fn message(&mut self) -> Result<Option<T>, Status> {
        poll_fn(|cx| self.poll_message(cx)).await
    }

    fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<T>, Status>> {
        loop {
            if let Some(message) = self.decode()? {
                return Poll::Ready(Ok(Some(message)));
            }
            if self.ended {
                return Poll::Ready(if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(Status::internal("the request stream ended inside a message"))
                });
            }
            match ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    // Trailers (a client may send them) carry nothing for us.
                    if let Ok(data) = frame.into_data() {
                        self.buf.put(data);
                    }
                }
                Some(Err(e)) => return Poll::Ready(Err(Status::from_error(e.into()))),
                None => self.ended = true,
            }
        }
    }

    /// Decodes the first message of `buf` if all of it is there.
    fn decode(&mut self) -> Result<Option<T>, Status> {
        let Some(header) = self.buf.get(..HEADER) else { return Ok(None) };
        if header[0] != 0 {
            // Compressed requests were refused when the stream opened (`grpc-encoding`).
            return Err(Status::internal("a compressed request without a grpc-encoding"));
        }
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        if len > self.max {
            return Err(Status::out_of_range(format!(
                "decoded message length too large: found {len} bytes, the limit is: {} bytes",
                self.max
            )));
        }
        if self.buf.len() < HEADER + len {
            // One allocation for the whole message, not a doubling per chunk.
            self.buf.reserve(HEADER + len - self.buf.len());
            return Ok(None);
        }
        let frame = self.buf.split_to(HEADER + len);
        let message = T::decode(&frame[HEADER..])
            .map_err(|e| Status::internal(format!("failed to decode Protobuf message: {e}")));
        if self.buf.is_empty() {
            // Let the buffer go: the next message gets one of its own size.
            self.buf = BytesMut::new();
        }
        message.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, Bytes};
    use futures_util::stream;
    use http_body::Frame;
    use prost::Message;
    use xds_proto::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;

    fn framed(message: &impl Message) -> Vec<u8> {
        let mut out = vec![0];
        out.put_u32(message.encoded_len() as u32);
        message.encode(&mut out).unwrap_or_default();
        out
    }

    fn body(chunks: Vec<Vec<u8>>) -> axum::body::Body {
        let frames =
            chunks.into_iter().map(|c| Ok::<_, std::io::Error>(Frame::data(Bytes::from(c))));
        axum::body::Body::new(http_body_util::StreamBody::new(stream::iter(frames)))
    }

    fn request(names: usize) -> DeltaDiscoveryRequest {
        DeltaDiscoveryRequest {
            type_url: "t".into(),
            resource_names_subscribe: (0..names).map(|i| format!("cluster-{i}")).collect(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn messages_split_across_chunks_and_sharing_chunks_decode_and_leave_no_buffer() {
        let (a, b) = (request(2_000), request(3));
        let mut bytes = framed(&a);
        bytes.extend(framed(&b));
        // Cut at odd places: inside the first header, inside the first message, inside the
        // second header.
        let cuts = [3, 4_000, framed(&a).len() + 2, bytes.len()];
        let mut chunks = Vec::new();
        let mut at = 0;
        for cut in cuts {
            chunks.push(bytes[at..cut].to_vec());
            at = cut;
        }
        let mut requests = Requests::<DeltaDiscoveryRequest>::new(body(chunks), 1 << 20);
        assert_eq!(requests.message().await.ok().flatten(), Some(a));
        assert_eq!(requests.message().await.ok().flatten(), Some(b));
        assert_eq!(requests.buf.capacity(), 0, "no buffer kept between requests");
        assert_eq!(requests.message().await.ok(), Some(None), "the client closed its side");
    }

    #[tokio::test]
    async fn oversized_cut_and_malformed_messages_are_refused_with_tonics_codes() {
        let big = framed(&request(100));
        let mut r = Requests::<DeltaDiscoveryRequest>::new(body(vec![big.clone()]), 100);
        let status = r.message().await.err();
        assert_eq!(status.map(|s| s.code()), Some(tonic::Code::OutOfRange));

        let cut = big[..big.len() - 1].to_vec();
        let mut r = Requests::<DeltaDiscoveryRequest>::new(body(vec![cut]), 1 << 20);
        assert_eq!(r.message().await.err().map(|s| s.code()), Some(tonic::Code::Internal));

        let junk = vec![0, 0, 0, 0, 2, 0xff, 0xff];
        let mut r = Requests::<DeltaDiscoveryRequest>::new(body(vec![junk]), 1 << 20);
        assert_eq!(r.message().await.err().map(|s| s.code()), Some(tonic::Code::Internal));

        let compressed = vec![1, 0, 0, 0, 0];
        let mut r = Requests::<DeltaDiscoveryRequest>::new(body(vec![compressed]), 1 << 20);
        assert_eq!(r.message().await.err().map(|s| s.code()), Some(tonic::Code::Internal));
    }
}
