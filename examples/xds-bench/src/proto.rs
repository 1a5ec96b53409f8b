//! Just enough protobuf to read xDS responses without decoding them into messages.
//!
//! The load generator reads thousands of responses a second; it walks the wire format in place
//! (no allocation) and looks only at the fields it needs: the header of a response, the name of a
//! Cluster, and the name and first endpoint port of a ClusterLoadAssignment.

/// A response or resource that is not valid protobuf (or not the expected message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed protobuf: {0}")]
pub struct Malformed(pub &'static str);

/// The value of one field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// A varint (int32, uint32, bool, enum, ...).
    Varint(u64),
    /// A length-delimited field (string, bytes, message, packed repeated).
    Bytes(&'a [u8]),
    /// A fixed 32- or 64-bit field (skipped).
    Fixed,
}

/// The fields of a message, in wire order: `(tag, value)`.
#[derive(Debug, Clone)]
pub struct Fields<'a> {
    buf: &'a [u8],
}

/// Iterates over the fields of `message`.
pub fn fields(message: &[u8]) -> Fields<'_> {
    Fields { buf: message }
}

fn varint(buf: &mut &[u8]) -> Result<u64, Malformed> {
    let mut value = 0u64;
    for shift in 0..10 {
        let (&byte, rest) = buf.split_first().ok_or(Malformed("truncated varint"))?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << (shift * 7);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(Malformed("varint longer than 10 bytes"))
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> Result<&'a [u8], Malformed> {
    if buf.len() < n {
        return Err(Malformed("truncated field"));
    }
    let (head, rest) = buf.split_at(n);
    *buf = rest;
    Ok(head)
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Value<'a>), Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        let item = (|| {
            let key = varint(&mut self.buf)?;
            let tag = u32::try_from(key >> 3).map_err(|_| Malformed("tag out of range"))?;
            let value = match key & 7 {
                0 => Value::Varint(varint(&mut self.buf)?),
                1 => {
                    take(&mut self.buf, 8)?;
                    Value::Fixed
                }
                2 => {
                    let len = usize::try_from(varint(&mut self.buf)?)
                        .map_err(|_| Malformed("length out of range"))?;
                    Value::Bytes(take(&mut self.buf, len)?)
                }
                5 => {
                    take(&mut self.buf, 4)?;
                    Value::Fixed
                }
                _ => return Err(Malformed("unsupported wire type")),
            };
            Ok((tag, value))
        })();
        if item.is_err() {
            // Stop after the first error.
            self.buf = &[];
        }
        Some(item)
    }
}

/// The first length-delimited field `tag` of `message`.
pub fn first_bytes(message: &[u8], tag: u32) -> Result<Option<&[u8]>, Malformed> {
    for field in fields(message) {
        if let (t, Value::Bytes(b)) = field?
            && t == tag
        {
            return Ok(Some(b));
        }
    }
    Ok(None)
}

/// The header of a `DiscoveryResponse` or `DeltaDiscoveryResponse`: what an ACK needs.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    /// `version_info` (SotW) or `system_version_info` (delta).
    pub version: &'a [u8],
    /// `type_url`.
    pub type_url: &'a [u8],
    /// `nonce`.
    pub nonce: &'a [u8],
}

/// The header of a `DiscoveryResponse` or a `DeltaDiscoveryResponse`: both carry the version
/// (`version_info` / `system_version_info`), the type URL and the nonce as fields 1, 4 and 5.
pub fn header(response: &[u8]) -> Result<Header<'_>, Malformed> {
    let mut h = Header::default();
    for field in fields(response) {
        match field? {
            (1, Value::Bytes(b)) => h.version = b,
            (4, Value::Bytes(b)) => h.type_url = b,
            (5, Value::Bytes(b)) => h.nonce = b,
            _ => {}
        }
    }
    Ok(h)
}

/// Calls `f` with the body (`Any.value`) of each resource of a SotW `DiscoveryResponse`.
pub fn sotw_resources(
    response: &[u8],
    mut f: impl FnMut(&[u8]) -> Result<(), Malformed>,
) -> Result<(), Malformed> {
    for field in fields(response) {
        if let (2, Value::Bytes(any)) = field? {
            f(first_bytes(any, 2)?.unwrap_or_default())?;
        }
    }
    Ok(())
}

/// One entry of a `DeltaDiscoveryResponse`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeltaEntry<'a> {
    /// A resource (its `Resource.name`, `Resource.version` and the body of its `Any`; the body
    /// is empty for a heartbeat).
    Resource {
        /// `Resource.name`.
        name: &'a [u8],
        /// `Resource.version`.
        version: &'a [u8],
        /// `Resource.resource.value`.
        body: &'a [u8],
    },
    /// A name in `removed_resources`.
    Removed(&'a [u8]),
}

/// Calls `f` with each resource and removal of a `DeltaDiscoveryResponse`.
pub fn delta_entries(
    response: &[u8],
    mut f: impl FnMut(DeltaEntry<'_>) -> Result<(), Malformed>,
) -> Result<(), Malformed> {
    for field in fields(response) {
        match field? {
            (2, Value::Bytes(resource)) => {
                let (mut name, mut version, mut body) = (&[][..], &[][..], &[][..]);
                for field in fields(resource) {
                    match field? {
                        (1, Value::Bytes(b)) => version = b,
                        (3, Value::Bytes(b)) => name = b,
                        (2, Value::Bytes(any)) => body = first_bytes(any, 2)?.unwrap_or_default(),
                        _ => {}
                    }
                }
                f(DeltaEntry::Resource { name, version, body })?;
            }
            (6, Value::Bytes(name)) => f(DeltaEntry::Removed(name))?,
            _ => {}
        }
    }
    Ok(())
}

/// The name of a `Cluster` (field 1).
pub fn cluster_name(cluster: &[u8]) -> Result<&[u8], Malformed> {
    Ok(first_bytes(cluster, 1)?.unwrap_or_default())
}

/// The `cluster_name` of a `ClusterLoadAssignment` and the port of its first endpoint (0 when it
/// has none): `endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value`.
pub fn cla_name_and_port(cla: &[u8]) -> Result<(&[u8], u32), Malformed> {
    let (mut name, mut port) = (&[][..], None);
    for field in fields(cla) {
        match field? {
            (1, Value::Bytes(b)) => name = b,
            (2, Value::Bytes(locality)) if port.is_none() => port = first_port(locality)?,
            _ => {}
        }
    }
    Ok((name, port.unwrap_or(0)))
}

/// The first port of a `LocalityLbEndpoints`.
fn first_port(locality: &[u8]) -> Result<Option<u32>, Malformed> {
    for field in fields(locality) {
        if let (2, Value::Bytes(lb_endpoint)) = field? {
            // LbEndpoint.endpoint (1) -> Endpoint.address (1) -> Address.socket_address (1).
            let socket = first_bytes(lb_endpoint, 1)?
                .map(|endpoint| first_bytes(endpoint, 1))
                .transpose()?
                .flatten()
                .map(|address| first_bytes(address, 1))
                .transpose()?
                .flatten();
            if let Some(socket) = socket {
                for field in fields(socket) {
                    if let (3, Value::Varint(v)) = field? {
                        return u32::try_from(v).map(Some).map_err(|_| Malformed("port > u32"));
                    }
                }
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xds_proto::builders::{eds_cluster, endpoints};
    use xds_proto::pb::envoy::service::discovery::v3::{
        DeltaDiscoveryResponse, DiscoveryResponse, Resource,
    };
    use xds_proto::pb::google::protobuf::Any;
    use xds_proto::prost::{Message, Name};

    fn any<M: Message + Name>(m: &M) -> Any {
        Any { type_url: M::type_url(), value: m.encode_to_vec() }
    }

    #[test]
    fn reads_a_sotw_response() {
        let cla = endpoints("cluster-7", &[("10.0.0.1", 10042), ("10.0.0.2", 9)]);
        let response = DiscoveryResponse {
            version_info: "v1".into(),
            resources: vec![any(&cla), any(&eds_cluster("cluster-3"))],
            type_url: "t".into(),
            nonce: "n1".into(),
            ..Default::default()
        }
        .encode_to_vec();
        let h = header(&response).unwrap();
        assert_eq!((h.version, h.type_url, h.nonce), (&b"v1"[..], &b"t"[..], &b"n1"[..]));
        let mut bodies = Vec::new();
        sotw_resources(&response, |b| {
            bodies.push(b.to_vec());
            Ok(())
        })
        .unwrap();
        assert_eq!(cla_name_and_port(&bodies[0]).unwrap(), (&b"cluster-7"[..], 10042));
        assert_eq!(cluster_name(&bodies[1]).unwrap(), b"cluster-3");
    }

    #[test]
    fn reads_a_delta_response() {
        let cla = endpoints("cluster-1", &[("10.0.0.1", 8080)]);
        let response = DeltaDiscoveryResponse {
            system_version_info: "s".into(),
            resources: vec![Resource {
                name: "cluster-1".into(),
                version: "abc".into(),
                resource: Some(any(&cla)),
                ..Default::default()
            }],
            removed_resources: vec!["cluster-2".into()],
            nonce: "n".into(),
            type_url: "t".into(),
            ..Default::default()
        }
        .encode_to_vec();
        assert_eq!(header(&response).unwrap().nonce, b"n");
        let mut seen = Vec::new();
        delta_entries(&response, |e| {
            seen.push(match e {
                DeltaEntry::Resource { name, version, body } => {
                    let (n, port) = cla_name_and_port(body)?;
                    assert_eq!((n, version), (name, &b"abc"[..]));
                    format!("{}:{port}", String::from_utf8_lossy(name))
                }
                DeltaEntry::Removed(name) => format!("-{}", String::from_utf8_lossy(name)),
            });
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, ["cluster-1:8080", "-cluster-2"]);
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        let cla = endpoints("cluster-1", &[("10.0.0.1", 8080)]).encode_to_vec();
        for cut in 0..cla.len() {
            let _ = cla_name_and_port(&cla[..cut]);
        }
        assert!(cla_name_and_port(&[0x0a, 0x05, b'a']).is_err());
    }
}
