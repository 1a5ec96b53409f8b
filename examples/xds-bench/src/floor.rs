//! The wire of `xds-floor-server`, the least a server can do to serve `xds-load`: every resource
//! encoded once as a response entry (delta and SotW), whole responses concatenated from those
//! entries once per revision and framed for gRPC, so that a stream only hands out shared bytes.
//!
//! `DiscoveryResponse` and `DeltaDiscoveryResponse` number the fields a response needs alike
//! (version 1, resources 2, type URL 4, nonce 5), so one writer serves both; only an entry
//! differs (an `Any` for SotW, a `Resource` with its name and version for delta).

use bytes::{BufMut, Bytes};
use xds_proto::pb::envoy::service::discovery::v3::Resource;
use xds_proto::pb::google::protobuf::Any;
use xds_proto::prost::{self, Message, Name};

use super::client::Mode;

/// One resource type's resources, by index, encoded for both protocol variants.
#[derive(Debug)]
pub struct TypeSet {
    type_url: String,
    /// By index: `Resource` entries (field 2 of a delta response).
    delta: Vec<Bytes>,
    /// By index: `Any` entries (field 2 of a SotW response).
    sotw: Vec<Bytes>,
    /// The whole set as one framed response per variant, until a resource changes.
    full: [Option<Bytes>; 2],
    /// Bumped by every change; names the versions and nonces.
    revision: u64,
}

/// The index of a variant in per-variant arrays.
fn slot(mode: Mode) -> usize {
    match mode {
        Mode::Delta => 0,
        Mode::Sotw => 1,
    }
}

impl TypeSet {
    /// Encodes `resources` (name and message, in index order) at revision 0.
    pub fn new<M: Message + Name>(resources: impl IntoIterator<Item = (String, M)>) -> Self {
        let mut set = TypeSet {
            type_url: M::type_url(),
            delta: Vec::new(),
            sotw: Vec::new(),
            full: [None, None],
            revision: 0,
        };
        for (name, m) in resources {
            let (delta, sotw) = set.entries(name, &m);
            set.delta.push(delta);
            set.sotw.push(sotw);
        }
        set
    }

    /// The type URL of the set's resources.
    pub fn type_url(&self) -> &str {
        &self.type_url
    }

    /// How many resources.
    pub fn len(&self) -> usize {
        self.delta.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.delta.is_empty()
    }

    /// The delta and SotW entries of `m` at the current revision.
    fn entries<M: Message + Name>(&self, name: String, m: &M) -> (Bytes, Bytes) {
        let any = Any { type_url: self.type_url.clone(), value: m.encode_to_vec() };
        let mut sotw = Vec::with_capacity(any.encoded_len() + 8);
        prost::encoding::message::encode(2, &any, &mut sotw);
        let resource = Resource {
            name,
            version: resource_version(self.revision),
            resource: Some(any),
            ..Default::default()
        };
        let mut delta = Vec::with_capacity(resource.encoded_len() + 8);
        prost::encoding::message::encode(2, &resource, &mut delta);
        (Bytes::from(delta), Bytes::from(sotw))
    }

    /// Every resource as one framed response of `mode`, encoded once per revision.
    pub fn full(&mut self, mode: Mode) -> Bytes {
        let revision = self.revision;
        let entries = match mode {
            Mode::Delta => &self.delta,
            Mode::Sotw => &self.sotw,
        };
        let type_url = &self.type_url;
        self.full[slot(mode)]
            .get_or_insert_with(|| {
                let version = format!("r{revision}");
                framed(&version, type_url, &format!("f{revision}"), entries)
            })
            .clone()
    }

    /// Replaces resource `i` (which must exist) with `m` at the next revision; returns the
    /// response that carries it alone, delta then SotW (a SotW EDS response need not repeat the
    /// resources that did not change).
    pub fn replace<M: Message + Name>(&mut self, i: usize, name: String, m: &M) -> [Bytes; 2] {
        self.revision += 1;
        let (delta, sotw) = self.entries(name, m);
        self.delta[i] = delta.clone();
        self.sotw[i] = sotw.clone();
        self.full = [None, None];
        let (version, nonce) = (format!("r{}", self.revision), format!("u{}", self.revision));
        [
            framed(&version, &self.type_url, &nonce, &[delta]),
            framed(&version, &self.type_url, &nonce, &[sotw]),
        ]
    }
}

impl TypeSet {
    /// The resources at `indices` (which must exist) as one framed response of `mode` at the
    /// current revision: what a stream is owed when several changes came while it had a
    /// response in flight.
    pub fn changes(&self, mode: Mode, indices: &[u32]) -> Bytes {
        let entries = match mode {
            Mode::Delta => &self.delta,
            Mode::Sotw => &self.sotw,
        };
        let picked: Vec<Bytes> = indices.iter().map(|&i| entries[i as usize].clone()).collect();
        let (version, nonce) = (format!("r{}", self.revision), format!("c{}", self.revision));
        framed(&version, &self.type_url, &nonce, &picked)
    }
}

/// A delta entry's version at `revision`: sixteen hex digits, as long as the project's (the hash of
/// the resource's content, `xds-proto`'s `EncodedResource`). The floor writes the project's bytes
/// so that their ratio measures work: with `r{revision}` it sent a delta storm 9 % fewer bytes
/// (2,722 MiB against 2,989 MiB for 1,000 clients × 20,000 resources).
fn resource_version(revision: u64) -> String {
    format!("{revision:016x}")
}

/// A response (version, entries, type URL, nonce) behind its gRPC frame header (uncompressed,
/// 4-byte big-endian length).
fn framed(version: &str, type_url: &str, nonce: &str, entries: &[Bytes]) -> Bytes {
    let mut head = Vec::new();
    prost::encoding::string::encode(1, &version.to_owned(), &mut head);
    prost::encoding::string::encode(4, &type_url.to_owned(), &mut head);
    prost::encoding::string::encode(5, &nonce.to_owned(), &mut head);
    let len = head.len() + entries.iter().map(Bytes::len).sum::<usize>();
    let mut out = Vec::with_capacity(5 + len);
    out.put_u8(0);
    out.put_u32(u32::try_from(len).expect("a response fits a gRPC frame"));
    out.extend_from_slice(&head);
    for e in entries {
        out.extend_from_slice(e);
    }
    Bytes::from(out)
}

/// The type URL of a request: the first one, read without looking further (a client sends one;
/// a SotW ACK's 10,000 names need not be walked by a server that does not look at them).
pub fn type_url(mode: Mode, message: &[u8]) -> Result<&[u8], super::proto::Malformed> {
    use super::proto::{Value, fields};
    let tag = match mode {
        Mode::Delta => 2,
        Mode::Sotw => 4,
    };
    for field in fields(message) {
        if let (t, Value::Bytes(b)) = field?
            && t == tag
        {
            return Ok(b);
        }
    }
    Ok(&[])
}

/// How many names a request subscribes to (delta `resource_names_subscribe`, SotW
/// `resource_names`: both field 3).
pub fn names(message: &[u8]) -> Result<usize, super::proto::Malformed> {
    use super::proto::{Value, fields};
    let mut n = 0;
    for field in fields(message) {
        n += usize::from(matches!(field?, (3, Value::Bytes(_))));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{self, DeltaEntry};
    use crate::resources;
    use xds_proto::pb::envoy::service::discovery::v3::{DeltaDiscoveryResponse, DiscoveryResponse};

    fn set() -> TypeSet {
        TypeSet::new((0..3).map(|i| (format!("cluster-{i}"), resources::cla(i, 2, 8080))))
    }

    fn body(framed: &Bytes) -> &[u8] {
        assert_eq!(framed[0], 0);
        let len = u32::from_be_bytes(framed[1..5].try_into().unwrap()) as usize;
        assert_eq!(framed.len(), 5 + len);
        &framed[5..]
    }

    #[test]
    fn the_whole_set_decodes_as_both_responses_and_an_update_carries_one_resource() {
        let mut set = set();
        let delta = DeltaDiscoveryResponse::decode(body(&set.full(Mode::Delta))).unwrap();
        assert_eq!(delta.resources.len(), 3);
        assert_eq!(delta.resources[2].name, "cluster-2");
        assert_eq!(delta.type_url, set.type_url());
        let sotw = DiscoveryResponse::decode(body(&set.full(Mode::Sotw))).unwrap();
        assert_eq!(sotw.resources.len(), 3);
        assert_eq!((sotw.version_info.as_str(), sotw.nonce.as_str()), ("r0", "f0"));

        let [d, s] = set.replace(1, "cluster-1".into(), &resources::cla(1, 2, 10_000));
        let mut seen = Vec::new();
        proto::delta_entries(body(&d), |e| {
            if let DeltaEntry::Resource { body, version, .. } = e {
                seen.push((proto::cla_name_and_port(body)?.1, version.to_vec()));
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, [(10_000, b"0000000000000001".to_vec())]);
        assert_eq!(proto::header(body(&s)).unwrap().nonce, b"u1");
        let again = DiscoveryResponse::decode(body(&set.full(Mode::Sotw))).unwrap();
        assert_eq!((again.resources.len(), again.nonce.as_str()), (3, "f1"));

        set.replace(2, "cluster-2".into(), &resources::cla(2, 2, 10_001));
        let both =
            DeltaDiscoveryResponse::decode(body(&set.changes(Mode::Delta, &[1, 2]))).unwrap();
        let names: Vec<_> = both.resources.iter().map(|r| r.name.as_str()).collect();
        assert_eq!((names, both.nonce.as_str()), (vec!["cluster-1", "cluster-2"], "c2"));
    }

    #[test]
    fn a_request_is_read_for_its_type_and_names() {
        use crate::codec::push_name;
        let mut list = Vec::new();
        push_name(&mut list, b"a");
        push_name(&mut list, b"b");
        let out = crate::codec::Outgoing::sotw(None, "t", b"v", b"n", Bytes::from(list));
        let mut buf = out.head.clone();
        buf.extend_from_slice(&out.names);
        assert_eq!((type_url(Mode::Sotw, &buf).unwrap(), names(&buf).unwrap()), (&b"t"[..], 2));
        let ack = crate::codec::Outgoing::delta(None, "t", b"n", Bytes::new(), Vec::new());
        assert_eq!(
            (type_url(Mode::Delta, &ack.head).unwrap(), names(&ack.head).unwrap()),
            (&b"t"[..], 0)
        );
    }
}
