//! Deterministic (canonical) protobuf encoding.
//!
//! prost encodes a map field (`google.protobuf.Struct.fields`,
//! `Cluster.typed_extension_protocol_options`, `Metadata.filter_metadata`, ...) in the iteration
//! order of its `HashMap`, which is randomly seeded per map and per process. Equal content can
//! therefore encode to different bytes, which would give equal resources different content
//! versions on different replicas (and make clients re-apply unchanged config). This module
//! rewrites an encoding into a canonical form by walking the wire bytes with the message's
//! descriptor from [`descriptor_pool`]:
//!
//! - the fields of every rewritten message are put in ascending field-number order; the sort is
//!   stable, so the elements of a repeated field (and repeated occurrences of any field) keep
//!   their order;
//! - the entries of every map field are sorted by their canonical encoded bytes (an entry whose
//!   key appears again later is dropped: the last one wins when decoding anyway);
//! - nested messages are canonicalized recursively, and so is the `value` of a
//!   `google.protobuf.Any` whose `type_url` names a message in the pool.
//!
//! Anything the walk does not understand stays byte-for-byte as it is: unknown message names,
//! `Any`s of unknown types, unknown fields and malformed bytes (a message that does not parse is
//! kept whole). The walk never panics and never fails.
//!
//! It is also cheap when there is nothing to do: whether a message type can transitively contain
//! a map or an `Any` is computed once for the whole pool, and bytes of a type that cannot are
//! returned borrowed without being looked at. Sub-messages of such types are copied without
//! being parsed.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, Kind, MessageDescriptor};

use crate::descriptor::descriptor_pool;

/// The full name of `google.protobuf.Any`.
const ANY: &str = "google.protobuf.Any";

/// Nesting deeper than this is left as it is (protobuf's own recursion limit is 100).
const MAX_DEPTH: u32 = 100;

/// The wire type of length-delimited records (strings, bytes, messages, packed scalars).
const WIRE_LEN: u8 = 2;

/// The canonical encoding of `encoded`, a message of type `message_name` (a full name such as
/// `envoy.config.cluster.v3.Cluster`; a type URL is accepted too).
///
/// Equal messages give equal canonical bytes whatever order their maps were built in, so the
/// result can be hashed into a content version and served as the wire bytes. Returns
/// `Cow::Borrowed(encoded)` when the bytes are already canonical, when the type cannot contain a
/// map or an `Any`, and when the type is unknown or the bytes do not parse: see the module
/// documentation.
pub fn canonical_bytes<'a>(message_name: &str, encoded: &'a [u8]) -> Cow<'a, [u8]> {
    let name = message_name.rsplit('/').next().unwrap_or(message_name);
    let pool = descriptor_pool();
    match pool.get_message_by_name(name) {
        Some(message) => canonicalize(pool, &message, encoded, 0),
        None => Cow::Borrowed(encoded),
    }
}

/// The full names of the message types whose encoding may depend on map iteration order: those
/// that can contain, at any depth, a map field or a `google.protobuf.Any` (whose value can be
/// anything). Computed once for the whole pool by a fixpoint over the message graph.
fn needs_walk(message: &MessageDescriptor) -> bool {
    static NEEDS_WALK: OnceLock<HashSet<Box<str>>> = OnceLock::new();
    NEEDS_WALK.get_or_init(|| types_needing_walk(descriptor_pool())).contains(message.full_name())
}

/// See [`needs_walk`].
fn types_needing_walk(pool: &DescriptorPool) -> HashSet<Box<str>> {
    let messages: Vec<MessageDescriptor> = pool.all_messages().collect();
    let mut marked: HashSet<Box<str>> = messages
        .iter()
        .filter(|m| m.full_name() == ANY || m.fields().any(|f| f.is_map()))
        .map(|m| m.full_name().into())
        .collect();
    loop {
        let newly: Vec<Box<str>> = messages
            .iter()
            .filter(|m| !marked.contains(m.full_name()))
            .filter(|m| {
                m.fields().any(|f| match f.kind() {
                    Kind::Message(child) => marked.contains(child.full_name()),
                    _ => false,
                })
            })
            .map(|m| m.full_name().into())
            .collect();
        if newly.is_empty() {
            return marked;
        }
        marked.extend(newly);
    }
}

/// One field record of an encoded message.
struct Record<'a> {
    number: u32,
    /// The tag (field number and wire type) exactly as encoded.
    tag: &'a [u8],
    /// For a length-delimited record, its payload; otherwise empty.
    payload: &'a [u8],
    /// The whole record: tag, length and payload.
    whole: &'a [u8],
    wire_type: u8,
}

/// A record after canonicalization: either unchanged or re-encoded with a new payload.
struct Canonical<'a> {
    record: Record<'a>,
    new_payload: Option<Vec<u8>>,
}

impl Canonical<'_> {
    fn payload(&self) -> &[u8] {
        self.new_payload.as_deref().unwrap_or(self.record.payload)
    }

    fn write(&self, out: &mut Vec<u8>) {
        match &self.new_payload {
            None => out.extend_from_slice(self.record.whole),
            Some(payload) => {
                out.extend_from_slice(self.record.tag);
                put_varint(out, payload.len() as u64);
                out.extend_from_slice(payload);
            }
        }
    }
}

/// The canonical form of `bytes`, an encoded `message`.
fn canonicalize<'a>(
    pool: &DescriptorPool,
    message: &MessageDescriptor,
    bytes: &'a [u8],
    depth: u32,
) -> Cow<'a, [u8]> {
    if depth > MAX_DEPTH || !needs_walk(message) {
        return Cow::Borrowed(bytes);
    }
    let Some(records) = parse(bytes) else {
        return Cow::Borrowed(bytes);
    };
    if !wire_types_fit(message, &records) || has_competing_oneof_members(message, &records) {
        return Cow::Borrowed(bytes);
    }

    // The message type of an `Any`'s value, when the pool knows it.
    let any_type = if message.full_name() == ANY {
        records
            .iter()
            .rev()
            .find(|r| r.number == 1 && r.wire_type == WIRE_LEN)
            .and_then(|r| std::str::from_utf8(r.payload).ok())
            .and_then(|url| url.rsplit('/').next())
            .and_then(|name| pool.get_message_by_name(name))
    } else {
        None
    };

    let mut canonical: Vec<Canonical<'a>> = records
        .into_iter()
        .map(|record| {
            let child = if record.wire_type != WIRE_LEN {
                None
            } else if message.full_name() == ANY {
                any_type.clone().filter(|_| record.number == 2)
            } else {
                message.get_field(record.number).and_then(|field| match field.kind() {
                    Kind::Message(child) => Some(child),
                    _ => None,
                })
            };
            let new_payload = child.and_then(|child| {
                match canonicalize(pool, &child, record.payload, depth + 1) {
                    Cow::Borrowed(_) => None,
                    Cow::Owned(payload) => Some(payload),
                }
            });
            Canonical { record, new_payload }
        })
        .collect();
    canonical.sort_by_key(|c| c.record.number);

    let mut out = Vec::with_capacity(bytes.len());
    let mut start = 0;
    while start < canonical.len() {
        let number = canonical[start].record.number;
        let end =
            start + canonical[start..].iter().take_while(|c| c.record.number == number).count();
        let group = &canonical[start..end];
        let is_map = message.get_field(number).is_some_and(|f| f.is_map());
        if is_map && group.iter().all(|c| c.record.wire_type == WIRE_LEN) {
            write_map_entries(group, &mut out);
        } else {
            for c in group {
                c.write(&mut out);
            }
        }
        start = end;
    }

    if out == bytes { Cow::Borrowed(bytes) } else { Cow::Owned(out) }
}

/// Whether every record of a known field has a wire type its kind allows. Decoders are lenient
/// with mismatches in ways that depend on the bytes that follow (prost reads a map field's
/// length-prefixed entry whatever the wire type), so such bytes are left as they are.
fn wire_types_fit(message: &MessageDescriptor, records: &[Record<'_>]) -> bool {
    records.iter().all(|record| {
        let Some(field) = message.get_field(record.number) else {
            return true;
        };
        let scalar = match field.kind() {
            Kind::Message(_) if field.is_group() => 3,
            Kind::Message(_) | Kind::String | Kind::Bytes => WIRE_LEN,
            Kind::Double | Kind::Fixed64 | Kind::Sfixed64 => 1,
            Kind::Float | Kind::Fixed32 | Kind::Sfixed32 => 5,
            _ => 0,
        };
        record.wire_type == scalar
            || (record.wire_type == WIRE_LEN && field.is_list() && scalar != 3)
    })
}

/// Whether two different members of one oneof are both present. The last one wins when decoding,
/// so sorting them by field number could change the message: such (never canonical) bytes are
/// left as they are.
fn has_competing_oneof_members(message: &MessageDescriptor, records: &[Record<'_>]) -> bool {
    if message.oneofs().len() == 0 {
        return false;
    }
    // Oneofs are keyed by the number of their first member.
    let mut seen: HashMap<u32, u32> = HashMap::new();
    records.iter().any(|record| {
        let Some(oneof) =
            message.get_field(record.number).and_then(|field| field.containing_oneof())
        else {
            return false;
        };
        let key = oneof.fields().next().map_or(0, |f| f.number());
        *seen.entry(key).or_insert(record.number) != record.number
    })
}

/// Writes the entries of one map field sorted by their canonical bytes, keeping only the last
/// entry of each key (the one a decoder keeps).
fn write_map_entries(entries: &[Canonical<'_>], out: &mut Vec<u8>) {
    let mut last_by_key: HashMap<&[u8], usize> = HashMap::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        last_by_key.insert(map_key(entry.payload()), index);
    }
    let mut kept: Vec<&Canonical<'_>> = entries
        .iter()
        .enumerate()
        .filter(|(index, entry)| last_by_key.get(map_key(entry.payload())) == Some(index))
        .map(|(_, entry)| entry)
        .collect();
    kept.sort_by(|a, b| a.payload().cmp(b.payload()));
    for entry in kept {
        entry.write(out);
    }
}

/// The encoded key of a map entry: its last field-1 record (empty when absent or unparsable).
fn map_key(entry: &[u8]) -> &[u8] {
    parse(entry)
        .and_then(|records| records.into_iter().rev().find(|r| r.number == 1))
        .map_or(&[], |r| r.whole)
}

/// The records of an encoded message, or `None` if the bytes are malformed.
fn parse(bytes: &[u8]) -> Option<Vec<Record<'_>>> {
    let mut records = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let start = rest;
        let key = take_varint(&mut rest)?;
        let tag = &start[..start.len() - rest.len()];
        let (number, wire_type) = split_key(key)?;
        let mut payload: &[u8] = &[];
        match wire_type {
            0 => {
                take_varint(&mut rest)?;
            }
            1 => rest = rest.get(8..)?,
            WIRE_LEN => {
                let len = usize::try_from(take_varint(&mut rest)?).ok()?;
                payload = rest.get(..len)?;
                rest = &rest[len..];
            }
            3 => skip_group(&mut rest, number)?,
            5 => rest = rest.get(4..)?,
            _ => return None,
        }
        records.push(Record {
            number,
            tag,
            payload,
            whole: &start[..start.len() - rest.len()],
            wire_type,
        });
    }
    Some(records)
}

/// The field number and wire type of a record key; `None` for a number outside 1..2^29.
fn split_key(key: u64) -> Option<(u32, u8)> {
    let number = u32::try_from(key >> 3).ok()?;
    if number == 0 || number >= 1 << 29 {
        return None;
    }
    Some((number, (key & 7) as u8))
}

/// Skips the body of a (deprecated) group up to and including its end-group record.
fn skip_group(rest: &mut &[u8], number: u32) -> Option<()> {
    let mut open = vec![number];
    while let Some(&current) = open.last() {
        let (field, wire_type) = split_key(take_varint(rest)?)?;
        match wire_type {
            0 => {
                take_varint(rest)?;
            }
            1 => *rest = rest.get(8..)?,
            WIRE_LEN => {
                let len = usize::try_from(take_varint(rest)?).ok()?;
                *rest = rest.get(len..)?;
            }
            3 => {
                if open.len() >= MAX_DEPTH as usize {
                    return None;
                }
                open.push(field);
            }
            4 if field == current => {
                open.pop();
            }
            5 => *rest = rest.get(4..)?,
            _ => return None,
        }
    }
    Some(())
}

/// Reads a base-128 varint (at most 10 bytes).
fn take_varint(rest: &mut &[u8]) -> Option<u64> {
    let mut value: u64 = 0;
    for i in 0..10 {
        let (&byte, tail) = rest.split_first()?;
        *rest = tail;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// Appends a base-128 varint.
fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::google::protobuf::{Any, Struct, Value, value::Kind as ValueKind};
    use prost::{Message, Name};

    fn string_value(s: &str) -> Value {
        Value { kind: Some(ValueKind::StringValue(s.to_owned())) }
    }

    #[test]
    fn varints_round_trip() {
        for value in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            let mut slice = out.as_slice();
            assert_eq!(take_varint(&mut slice), Some(value));
            assert!(slice.is_empty());
        }
    }

    #[test]
    fn types_without_maps_or_any_are_not_walked() {
        let pool = descriptor_pool();
        let no = |name: &str| !needs_walk(&pool.get_message_by_name(name).unwrap());
        assert!(no("google.protobuf.Duration"));
        assert!(no("envoy.config.core.v3.Address"));
        assert!(no("envoy.type.v3.FractionalPercent"));
        let yes = |name: &str| needs_walk(&pool.get_message_by_name(name).unwrap());
        // `custom` is a TypedExtensionConfig, which holds an Any.
        assert!(yes("envoy.type.matcher.v3.StringMatcher"));
        assert!(yes("google.protobuf.Any"));
        assert!(yes("google.protobuf.Struct"));
        assert!(yes("google.protobuf.Value"));
        assert!(yes("google.protobuf.ListValue"));
        assert!(yes("envoy.config.core.v3.Metadata"));
        assert!(yes("envoy.config.cluster.v3.Cluster"));
        assert!(yes("envoy.config.listener.v3.Listener"));
    }

    #[test]
    fn fields_are_sorted_and_map_entries_ordered() {
        // Struct { fields: {"b": "2", "a": "1"} } written by hand in the "wrong" order.
        let entry = |key: &str, value: &str| {
            let mut entry = Vec::new();
            prost::encoding::string::encode(1, &key.to_owned(), &mut entry);
            prost::encoding::message::encode(2, &string_value(value), &mut entry);
            entry
        };
        let mut reversed = Vec::new();
        prost::encoding::bytes::encode(1, &entry("b", "2"), &mut reversed);
        prost::encoding::bytes::encode(1, &entry("a", "1"), &mut reversed);
        let mut sorted = Vec::new();
        prost::encoding::bytes::encode(1, &entry("a", "1"), &mut sorted);
        prost::encoding::bytes::encode(1, &entry("b", "2"), &mut sorted);

        assert_eq!(
            canonical_bytes(Struct::full_name().as_str(), &reversed).as_ref(),
            sorted.as_slice()
        );
        assert!(matches!(canonical_bytes(Struct::full_name().as_str(), &sorted), Cow::Borrowed(_)));
    }

    #[test]
    fn a_repeated_key_keeps_the_last_entry() {
        let mut entry_first = Vec::new();
        prost::encoding::string::encode(1, &"k".to_owned(), &mut entry_first);
        prost::encoding::message::encode(2, &string_value("zzz"), &mut entry_first);
        let mut entry_last = Vec::new();
        prost::encoding::string::encode(1, &"k".to_owned(), &mut entry_last);
        prost::encoding::message::encode(2, &string_value("aaa"), &mut entry_last);
        let mut bytes = Vec::new();
        prost::encoding::bytes::encode(1, &entry_first, &mut bytes);
        prost::encoding::bytes::encode(1, &entry_last, &mut bytes);

        let canonical = canonical_bytes("google.protobuf.Struct", &bytes);
        let decoded = Struct::decode(canonical.as_ref()).unwrap();
        assert_eq!(decoded, Struct::decode(bytes.as_slice()).unwrap());
        assert_eq!(decoded.fields["k"], string_value("aaa"));
    }

    #[test]
    fn any_values_of_known_types_are_rewritten() {
        let mut fields_value = Vec::new();
        for key in ["z", "y", "x"] {
            let mut entry = Vec::new();
            prost::encoding::string::encode(1, &key.to_owned(), &mut entry);
            prost::encoding::message::encode(2, &string_value(key), &mut entry);
            prost::encoding::bytes::encode(1, &entry, &mut fields_value);
        }
        let any = Any {
            type_url: "type.googleapis.com/google.protobuf.Struct".to_owned(),
            value: fields_value.clone(),
        };
        let canonical = canonical_bytes("google.protobuf.Any", &any.encode_to_vec()).into_owned();
        let decoded = Any::decode(canonical.as_slice()).unwrap();
        assert_ne!(decoded.value, fields_value);
        assert_eq!(
            Struct::decode(decoded.value.as_slice()).unwrap(),
            Struct::decode(fields_value.as_slice()).unwrap()
        );

        let unknown =
            Any { type_url: "type.googleapis.com/not.a.Type".to_owned(), value: fields_value };
        let encoded = unknown.encode_to_vec();
        assert!(matches!(canonical_bytes("google.protobuf.Any", &encoded), Cow::Borrowed(_)));
    }

    #[test]
    fn malformed_input_is_left_alone() {
        for bytes in [
            &[0xff_u8, 0xff, 0xff][..],
            &[0x0a, 0x05, 0x01][..],
            &[0x00][..],
            &[0x0b, 0x10, 0x01][..],
            &[0x07][..],
        ] {
            assert_eq!(canonical_bytes("google.protobuf.Struct", bytes).as_ref(), bytes);
        }
        assert!(matches!(canonical_bytes("no.such.Message", &[1, 2, 3]), Cow::Borrowed(_)));
    }

    #[test]
    fn groups_are_skipped_whole() {
        // Field 5 as a group holding field 1 = 1, then Struct.fields entry "a".
        let mut bytes = vec![0x2b, 0x08, 0x01, 0x2c];
        let mut entry = Vec::new();
        prost::encoding::string::encode(1, &"a".to_owned(), &mut entry);
        prost::encoding::bytes::encode(1, &entry, &mut bytes);
        let canonical = canonical_bytes("google.protobuf.Struct", &bytes);
        // Field 1 sorts before the unknown field 5.
        assert_eq!(&canonical[..entry.len() + 2][2..], entry.as_slice());
        assert_eq!(&canonical[entry.len() + 2..], &[0x2b, 0x08, 0x01, 0x2c]);
    }
}
