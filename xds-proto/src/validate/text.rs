//! String and bytes rules: lengths, affixes, lists, `pattern` (compiled once, size-bounded) and
//! the well-known formats (host names, addresses, HTTP header names and values).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use regex::{Regex, RegexBuilder};

use crate::pb::validate::{BytesRules, KnownRegex, StringRules, bytes_rules, string_rules};

/// Size bounds for a compiled `pattern`: PGV patterns are short RE2 expressions; a pattern
/// beyond these bounds is not checked rather than allowed to cost unbounded memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// String rules with the pattern compiled and the well-known format resolved.
#[derive(Debug)]
pub(super) struct StringCheck {
    rules: StringRules,
    pattern: Option<Regex>,
    format: Option<Format>,
}

/// The `well_known` string formats.
#[derive(Debug, Clone, Copy)]
enum Format {
    Email,
    Hostname,
    Ip,
    Ipv4,
    Ipv6,
    Uri,
    Address,
    Uuid,
    HeaderName { strict: bool },
    HeaderValue { strict: bool },
}

impl StringCheck {
    pub(super) fn compile(rules: StringRules) -> Self {
        let pattern = rules.pattern.as_deref().and_then(compile_pattern);
        let strict = rules.strict.unwrap_or(true);
        let format = match rules.well_known {
            Some(string_rules::WellKnown::Email(true)) => Some(Format::Email),
            Some(string_rules::WellKnown::Hostname(true)) => Some(Format::Hostname),
            Some(string_rules::WellKnown::Ip(true)) => Some(Format::Ip),
            Some(string_rules::WellKnown::Ipv4(true)) => Some(Format::Ipv4),
            Some(string_rules::WellKnown::Ipv6(true)) => Some(Format::Ipv6),
            Some(string_rules::WellKnown::Uri(true)) => Some(Format::Uri),
            Some(string_rules::WellKnown::Address(true)) => Some(Format::Address),
            Some(string_rules::WellKnown::Uuid(true)) => Some(Format::Uuid),
            Some(string_rules::WellKnown::WellKnownRegex(regex)) => {
                match KnownRegex::try_from(regex) {
                    Ok(KnownRegex::HttpHeaderName) => Some(Format::HeaderName { strict }),
                    Ok(KnownRegex::HttpHeaderValue) => Some(Format::HeaderValue { strict }),
                    _ => None,
                }
            }
            // `uri_ref` accepts every string Envoy can be given; `false` means no rule.
            _ => None,
        };
        StringCheck { rules, pattern, format }
    }

    pub(super) fn check(&self, value: &str, out: &mut Vec<String>) {
        let r = &self.rules;
        if r.ignore_empty() && value.is_empty() {
            return;
        }
        if let Some(konst) = &r.r#const
            && value != konst
        {
            out.push(format!("value must equal {konst:?}"));
        }
        if r.len.is_some() || r.min_len.is_some() || r.max_len.is_some() {
            // PGV counts runes (code points), not bytes.
            let chars = value.chars().count() as u64;
            if r.len.is_some_and(|len| chars != len) {
                out.push(format!("value length must be {} runes", r.len()));
            }
            if r.min_len.is_some_and(|min| chars < min) {
                out.push(format!("value length must be at least {} runes", r.min_len()));
            }
            if r.max_len.is_some_and(|max| chars > max) {
                out.push(format!("value length must be at most {} runes", r.max_len()));
            }
        }
        let bytes = value.len() as u64;
        if r.len_bytes.is_some_and(|len| bytes != len) {
            out.push(format!("value length must be {} bytes", r.len_bytes()));
        }
        if r.min_bytes.is_some_and(|min| bytes < min) {
            out.push(format!("value length must be at least {} bytes", r.min_bytes()));
        }
        if r.max_bytes.is_some_and(|max| bytes > max) {
            out.push(format!("value length must be at most {} bytes", r.max_bytes()));
        }
        if let Some(pattern) = &self.pattern
            && !pattern.is_match(value)
        {
            out.push(format!("value does not match regex pattern {:?}", pattern.as_str()));
        }
        if let Some(prefix) = &r.prefix
            && !value.starts_with(prefix.as_str())
        {
            out.push(format!("value does not have prefix {prefix:?}"));
        }
        if let Some(suffix) = &r.suffix
            && !value.ends_with(suffix.as_str())
        {
            out.push(format!("value does not have suffix {suffix:?}"));
        }
        if let Some(contains) = &r.contains
            && !value.contains(contains.as_str())
        {
            out.push(format!("value does not contain substring {contains:?}"));
        }
        if let Some(not_contains) = &r.not_contains
            && value.contains(not_contains.as_str())
        {
            out.push(format!("value contains substring {not_contains:?}"));
        }
        if !r.r#in.is_empty() && !r.r#in.iter().any(|s| s == value) {
            out.push(format!("value must be in list {:?}", r.r#in));
        }
        if r.not_in.iter().any(|s| s == value) {
            out.push(format!("value must not be in list {:?}", r.not_in));
        }
        if let Some(format) = self.format
            && let Some(rule) = format.violation(value)
        {
            out.push(rule.to_owned());
        }
    }
}

impl Format {
    /// The rule text if `value` is not of this format.
    fn violation(self, value: &str) -> Option<&'static str> {
        let (ok, rule) = match self {
            Format::Email => (is_email(value), "value must be a valid email address"),
            Format::Hostname => (is_hostname(value), "value must be a valid hostname"),
            Format::Ip => (value.parse::<IpAddr>().is_ok(), "value must be a valid IP address"),
            Format::Ipv4 => {
                (value.parse::<Ipv4Addr>().is_ok(), "value must be a valid IPv4 address")
            }
            Format::Ipv6 => {
                (value.parse::<Ipv6Addr>().is_ok(), "value must be a valid IPv6 address")
            }
            Format::Uri => (is_absolute_uri(value), "value must be a valid absolute URI"),
            Format::Address => (
                value.parse::<IpAddr>().is_ok() || is_hostname(value),
                "value must be a valid hostname or IP address",
            ),
            Format::Uuid => (is_uuid(value), "value must be a valid UUID"),
            // PGV: strict `^:?[0-9a-zA-Z!#$%&'*+-.^_|~\x60]+$`; loose `^[^\0\n\r]*$`.
            Format::HeaderName { strict: true } => (
                is_header_name(value),
                "value must be a valid HTTP header name (RFC 7230 token, optional leading ':')",
            ),
            Format::HeaderValue { strict: true } => (
                // PGV: `^[^\u0000-\u0008\u000A-\u001F\u007F]*$`.
                !value.chars().any(|c| matches!(c, '\0'..='\u{8}' | '\n'..='\u{1f}' | '\u{7f}')),
                "value must be a valid HTTP header value (no control characters)",
            ),
            Format::HeaderName { strict: false } | Format::HeaderValue { strict: false } => {
                (!value.contains(['\0', '\n', '\r']), "value must not contain NUL, CR or LF")
            }
        };
        (!ok).then_some(rule)
    }
}

fn is_header_name(value: &str) -> bool {
    let token = value.strip_prefix(':').unwrap_or(value);
    !token.is_empty()
        // PGV's pattern has the range `+-.`, which takes in `,` too: Envoy accepts it.
        && token.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+,-.^_|~`".contains(&b))
}

/// RFC 1123 host name, as PGV checks it: at most 253 bytes (without a trailing dot), labels of
/// 1 to 63 letters, digits and inner hyphens.
fn is_hostname(value: &str) -> bool {
    let name = value.strip_suffix('.').unwrap_or(value);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

fn is_email(value: &str) -> bool {
    let address =
        value.rsplit_once('<').and_then(|(_, rest)| rest.strip_suffix('>')).unwrap_or(value);
    match address.rsplit_once('@') {
        Some((local, host)) => !local.is_empty() && local.len() <= 64 && is_hostname(host),
        None => false,
    }
}

/// `scheme:rest` with an RFC 3986 scheme and no whitespace.
fn is_absolute_uri(value: &str) -> bool {
    let Some((scheme, _)) = value.split_once(':') else {
        return false;
    };
    scheme.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
        && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
        && !value.chars().any(char::is_whitespace)
}

fn is_uuid(value: &str) -> bool {
    let bytes = value.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

fn compile_pattern(pattern: &str) -> Option<Regex> {
    RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .ok()
}

/// Bytes rules with the pattern compiled.
#[derive(Debug)]
pub(super) struct BytesCheck {
    rules: BytesRules,
    pattern: Option<regex::bytes::Regex>,
}

impl BytesCheck {
    pub(super) fn compile(rules: BytesRules) -> Self {
        let pattern = rules.pattern.as_deref().and_then(|p| {
            regex::bytes::RegexBuilder::new(p)
                .size_limit(REGEX_SIZE_LIMIT)
                .dfa_size_limit(REGEX_SIZE_LIMIT)
                .build()
                .ok()
        });
        BytesCheck { rules, pattern }
    }

    pub(super) fn check(&self, value: &[u8], out: &mut Vec<String>) {
        let r = &self.rules;
        if r.ignore_empty() && value.is_empty() {
            return;
        }
        let len = value.len() as u64;
        if let Some(konst) = &r.r#const
            && value != konst.as_slice()
        {
            out.push("value must equal the constant bytes".to_owned());
        }
        if r.len.is_some_and(|l| len != l) {
            out.push(format!("value length must be {} bytes", r.len()));
        }
        if r.min_len.is_some_and(|min| len < min) {
            out.push(format!("value length must be at least {} bytes", r.min_len()));
        }
        if r.max_len.is_some_and(|max| len > max) {
            out.push(format!("value length must be at most {} bytes", r.max_len()));
        }
        if let Some(pattern) = &self.pattern
            && !pattern.is_match(value)
        {
            out.push(format!("value does not match regex pattern {:?}", pattern.as_str()));
        }
        if r.prefix.as_ref().is_some_and(|p| !value.starts_with(p)) {
            out.push("value does not have the required prefix".to_owned());
        }
        if r.suffix.as_ref().is_some_and(|s| !value.ends_with(s)) {
            out.push("value does not have the required suffix".to_owned());
        }
        if let Some(contains) = &r.contains
            && !contains.is_empty()
            && !value.windows(contains.len()).any(|w| w == contains.as_slice())
        {
            out.push("value does not contain the required bytes".to_owned());
        }
        if !r.r#in.is_empty() && !r.r#in.iter().any(|b| b == value) {
            out.push("value must be in the list of allowed values".to_owned());
        }
        if r.not_in.iter().any(|b| b == value) {
            out.push("value must not be in the list of forbidden values".to_owned());
        }
        let ip = match r.well_known {
            Some(bytes_rules::WellKnown::Ip(true)) => Some((len == 4 || len == 16, "IP")),
            Some(bytes_rules::WellKnown::Ipv4(true)) => Some((len == 4, "IPv4")),
            Some(bytes_rules::WellKnown::Ipv6(true)) => Some((len == 16, "IPv6")),
            _ => None,
        };
        if let Some((false, family)) = ip {
            out.push(format!("value must be a valid {family} address in byte form"));
        }
    }
}
