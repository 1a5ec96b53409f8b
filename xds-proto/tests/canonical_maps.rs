//! Canonical encoding: equal messages give equal bytes whatever their maps' iteration order.

#![allow(clippy::unwrap_used)] // Test helpers outside #[test] functions unwrap too.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::RandomState;

use prost::{Message, Name};
use xds_proto::canonical_bytes;
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::config::core::v3::{
    Address, Metadata, SocketAddress, address, socket_address,
};
use xds_proto::pb::envoy::config::listener::v3::{Filter, FilterChain, Listener, filter};
use xds_proto::pb::envoy::extensions::upstreams::http::v3::HttpProtocolOptions;
use xds_proto::pb::google::protobuf::value::Kind;
use xds_proto::pb::google::protobuf::{Any, Duration, ListValue, Struct, Value};

/// How many times to rebuild a message looking for a different raw encoding.
const ATTEMPTS: usize = 200;

fn string(s: &str) -> Value {
    Value { kind: Some(Kind::StringValue(s.to_owned())) }
}

fn number(n: f64) -> Value {
    Value { kind: Some(Kind::NumberValue(n)) }
}

/// A fresh map (new random seed) with `entries` inserted in the given order.
fn fresh_map<V: Clone>(entries: &[(String, V)], reversed: bool) -> HashMap<String, V> {
    let mut map = HashMap::with_hasher(RandomState::new());
    let mut order: Vec<&(String, V)> = entries.iter().collect();
    if reversed {
        order.reverse();
    }
    for (key, value) in order {
        map.insert(key.clone(), value.clone());
    }
    map
}

/// A Struct with 10 fields, one of them a nested Struct with its own 8 fields.
fn struct_entries() -> Vec<(String, Value)> {
    let inner: Vec<(String, Value)> =
        (0..8).map(|i| (format!("inner_{i}"), number(f64::from(i)))).collect();
    let mut entries: Vec<(String, Value)> =
        (0..9).map(|i| (format!("key_{i}"), string(&format!("value {i}")))).collect();
    entries.push((
        "nested".to_owned(),
        Value {
            kind: Some(Kind::ListValue(ListValue {
                values: vec![Value {
                    kind: Some(Kind::StructValue(Struct { fields: fresh_map(&inner, false) })),
                }],
            })),
        },
    ));
    entries
}

fn build_struct(reversed: bool) -> Struct {
    Struct { fields: fresh_map(&struct_entries(), reversed) }
}

fn build_cluster(reversed: bool) -> Cluster {
    let options: Vec<(String, Any)> = (0..5)
        .map(|i| {
            let options = HttpProtocolOptions {
                common_http_protocol_options: Some(
                    xds_proto::pb::envoy::config::core::v3::HttpProtocolOptions {
                        idle_timeout: Some(Duration { seconds: i, nanos: 0 }),
                        ..Default::default()
                    },
                ),
                ..Default::default()
            };
            (
                format!("envoy.extensions.upstreams.http.v3.HttpProtocolOptions.{i}"),
                Any { type_url: HttpProtocolOptions::type_url(), value: options.encode_to_vec() },
            )
        })
        .collect();
    let metadata: Vec<(String, Struct)> =
        (0..6).map(|i| (format!("filter.{i}"), build_struct(reversed))).collect();
    let typed_metadata: Vec<(String, Any)> = (0..4)
        .map(|i| {
            (
                format!("typed.{i}"),
                Any {
                    type_url: Struct::type_url(),
                    value: build_struct(!reversed).encode_to_vec(),
                },
            )
        })
        .collect();
    Cluster {
        name: "backend".to_owned(),
        connect_timeout: Some(Duration { seconds: 1, nanos: 0 }),
        typed_extension_protocol_options: fresh_map(&options, reversed),
        metadata: Some(Metadata {
            filter_metadata: fresh_map(&metadata, reversed),
            typed_filter_metadata: fresh_map(&typed_metadata, reversed),
        }),
        ..Default::default()
    }
}

fn build_listener(reversed: bool) -> Listener {
    Listener {
        name: "listener_0".to_owned(),
        filter_chains: vec![FilterChain {
            filters: vec![Filter {
                name: "acme.config".to_owned(),
                config_type: Some(filter::ConfigType::TypedConfig(Any {
                    type_url: Struct::type_url(),
                    value: build_struct(reversed).encode_to_vec(),
                })),
            }],
            ..Default::default()
        }],
        metadata: Some(Metadata {
            filter_metadata: fresh_map(&[("m".to_owned(), build_struct(!reversed))], false),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Builds the message until two raw prost encodings differ, then checks their canonical forms
/// are byte-identical and decode back to the same message as the originals.
fn assert_canonical<M>(build: impl Fn(bool) -> M, same: impl Fn(&M, &M) -> bool)
where
    M: Message + Name + Default,
{
    let name = M::full_name();
    let mut differed = false;
    let mut reference: Option<Vec<u8>> = None;
    for attempt in 0..ATTEMPTS {
        let a = build(attempt % 2 == 0);
        let b = build(attempt % 2 == 1);
        let (raw_a, raw_b) = (a.encode_to_vec(), b.encode_to_vec());
        let (canon_a, canon_b) = (
            canonical_bytes(&name, &raw_a).into_owned(),
            canonical_bytes(&name, &raw_b).into_owned(),
        );
        assert_eq!(canon_a, canon_b, "{name}: canonical encodings differ");
        // The same across all attempts, not only within a pair.
        let first = reference.get_or_insert_with(|| canon_a.clone());
        assert_eq!(*first, canon_a);
        // Canonical bytes are a fixed point.
        assert!(matches!(canonical_bytes(&name, &canon_a), Cow::Borrowed(_)));
        let decoded = M::decode(canon_a.as_slice()).unwrap();
        assert!(same(&decoded, &a), "{name}: canonical bytes decode to another message");
        if raw_a != raw_b {
            differed = true;
            if attempt > 4 {
                break;
            }
        }
    }
    assert!(differed, "{name}: prost never produced two different encodings");
}

fn decode_struct(any: &Any) -> Struct {
    Struct::decode(any.value.as_slice()).unwrap()
}

#[test]
fn struct_with_many_fields() {
    assert_canonical(build_struct, |a, b| a == b);
}

#[test]
fn cluster_protocol_options_and_metadata() {
    assert_canonical(build_cluster, |a: &Cluster, b: &Cluster| {
        // Anys hold bytes: compare what they pack.
        let protocol_options = |c: &Cluster| {
            c.typed_extension_protocol_options
                .iter()
                .map(|(k, any)| {
                    (k.clone(), HttpProtocolOptions::decode(any.value.as_slice()).unwrap())
                })
                .collect::<HashMap<_, _>>()
        };
        let typed_metadata = |c: &Cluster| {
            c.metadata
                .as_ref()
                .unwrap()
                .typed_filter_metadata
                .iter()
                .map(|(k, any)| (k.clone(), decode_struct(any)))
                .collect::<HashMap<_, _>>()
        };
        a.name == b.name
            && a.connect_timeout == b.connect_timeout
            && protocol_options(a) == protocol_options(b)
            && a.metadata.as_ref().unwrap().filter_metadata
                == b.metadata.as_ref().unwrap().filter_metadata
            && typed_metadata(a) == typed_metadata(b)
    });
}

#[test]
fn struct_inside_an_any_inside_a_listener() {
    assert_canonical(build_listener, |a: &Listener, b: &Listener| {
        let packed = |l: &Listener| match &l.filter_chains[0].filters[0].config_type {
            Some(filter::ConfigType::TypedConfig(any)) => decode_struct(any),
            _ => panic!("no typed_config"),
        };
        a.name == b.name && a.metadata == b.metadata && packed(a) == packed(b)
    });
}

#[test]
fn the_any_value_itself_is_rewritten() {
    // Find two listeners whose packed Struct bytes differ: after canonicalization the Any values
    // (not only the maps of the outer message) are equal.
    for _ in 0..ATTEMPTS {
        let (a, b) = (build_listener(false), build_listener(true));
        let value = |l: &Listener| match &l.filter_chains[0].filters[0].config_type {
            Some(filter::ConfigType::TypedConfig(any)) => any.value.clone(),
            _ => panic!("no typed_config"),
        };
        if value(&a) == value(&b) {
            continue;
        }
        let name = Listener::full_name();
        let ca = Listener::decode(canonical_bytes(&name, &a.encode_to_vec()).as_ref()).unwrap();
        let cb = Listener::decode(canonical_bytes(&name, &b.encode_to_vec()).as_ref()).unwrap();
        assert_eq!(value(&ca), value(&cb));
        return;
    }
    panic!("the packed Struct encodings never differed");
}

#[test]
fn messages_without_maps_are_borrowed() {
    let address = Address {
        address: Some(address::Address::SocketAddress(SocketAddress {
            address: "10.0.0.1".to_owned(),
            port_specifier: Some(socket_address::PortSpecifier::PortValue(8080)),
            ..Default::default()
        })),
    };
    let bytes = address.encode_to_vec();
    let canonical = canonical_bytes(&Address::full_name(), &bytes);
    assert!(matches!(canonical, Cow::Borrowed(b) if b == bytes.as_slice()));

    // A map-capable type whose maps are empty and whose fields are already in order.
    let empty = Struct::default().encode_to_vec();
    assert!(matches!(canonical_bytes(&Struct::full_name(), &empty), Cow::Borrowed(_)));
    // Unknown message names are left alone.
    assert!(matches!(canonical_bytes("acme.v1.Unknown", &bytes), Cow::Borrowed(_)));
}

#[test]
fn garbage_comes_back_unchanged() {
    let valid = build_cluster(false).encode_to_vec();
    let garbage: Vec<Vec<u8>> = vec![
        vec![0xff; 16],
        vec![0x0a, 0x7f, 0x01, 0x02],
        vec![0x80],
        vec![0x08],
        vec![0x00, 0x00],
        vec![0x0f, 0x01],
        valid[..valid.len() - 1].to_vec(),
        [valid.as_slice(), &[0x12]].concat(),
    ];
    for bytes in &garbage {
        for name in
            [Cluster::full_name(), Struct::full_name(), Any::full_name(), Listener::full_name()]
        {
            let canonical = canonical_bytes(&name, bytes);
            assert!(matches!(canonical, Cow::Borrowed(_)), "{name}: {bytes:?}");
            assert_eq!(canonical.as_ref(), bytes.as_slice());
        }
    }
}

/// A small deterministic generator (xorshift64*), to fuzz without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn random_and_mutated_bytes_never_panic_and_keep_their_meaning() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let valid = build_struct(false).encode_to_vec();
    let name = Struct::full_name();
    for round in 0..3000 {
        let bytes: Vec<u8> = if round % 2 == 0 {
            let len = (rng.next() % 64) as usize;
            (0..len).map(|_| rng.next() as u8).collect()
        } else {
            let mut bytes = valid.clone();
            for _ in 0..1 + rng.next() % 3 {
                let at = (rng.next() as usize) % bytes.len();
                bytes[at] = rng.next() as u8;
            }
            bytes
        };
        let canonical = canonical_bytes(&name, &bytes);
        // Whatever prost makes of the input, it makes of the output. (Compared through the
        // canonical encoding of each decoded message: a mutated double may be a NaN.)
        if let Ok(original) = Struct::decode(bytes.as_slice()) {
            let output = Struct::decode(canonical.as_ref())
                .unwrap_or_else(|e| panic!("{e}: {bytes:?} -> {canonical:?}"));
            let canon = |s: &Struct| canonical_bytes(&name, &s.encode_to_vec()).into_owned();
            assert_eq!(canon(&output), canon(&original), "{bytes:?}");
        }
    }
}

#[test]
fn mutated_resources_never_panic() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for (name, valid) in [
        (Cluster::full_name(), build_cluster(false).encode_to_vec()),
        (Listener::full_name(), build_listener(true).encode_to_vec()),
    ] {
        for _ in 0..300 {
            let mut bytes = valid.clone();
            for _ in 0..1 + rng.next() % 4 {
                let at = (rng.next() as usize) % bytes.len();
                bytes[at] = rng.next() as u8;
            }
            let canonical = canonical_bytes(&name, &bytes);
            // Canonicalizing twice changes nothing more.
            assert_eq!(canonical_bytes(&name, &canonical).as_ref(), canonical.as_ref());
        }
    }
}
