//! The load generator's gRPC codec: requests go out as pre-encoded bytes, responses come in as
//! raw bytes (read in place by [`proto`](super::proto)).

use bytes::{BufMut, Bytes};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::prost;

/// An encoded request: a small header (encoded per request) followed by an encoded list of
/// resource names (field 3 in both `DiscoveryRequest.resource_names` and
/// `DeltaDiscoveryRequest.resource_names_subscribe`), shared by every client that subscribes to
/// the same names. Protobuf fields may come in any order, so the concatenation is one message.
#[derive(Debug, Clone, Default)]
pub struct Outgoing {
    /// Every field but the names.
    pub head: Vec<u8>,
    /// Repeated field 3, already encoded.
    pub names: Bytes,
}

impl Outgoing {
    /// A SotW request (a first request, an ACK or a subscription change).
    pub fn sotw(
        node: Option<&Node>,
        type_url: &str,
        version: &[u8],
        nonce: &[u8],
        names: Bytes,
    ) -> Self {
        let mut head = Vec::with_capacity(type_url.len() + version.len() + nonce.len() + 8);
        push_field(&mut head, 1, version);
        if let Some(node) = node {
            prost::encoding::message::encode(2, node, &mut head);
        }
        push_field(&mut head, 4, type_url.as_bytes());
        push_field(&mut head, 5, nonce);
        Outgoing { head, names }
    }

    /// A delta request: subscribes to `subscribe` (encoded field 3), unsubscribes from
    /// `unsubscribe`, and ACKs `nonce` if not empty.
    pub fn delta(
        node: Option<&Node>,
        type_url: &str,
        nonce: &[u8],
        subscribe: Bytes,
        unsubscribe: Vec<String>,
    ) -> Self {
        let mut head = Vec::with_capacity(type_url.len() + nonce.len() + 8);
        if let Some(node) = node {
            prost::encoding::message::encode(1, node, &mut head);
        }
        push_field(&mut head, 2, type_url.as_bytes());
        for name in &unsubscribe {
            push_name_field(&mut head, 4, name.as_bytes());
        }
        push_field(&mut head, 6, nonce);
        Outgoing { head, names: subscribe }
    }

    /// Adds `initial_resource_versions` (field 5 of a delta request: what a reconnecting client
    /// holds, by name, so that it is sent only what differs).
    pub fn with_initial_versions<'v>(
        mut self,
        versions: impl IntoIterator<Item = (&'v [u8], &'v [u8])>,
    ) -> Self {
        let mut entry = Vec::new();
        for (name, version) in versions {
            entry.clear();
            push_field(&mut entry, 1, name);
            push_field(&mut entry, 2, version);
            push_name_field(&mut self.head, 5, &entry);
        }
        self
    }
}

/// Appends a string field unless it is empty (the proto3 default is not encoded).
fn push_field(buf: &mut Vec<u8>, tag: u8, value: &[u8]) {
    if !value.is_empty() {
        push_name_field(buf, tag, value);
    }
}

/// Appends a length-delimited field `tag` (< 16).
fn push_name_field(buf: &mut Vec<u8>, tag: u8, value: &[u8]) {
    buf.put_u8((tag << 3) | 2);
    let mut len = value.len() as u64;
    while len >= 0x80 {
        buf.put_u8((len as u8) | 0x80);
        len >>= 7;
    }
    buf.put_u8(len as u8);
    buf.put_slice(value);
}

/// Appends `name` to an encoded list of names (repeated string field 3).
pub fn push_name(list: &mut Vec<u8>, name: &[u8]) {
    push_name_field(list, 3, name);
}

/// Requests as [`Outgoing`], responses as raw [`Bytes`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RawCodec;

/// The encoder of [`RawCodec`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RawEncoder;

/// The decoder of [`RawCodec`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RawDecoder;

impl Codec for RawCodec {
    type Encode = Outgoing;
    type Decode = Bytes;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl Encoder for RawEncoder {
    type Item = Outgoing;
    type Error = Status;

    fn encode(&mut self, item: Outgoing, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.reserve(item.head.len() + item.names.len());
        dst.put_slice(&item.head);
        dst.put_slice(&item.names);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        use bytes::Buf;
        // Splits the frame off the receive buffer: no copy.
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xds_proto::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
    use xds_proto::prost::Message;

    #[test]
    fn a_request_with_shared_names_decodes_as_one_message() {
        let mut names = Vec::new();
        push_name(&mut names, b"cluster-0");
        push_name(&mut names, &[b'x'; 200]);
        let node = Node { id: "load-1".into(), ..Default::default() };
        let out = Outgoing::sotw(Some(&node), "t", b"v", b"n", Bytes::from(names));
        let mut buf = out.head.clone();
        buf.extend_from_slice(&out.names);
        let r = DiscoveryRequest::decode(&buf[..]).unwrap();
        assert_eq!(r.resource_names.len(), 2);
        assert_eq!(r.resource_names[0], "cluster-0");
        assert_eq!(r.resource_names[1].len(), 200);
        assert_eq!((r.version_info.as_str(), r.response_nonce.as_str()), ("v", "n"));
        assert_eq!(r.node.map(|n| n.id), Some("load-1".into()));

        let d = Outgoing::delta(None, "t", b"", out.names.clone(), vec!["gone".into()]);
        let mut buf = d.head.clone();
        buf.extend_from_slice(&d.names);
        let r = DeltaDiscoveryRequest::decode(&buf[..]).unwrap();
        assert_eq!(r.resource_names_subscribe.len(), 2);
        assert_eq!(r.resource_names_unsubscribe, ["gone"]);

        let resume = Outgoing::delta(None, "t", b"", Bytes::new(), Vec::new())
            .with_initial_versions([(&b"cluster-0"[..], &b"v0"[..]), (b"cluster-1", b"v1")]);
        let r = DeltaDiscoveryRequest::decode(&resume.head[..]).unwrap();
        assert_eq!(r.initial_resource_versions.len(), 2);
        assert_eq!(r.initial_resource_versions["cluster-1"], "v1");
    }
}
