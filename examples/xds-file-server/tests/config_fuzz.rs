//! The `config_parse` fuzz target's checks as property tests that run in `cargo test`: any text,
//! and the default configuration with random edits, loads or is refused with an error that names
//! the file and a reason; nothing panics. `cargo fuzz run config_parse` searches much further.

use std::path::Path;

use proptest::prelude::*;
use xds_file_server::config::{self, DEFAULT_GROUP};

const DEFAULT: &str = include_str!("../config/default.yaml");

/// Loads `text` as YAML and as JSON and checks the outcome.
fn check(text: &str) {
    for file in ["fuzz.yaml", "fuzz.json"] {
        match config::parse_str(Path::new(file), text) {
            Ok(config) => assert!(config.groups.contains_key(DEFAULT_GROUP)),
            Err(e) => {
                let shown = e.to_string();
                assert!(shown.starts_with(file), "the error names the file: {shown}");
                assert!(!e.reason.is_empty(), "the error gives a reason: {shown}");
            }
        }
    }
}

/// An edit of a text: replace, insert or delete at a position (taken modulo the length).
#[derive(Clone, Debug)]
enum Edit {
    Replace(usize, String),
    Insert(usize, String),
    Delete(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    // Fragments that matter to YAML and to the loader, and anything.
    let fragment = prop_oneof![
        Just(": ".to_owned()),
        Just("\n  - ".to_owned()),
        Just("{".to_owned()),
        Just("[".to_owned()),
        Just("&a".to_owned()),
        Just("*a".to_owned()),
        Just("<<: *a".to_owned()),
        Just("!!binary".to_owned()),
        Just("\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster".to_owned()),
        Just("name: backend".to_owned()),
        Just("port_value: 99999999999".to_owned()),
        Just("connect_timeout: -1s".to_owned()),
        Just("\t".to_owned()),
        "\\PC{0,8}",
    ];
    prop_oneof![
        (any::<usize>(), fragment.clone()).prop_map(|(at, s)| Edit::Replace(at, s)),
        (any::<usize>(), fragment).prop_map(|(at, s)| Edit::Insert(at, s)),
        (any::<usize>(), 0usize..40).prop_map(|(at, n)| Edit::Delete(at, n)),
    ]
}

/// The nearest char boundary at or before `at % (len + 1)`.
fn boundary(text: &str, at: usize) -> usize {
    let mut at = at % (text.len() + 1);
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn apply(text: &mut String, edit: &Edit) {
    match edit {
        Edit::Replace(at, s) => {
            let start = boundary(text, *at);
            let end = boundary(text, start + s.len().min(text.len() - start));
            text.replace_range(start..end.max(start), s);
        }
        Edit::Insert(at, s) => {
            let at = boundary(text, *at);
            text.insert_str(at, s);
        }
        Edit::Delete(at, n) => {
            let start = boundary(text, *at);
            let end = boundary(text, (start + n).min(text.len()));
            text.replace_range(start..end.max(start), "");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn any_text_loads_or_is_refused_clearly(text in "\\PC{0,200}") {
        check(&text);
    }

    #[test]
    fn an_edited_default_config_loads_or_is_refused_clearly(
        edits in proptest::collection::vec(edit(), 1..6),
    ) {
        let mut text = DEFAULT.to_owned();
        for e in &edits {
            apply(&mut text, e);
        }
        check(&text);
    }
}

#[test]
fn the_unedited_default_config_loads_from_text() {
    let config = config::parse_str(Path::new("default.yaml"), DEFAULT).unwrap();
    assert_eq!(config.groups.keys().collect::<Vec<_>>(), ["", "grpc-clients"]);
}
