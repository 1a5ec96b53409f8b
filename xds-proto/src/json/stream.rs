//! Reading a document of resources one resource at a time.
//!
//! A control plane's configuration file lists resources, for every node and per group:
//!
//! ```text
//! resources: [ {"@type": ..., ...}, ... ]
//! groups: { <name>: { resources: [ ... ] }, ... }
//! ```
//!
//! [`read_resource_document`] hands each resource to its caller as soon as it is read, as the
//! proto3 JSON value [`any_from_json`](super::any_from_json) takes, and drops it before reading
//! the next one. Reading the whole document into one value first holds a tree of every resource
//! while each is encoded: a peak heap of 16-18x the file's size (an RSS of 1.34 GB for a 63 MB
//! file of 178k clusters), where streaming needs the text, one resource and what the caller
//! keeps (2.3-2.4x, 196 MB).

use std::collections::HashSet;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::{
    JsonError, Yaml, check_json_nesting, json_error, located, yaml_error, yaml_key, yaml_options,
    yaml_value_to_json,
};

/// The syntax of a document's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextFormat {
    /// JSON, parsed as by [`json_value_from_str`](super::json_value_from_str).
    Json,
    /// YAML, parsed as by [`yaml_to_json`](super::yaml_to_json).
    Yaml,
}

/// What [`read_resource_document`] hands its callback, in document order.
#[derive(Debug, Clone, PartialEq)]
pub enum DocumentPart<'a> {
    /// A group is declared, with or without resources: `""` for the top level's `resources:`
    /// key, else the name of a `groups:` entry. Its resources follow.
    Group(&'a str),
    /// The `index`th resource of `group`'s list, as JSON (YAML converted as by
    /// [`yaml_to_json`](super::yaml_to_json)).
    Resource {
        /// The group, as in [`DocumentPart::Group`].
        group: &'a str,
        /// Its position in the group's list (0-based).
        index: usize,
        /// The resource.
        value: Value,
    },
}

/// Why [`read_resource_document`] refused a document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DocumentError {
    /// The text is blank, only comments, or a null document. Told apart from the other faults
    /// so that a caller can refuse it in words of its own (an empty configuration file is more
    /// often a truncated one than an intent to serve nothing).
    #[error("the document is empty")]
    Empty,
    /// The text does not parse (or nests deeper than [`MAX_NESTING`](super::MAX_NESTING)), or a
    /// YAML mapping key is a collection.
    #[error(transparent)]
    Syntax(JsonError),
    /// A part of the document is wrong, or the callback refused it: where (e.g.
    /// `groups.edge.resources[3]`; empty for the whole document), and why.
    #[error("{}", located(.location, .reason))]
    At {
        /// Where in the document.
        location: String,
        /// What is wrong.
        reason: String,
    },
}

/// Where the `index`th resource of `group` sits in a resource document: `resources[2]` for the
/// top level's list (`group` empty), `groups.edge.resources[2]` for a group's.
pub fn resource_location(group: &str, index: usize) -> String {
    format!("{}[{index}]", list_location(group))
}

/// Where `group`'s list sits: `resources`, or `groups.<name>.resources`.
fn list_location(group: &str) -> String {
    if group.is_empty() { "resources".to_owned() } else { format!("groups.{group}.resources") }
}

/// Reads a document of resources (`resources: [...]` for every node, `groups: {<name>:
/// {resources: [...]}}` per group, as a control plane's configuration file lists them), calling
/// `on_part` with each group as it is declared and each resource as it is read, in document
/// order. A resource is held only while it is read and handed over, so the memory this needs
/// beyond `text` is one resource and whatever `on_part` keeps; a whole document parsed into one
/// value first needs 16-18x the text's size.
///
/// The layout is checked as the document is read: only `resources` and `groups` at the top
/// level and `resources` in a group, non-empty group names, no key given twice (JSON parsers
/// would keep the last one silently; YAML's refuses it), a mapping or list where one belongs (a
/// null list is an empty one). The first fault (or error returned by `on_part`, located at the
/// resource) ends the calls to `on_part`, but the rest of the text is still parsed, without
/// building anything: a syntax error anywhere in the text is reported before any other fault, as
/// when a whole document is parsed first.
///
/// Both formats are parsed as [`json_value_from_str`](super::json_value_from_str) and
/// [`yaml_to_json`](super::yaml_to_json) parse them: the same bounds (nesting deeper than
/// [`MAX_NESTING`](super::MAX_NESTING) is refused in linear time), YAML's strict booleans, merge
/// keys, anchors and aliases, and the same syntax errors.
///
/// # Errors
///
/// [`DocumentError::Syntax`] for a text that does not parse; else [`DocumentError::Empty`] for a
/// blank or null document, or [`DocumentError::At`] for the first part that is wrong.
pub fn read_resource_document<F>(
    text: &str,
    format: TextFormat,
    on_part: F,
) -> Result<(), DocumentError>
where
    F: FnMut(DocumentPart<'_>) -> Result<(), String>,
{
    if text.trim().is_empty() {
        return Err(DocumentError::Empty);
    }
    match format {
        TextFormat::Json => {
            check_json_nesting(text).map_err(DocumentError::Syntax)?;
            let mut reader = Reader::<Value, F>::new(on_part);
            let mut deserializer = serde_json::Deserializer::from_str(text);
            let parsed = Visit(Document(&mut reader))
                .deserialize(&mut deserializer)
                .and_then(|()| deserializer.end());
            reader.outcome(parsed.map_err(json_error))
        }
        TextFormat::Yaml => {
            let mut reader = Reader::<Yaml, F>::new(on_part);
            let parsed = serde_saphyr::with_deserializer_from_str_with_options(
                text,
                yaml_options(text.len()),
                |deserializer| Visit(Document(&mut reader)).deserialize(deserializer),
            );
            reader.outcome(parsed.map_err(yaml_error))
        }
    }
}

/// A node of the document as its format reads it (`serde_json::Value`, or YAML's own node, which
/// keeps what JSON cannot hold until it is converted): what a resource and a mapping key are
/// read into.
trait Node: for<'de> Deserialize<'de> {
    /// The node as JSON.
    fn into_json(self) -> Result<Value, JsonError>;
    /// The node as a mapping key (YAML's `80:` is the key `"80"`).
    fn into_key(self) -> Result<String, JsonError>;
}

impl Node for Value {
    fn into_json(self) -> Result<Value, JsonError> {
        Ok(self)
    }
    fn into_key(self) -> Result<String, JsonError> {
        // The JSON parser reads every key as a string.
        Ok(match self {
            Value::String(key) => key,
            other => other.to_string(),
        })
    }
}

impl Node for Yaml {
    fn into_json(self) -> Result<Value, JsonError> {
        yaml_value_to_json(self)
    }
    fn into_key(self) -> Result<String, JsonError> {
        yaml_key(self)
    }
}

/// The state of one read: the callback, and the first fault. Once there is a fault the levels
/// read the rest of the text as [`IgnoredAny`], so that the parser's own errors (which come first)
/// are still found, and no error of ours is ever mixed with the parser's.
struct Reader<N, F> {
    on_part: F,
    fault: Option<DocumentError>,
    node: PhantomData<fn() -> N>,
}

impl<N: Node, F: FnMut(DocumentPart<'_>) -> Result<(), String>> Reader<N, F> {
    fn new(on_part: F) -> Self {
        Reader { on_part, fault: None, node: PhantomData }
    }

    fn faulted(&self) -> bool {
        self.fault.is_some()
    }

    /// Records `fault` unless an earlier one is recorded.
    fn refuse(&mut self, fault: DocumentError) {
        self.fault.get_or_insert(fault);
    }

    /// [`Reader::refuse`] with a fault at `location`.
    fn refuse_at(&mut self, location: String, reason: &str) {
        self.refuse(DocumentError::At { location, reason: reason.to_owned() });
    }

    /// Reads a mapping's next key, as JSON has it. A key given twice (`seen` holds the mapping's
    /// keys so far) or one that cannot be a key is a fault: its value is skipped and `None`
    /// returned, as at the mapping's end.
    fn key<'de, A: MapAccess<'de>>(
        &mut self,
        map: &mut A,
        seen: &mut HashSet<String>,
        location: impl Fn(&str) -> String,
    ) -> Result<Option<String>, A::Error> {
        let Some(key) = map.next_key::<N>()? else { return Ok(None) };
        match key.into_key() {
            Ok(key) if seen.insert(key.clone()) => return Ok(Some(key)),
            Ok(key) => self.refuse_at(location(&key), "the key is given twice"),
            Err(e) => self.refuse(DocumentError::Syntax(e)),
        }
        map.next_value::<IgnoredAny>()?;
        Ok(None)
    }

    /// Hands `part` to the callback, unless there is a fault already; the callback's refusal
    /// is a fault at `location`.
    fn hand(&mut self, part: DocumentPart<'_>, location: impl FnOnce() -> String) {
        if self.faulted() {
            return;
        }
        if let Err(reason) = (self.on_part)(part) {
            self.refuse(DocumentError::At { location: location(), reason });
        }
    }

    /// What the read returns: the parser's error first, then the recorded fault.
    fn outcome(self, parsed: Result<(), JsonError>) -> Result<(), DocumentError> {
        parsed.map_err(DocumentError::Syntax)?;
        self.fault.map_or(Ok(()), Err)
    }
}

/// Reads the rest of a mapping without building anything.
fn skip_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Reads the rest of a sequence without building anything.
fn skip_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

/// One level of the document's layout: what it reads (a mapping, a list, a null) and the fault
/// for a value of any other kind, which is then skipped. [`Visit`] makes it a serde visitor, so
/// that each level states only what it accepts.
trait Level<'de>: Sized {
    /// Reads a mapping.
    fn map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        self.wrong();
        skip_map(map)
    }
    /// Reads a sequence.
    fn seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        self.wrong();
        skip_seq(seq)
    }
    /// Reads a null (an empty value).
    fn null(self) {
        self.wrong();
    }
    /// Records the fault of a value of the wrong kind.
    fn wrong(self);
}

/// The serde visitor (and seed) of a [`Level`]: every kind of value goes to the level's `map`,
/// `seq`, `null` or `wrong`.
struct Visit<L>(L);

impl<'de, L: Level<'de>> DeserializeSeed<'de> for Visit<L> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, L: Level<'de>> Visitor<'de> for Visit<L> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML or JSON node")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        self.0.wrong();
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        self.0.wrong();
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        self.0.wrong();
        Ok(())
    }
    fn visit_i128<E>(self, _: i128) -> Result<(), E> {
        self.0.wrong();
        Ok(())
    }
    fn visit_u128<E>(self, _: u128) -> Result<(), E> {
        self.0.wrong();
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        self.0.wrong();
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        self.0.wrong();
        Ok(())
    }
    fn visit_bytes<E>(self, _: &[u8]) -> Result<(), E> {
        self.0.wrong();
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.null();
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        self.0.null();
        Ok(())
    }
    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        self.0.seq(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        self.0.map(map)
    }
}

/// The top level: a mapping of `resources` and `groups`.
struct Document<'r, N, F>(&'r mut Reader<N, F>);

impl<'de, N: Node, F: FnMut(DocumentPart<'_>) -> Result<(), String>> Level<'de>
    for Document<'_, N, F>
{
    fn map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let reader = self.0;
        let mut seen = HashSet::new();
        while let Some(key) = reader.key(&mut map, &mut seen, str::to_owned)? {
            match key.as_str() {
                "resources" => {
                    reader.hand(DocumentPart::Group(""), || key.clone());
                    map.next_value_seed(Visit(List { reader: &mut *reader, group: "" }))?;
                }
                "groups" => map.next_value_seed(Visit(Groups(&mut *reader)))?,
                _ => {
                    reader.refuse_at(key, "unknown key: expected `resources` or `groups`");
                    map.next_value::<IgnoredAny>()?;
                }
            }
            if reader.faulted() {
                break;
            }
        }
        skip_map(map)
    }
    fn null(self) {
        self.0.refuse(DocumentError::Empty);
    }
    fn wrong(self) {
        self.0.refuse_at(String::new(), "expected a mapping with `resources:` and `groups:`");
    }
}

/// `groups:`, a mapping of group names.
struct Groups<'r, N, F>(&'r mut Reader<N, F>);

impl<'de, N: Node, F: FnMut(DocumentPart<'_>) -> Result<(), String>> Level<'de>
    for Groups<'_, N, F>
{
    fn map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let reader = self.0;
        let mut seen = HashSet::new();
        let here = |name: &str| format!("groups.{name}");
        while let Some(name) = reader.key(&mut map, &mut seen, here)? {
            if name.is_empty() {
                reader.refuse_at(here(&name), "a group needs a non-empty name");
                map.next_value::<IgnoredAny>()?;
            } else {
                map.next_value_seed(Visit(Group { reader: &mut *reader, name: &name }))?;
            }
            if reader.faulted() {
                break;
            }
        }
        skip_map(map)
    }
    fn wrong(self) {
        self.0.refuse_at("groups".to_owned(), "expected a mapping of group names");
    }
}

/// One group: a mapping with `resources`.
struct Group<'r, 'n, N, F> {
    reader: &'r mut Reader<N, F>,
    name: &'n str,
}

impl<'de, N: Node, F: FnMut(DocumentPart<'_>) -> Result<(), String>> Level<'de>
    for Group<'_, '_, N, F>
{
    fn map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Group { reader, name } = self;
        let here = format!("groups.{name}");
        reader.hand(DocumentPart::Group(name), || here.clone());
        let mut seen = HashSet::new();
        while let Some(key) = reader.key(&mut map, &mut seen, |key| format!("{here}.{key}"))? {
            if key == "resources" {
                map.next_value_seed(Visit(List { reader: &mut *reader, group: name }))?;
            } else {
                reader.refuse_at(format!("{here}.{key}"), "unknown key: expected `resources`");
                map.next_value::<IgnoredAny>()?;
            }
            if reader.faulted() {
                break;
            }
        }
        skip_map(map)
    }
    fn wrong(self) {
        self.reader
            .refuse_at(format!("groups.{}", self.name), "expected a mapping with `resources:`");
    }
}

/// A group's list of resources (null: none).
struct List<'r, 'n, N, F> {
    reader: &'r mut Reader<N, F>,
    group: &'n str,
}

impl<'de, N: Node, F: FnMut(DocumentPart<'_>) -> Result<(), String>> Level<'de>
    for List<'_, '_, N, F>
{
    fn seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let List { reader, group } = self;
        let mut index = 0;
        // One resource at a time: read, converted, handed over and dropped before the next.
        while !reader.faulted() {
            let Some(node) = seq.next_element::<N>()? else { return Ok(()) };
            match node.into_json() {
                Ok(value) => reader.hand(DocumentPart::Resource { group, index, value }, || {
                    resource_location(group, index)
                }),
                Err(e) => reader.refuse(DocumentError::Syntax(e)),
            }
            index += 1;
        }
        skip_seq(seq)
    }
    fn null(self) {}
    fn wrong(self) {
        self.reader.refuse_at(list_location(self.group), "expected a list of resources");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What `on_part` was handed, as text (`group` or `group[index] value`), and the outcome.
    fn read(text: &str, format: TextFormat) -> (Vec<String>, Result<(), DocumentError>) {
        let mut parts = Vec::new();
        let outcome = read_resource_document(text, format, |part| {
            parts.push(match part {
                DocumentPart::Group(name) => format!("group {name:?}"),
                DocumentPart::Resource { group, index, value } => {
                    format!("{group}[{index}] {value}")
                }
            });
            Ok(())
        });
        (parts, outcome)
    }

    fn at(location: &str, reason: &str) -> Result<(), DocumentError> {
        Err(DocumentError::At { location: location.to_owned(), reason: reason.to_owned() })
    }

    #[test]
    fn parts_are_handed_over_in_document_order_in_both_formats() {
        let yaml = "groups:\n  b:\n    resources: [{x: 1}]\n  a: {}\nresources:\n  - {y: [2]}\n  - {z: null}\n";
        let json = r#"{"groups": {"b": {"resources": [{"x": 1}]}, "a": {}},
                       "resources": [{"y": [2]}, {"z": null}]}"#;
        let expected = [
            r#"group "b""#,
            r#"b[0] {"x":1}"#,
            r#"group "a""#,
            r#"group """#,
            r#"[0] {"y":[2]}"#,
            r#"[1] {"z":null}"#,
        ];
        assert_eq!(read(yaml, TextFormat::Yaml), (expected.map(String::from).to_vec(), Ok(())));
        assert_eq!(read(json, TextFormat::Json), (expected.map(String::from).to_vec(), Ok(())));
        // YAML's scalars become JSON as `yaml_to_json` makes them, keys of every level included.
        let (parts, outcome) =
            read("resources: [{80: .nan, on: yes, n: 012}]\ngroups: {7: {}}\n", TextFormat::Yaml);
        assert_eq!(outcome, Ok(()));
        assert_eq!(
            parts,
            [r#"group """#, r#"[0] {"80":"NaN","n":"012","on":"yes"}"#, r#"group "7""#]
        );
    }

    #[test]
    fn the_first_fault_ends_the_handing_over_but_a_later_syntax_error_comes_first() {
        let text =
            "resources:\n  - {a: 1}\n  - {a: 2}\n  - {a: 3}\ngroups: {g: {resources: [{a: 4}]}}\n";
        let mut seen = Vec::new();
        let outcome = read_resource_document(text, TextFormat::Yaml, |part| {
            if let DocumentPart::Resource { group, index, value } = part {
                seen.push((group.to_owned(), index));
                if value == json!({"a": 2}) {
                    return Err("two is refused".into());
                }
            }
            Ok(())
        });
        assert_eq!(outcome, at("resources[1]", "two is refused"));
        assert_eq!(seen, [(String::new(), 0), (String::new(), 1)], "nothing after the fault");

        // Each resource is handed over as it is read: the two before the broken text are seen
        // (a parser that reads the whole text first sees none), yet the syntax error is what the
        // read returns, with its line, as when the whole text is parsed first.
        let broken = "extra: 1\nresources:\n  - {a: 1}\n  - {a: 2}\n  - {a: [}\n";
        let mut count = 0;
        let outcome = read_resource_document(broken, TextFormat::Yaml, |_| {
            count += 1;
            Ok(())
        });
        assert!(
            matches!(outcome, Err(DocumentError::Syntax(JsonError::Syntax { line: Some(5), .. }))),
            "{outcome:?}"
        );
        assert_eq!(count, 0, "the unknown key came first: nothing is handed over after it");
        let broken = "resources:\n  - {a: 1}\n  - {a: 2}\n  - {a: [}\n";
        let mut count = 0;
        let outcome = read_resource_document(broken, TextFormat::Yaml, |_| {
            count += 1;
            Ok(())
        });
        assert!(
            matches!(outcome, Err(DocumentError::Syntax(JsonError::Syntax { line: Some(4), .. }))),
            "{outcome:?}"
        );
        assert_eq!(count, 3, "the group and two resources, handed over before the error was read");
    }

    #[test]
    fn the_layout_is_checked_where_it_is_wrong() {
        let yaml = TextFormat::Yaml;
        let json = TextFormat::Json;
        let cases = [
            ("- a\n", yaml, at("", "expected a mapping with `resources:` and `groups:`")),
            ("3", json, at("", "expected a mapping with `resources:` and `groups:`")),
            ("80: x\n", yaml, at("80", "unknown key: expected `resources` or `groups`")),
            ("groups:\n", yaml, at("groups", "expected a mapping of group names")),
            (r#"{"groups": []}"#, json, at("groups", "expected a mapping of group names")),
            ("groups: {'': {}}", yaml, at("groups.", "a group needs a non-empty name")),
            ("groups: {e: 1}", yaml, at("groups.e", "expected a mapping with `resources:`")),
            ("groups: {e: {x: 1}}", yaml, at("groups.e.x", "unknown key: expected `resources`")),
            ("resources: {}", yaml, at("resources", "expected a list of resources")),
            (
                "groups: {e: {resources: 1}}",
                yaml,
                at("groups.e.resources", "expected a list of resources"),
            ),
            // A JSON parser keeps the last of two equal keys silently: refused instead.
            (
                r#"{"resources": [], "resources": []}"#,
                json,
                at("resources", "the key is given twice"),
            ),
            (r#"{"groups": {"e": {}, "e": {}}}"#, json, at("groups.e", "the key is given twice")),
            (
                r#"{"groups": {"e": {"resources": [], "resources": []}}}"#,
                json,
                at("groups.e.resources", "the key is given twice"),
            ),
        ];
        for (text, format, expected) in cases {
            assert_eq!(read(text, format).1, expected, "{text}");
        }
        // A null list is an empty one.
        assert_eq!(read("resources:\ngroups: {e: {resources: ~}}\n", yaml).1, Ok(()));
        // YAML refuses equal keys itself, as a syntax error.
        let outcome = read("resources: []\nresources: []\n", yaml).1;
        assert!(matches!(outcome, Err(DocumentError::Syntax(_))), "{outcome:?}");
        // A collection as a key cannot be JSON.
        let outcome = read("resources: [{? [1]: x}]", yaml).1;
        assert!(
            matches!(outcome, Err(DocumentError::Syntax(JsonError::Syntax { .. }))),
            "{outcome:?}"
        );
    }

    #[test]
    fn empty_documents_are_told_apart() {
        for (text, format) in [
            ("", TextFormat::Yaml),
            (" \n", TextFormat::Json),
            ("# nothing\n", TextFormat::Yaml),
            ("~\n", TextFormat::Yaml),
            ("null", TextFormat::Json),
        ] {
            assert_eq!(read(text, format), (vec![], Err(DocumentError::Empty)), "{text:?}");
        }
    }

    #[test]
    fn nesting_and_aliases_are_bounded_as_for_a_whole_value() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        for (text, format) in [
            (format!("resources:\n  - {deep}\n"), TextFormat::Yaml),
            (format!("{{\"resources\":\n[{deep}]}}"), TextFormat::Json),
        ] {
            let outcome = read(&text, format).1;
            let Err(DocumentError::Syntax(e @ JsonError::Syntax { line: Some(2), .. })) = outcome
            else {
                panic!("{outcome:?}");
            };
            assert!(e.to_string().contains("nesting deeper than 100"), "{e}");
        }
        // Alias expansion keeps the parser's budget: 10^12 nodes from 12 lines are refused.
        let mut bomb = String::from("resources:\n  - a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let p = i - 1;
            bomb.push_str(&format!(
                "    a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        let outcome = read(&bomb, TextFormat::Yaml).1;
        assert!(matches!(outcome, Err(DocumentError::Syntax(_))), "{outcome:?}");
    }

    #[test]
    fn anchors_aliases_and_merge_keys_apply() {
        let yaml =
            "resources: [&r {a: 1}]\ngroups:\n  g: &g {resources: [*r]}\n  h: *g\n  i: {<<: *g}\n";
        let (parts, outcome) = read(yaml, TextFormat::Yaml);
        assert_eq!(outcome, Ok(()));
        assert_eq!(
            parts,
            [
                r#"group """#,
                r#"[0] {"a":1}"#,
                r#"group "g""#,
                r#"g[0] {"a":1}"#,
                r#"group "h""#,
                r#"h[0] {"a":1}"#,
                r#"group "i""#,
                r#"i[0] {"a":1}"#,
            ]
        );
    }
}
