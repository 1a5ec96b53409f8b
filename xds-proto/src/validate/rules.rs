//! Compiled `validate.rules` (protoc-gen-validate) and the checks of one value against them.
//!
//! A [`FieldCheck`] is built once per annotated field from the `validate.FieldRules` found in
//! the field's options (regexes compiled, integer widths unified) and evaluated many times. The
//! rule texts follow PGV's wording where Envoy users will recognise it.

use std::collections::HashSet;
use std::fmt::{self, Display};

use prost_reflect::{EnumDescriptor, Kind, Value};

use super::text::{BytesCheck, StringCheck};
use crate::pb::validate::FieldRules;
use crate::pb::validate::field_rules::Type;

/// Builds a [`Num`] from any of PGV's numeric rule messages (they share field names).
macro_rules! num {
    ($rules:expr, $t:ty) => {{
        let r = $rules;
        Num::<$t> {
            konst: r.r#const.map(<$t>::from),
            lower: bound(r.gt.map(<$t>::from), r.gte.map(<$t>::from)),
            upper: bound(r.lt.map(<$t>::from), r.lte.map(<$t>::from)),
            within: r.r#in.iter().copied().map(<$t>::from).collect(),
            not_in: r.not_in.iter().copied().map(<$t>::from).collect(),
            ignore_empty: r.ignore_empty(),
        }
    }};
}

/// The rules of one field (or of one item, key or value of a repeated or map field).
#[derive(Debug)]
pub(super) struct FieldCheck {
    /// `message.required`, `duration.required`, `timestamp.required` or `any.required`.
    pub(super) required: bool,
    /// `message.skip`: do not look inside the message.
    pub(super) skip: bool,
    /// The type-specific rules, if any.
    pub(super) kind: Option<KindCheck>,
}

/// Type-specific rules. Integer rules of every width share one representation.
#[derive(Debug)]
pub(super) enum KindCheck {
    Signed(Num<i64>),
    Unsigned(Num<u64>),
    Float(Num<f64>),
    Bool(bool),
    String(Box<StringCheck>),
    Bytes(Box<BytesCheck>),
    Enum(EnumCheck),
    Repeated(Box<RepeatedCheck>),
    Map(Box<MapCheck>),
    Any(AnyCheck),
    /// Duration and timestamp bounds, in nanoseconds.
    Time(Num<Nanos>),
}

impl FieldCheck {
    /// Compiles `rules` for values of `kind` (the element kind of a repeated field, the entry
    /// message of a map field).
    pub(super) fn compile(rules: &FieldRules, kind: &Kind) -> Self {
        let message = rules.message.unwrap_or_default();
        let mut required = message.required();
        let kind = rules.r#type.as_ref().and_then(|rule| {
            Some(match rule {
                Type::Float(r) => KindCheck::Float(num!(r, f64)),
                Type::Double(r) => KindCheck::Float(num!(r, f64)),
                Type::Int32(r) => KindCheck::Signed(num!(r, i64)),
                Type::Sint32(r) => KindCheck::Signed(num!(r, i64)),
                Type::Sfixed32(r) => KindCheck::Signed(num!(r, i64)),
                Type::Int64(r) => KindCheck::Signed(num!(r, i64)),
                Type::Sint64(r) => KindCheck::Signed(num!(r, i64)),
                Type::Sfixed64(r) => KindCheck::Signed(num!(r, i64)),
                Type::Uint32(r) => KindCheck::Unsigned(num!(r, u64)),
                Type::Fixed32(r) => KindCheck::Unsigned(num!(r, u64)),
                Type::Uint64(r) => KindCheck::Unsigned(num!(r, u64)),
                Type::Fixed64(r) => KindCheck::Unsigned(num!(r, u64)),
                Type::Bool(r) => KindCheck::Bool(r.r#const?),
                Type::String(r) => KindCheck::String(Box::new(StringCheck::compile(r.clone()))),
                Type::Bytes(r) => KindCheck::Bytes(Box::new(BytesCheck::compile(r.clone()))),
                Type::Enum(r) => KindCheck::Enum(EnumCheck {
                    konst: r.r#const,
                    defined_only: r.defined_only().then(|| kind.as_enum().cloned()).flatten(),
                    within: r.r#in.clone(),
                    not_in: r.not_in.clone(),
                }),
                Type::Repeated(r) => KindCheck::Repeated(Box::new(RepeatedCheck {
                    min_items: r.min_items,
                    max_items: r.max_items,
                    unique: r.unique(),
                    ignore_empty: r.ignore_empty(),
                    items: r.items.as_deref().map(|items| FieldCheck::compile(items, kind)),
                })),
                Type::Map(r) => {
                    let entry = kind.as_message()?;
                    let key_kind = entry.map_entry_key_field().kind();
                    let value_kind = entry.map_entry_value_field().kind();
                    KindCheck::Map(Box::new(MapCheck {
                        min_pairs: r.min_pairs,
                        max_pairs: r.max_pairs,
                        ignore_empty: r.ignore_empty(),
                        keys: r.keys.as_deref().map(|keys| FieldCheck::compile(keys, &key_kind)),
                        values: r.values.as_deref().map(|v| FieldCheck::compile(v, &value_kind)),
                    }))
                }
                Type::Any(r) => {
                    required |= r.required();
                    KindCheck::Any(AnyCheck { within: r.r#in.clone(), not_in: r.not_in.clone() })
                }
                Type::Duration(r) => {
                    required |= r.required();
                    KindCheck::Time(Num {
                        konst: r.r#const.map(|d| Nanos::of(d.seconds, d.nanos)),
                        lower: bound(
                            r.gt.map(|d| Nanos::of(d.seconds, d.nanos)),
                            r.gte.map(|d| Nanos::of(d.seconds, d.nanos)),
                        ),
                        upper: bound(
                            r.lt.map(|d| Nanos::of(d.seconds, d.nanos)),
                            r.lte.map(|d| Nanos::of(d.seconds, d.nanos)),
                        ),
                        within: r.r#in.iter().map(|d| Nanos::of(d.seconds, d.nanos)).collect(),
                        not_in: r.not_in.iter().map(|d| Nanos::of(d.seconds, d.nanos)).collect(),
                        ignore_empty: false,
                    })
                }
                Type::Timestamp(r) => {
                    // `lt_now`, `gt_now` and `within` depend on the clock: not checked (no
                    // Envoy resource uses them).
                    required |= r.required();
                    KindCheck::Time(Num {
                        konst: r.r#const.map(|t| Nanos::of(t.seconds, t.nanos)),
                        lower: bound(
                            r.gt.map(|t| Nanos::of(t.seconds, t.nanos)),
                            r.gte.map(|t| Nanos::of(t.seconds, t.nanos)),
                        ),
                        upper: bound(
                            r.lt.map(|t| Nanos::of(t.seconds, t.nanos)),
                            r.lte.map(|t| Nanos::of(t.seconds, t.nanos)),
                        ),
                        within: Vec::new(),
                        not_in: Vec::new(),
                        ignore_empty: false,
                    })
                }
            })
        });
        FieldCheck { required, skip: message.skip(), kind }
    }
}

/// An exclusive bound if given, else an inclusive one: `(value, inclusive)`.
fn bound<T>(exclusive: Option<T>, inclusive: Option<T>) -> Option<(T, bool)> {
    exclusive.map(|v| (v, false)).or(inclusive.map(|v| (v, true)))
}

/// Numeric rules: `const`, `gt`/`gte`, `lt`/`lte`, `in`, `not_in`, `ignore_empty`.
#[derive(Debug)]
pub(super) struct Num<T> {
    konst: Option<T>,
    /// `gt` (exclusive) or `gte` (inclusive).
    lower: Option<(T, bool)>,
    /// `lt` (exclusive) or `lte` (inclusive).
    upper: Option<(T, bool)>,
    within: Vec<T>,
    not_in: Vec<T>,
    ignore_empty: bool,
}

impl<T: Copy + PartialOrd + Display + Default> Num<T> {
    /// Pushes a rule text to `out` for each rule `value` breaks.
    pub(super) fn check(&self, value: T, out: &mut Vec<String>) {
        if self.ignore_empty && value == T::default() {
            return;
        }
        if let Some(konst) = self.konst
            && value != konst
        {
            out.push(format!("value must equal {konst}"));
        }
        let above = |(lo, inclusive): (T, bool)| if inclusive { value >= lo } else { value > lo };
        let below = |(hi, inclusive): (T, bool)| if inclusive { value <= hi } else { value < hi };
        let broken = match (self.lower, self.upper) {
            (Some(lo), Some(hi)) => {
                // PGV: with both bounds, `lt > gt` means "inside", otherwise "outside".
                let inside = hi.0 > lo.0;
                let ok = if inside { above(lo) && below(hi) } else { above(lo) || below(hi) };
                (!ok).then(|| {
                    if inside {
                        let open = if lo.1 { '[' } else { '(' };
                        let close = if hi.1 { ']' } else { ')' };
                        format!("value must be inside range {open}{}, {}{close}", lo.0, hi.0)
                    } else {
                        let open = if hi.1 { '(' } else { '[' };
                        let close = if lo.1 { ')' } else { ']' };
                        format!("value must be outside range {open}{}, {}{close}", hi.0, lo.0)
                    }
                })
            }
            (Some(lo), None) => (!above(lo)).then(|| {
                let or_equal = if lo.1 { " or equal to" } else { "" };
                format!("value must be greater than{or_equal} {}", lo.0)
            }),
            (None, Some(hi)) => (!below(hi)).then(|| {
                let or_equal = if hi.1 { " or equal to" } else { "" };
                format!("value must be less than{or_equal} {}", hi.0)
            }),
            (None, None) => None,
        };
        out.extend(broken);
        if !self.within.is_empty() && !self.within.contains(&value) {
            out.push(format!("value must be in list {}", list(&self.within)));
        }
        if self.not_in.contains(&value) {
            out.push(format!("value must not be in list {}", list(&self.not_in)));
        }
    }
}

/// `[a, b, c]`.
fn list<T: Display>(items: &[T]) -> String {
    let items: Vec<String> = items.iter().map(ToString::to_string).collect();
    format!("[{}]", items.join(", "))
}

/// A duration or timestamp in nanoseconds, printed as protobuf JSON does (`1.5s`).
#[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd)]
pub(super) struct Nanos(i128);

impl Nanos {
    pub(super) fn of(seconds: i64, nanos: i32) -> Self {
        Nanos(i128::from(seconds) * 1_000_000_000 + i128::from(nanos))
    }
}

impl Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let (seconds, nanos) = (self.0.abs() / 1_000_000_000, self.0.abs() % 1_000_000_000);
        if nanos == 0 {
            write!(f, "{sign}{seconds}s")
        } else {
            let fraction = format!("{nanos:09}");
            write!(f, "{sign}{seconds}.{}s", fraction.trim_end_matches('0'))
        }
    }
}

/// Enum rules. `defined_only` holds the enum to look values up in.
#[derive(Debug)]
pub(super) struct EnumCheck {
    konst: Option<i32>,
    defined_only: Option<EnumDescriptor>,
    within: Vec<i32>,
    not_in: Vec<i32>,
}

impl EnumCheck {
    fn check(&self, value: i32, out: &mut Vec<String>) {
        if let Some(konst) = self.konst
            && value != konst
        {
            out.push(format!("value must equal {konst}"));
        }
        if let Some(descriptor) = &self.defined_only
            && descriptor.get_value(value).is_none()
        {
            out.push(format!("value must be one of the defined enum values (got {value})"));
        }
        if !self.within.is_empty() && !self.within.contains(&value) {
            out.push(format!("value must be in list {}", list(&self.within)));
        }
        if self.not_in.contains(&value) {
            out.push(format!("value must not be in list {}", list(&self.not_in)));
        }
    }
}

/// `repeated` rules; `items` apply to each element.
#[derive(Debug)]
pub(super) struct RepeatedCheck {
    min_items: Option<u64>,
    max_items: Option<u64>,
    unique: bool,
    ignore_empty: bool,
    pub(super) items: Option<FieldCheck>,
}

impl RepeatedCheck {
    /// Whether an empty list skips every rule (`ignore_empty`).
    pub(super) fn ignores(&self, items: &[Value]) -> bool {
        self.ignore_empty && items.is_empty()
    }

    /// The count and uniqueness rules of the whole list.
    pub(super) fn check(&self, items: &[Value], out: &mut Vec<String>) {
        let len = items.len() as u64;
        if let Some(min) = self.min_items
            && len < min
        {
            out.push(format!("value must contain at least {min} item(s)"));
        }
        if let Some(max) = self.max_items
            && len > max
        {
            out.push(format!("value must contain no more than {max} item(s)"));
        }
        if self.unique && !all_unique(items) {
            out.push("repeated value must contain unique items".to_owned());
        }
    }
}

/// Whether scalar `items` are pairwise distinct (messages are never compared: PGV refuses
/// `unique` on them).
fn all_unique(items: &[Value]) -> bool {
    #[derive(PartialEq, Eq, Hash)]
    enum Key<'a> {
        Bool(bool),
        Int(i64),
        Uint(u64),
        Float(u64),
        Str(&'a str),
        Bytes(&'a [u8]),
    }
    let mut seen = HashSet::with_capacity(items.len());
    for item in items {
        let key = match item {
            Value::Bool(v) => Key::Bool(*v),
            Value::I32(v) | Value::EnumNumber(v) => Key::Int(i64::from(*v)),
            Value::I64(v) => Key::Int(*v),
            Value::U32(v) => Key::Uint(u64::from(*v)),
            Value::U64(v) => Key::Uint(*v),
            Value::F32(v) => Key::Float(f64::from(*v).to_bits()),
            Value::F64(v) => Key::Float(v.to_bits()),
            Value::String(v) => Key::Str(v),
            Value::Bytes(v) => Key::Bytes(v),
            Value::Message(_) | Value::List(_) | Value::Map(_) => return true,
        };
        if !seen.insert(key) {
            return false;
        }
    }
    true
}

/// `map` rules; `keys` and `values` apply to each pair.
#[derive(Debug)]
pub(super) struct MapCheck {
    min_pairs: Option<u64>,
    max_pairs: Option<u64>,
    ignore_empty: bool,
    pub(super) keys: Option<FieldCheck>,
    pub(super) values: Option<FieldCheck>,
}

impl MapCheck {
    /// Whether an empty map skips every rule (`ignore_empty`).
    pub(super) fn ignores(&self, len: usize) -> bool {
        self.ignore_empty && len == 0
    }

    /// The count rules of the whole map.
    pub(super) fn check(&self, len: usize, out: &mut Vec<String>) {
        let len = len as u64;
        if let Some(min) = self.min_pairs
            && len < min
        {
            out.push(format!("value must contain at least {min} pair(s)"));
        }
        if let Some(max) = self.max_pairs
            && len > max
        {
            out.push(format!("value must contain no more than {max} pair(s)"));
        }
    }
}

/// `any` rules on the type URL (`required` is in [`FieldCheck::required`]).
#[derive(Debug)]
pub(super) struct AnyCheck {
    within: Vec<String>,
    not_in: Vec<String>,
}

impl AnyCheck {
    pub(super) fn check(&self, type_url: &str, out: &mut Vec<String>) {
        if !self.within.is_empty() && !self.within.iter().any(|t| t == type_url) {
            out.push(format!("type URL must be in list {:?}", self.within));
        }
        if self.not_in.iter().any(|t| t == type_url) {
            out.push(format!("type URL must not be in list {:?}", self.not_in));
        }
    }
}

/// Checks a scalar `value` (or the inner value of a wrapper message) against `kind`. Rules of a
/// kind that does not match the value's type are ignored (a malformed annotation).
pub(super) fn check_scalar(kind: &KindCheck, value: &Value, out: &mut Vec<String>) {
    match (kind, value) {
        (KindCheck::Signed(n), Value::I32(v)) => n.check(i64::from(*v), out),
        (KindCheck::Signed(n), Value::I64(v)) => n.check(*v, out),
        (KindCheck::Unsigned(n), Value::U32(v)) => n.check(u64::from(*v), out),
        (KindCheck::Unsigned(n), Value::U64(v)) => n.check(*v, out),
        (KindCheck::Float(n), Value::F32(v)) => n.check(f64::from(*v), out),
        (KindCheck::Float(n), Value::F64(v)) => n.check(*v, out),
        (KindCheck::Bool(konst), Value::Bool(v)) if v != konst => {
            out.push(format!("value must equal {konst}"));
        }
        (KindCheck::String(s), Value::String(v)) => s.check(v, out),
        (KindCheck::Bytes(b), Value::Bytes(v)) => b.check(v, out),
        (KindCheck::Enum(e), Value::EnumNumber(v)) => e.check(*v, out),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::validate::{
        BoolRules, BytesRules, Int64Rules, KnownRegex, RepeatedRules, StringRules, UInt32Rules,
        bytes_rules, string_rules,
    };

    /// The rule texts `value` breaks under `rule` (for a field of `kind`).
    fn broken(rule: Type, kind: Kind, value: Value) -> Vec<String> {
        let check = FieldCheck::compile(&FieldRules { message: None, r#type: Some(rule) }, &kind);
        let mut out = Vec::new();
        check_scalar(check.kind.as_ref().expect("a type rule"), &value, &mut out);
        out
    }

    fn uint32(rules: UInt32Rules, value: u32) -> Vec<String> {
        broken(Type::Uint32(rules), Kind::Uint32, Value::U32(value))
    }

    fn string(rules: StringRules, value: &str) -> Vec<String> {
        broken(Type::String(rules), Kind::String, Value::String(value.into()))
    }

    #[test]
    fn numeric_bounds_inside_and_outside_ranges() {
        let inside = || UInt32Rules { gt: Some(10), lte: Some(20), ..Default::default() };
        assert!(uint32(inside(), 20).is_empty());
        assert_eq!(uint32(inside(), 10), ["value must be inside range (10, 20]"]);
        // lt < gt: PGV reads an exclusive "outside" range.
        let outside = || UInt32Rules { lt: Some(10), gt: Some(20), ..Default::default() };
        assert!(uint32(outside(), 9).is_empty());
        assert!(uint32(outside(), 21).is_empty());
        assert_eq!(uint32(outside(), 15), ["value must be outside range [10, 20]"]);
        assert_eq!(
            uint32(UInt32Rules { gte: Some(2), ..Default::default() }, 1),
            ["value must be greater than or equal to 2"]
        );
        assert_eq!(
            uint32(UInt32Rules { lt: Some(2), ..Default::default() }, 2),
            ["value must be less than 2"]
        );
    }

    #[test]
    fn numeric_const_in_not_in_and_ignore_empty() {
        assert_eq!(
            uint32(UInt32Rules { r#const: Some(3), ..Default::default() }, 4),
            ["value must equal 3"]
        );
        let within = UInt32Rules { r#in: vec![1, 2], ..Default::default() };
        assert_eq!(uint32(within, 3), ["value must be in list [1, 2]"]);
        let not_in = UInt32Rules { not_in: vec![0], ..Default::default() };
        assert_eq!(uint32(not_in, 0), ["value must not be in list [0]"]);
        let ignore = UInt32Rules { gt: Some(5), ignore_empty: Some(true), ..Default::default() };
        assert!(uint32(ignore, 0).is_empty());
        let signed = Int64Rules { gt: Some(-1), ..Default::default() };
        assert_eq!(
            broken(Type::Int64(signed), Kind::Int64, Value::I64(-1)),
            ["value must be greater than -1"]
        );
        // A rule of another kind than the value's is ignored.
        assert!(uint32(UInt32Rules { gt: Some(5), ..Default::default() }, 1).len() == 1);
        let mismatch = UInt32Rules { gt: Some(5), ..Default::default() };
        assert!(broken(Type::Uint32(mismatch), Kind::Int64, Value::I64(1)).is_empty());
    }

    #[test]
    fn bool_const() {
        let rule = || Type::Bool(BoolRules { r#const: Some(true) });
        assert_eq!(broken(rule(), Kind::Bool, Value::Bool(false)), ["value must equal true"]);
        assert!(broken(rule(), Kind::Bool, Value::Bool(true)).is_empty());
    }

    #[test]
    fn string_lengths_count_runes_and_bytes() {
        let runes = || StringRules { min_len: Some(2), max_len: Some(3), ..Default::default() };
        assert!(string(runes(), "éé").is_empty());
        assert_eq!(string(runes(), "é"), ["value length must be at least 2 runes"]);
        assert_eq!(string(runes(), "abcd"), ["value length must be at most 3 runes"]);
        let bytes = StringRules { max_bytes: Some(3), ..Default::default() };
        assert_eq!(string(bytes, "éé"), ["value length must be at most 3 bytes"]);
        let exact = StringRules { len: Some(1), len_bytes: Some(1), ..Default::default() };
        assert_eq!(string(exact, "é"), ["value length must be 1 bytes"]);
    }

    #[test]
    fn string_affixes_const_and_lists() {
        let affixes = || StringRules {
            prefix: Some("%".into()),
            suffix: Some("%".into()),
            ignore_empty: Some(true),
            ..Default::default()
        };
        assert!(string(affixes(), "%A%").is_empty());
        assert!(string(affixes(), "").is_empty());
        assert_eq!(
            string(affixes(), "A"),
            ["value does not have prefix \"%\"", "value does not have suffix \"%\""]
        );
        let contains = StringRules {
            contains: Some("b".into()),
            not_contains: Some("z".into()),
            ..Default::default()
        };
        assert_eq!(
            string(contains, "az"),
            ["value does not contain substring \"b\"", "value contains substring \"z\""]
        );
        let within =
            StringRules { r#in: vec!["http".into(), "https".into()], ..Default::default() };
        assert_eq!(string(within, "ftp"), ["value must be in list [\"http\", \"https\"]"]);
        let konst = StringRules { r#const: Some("x".into()), ..Default::default() };
        assert_eq!(string(konst, "y"), ["value must equal \"x\""]);
    }

    #[test]
    fn http_header_regexes_strict_and_loose() {
        let name = |strict| StringRules {
            strict,
            well_known: Some(string_rules::WellKnown::WellKnownRegex(
                KnownRegex::HttpHeaderName as i32,
            )),
            ..Default::default()
        };
        assert!(string(name(None), ":authority").is_empty());
        assert!(string(name(None), "x-b3-traceid").is_empty());
        assert_eq!(string(name(None), "a b").len(), 1);
        assert_eq!(string(name(None), "").len(), 1);
        assert!(string(name(Some(false)), "a b").is_empty());
        assert_eq!(string(name(Some(false)), "a\r\nb"), ["value must not contain NUL, CR or LF"]);
        let value = |strict| StringRules {
            strict,
            well_known: Some(string_rules::WellKnown::WellKnownRegex(
                KnownRegex::HttpHeaderValue as i32,
            )),
            ..Default::default()
        };
        assert!(string(value(None), "a\tb ü").is_empty());
        assert_eq!(string(value(None), "a\u{7f}").len(), 1);
        assert!(string(value(Some(false)), "a\u{7f}").is_empty());
        assert_eq!(string(value(Some(false)), "a\0").len(), 1);
    }

    #[test]
    fn well_known_string_formats() {
        use string_rules::WellKnown as W;
        let format = |w: W, value: &str| {
            string(StringRules { well_known: Some(w), ..Default::default() }, value).is_empty()
        };
        assert!(format(W::Hostname(true), "api.example.com."));
        assert!(!format(W::Hostname(true), "-bad.example"));
        assert!(!format(W::Hostname(true), &"a".repeat(64)));
        assert!(format(W::Ip(true), "::1") && format(W::Ip(true), "10.0.0.1"));
        assert!(!format(W::Ipv4(true), "::1") && !format(W::Ipv6(true), "10.0.0.1"));
        assert!(format(W::Address(true), "10.0.0.1") && format(W::Address(true), "host"));
        assert!(!format(W::Address(true), "no spaces"));
        assert!(format(W::Uri(true), "https://example.com/x") && !format(W::Uri(true), "/rel"));
        assert!(format(W::UriRef(true), "/rel"));
        assert!(format(W::Email(true), "a@example.com") && !format(W::Email(true), "a@"));
        assert!(format(W::Uuid(true), "123e4567-e89b-12d3-a456-426614174000"));
        assert!(!format(W::Uuid(true), "123e4567e89b12d3a456426614174000"));
    }

    #[test]
    fn bytes_rules() {
        let bytes = |rules: BytesRules, value: &[u8]| {
            broken(Type::Bytes(rules), Kind::Bytes, Value::Bytes(value.to_vec().into()))
        };
        let len = || BytesRules { min_len: Some(1), max_len: Some(2), ..Default::default() };
        assert_eq!(bytes(len(), b""), ["value length must be at least 1 bytes"]);
        assert_eq!(bytes(len(), b"abc"), ["value length must be at most 2 bytes"]);
        let ip = BytesRules {
            well_known: Some(bytes_rules::WellKnown::Ipv4(true)),
            ..Default::default()
        };
        assert_eq!(bytes(ip, &[1, 2, 3]), ["value must be a valid IPv4 address in byte form"]);
        let pattern = BytesRules { pattern: Some("^ab".into()), ..Default::default() };
        assert_eq!(bytes(pattern, b"ba").len(), 1);
    }

    #[test]
    fn repeated_counts_and_unique() {
        let rules = RepeatedRules {
            min_items: Some(1),
            max_items: Some(2),
            unique: Some(true),
            ..Default::default()
        };
        let check = FieldCheck::compile(
            &FieldRules { message: None, r#type: Some(Type::Repeated(Box::new(rules))) },
            &Kind::String,
        );
        let Some(KindCheck::Repeated(repeated)) = &check.kind else { panic!("repeated") };
        let run = |items: &[&str]| {
            let items: Vec<Value> = items.iter().map(|s| Value::String((*s).into())).collect();
            let mut out = Vec::new();
            repeated.check(&items, &mut out);
            out
        };
        assert!(run(&["a", "b"]).is_empty());
        assert_eq!(run(&[]), ["value must contain at least 1 item(s)"]);
        assert_eq!(run(&["a", "a"]), ["repeated value must contain unique items"]);
        assert_eq!(run(&["a", "b", "c"]), ["value must contain no more than 2 item(s)"]);
    }

    #[test]
    fn durations_print_as_protobuf_json() {
        assert_eq!(Nanos::of(0, 0).to_string(), "0s");
        assert_eq!(Nanos::of(1, 500_000_000).to_string(), "1.5s");
        assert_eq!(Nanos::of(-1, -500_000_000).to_string(), "-1.5s");
        assert_eq!(Nanos::of(0, 1_000_000).to_string(), "0.001s");
    }
}
