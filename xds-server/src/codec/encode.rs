//! The protobuf field writers of the response messages: lengths and bytes of each field,
//! written from encoded resources without decoding or re-encoding them.

use std::collections::BTreeMap;

use bytes::BufMut;
use prost::encoding::{self, WireType};
use xds_core::{DeltaResource, ResourceError};
use xds_proto::EncodedResource;

/// The encoded length of a string field, as `encoding::string::encoded_len` computes it but
/// without the `&String` that function takes (a copy per resource per client on the write path).
pub(super) fn string_len(tag: u32, s: &str) -> usize {
    if s.is_empty() { 0 } else { len_delimited(tag, s.len()) }
}

pub(super) fn put_string(tag: u32, s: &str, buf: &mut impl BufMut) {
    if !s.is_empty() {
        put_key_len(tag, s.len(), buf);
        buf.put_slice(s.as_bytes());
    }
}

pub(super) fn put_bytes_field(tag: u32, bytes: &[u8], buf: &mut impl BufMut) {
    put_key_len(tag, bytes.len(), buf);
    buf.put_slice(bytes);
}

/// A length-delimited field's key and length, written with one copy: `encoding::encode_key`
/// and `encode_varint` write a byte at a time, each a reserve check and a copy into the buffer.
pub(super) fn put_key_len(tag: u32, len: usize, buf: &mut impl BufMut) {
    let mut head = [0u8; 15];
    let at = put_varint(u64::from(tag) << 3 | 2, &mut head, 0);
    let at = put_varint(len as u64, &mut head, at);
    buf.put_slice(&head[..at]);
}

/// Writes `value` as a varint into `out` from `at`; returns where it ends. A key (a tag below
/// 2^29) takes at most 5 bytes and a length at most 10, so a key and a length fit in 15.
fn put_varint(mut value: u64, out: &mut [u8; 15], mut at: usize) -> usize {
    while value >= 0x80 {
        out[at] = (value as u8) | 0x80;
        value >>= 7;
        at += 1;
    }
    out[at] = value as u8;
    at + 1
}

pub(super) fn len_delimited(tag: u32, body_len: usize) -> usize {
    encoding::key_len(tag) + encoding::encoded_len_varint(body_len as u64) + body_len
}

/// The length of `Any { type_url, value }`.
pub(super) fn any_len(r: &EncodedResource) -> usize {
    string_len(1, r.type_url().as_str()) + len_delimited(2, r.value().len())
}

/// The resource as an `Any` field of number 2, as the resource keeps it written.
pub(super) fn put_any(r: &EncodedResource, buf: &mut impl BufMut) {
    buf.put_slice(r.any_field());
}

/// The type URL of `envoy.service.discovery.v3.Resource`, the wrapper SotW uses for resources
/// with a TTL.
pub(super) fn wrapper_type_url() -> &'static str {
    static URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    URL.get_or_init(
        <xds_proto::pb::envoy::service::discovery::v3::Resource as prost::Name>::type_url,
    )
}

/// The body length of a `Resource` wrapper: name, version, the resource unless a heartbeat, TTL.
pub(super) fn wrapper_len(r: &EncodedResource, ttl: std::time::Duration, heartbeat: bool) -> usize {
    string_len(1, r.version())
        + (if heartbeat { 0 } else { len_delimited(2, any_len(r)) })
        + string_len(3, r.name())
        + len_delimited(6, duration_len(ttl))
}

pub(super) fn put_wrapper(
    r: &EncodedResource,
    ttl: std::time::Duration,
    heartbeat: bool,
    buf: &mut impl BufMut,
) {
    put_string(1, r.version(), buf);
    if !heartbeat {
        put_any(r, buf);
    }
    put_string(3, r.name(), buf);
    put_duration(6, ttl, buf);
}

/// The length of one SotW entry's `Any`: the resource, or a `Resource` wrapper when it has a TTL.
pub(super) fn sotw_any_len(r: &EncodedResource, heartbeat: bool) -> usize {
    match r.ttl() {
        None => any_len(r),
        Some(ttl) => {
            string_len(1, wrapper_type_url()) + len_delimited(2, wrapper_len(r, ttl, heartbeat))
        }
    }
}

pub(super) fn put_sotw_any(r: &EncodedResource, heartbeat: bool, buf: &mut impl BufMut) {
    let Some(ttl) = r.ttl() else { return put_any(r, buf) };
    put_key_len(2, sotw_any_len(r, heartbeat), buf);
    put_string(1, wrapper_type_url(), buf);
    put_key_len(2, wrapper_len(r, ttl, heartbeat), buf);
    put_wrapper(r, ttl, heartbeat, buf);
}

pub(super) fn control_plane_len(tag: u32, cp: &Option<String>) -> usize {
    cp.as_deref().map_or(0, |id| len_delimited(tag, string_len(1, id)))
}

pub(super) fn put_control_plane(tag: u32, cp: &Option<String>, buf: &mut impl BufMut) {
    if let Some(id) = cp {
        put_key_len(tag, string_len(1, id), buf);
        put_string(1, id, buf);
    }
}

/// The body of `ResourceError { resource_name: ResourceName { name = 1 } = 1,
/// error_detail: google.rpc.Status { code = 1, message = 2 } = 2 }`.
pub(super) fn resource_error_len(e: &ResourceError) -> (usize, usize, usize) {
    let name = string_len(1, &e.name);
    let code = if e.error.code == 0 { 0 } else { encoding::int32::encoded_len(1, &e.error.code) };
    let status = code + string_len(2, &e.error.message);
    (name, status, len_delimited(1, name) + len_delimited(2, status))
}

pub(super) fn resource_errors_len(tag: u32, errors: &[ResourceError]) -> usize {
    errors.iter().map(|e| len_delimited(tag, resource_error_len(e).2)).sum()
}

pub(super) fn put_resource_errors(tag: u32, errors: &[ResourceError], buf: &mut impl BufMut) {
    for e in errors {
        let (name, status, body) = resource_error_len(e);
        put_key_len(tag, body, buf);
        put_key_len(1, name, buf);
        put_string(1, &e.name, buf);
        put_key_len(2, status, buf);
        if e.error.code != 0 {
            encoding::int32::encode(1, &e.error.code, buf);
        }
        put_string(2, &e.error.message, buf);
    }
}

/// `Duration { seconds = 1, nanos = 2 }` of a TTL.
pub(super) fn duration_len(d: std::time::Duration) -> usize {
    let secs = d.as_secs();
    let nanos = d.subsec_nanos();
    (if secs > 0 { 1 + encoding::encoded_len_varint(secs) } else { 0 })
        + (if nanos > 0 { 1 + encoding::encoded_len_varint(u64::from(nanos)) } else { 0 })
}

pub(super) fn put_duration(tag: u32, d: std::time::Duration, buf: &mut impl BufMut) {
    put_key_len(tag, duration_len(d), buf);
    if d.as_secs() > 0 {
        encoding::encode_key(1, WireType::Varint, buf);
        encoding::encode_varint(d.as_secs(), buf);
    }
    if d.subsec_nanos() > 0 {
        encoding::encode_key(2, WireType::Varint, buf);
        encoding::encode_varint(u64::from(d.subsec_nanos()), buf);
    }
}

/// The name a client knows `name` by (rule C1).
pub(super) fn spelled<'a>(spellings: &'a BTreeMap<String, String>, name: &'a str) -> &'a str {
    spellings.get(name).map_or(name, String::as_str)
}

/// The body length of one delta `Resource` message.
pub(super) fn delta_resource_len(
    e: &DeltaResource<EncodedResource>,
    heartbeat: bool,
    spellings: &BTreeMap<String, String>,
) -> usize {
    match e {
        DeltaResource::Present { resource, aliases } => {
            present_len(resource, spelled(spellings, resource.name()), aliases, heartbeat)
        }
        DeltaResource::Absent { name, aliases } => {
            string_len(3, spelled(spellings, name)) + aliases_len(aliases)
        }
    }
}

pub(super) fn put_delta_resource(
    e: &DeltaResource<EncodedResource>,
    heartbeat: bool,
    spellings: &BTreeMap<String, String>,
    buf: &mut impl BufMut,
) {
    match e {
        DeltaResource::Present { resource, aliases } => {
            let name = spelled(spellings, resource.name());
            put_present(resource, name, aliases, heartbeat, buf);
        }
        DeltaResource::Absent { name, aliases } => {
            let name = spelled(spellings, name);
            put_key_len(2, string_len(3, name) + aliases_len(aliases), buf);
            put_string(3, name, buf);
            put_aliases(aliases, buf);
        }
    }
}

/// The body length of a delta `Resource` that carries `resource` as the client knows it, under
/// `name`, with the `aliases` it was subscribed by; without its body in a heartbeat.
fn present_len(r: &EncodedResource, name: &str, aliases: &[String], heartbeat: bool) -> usize {
    if is_plain(r, name, aliases, heartbeat) {
        plain_delta_len(r)
    } else {
        fields_len(r, name, aliases, heartbeat)
    }
}

/// [`present_len`] of an entry written field by field (see [`is_plain`]).
fn fields_len(r: &EncodedResource, name: &str, aliases: &[String], heartbeat: bool) -> usize {
    string_len(1, r.version())
        + (if heartbeat { 0 } else { len_delimited(2, any_len(r)) })
        + string_len(3, name)
        + aliases_len(aliases)
        + r.ttl().map_or(0, |t| len_delimited(6, duration_len(t)))
}

/// The field (key, length and body) of the `Resource` that [`present_len`] measures.
fn put_present(
    r: &EncodedResource,
    name: &str,
    aliases: &[String],
    heartbeat: bool,
    buf: &mut impl BufMut,
) {
    if is_plain(r, name, aliases, heartbeat) {
        return put_plain_delta(r, buf);
    }
    put_key_len(2, fields_len(r, name, aliases, heartbeat), buf);
    put_string(1, r.version(), buf);
    if !heartbeat {
        put_any(r, buf);
    }
    put_string(3, name, buf);
    put_aliases(aliases, buf);
    if let Some(ttl) = r.ttl() {
        put_duration(6, ttl, buf);
    }
}

/// Whether the entry is the one the resource keeps written ([`EncodedResource::delta_entry`]):
/// under its own name as the client spells it (rule C1), with no alias, not a heartbeat.
fn is_plain(r: &EncodedResource, name: &str, aliases: &[String], heartbeat: bool) -> bool {
    !heartbeat && aliases.is_empty() && name == r.name()
}

fn aliases_len(aliases: &[String]) -> usize {
    aliases.iter().map(|a| len_delimited(4, a.len())).sum()
}

fn put_aliases(aliases: &[String], buf: &mut impl BufMut) {
    for a in aliases {
        put_bytes_field(4, a.as_bytes(), buf);
    }
}

/// The body length of a shared set's delta entry: the resource under its own name, no alias,
/// which it keeps written.
pub(super) fn plain_delta_len(r: &EncodedResource) -> usize {
    r.delta_entry().len()
}

/// A shared set's delta entry (see [`plain_delta_len`]): one copy.
pub(super) fn put_plain_delta(r: &EncodedResource, buf: &mut impl BufMut) {
    put_bytes_field(2, r.delta_entry(), buf);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key and a length written at once read as prost writes them, a byte at a time, from
    /// the shortest varints to the longest.
    #[test]
    fn a_key_and_length_written_at_once_are_what_prost_writes() {
        let tags = [1, 2, 15, 16, 2047, 2048, (1 << 29) - 1];
        let lens = [0, 1, 127, 128, 16_383, 16_384, 1 << 21, 1 << 35, usize::MAX];
        for tag in tags {
            for len in lens {
                let (mut ours, mut prost) = (Vec::new(), Vec::new());
                put_key_len(tag, len, &mut ours);
                encoding::encode_key(tag, WireType::LengthDelimited, &mut prost);
                encoding::encode_varint(len as u64, &mut prost);
                assert_eq!(ours, prost, "tag {tag}, length {len}");
            }
        }
    }
}
