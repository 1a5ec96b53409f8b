//! Responses written straight from encoded resources.
//!
//! `SotwWire` and `DeltaWire` encode exactly like `DiscoveryResponse` and
//! `DeltaDiscoveryResponse`, but each resource's body is copied from the bytes the cache encoded
//! once: sending the same resources to N clients costs N copies of bytes, never N protobuf
//! encodes. They are meant to be encoded only: decoding one skips every field (the server never
//! reads a response; decode a `DiscoveryResponse` instead).
//!
//! Whether a response carries a whole shared set or a list is decided here, once, when the
//! core's response becomes a wire message: a set that cannot be written whole (another memo on
//! it, or names the client spelled otherwise) goes as a list.

use bytes::{Buf, BufMut, Bytes};
use prost::encoding::{self, DecodeContext, WireType};
use prost::{DecodeError, Message};
use std::borrow::Cow;
use std::collections::BTreeMap;

use xds_core::{DeltaResource, DeltaResponse, ResourceError, SotwResponse, Text};
use xds_proto::{EncodedResource, TypeUrl};

use super::encode::*;
use super::encodings::{EncodedSet, RecentEncodings, SetVariant, encoded_set};

/// A `DiscoveryResponse` over encoded resources.
#[derive(Debug, Default)]
pub struct SotwWire {
    /// Field 1.
    pub version_info: Text,
    /// Field 2: a whole set's entries, encoded once for every client it goes to (see
    /// `EncodedSet`); written before `resources`.
    pub shared: Option<EncodedSet>,
    /// Field 2: each encoded as an `Any`.
    pub resources: Vec<EncodedResource>,
    /// Field 4. A built-in type's URL is borrowed, not copied into every response.
    pub type_url: Cow<'static, str>,
    /// Field 5.
    pub nonce: Text,
    /// Field 6: `ControlPlane.identifier`, if set.
    pub control_plane: Option<String>,
    /// Field 7: why subscribed resources are not sent (rule C4).
    pub resource_errors: Vec<ResourceError>,
    /// A heartbeat: resources with a TTL go out as bodiless `Resource` wrappers.
    pub heartbeat: bool,
}

/// A `DeltaDiscoveryResponse` over encoded resources.
#[derive(Debug, Default)]
pub struct DeltaWire {
    /// Field 1.
    pub system_version_info: Text,
    /// Field 2: a whole set's `Resource` entries, encoded once for every client it goes to (see
    /// `EncodedSet`); written before `resources`.
    pub shared: Option<EncodedSet>,
    /// Field 2: `Resource` messages.
    pub resources: Vec<DeltaResource<EncodedResource>>,
    /// Field 4. A built-in type's URL is borrowed, not copied into every response.
    pub type_url: Cow<'static, str>,
    /// Field 5.
    pub nonce: Text,
    /// Field 6.
    pub removed_resources: Vec<String>,
    /// Field 7: `ControlPlane.identifier`, if set.
    pub control_plane: Option<String>,
    /// Field 9: why subscribed resources are not sent (rule C4).
    pub resource_errors: Vec<ResourceError>,
    /// Rule C1: the client's spelling of names whose normal form differs (normal -> asked); the
    /// `Resource.name`s and `removed_resources` are written as the client asked.
    pub spellings: BTreeMap<String, String>,
    /// A heartbeat: every resource goes out without its body.
    pub heartbeat: bool,
}

impl SotwWire {
    /// The wire form of a core response for `type_url`.
    pub fn new(type_url: &TypeUrl, r: SotwResponse<EncodedResource>, cp: Option<&str>) -> Self {
        Self::encode(type_url, r, cp, None)
    }

    /// [`new`](Self::new), keeping a whole set's encoding among `recent` (the server's).
    pub(crate) fn encode(
        type_url: &TypeUrl,
        r: SotwResponse<EncodedResource>,
        cp: Option<&str>,
        recent: Option<&RecentEncodings>,
    ) -> Self {
        let shared = r.shared.as_ref().and_then(|set| encoded_set(set, SetVariant::Sotw, recent));
        // A set that cannot be encoded whole goes entry by entry.
        let r = if shared.is_none() { r.into_listed() } else { r };
        SotwWire {
            version_info: r.version_info,
            shared,
            resources: r.resources,
            type_url: type_url.to_static_str(),
            nonce: r.nonce,
            control_plane: cp.map(str::to_owned),
            resource_errors: r.resource_errors,
            heartbeat: r.heartbeat,
        }
    }

    /// The bytes of resource bodies carried (for metrics).
    pub fn body_bytes(&self) -> usize {
        self.shared.as_ref().map_or(0, |s| s.body_bytes)
            + self.resources.iter().map(|r| r.value().len()).sum::<usize>()
    }
}

impl DeltaWire {
    /// The wire form of a core response for `type_url`.
    pub fn new(type_url: &TypeUrl, r: DeltaResponse<EncodedResource>, cp: Option<&str>) -> Self {
        Self::encode(type_url, r, cp, None)
    }

    /// [`new`](Self::new), keeping a whole set's encoding among `recent` (the server's).
    pub(crate) fn encode(
        type_url: &TypeUrl,
        r: DeltaResponse<EncodedResource>,
        cp: Option<&str>,
        recent: Option<&RecentEncodings>,
    ) -> Self {
        // The set's encoding names each resource by its normal form: a client that spelled some
        // of them otherwise (rule C1) is written entry by entry.
        let shared = r
            .shared
            .as_ref()
            .filter(|_| r.spellings.is_empty())
            .and_then(|set| encoded_set(set, SetVariant::Delta, recent));
        let r = if shared.is_none() { r.into_listed() } else { r };
        DeltaWire {
            system_version_info: r.system_version_info,
            shared,
            resources: r.resources,
            type_url: type_url.to_static_str(),
            nonce: r.nonce,
            removed_resources: r.removed_resources,
            control_plane: cp.map(str::to_owned),
            resource_errors: r.resource_errors,
            spellings: r.spellings,
            heartbeat: r.heartbeat,
        }
    }

    /// The bytes of resource bodies carried (for metrics); none for a heartbeat.
    pub fn body_bytes(&self) -> usize {
        let present = self.resources.iter().filter_map(|e| match e {
            DeltaResource::Present { resource, .. } if !self.heartbeat => Some(resource),
            _ => None,
        });
        self.shared.as_ref().map_or(0, |s| s.body_bytes)
            + present.map(|r| r.value().len()).sum::<usize>()
    }
}

/// A response written in pieces: a head, `parts()` parts, a tail. The streaming body writes a
/// large response a few parts at a time as the client's flow-control window opens, so no stream
/// holds a buffer the size of its largest response (see `codec::body`).
pub(crate) trait Framed: Message + Send + 'static {
    /// The fields before the parts.
    fn put_head(&self, buf: &mut impl BufMut);
    /// Bytes that go between the head and the parts as they are, shared with other responses
    /// (a whole set's entries): the body writes them without copying.
    fn shared(&self) -> Option<&Bytes>;
    /// How many parts (resources) there are.
    fn parts(&self) -> usize;
    /// Part `i`; nothing for an index out of range.
    fn put_part(&self, i: usize, buf: &mut impl BufMut);
    /// The fields after the parts.
    fn put_tail(&self, buf: &mut impl BufMut);

    /// The whole message: what `Message::encode_raw` writes.
    fn put_all(&self, buf: &mut impl BufMut) {
        self.put_head(buf);
        if let Some(shared) = self.shared() {
            buf.put_slice(shared);
        }
        for i in 0..self.parts() {
            self.put_part(i, buf);
        }
        self.put_tail(buf);
    }
}

/// A response boxed where it is made: the stream's loop and the body move it from the outbox to
/// the transport through several calls, and a box is one word where the message is 240 bytes.
impl<W: Framed> Framed for Box<W> {
    fn put_head(&self, buf: &mut impl BufMut) {
        (**self).put_head(buf);
    }

    fn shared(&self) -> Option<&Bytes> {
        (**self).shared()
    }

    fn parts(&self) -> usize {
        (**self).parts()
    }

    fn put_part(&self, i: usize, buf: &mut impl BufMut) {
        (**self).put_part(i, buf);
    }

    fn put_tail(&self, buf: &mut impl BufMut) {
        (**self).put_tail(buf);
    }
}

impl Framed for SotwWire {
    fn put_head(&self, buf: &mut impl BufMut) {
        put_string(1, &self.version_info, buf);
    }

    fn shared(&self) -> Option<&Bytes> {
        self.shared.as_ref().map(|s| &s.bytes)
    }

    fn parts(&self) -> usize {
        self.resources.len()
    }

    fn put_part(&self, i: usize, buf: &mut impl BufMut) {
        if let Some(r) = self.resources.get(i) {
            put_sotw_any(r, self.heartbeat, buf);
        }
    }

    fn put_tail(&self, buf: &mut impl BufMut) {
        put_string(4, &self.type_url, buf);
        put_string(5, &self.nonce, buf);
        put_control_plane(6, &self.control_plane, buf);
        put_resource_errors(7, &self.resource_errors, buf);
    }
}

impl Message for SotwWire {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        self.put_all(buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        string_len(1, &self.version_info)
            + self.shared.as_ref().map_or(0, |s| s.bytes.len())
            + self
                .resources
                .iter()
                .map(|r| len_delimited(2, sotw_any_len(r, self.heartbeat)))
                .sum::<usize>()
            + string_len(4, &self.type_url)
            + string_len(5, &self.nonce)
            + control_plane_len(6, &self.control_plane)
            + resource_errors_len(7, &self.resource_errors)
    }

    fn clear(&mut self) {
        *self = SotwWire::default();
    }
}

impl Framed for DeltaWire {
    fn put_head(&self, buf: &mut impl BufMut) {
        put_string(1, &self.system_version_info, buf);
    }

    fn shared(&self) -> Option<&Bytes> {
        self.shared.as_ref().map(|s| &s.bytes)
    }

    fn parts(&self) -> usize {
        self.resources.len()
    }

    fn put_part(&self, i: usize, buf: &mut impl BufMut) {
        if let Some(e) = self.resources.get(i) {
            put_delta_resource(e, self.heartbeat, &self.spellings, buf);
        }
    }

    fn put_tail(&self, buf: &mut impl BufMut) {
        put_string(4, &self.type_url, buf);
        put_string(5, &self.nonce, buf);
        for name in &self.removed_resources {
            put_bytes_field(6, spelled(&self.spellings, name).as_bytes(), buf);
        }
        put_control_plane(7, &self.control_plane, buf);
        put_resource_errors(9, &self.resource_errors, buf);
    }
}

impl Message for DeltaWire {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        self.put_all(buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        string_len(1, &self.system_version_info)
            + self.shared.as_ref().map_or(0, |s| s.bytes.len())
            + self
                .resources
                .iter()
                .map(|e| len_delimited(2, delta_resource_len(e, self.heartbeat, &self.spellings)))
                .sum::<usize>()
            + string_len(4, &self.type_url)
            + string_len(5, &self.nonce)
            + self
                .removed_resources
                .iter()
                .map(|n| len_delimited(6, spelled(&self.spellings, n).len()))
                .sum::<usize>()
            + control_plane_len(7, &self.control_plane)
            + resource_errors_len(9, &self.resource_errors)
    }

    fn clear(&mut self) {
        *self = DeltaWire::default();
    }
}

#[cfg(test)]
mod tests {
    use super::super::encodings::{RECENT, SetEncoding};
    use super::*;
    use std::time::Duration;
    use xds_core::ResourceSet;
    use xds_proto::pb::envoy::config::cluster::v3::Cluster;
    use xds_proto::pb::envoy::service::discovery::v3::{DeltaDiscoveryResponse, DiscoveryResponse};

    fn cluster(name: &str) -> EncodedResource {
        EncodedResource::new(&Cluster { name: name.into(), ..Default::default() }).unwrap()
    }

    #[test]
    fn sotw_wire_decodes_as_a_discovery_response() {
        let wire = SotwWire {
            shared: None,
            version_info: "v1".into(),
            resources: vec![cluster("a"), cluster("b")],
            type_url: xds_proto::ResourceType::Cluster.type_url().into(),
            nonce: "7".into(),
            control_plane: Some("cp-1".into()),
            resource_errors: Vec::new(),
            heartbeat: false,
        };
        let bytes = wire.encode_to_vec();
        assert_eq!(bytes.len(), wire.encoded_len());
        let decoded = DiscoveryResponse::decode(&*bytes).unwrap();
        assert_eq!(decoded.version_info, "v1");
        assert_eq!(decoded.nonce, "7");
        assert_eq!(decoded.type_url, wire.type_url);
        assert_eq!(decoded.control_plane.unwrap().identifier, "cp-1");
        let names: Vec<String> = decoded
            .resources
            .iter()
            .map(|any| Cluster::decode(&*any.value).unwrap().name)
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(decoded.resources[0], cluster("a").to_any());
    }

    #[test]
    fn sotw_resources_with_a_ttl_are_wrapped_and_heartbeats_have_no_body() {
        use xds_proto::pb::envoy::service::discovery::v3::Resource;
        let ttl = cluster("t").with_ttl(Duration::from_secs(30));
        for heartbeat in [false, true] {
            let wire = SotwWire {
                shared: None,
                version_info: "v".into(),
                resources: vec![cluster("plain"), ttl.clone()],
                type_url: xds_proto::ResourceType::Cluster.type_url().into(),
                nonce: "1".into(),
                control_plane: None,
                resource_errors: Vec::new(),
                heartbeat,
            };
            let bytes = wire.encode_to_vec();
            assert_eq!(bytes.len(), wire.encoded_len());
            let d = DiscoveryResponse::decode(&*bytes).unwrap();
            assert_eq!(d.resources[0], cluster("plain").to_any());
            assert_eq!(d.resources[1].type_url, <Resource as prost::Name>::type_url());
            let wrapped = Resource::decode(&*d.resources[1].value).unwrap();
            assert_eq!((wrapped.name.as_str(), wrapped.version.as_str()), ("t", ttl.version()));
            assert_eq!(wrapped.ttl.unwrap().seconds, 30);
            assert_eq!(wrapped.resource.is_none(), heartbeat);
            if !heartbeat {
                assert_eq!(wrapped.resource.unwrap(), ttl.to_any());
            }
        }
    }

    /// A set sent whole is encoded once, and reads as its resources listed one by one.
    #[test]
    fn a_shared_set_is_encoded_once_for_every_response_and_reads_as_its_list() {
        let set = ResourceSet::new((0..300).map(|i| cluster(&format!("c{i:03}"))).collect());
        let url = TypeUrl::from(xds_proto::ResourceType::Cluster);

        let sotw = SotwResponse {
            version_info: "v".into(),
            nonce: "1".into(),
            resources: vec![cluster("z")],
            shared: Some(set.clone()),
            heartbeat: false,
            resource_errors: Vec::new(),
        };
        let recent = RecentEncodings::default();
        let wire =
            |r: SotwResponse<EncodedResource>| SotwWire::encode(&url, r, None, Some(&recent));
        let (a, b) = (wire(sotw.clone()), wire(sotw.clone()));
        let (sa, sb) = (a.shared.as_ref().unwrap(), b.shared.as_ref().unwrap());
        assert_eq!(sa.bytes.as_ptr(), sb.bytes.as_ptr(), "one encoding for both");
        let listed = SotwWire::new(&url, sotw.clone().into_listed(), None);
        assert!(listed.shared.is_none());
        assert!(a.encode_to_vec() == listed.encode_to_vec(), "the same bytes as listed");
        assert_eq!(a.encoded_len(), listed.encoded_len());
        assert_eq!(a.body_bytes(), listed.body_bytes());
        assert_eq!(DiscoveryResponse::decode(&*a.encode_to_vec()).unwrap().resources.len(), 301);
        // Kept only while a response holds it: a set that lives on keeps no second copy.
        let kept = |set: &ResourceSet<EncodedResource>| {
            let memo = set.memo::<SetEncoding>().unwrap();
            memo.sotw.lock().unwrap().upgrade().is_some()
        };
        drop((a, b));
        assert!(kept(&set), "kept among the encodings used last");
        // Pushed out by others, and no response holds it: released.
        let others: Vec<_> =
            (0..RECENT).map(|i| ResourceSet::new(vec![cluster(&format!("other-{i}"))])).collect();
        let wires: Vec<_> =
            others.iter().map(|o| encoded_set(o, SetVariant::Sotw, Some(&recent))).collect();
        assert!(!kept(&set), "released once it is neither used nor recent");
        drop(wires);
        // Another server's encodings are its own: nothing here keeps them once they are used.
        let elsewhere = SotwWire::new(&url, sotw.clone(), None);
        assert!(kept(&set));
        drop(elsewhere);
        assert!(!kept(&set), "kept by no server's recent encodings");

        let delta = DeltaResponse {
            system_version_info: "v".into(),
            nonce: "2".into(),
            resources: vec![DeltaResource::Absent { name: "zz".into(), aliases: vec![] }],
            shared: Some(set.clone()),
            removed_resources: vec!["gone".into()],
            heartbeat: false,
            resource_errors: Vec::new(),
            spellings: BTreeMap::new(),
        };
        let a = DeltaWire::new(&url, delta.clone(), None);
        let b = DeltaWire::new(&url, delta.clone(), None);
        let (sa, sb) = (a.shared.as_ref().unwrap(), b.shared.as_ref().unwrap());
        assert_eq!(sa.bytes.as_ptr(), sb.bytes.as_ptr(), "one encoding for both");
        let listed = DeltaWire::new(&url, delta.clone().into_listed(), None);
        assert!(a.encode_to_vec() == listed.encode_to_vec(), "the same bytes as listed");
        assert_eq!(a.body_bytes(), listed.body_bytes());
        let d = DeltaDiscoveryResponse::decode(&*a.encode_to_vec()).unwrap();
        assert_eq!(d.resources.len(), 301);
        assert_eq!(d.resources[7].name, "c007");
        assert_eq!(d.resources[7].resource.as_ref().unwrap(), &cluster("c007").to_any());

        // Rule C1: a client that spelled a name otherwise is written entry by entry, as asked.
        let mut spelled = delta;
        spelled.spellings.insert("c001".into(), "C-one".into());
        let wire = DeltaWire::new(&url, spelled, None);
        assert!(wire.shared.is_none());
        let d = DeltaDiscoveryResponse::decode(&*wire.encode_to_vec()).unwrap();
        assert_eq!(d.resources[1].name, "C-one");
    }

    #[test]
    fn delta_heartbeat_has_no_body() {
        let r = cluster("t").with_ttl(Duration::from_secs(2));
        let wire = DeltaWire {
            shared: None,
            resources: vec![DeltaResource::Present { resource: r.clone(), aliases: vec![] }],
            nonce: "n".into(),
            heartbeat: true,
            ..Default::default()
        };
        let bytes = wire.encode_to_vec();
        assert_eq!(bytes.len(), wire.encoded_len());
        let d = DeltaDiscoveryResponse::decode(&*bytes).unwrap();
        let e = &d.resources[0];
        assert_eq!((e.name.as_str(), e.version.as_str()), ("t", r.version()));
        assert!(e.resource.is_none());
        assert_eq!(e.ttl.unwrap().seconds, 2);
    }

    #[test]
    fn delta_wire_decodes_as_a_delta_discovery_response() {
        let wire = DeltaWire {
            shared: None,
            system_version_info: "sys".into(),
            resources: vec![
                DeltaResource::Present {
                    resource: cluster("a").with_ttl(Duration::from_millis(1500)),
                    aliases: vec!["x".into()],
                },
                DeltaResource::Absent { name: "gone".into(), aliases: vec!["gone".into()] },
            ],
            type_url: "t".into(),
            nonce: "n".into(),
            removed_resources: vec!["r1".into(), "r2".into()],
            control_plane: None,
            resource_errors: Vec::new(),
            spellings: BTreeMap::new(),
            heartbeat: false,
        };
        let bytes = wire.encode_to_vec();
        assert_eq!(bytes.len(), wire.encoded_len());
        let d = DeltaDiscoveryResponse::decode(&*bytes).unwrap();
        assert_eq!(d.system_version_info, "sys");
        assert_eq!(d.removed_resources, ["r1", "r2"]);
        assert_eq!(d.resources.len(), 2);
        let a = &d.resources[0];
        assert_eq!(a.name, "a");
        assert_eq!(a.version, cluster("a").version());
        assert_eq!(a.aliases, ["x"]);
        assert_eq!(a.resource.as_ref().unwrap(), &cluster("a").to_any());
        let ttl = a.ttl.as_ref().unwrap();
        assert_eq!((ttl.seconds, ttl.nanos), (1, 500_000_000));
        let gone = &d.resources[1];
        assert_eq!((gone.name.as_str(), gone.resource.is_none()), ("gone", true));
        assert_eq!(gone.aliases, ["gone"]);
        assert!(d.control_plane.is_none());
        // Boxed, as the stream hands it to the body: the same bytes, written in the same parts.
        let boxed = Box::new(wire);
        let mut parts = Vec::new();
        boxed.put_all(&mut parts);
        assert_eq!(parts, bytes);
        assert_eq!(boxed.parts(), 2);
    }

    #[test]
    fn c04_resource_errors_and_c01_spellings_decode() {
        use xds_core::{ErrorDetail, code};
        let errors = vec![
            ResourceError { name: "gone".into(), error: ErrorDetail::new(code::NOT_FOUND, "no") },
            ResourceError { name: "*".into(), error: ErrorDetail::new(0, "") },
        ];
        let sotw = SotwWire {
            resources: vec![cluster("a")],
            resource_errors: errors.clone(),
            control_plane: Some("cp".into()),
            ..Default::default()
        };
        let bytes = sotw.encode_to_vec();
        assert_eq!(bytes.len(), sotw.encoded_len());
        let d = DiscoveryResponse::decode(&*bytes).unwrap();
        let got: Vec<_> = d
            .resource_errors
            .iter()
            .map(|e| {
                let status = e.error_detail.clone().unwrap_or_default();
                (e.resource_name.clone().unwrap_or_default().name, status.code, status.message)
            })
            .collect();
        assert_eq!(got, [("gone".into(), 5, "no".into()), ("*".into(), 0, String::new())]);
        assert_eq!(d.control_plane.unwrap().identifier, "cp");

        let normal = "xdstp://a/envoy.config.cluster.v3.Cluster/x?a=1&b=2";
        let asked = "xdstp://a/envoy.config.cluster.v3.Cluster/x?b=2&a=1";
        let r =
            EncodedResource::new(&Cluster { name: asked.into(), ..Default::default() }).unwrap();
        assert_eq!(r.name(), normal);
        let delta = DeltaWire {
            resources: vec![DeltaResource::Present { resource: r, aliases: vec![] }],
            removed_resources: vec![normal.into()],
            resource_errors: errors,
            spellings: BTreeMap::from([(normal.to_owned(), asked.to_owned())]),
            ..Default::default()
        };
        let bytes = delta.encode_to_vec();
        assert_eq!(bytes.len(), delta.encoded_len());
        let d = DeltaDiscoveryResponse::decode(&*bytes).unwrap();
        assert_eq!(d.resources[0].name, asked);
        assert_eq!(d.removed_resources, [asked]);
        assert_eq!(d.resource_errors.len(), 2);
        assert_eq!(d.resource_errors[0].error_detail.as_ref().unwrap().code, 5);
    }
}
