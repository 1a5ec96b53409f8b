//! The request side of a streaming xDS method: gRPC frames read from the HTTP body and decoded.
//!
//! tonic's request stream copies every message into one buffer per stream and keeps that
//! buffer's capacity for the life of the stream: after a proxy subscribes to the endpoints of
//! 10,000 clusters in one request (~150 KB), every connected proxy pins 150 KB it will not need
//! again, which was the largest single cost of an idle connected client. [`Requests`] reads a
//! message into a buffer sized for it and lets the buffer go once the message is decoded: between
//! requests a stream holds nothing.
//!
//! A SotW request is read as a [`SotwIncoming`]: every field but its names, which are only
//! digested on the way ([`NamesDigest`]). A SotW client repeats its whole subscription with every
//! ACK (10,000 names for the endpoints of a large mesh, from every proxy after every update); the
//! stream compares the digest with the list its sub-stream last took in and decodes the names
//! only when they changed.

use std::future::poll_fn;
use std::marker::PhantomData;
use std::ops::Range;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body::Body;
use prost::encoding::{DecodeContext, WireType, decode_key, decode_varint, skip_field};
use prost::{DecodeError, Message};
use tonic::Status;
use xds_core::NamesDigest;
use xds_proto::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};

use super::frame::{self, HEADER};

/// A request message as a stream reads it off the wire.
pub(crate) trait Incoming: Sized {
    /// Decodes one message (the bytes of one gRPC frame, without its header).
    fn decode(message: Bytes) -> Result<Self, Malformed>;
}

/// Why a request message did not decode.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Malformed {
    #[error(transparent)]
    Message(#[from] DecodeError),
    #[error("resource_names: {0}")]
    Names(&'static str),
}

/// `DiscoveryRequest.resource_names` and `DeltaDiscoveryRequest.resource_names_subscribe`: the
/// same field number in both.
const RESOURCE_NAMES: u32 = 3;

/// The one-byte key of a `resource_names` entry: field 3, length-delimited.
const NAME_KEY: u8 = (RESOURCE_NAMES as u8) << 3 | WireType::LengthDelimited as u8;

/// One pass over a request message: prost decodes every field into `request` but the names of
/// field 3, which are skipped and handed to `name` in place: the range of the whole field in
/// the message (key and length included) and the name's bytes.
fn read_fields<M: Message>(
    message: &[u8],
    request: &mut M,
    mut name: impl FnMut(Range<usize>, &[u8]),
) -> Result<(), Malformed> {
    let mut buf = message;
    while let Some(&key) = buf.first() {
        let start = message.len() - buf.len();
        // A name, most likely: its key and (under 128 bytes) its length are one byte each.
        // Read inline, it costs a few instructions; prost's varint decoding, not inlined,
        // was a third of the server's CPU at every update.
        let short = (key == NAME_KEY).then(|| buf.get(1).filter(|&&len| len < 0x80)).flatten();
        let value = if let Some(&len) = short {
            let value = buf.get(2..2 + usize::from(len));
            let value = value.ok_or(Malformed::Names("buffer underflow"))?;
            buf = &buf[2 + usize::from(len)..];
            Some(value)
        } else {
            let (tag, wire_type) = decode_key(&mut buf)?;
            if tag == RESOURCE_NAMES {
                Some(bytes_field(wire_type, &mut buf)?)
            } else {
                request.merge_field(tag, wire_type, &mut buf, DecodeContext::default())?;
                None
            }
        };
        if let Some(value) = value {
            name(start..message.len() - buf.len(), value);
        }
    }
    Ok(())
}

/// Each name of field 3, as bytes (a second pass over the message, the other fields skipped).
fn each_name<'a>(
    message: &'a [u8],
    mut name: impl FnMut(&'a [u8]) -> Result<(), Malformed>,
) -> Result<(), Malformed> {
    let mut buf = message;
    while buf.has_remaining() {
        let (tag, wire_type) = decode_key(&mut buf)?;
        if tag == RESOURCE_NAMES {
            name(bytes_field(wire_type, &mut buf)?)?;
        } else {
            skip_field(wire_type, tag, &mut buf, DecodeContext::default())?;
        }
    }
    Ok(())
}

/// The names of field 3, decoded from the message.
fn decode_names(message: &[u8], count: usize) -> Result<Vec<String>, Malformed> {
    let mut names = Vec::with_capacity(count);
    each_name(message, |name| {
        let name =
            std::str::from_utf8(name).map_err(|_| Malformed::Names("a name is not UTF-8"))?;
        names.push(name.to_owned());
        Ok(())
    })?;
    Ok(names)
}

/// A delta request with the names it subscribes to digested, not decoded.
#[derive(Debug)]
pub(crate) struct DeltaIncoming {
    /// Every field but `resource_names_subscribe`, which stays empty until
    /// [`names`](Self::names).
    pub(crate) request: DeltaDiscoveryRequest,
    /// The digest of `resource_names_subscribe`, name by name in any order
    /// ([`NamesDigest::push`]), as [`NameSet::find`](xds_core::NameSet::find) looks sets up.
    pub(crate) subscribe: NamesDigest,
    /// The whole message, to read the names from when they are needed.
    message: Bytes,
    /// The live set the names were recognised as, when they were not decoded.
    pub(crate) set: Option<xds_core::NameSet>,
}

impl Incoming for DeltaIncoming {
    /// One pass over the message, as [`SotwIncoming`] reads one, with a hash of each name
    /// instead of one over the list: proxies list the same names in their own order. UTF-8 is
    /// checked when the names are decoded; names recognised as a live set never are (see
    /// [`NameSet`](xds_core::NameSet) for what a collision could do).
    fn decode(message: Bytes) -> Result<Self, Malformed> {
        let mut request = DeltaDiscoveryRequest::default();
        let mut subscribe = NamesDigest::default();
        read_fields(&message, &mut request, |_, name| subscribe.push(name))?;
        Ok(DeltaIncoming { request, subscribe, message, set: None })
    }
}

impl DeltaIncoming {
    /// The subscribed names, decoded from the message.
    pub(crate) fn names(&self) -> Result<Vec<String>, Malformed> {
        decode_names(&self.message, self.subscribe.count())
    }
}

/// A SotW request with its names digested, not decoded.
#[derive(Debug)]
pub(crate) struct SotwIncoming {
    /// Every field but `resource_names`, which stays empty until [`names`](Self::names).
    pub(crate) request: DiscoveryRequest,
    /// The digest of `resource_names` as the client encoded them ([`NamesDigest::of_encoded`]).
    pub(crate) digest: NamesDigest,
    /// The whole message, to read the names from when they are needed.
    message: Bytes,
    /// The names repeat the sub-stream's last list: the core gets
    /// [`SotwNames::Repeated`](xds_core::SotwNames::Repeated).
    pub(crate) repeated: bool,
    /// The live set the names were recognised as, when they were not decoded: the core gets
    /// [`SotwNames::Found`](xds_core::SotwNames::Found).
    pub(crate) set: Option<xds_core::NameSet>,
}

impl Incoming for SotwIncoming {
    /// One pass over the message: prost decodes every other field, the names' fields are
    /// skipped and their bytes digested in place, in one go. Whether the names are UTF-8 is
    /// checked when they are decoded, and names that repeat the sub-stream's last list never
    /// are: that costs the chance (about 2^-64, or a client crafting its own collision) that a
    /// malformed list passes for the last one, and then it changes nothing.
    fn decode(message: Bytes) -> Result<Self, Malformed> {
        let mut request = DiscoveryRequest::default();
        let mut count = 0;
        // The runs of consecutive name fields, as offsets into the message: one run, as every
        // encoder writes fields in order, unless the client interleaves them with others.
        let mut runs: Vec<Range<usize>> = Vec::new();
        read_fields(&message, &mut request, |field, _| {
            count += 1;
            match runs.last_mut() {
                Some(run) if run.end == field.start => run.end = field.end,
                _ => runs.push(field),
            }
        })?;
        let digest = NamesDigest::of_encoded(count, runs.iter().map(|run| &message[run.clone()]));
        Ok(SotwIncoming { request, digest, message, repeated: false, set: None })
    }
}

impl SotwIncoming {
    /// The names, decoded from the message (a second pass, over the names only).
    pub(crate) fn names(&self) -> Result<Vec<String>, Malformed> {
        decode_names(&self.message, self.digest.count())
    }

    /// The digest of the names in any order, as [`DeltaIncoming`] has it: a second pass, for
    /// a list that does not repeat the sub-stream's last one (a joining proxy's first), to find
    /// it among the sets live subscriptions hold.
    pub(crate) fn names_digest(&self) -> Result<NamesDigest, Malformed> {
        let mut digest = NamesDigest::default();
        each_name(&self.message, |name| {
            digest.push(name);
            Ok(())
        })?;
        Ok(digest)
    }
}

/// A length-delimited field's value, borrowed from the message.
fn bytes_field<'a>(wire_type: WireType, buf: &mut &'a [u8]) -> Result<&'a [u8], Malformed> {
    if wire_type != WireType::LengthDelimited {
        return Err(Malformed::Names("not a length-delimited field"));
    }
    let len = usize::try_from(decode_varint(buf)?).unwrap_or(usize::MAX);
    if len > buf.len() {
        return Err(Malformed::Names("buffer underflow"));
    }
    let (value, rest) = buf.split_at(len);
    *buf = rest;
    Ok(value)
}

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

impl<T: Incoming> Requests<T> {
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
        let Some(&header) = self.buf.first_chunk::<HEADER>() else { return Ok(None) };
        let (compressed, len) = frame::parse(header);
        if compressed {
            // Compressed requests were refused when the stream opened (`grpc-encoding`).
            return Err(Status::internal("a compressed request without a grpc-encoding"));
        }
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
        let mut frame = self.buf.split_to(HEADER + len);
        frame.advance(HEADER);
        let message = T::decode(frame.freeze())
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
        let mut requests = Requests::<DeltaIncoming>::new(body(chunks), 1 << 20);
        assert_eq!(requests.message().await.ok().flatten().map(whole), Some(a));
        assert_eq!(requests.message().await.ok().flatten().map(whole), Some(b));
        assert_eq!(requests.buf.capacity(), 0, "no buffer kept between requests");
        assert!(matches!(requests.message().await, Ok(None)), "the client closed its side");
    }

    /// A delta request as read, with its names decoded.
    fn whole(read: DeltaIncoming) -> DeltaDiscoveryRequest {
        let names = read.names().unwrap_or_default();
        DeltaDiscoveryRequest { resource_names_subscribe: names, ..read.request }
    }

    /// A delta request read with its subscriptions digested says what prost's decoding says, and
    /// its digest is the digest of its names in any order: the one a subscription of those names
    /// keys its set by, so that proxies listing the same names in their own order find it.
    #[test]
    fn a_delta_request_digested_decodes_as_prost_decodes_it_and_its_digest_ignores_order() {
        let names: Vec<String> = (0..300).map(|i| format!("cluster-{i}")).collect();
        let long = "x".repeat(200);
        let mut listed = names.clone();
        listed.push(long.clone());
        let request = DeltaDiscoveryRequest {
            type_url: "t".into(),
            resource_names_subscribe: listed.clone(),
            resource_names_unsubscribe: vec!["gone".into()],
            initial_resource_versions: [("a".to_owned(), "1".to_owned())].into(),
            response_nonce: "7".into(),
            ..Default::default()
        };
        let read = <DeltaIncoming as Incoming>::decode(Bytes::from(request.encode_to_vec()));
        let read = read.expect("decodes");
        assert!(read.request.resource_names_subscribe.is_empty(), "names left in the bytes");
        let mut reversed = listed.clone();
        reversed.reverse();
        assert_eq!(read.subscribe, NamesDigest::of(&reversed));
        assert_ne!(read.subscribe, NamesDigest::of(&names), "a name more is another digest");
        assert_eq!(whole(read), request);
    }

    /// A SotW request read with its names digested says what prost's decoding says, field for
    /// field, also when the names come in two runs around other fields (a merge of two messages,
    /// which protobuf allows).
    #[test]
    fn a_sotw_request_digested_decodes_as_prost_decodes_it() {
        let first = DiscoveryRequest {
            version_info: "v1".into(),
            node: Some(xds_proto::pb::envoy::config::core::v3::Node {
                id: "n".into(),
                ..Default::default()
            }),
            resource_names: vec!["a".into(), "xdstp://x/t/é".into(), String::new()],
            type_url: "t".into(),
            response_nonce: "7".into(),
            ..Default::default()
        };
        let second = DiscoveryRequest {
            // A name of 200 bytes has a two-byte length.
            resource_names: vec!["a".into(), "b".repeat(200)],
            response_nonce: "8".into(),
            error_detail: Some(xds_proto::pb::google::rpc::Status {
                code: 3,
                message: "no".into(),
                details: Vec::new(),
            }),
            ..Default::default()
        };
        let mut bytes = first.encode_to_vec();
        bytes.extend(second.encode_to_vec());
        let expected = <DiscoveryRequest as Message>::decode(&bytes[..]).unwrap_or_default();
        assert_eq!(expected.resource_names.len(), 5);

        let read = <SotwIncoming as Incoming>::decode(Bytes::from(bytes)).expect("decodes");
        assert!(read.request.resource_names.is_empty(), "names are not decoded on the way in");
        let names = read.names().expect("names decode");
        assert_eq!(names, expected.resource_names);
        assert_eq!(DiscoveryRequest { resource_names: names, ..read.request }, expected);
        // The same names, encoded the same way, with other fields changed: the same digest
        // (what an ACK sends). In two runs, or in another order: another one.
        let ack = DiscoveryRequest {
            version_info: "v2".into(),
            resource_names: expected.resource_names.clone(),
            response_nonce: "9".into(),
            ..Default::default()
        };
        let digest = |m: &DiscoveryRequest| {
            <SotwIncoming as Incoming>::decode(Bytes::from(m.encode_to_vec()))
                .map(|r| r.digest)
                .ok()
        };
        let one_run = digest(&ack);
        assert!(one_run.is_some_and(|d| d.count() == 5));
        assert_eq!(
            digest(&DiscoveryRequest { response_nonce: "10".into(), ..ack.clone() }),
            one_run
        );
        assert_ne!(Some(read.digest), one_run, "two runs");
        let mut reordered = ack.clone();
        reordered.resource_names.swap(0, 1);
        assert_ne!(digest(&reordered), one_run);
    }

    #[test]
    fn a_sotw_request_with_a_malformed_name_is_refused_as_prost_refuses_it() {
        let cases: [(&str, &[u8]); 4] = [
            ("not UTF-8", &[0x1a, 2, 0xc3, 0x28]),
            ("not length-delimited", &[0x18, 1]),
            ("longer than the message", &[0x1a, 5, b'a']),
            (
                "a length that is not a varint",
                &[0x1a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            ),
        ];
        for (why, bytes) in cases {
            assert!(<DiscoveryRequest as Message>::decode(bytes).is_err(), "prost: {why}");
            // Refused as it is read, or (a name that is not UTF-8) once its names are decoded.
            let read = <SotwIncoming as Incoming>::decode(Bytes::from_static(bytes));
            assert!(read.is_err() || read.is_ok_and(|r| r.names().is_err()), "{why}");
        }
    }

    #[tokio::test]
    async fn oversized_cut_and_malformed_messages_are_refused_with_tonics_codes() {
        let big = framed(&request(100));
        let mut r = Requests::<DeltaIncoming>::new(body(vec![big.clone()]), 100);
        let status = r.message().await.err();
        assert_eq!(status.map(|s| s.code()), Some(tonic::Code::OutOfRange));

        let cut = big[..big.len() - 1].to_vec();
        let mut r = Requests::<DeltaIncoming>::new(body(vec![cut]), 1 << 20);
        assert_eq!(r.message().await.err().map(|s| s.code()), Some(tonic::Code::Internal));

        let junk = vec![0, 0, 0, 0, 2, 0xff, 0xff];
        let mut r = Requests::<DeltaIncoming>::new(body(vec![junk]), 1 << 20);
        assert_eq!(r.message().await.err().map(|s| s.code()), Some(tonic::Code::Internal));

        let compressed = vec![1, 0, 0, 0, 0];
        let mut r = Requests::<DeltaIncoming>::new(body(vec![compressed]), 1 << 20);
        assert_eq!(r.message().await.err().map(|s| s.code()), Some(tonic::Code::Internal));
    }
}
