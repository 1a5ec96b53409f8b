//! `xdstp://` resource names (cncf/xds TP1, gRPC A47): parsing and the normal form (rule C1).
//!
//! ```text
//! xdstp://[authority]/{resource type}/{id}[?{context parameters}]
//! ```
//!
//! Two names are the same resource when authority, type, id and context parameters match
//! component-wise, whatever order the parameters came in and however their characters were
//! percent-encoded. [`XdstpName`]'s `Display` is the *normal form*: every component
//! percent-decoded and re-encoded one fixed way, the parameters sorted by key. The protocol core
//! keys subscriptions by the normal form, and the caches key resources by it, so a client's
//! spelling matches a resource's however either wrote its parameters.
//!
//! Names that do not start with `xdstp://` are opaque strings and are never touched
//! ([`normalize`] returns them as they are).
//!
//! A name whose last id segment is a literal `*` is a *glob collection* (rule C2): it stands for
//! every resource whose id has the same leading segments and whose context parameters are the same.
//!
//! ```
//! use xds_core::xdstp::{normalize, XdstpName};
//!
//! let name: XdstpName = "xdstp://auth/envoy.config.cluster.v3.Cluster/a/b?z=1&a=x%2Fy".parse()?;
//! assert_eq!(name.authority(), "auth");
//! assert_eq!(name.resource_type(), "envoy.config.cluster.v3.Cluster");
//! assert_eq!(name.id_segments(), ["a", "b"]);
//! assert_eq!(name.context_params().get("a").map(String::as_str), Some("x/y"));
//! assert_eq!(name.to_string(), "xdstp://auth/envoy.config.cluster.v3.Cluster/a/b?a=x%2Fy&z=1");
//! // Opaque names stay as they are.
//! assert_eq!(normalize("backend")?, "backend");
//! # Ok::<(), xds_core::xdstp::XdstpError>(())
//! ```

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::str::FromStr;

/// The scheme prefix of an xDS-TP name.
pub const SCHEME: &str = "xdstp://";

/// The id segment that makes a name a glob collection (rule C2).
pub const GLOB: &str = "*";

/// The longest `xdstp://` name parsed: longer ones are refused rather than stored or echoed.
pub const MAX_NAME_BYTES: usize = 4096;

/// Why a string is not a valid `xdstp://` name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum XdstpError {
    /// The string does not start with `xdstp://`.
    #[error("not an xdstp:// name")]
    NotXdstp,
    /// The name is longer than [`MAX_NAME_BYTES`].
    #[error("xdstp name longer than {MAX_NAME_BYTES} bytes")]
    TooLong,
    /// No `/{resource type}` after the authority.
    #[error("xdstp name has no resource type")]
    MissingType,
    /// No `/{id}` after the resource type.
    #[error("xdstp name has no id")]
    MissingId,
    /// A `%` not followed by two hex digits, or an escape that decodes to invalid UTF-8.
    #[error("xdstp name has a bad percent-encoding in {component}")]
    BadEncoding {
        /// Which component: `authority`, `type`, `id`, `parameters`.
        component: &'static str,
    },
    /// A context parameter with an empty key.
    #[error("xdstp name has a context parameter with an empty key")]
    EmptyParamKey,
    /// The same context parameter key twice.
    #[error("xdstp name repeats the context parameter {key:?}")]
    DuplicateParam {
        /// The repeated key (decoded).
        key: String,
    },
    /// A `#` fragment: processing directives belong to resource locators, not names.
    #[error("xdstp name has a fragment (#...); names carry no processing directives")]
    Fragment,
    /// A glob collection on a SotW stream: collections are served over delta only (rule C2).
    #[error("glob collections (xdstp://.../*) are served over delta (incremental) xDS only")]
    GlobOnSotw,
    /// The name's type segment is not the type of the stream it was sent on.
    #[error("xdstp name is of type {got}, but the stream is of type {expected}")]
    TypeMismatch {
        /// The stream's type (a message name such as `envoy.config.cluster.v3.Cluster`).
        expected: String,
        /// The type the name carries.
        got: String,
    },
}

/// A parsed `xdstp://` name. Components are stored decoded; `Display` writes the normal form.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct XdstpName {
    authority: String,
    resource_type: String,
    id: Vec<String>,
    glob: bool,
    params: BTreeMap<String, String>,
}

impl XdstpName {
    /// Parses `name`, which must start with `xdstp://`.
    pub fn parse(name: &str) -> Result<Self, XdstpError> {
        let rest = name.strip_prefix(SCHEME).ok_or(XdstpError::NotXdstp)?;
        if name.len() > MAX_NAME_BYTES {
            return Err(XdstpError::TooLong);
        }
        if rest.contains('#') {
            return Err(XdstpError::Fragment);
        }
        let (path, query) = match rest.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (rest, None),
        };
        let (authority, path) = path.split_once('/').ok_or(XdstpError::MissingType)?;
        let (resource_type, id) = path.split_once('/').unwrap_or((path, ""));
        if resource_type.is_empty() {
            return Err(XdstpError::MissingType);
        }
        if id.is_empty() {
            return Err(XdstpError::MissingId);
        }
        let raw: Vec<&str> = id.split('/').collect();
        let glob = raw.last() == Some(&GLOB);
        let id = raw.iter().map(|s| decode(s, "id")).collect::<Result<Vec<_>, _>>()?;
        let mut params = BTreeMap::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = decode(key, "parameters")?;
            if key.is_empty() {
                return Err(XdstpError::EmptyParamKey);
            }
            let value = decode(value, "parameters")?;
            if params.contains_key(&key) {
                return Err(XdstpError::DuplicateParam { key });
            }
            params.insert(key, value);
        }
        Ok(XdstpName {
            authority: decode(authority, "authority")?,
            resource_type: decode(resource_type, "type")?,
            id,
            glob,
            params,
        })
    }

    /// The authority (decoded; empty for `xdstp:///...`).
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// The resource type: a message name such as `envoy.config.listener.v3.Listener`.
    pub fn resource_type(&self) -> &str {
        &self.resource_type
    }

    /// The id's segments, decoded (a glob's last segment is `*`).
    pub fn id_segments(&self) -> &[String] {
        &self.id
    }

    /// The context parameters, decoded, sorted by key.
    pub fn context_params(&self) -> &BTreeMap<String, String> {
        &self.params
    }

    /// Whether the name is a glob collection: its last id segment is a literal `*` (rule C2).
    pub fn is_glob(&self) -> bool {
        self.glob
    }

    /// Checks that the name is of the stream's type (`expected`: a message name).
    pub fn check_type(&self, expected: &str) -> Result<(), XdstpError> {
        if self.resource_type == expected {
            Ok(())
        } else {
            Err(XdstpError::TypeMismatch {
                expected: expected.to_owned(),
                got: self.resource_type.clone(),
            })
        }
    }

    /// The glob collection this name is a member of: the same name with its last id segment
    /// replaced by `*` (rule C2). `None` for a glob itself.
    pub fn collection(&self) -> Option<XdstpName> {
        if self.glob {
            return None;
        }
        let mut glob = self.clone();
        if let Some(last) = glob.id.last_mut() {
            *last = GLOB.to_owned();
        }
        glob.glob = true;
        Some(glob)
    }
}

impl FromStr for XdstpName {
    type Err = XdstpError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        XdstpName::parse(s)
    }
}

impl fmt::Display for XdstpName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(SCHEME)?;
        encode(&self.authority, f)?;
        f.write_char('/')?;
        encode(&self.resource_type, f)?;
        let last = self.id.len().saturating_sub(1);
        for (i, segment) in self.id.iter().enumerate() {
            f.write_char('/')?;
            if self.glob && i == last {
                f.write_str(GLOB)?;
            } else {
                encode(segment, f)?;
            }
        }
        for (i, (key, value)) in self.params.iter().enumerate() {
            f.write_char(if i == 0 { '?' } else { '&' })?;
            encode(key, f)?;
            f.write_char('=')?;
            encode(value, f)?;
        }
        Ok(())
    }
}

/// Whether `name` is an `xdstp://` name (valid or not).
pub fn is_xdstp(name: &str) -> bool {
    name.starts_with(SCHEME)
}

/// The normal form of a resource name: an `xdstp://` name parsed and written back (rule C1), any
/// other name unchanged. Borrows when nothing changes, so opaque names cost one prefix check.
pub fn normalize(name: &str) -> Result<Cow<'_, str>, XdstpError> {
    if !is_xdstp(name) {
        return Ok(Cow::Borrowed(name));
    }
    let normal = XdstpName::parse(name)?.to_string();
    Ok(if normal == name { Cow::Borrowed(name) } else { Cow::Owned(normal) })
}

/// The path of a normal-form `xdstp://` name (`authority/type/id...`) and its query (with its
/// `?`, or empty), if the path has an authority, a type and an id. Structure characters (`/`, `?`,
/// `*`) are always escaped inside components in the normal form, so plain string operations
/// find the structure.
fn split_normal(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix(SCHEME)?;
    let (path, query) = match rest.find('?') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    (path.bytes().filter(|b| *b == b'/').count() >= 2).then_some((path, query))
}

/// Whether a normal-form name is a glob collection (rule C2): `xdstp://a/T/p/*[?params]`.
/// One prefix check for a name that is not `xdstp://`.
pub fn is_glob_name(name: &str) -> bool {
    is_xdstp(name) && split_normal(name).is_some_and(|(path, _)| path.ends_with("/*"))
}

/// The part of a normal-form glob that every member's normal form starts with (up to and
/// including the last `/` of its path), and its query (with its `?`, or empty), which every
/// member's query equals. `None` if `glob` is not a glob.
pub fn glob_prefix(glob: &str) -> Option<(&str, &str)> {
    let (path, query) = split_normal(glob)?;
    let path = path.strip_suffix('*').filter(|p| p.ends_with('/'))?;
    Some((&glob[..SCHEME.len() + path.len()], query))
}

/// The entries of `map` (keyed by normal-form name) whose names start with `glob`'s prefix
/// ([`glob_prefix`]), in name order: every member of the glob and the few other names under the
/// same path, found by a range over the ordered keys, O(log n + names under the prefix), never a
/// scan. Filter with [`is_member`]. Empty if `glob` is not a glob.
pub fn under_prefix<'a, K: std::borrow::Borrow<str> + Ord, V>(
    map: &'a BTreeMap<K, V>,
    glob: &'a str,
) -> impl Iterator<Item = (&'a K, &'a V)> + 'a {
    let prefix = glob_prefix(glob).map(|(prefix, _)| prefix);
    let start = prefix.unwrap_or("");
    // Without a prefix the range is cut off at once: `take_while` sees a `None` prefix.
    map.range::<str, _>((std::ops::Bound::Included(start), std::ops::Bound::Unbounded))
        .take_while(move |(name, _)| prefix.is_some_and(|p| (*name).borrow().starts_with(p)))
}

/// Whether the normal-form `name` is a member of the normal-form glob collection `glob`
/// (rule C2): the same authority, type and leading id segments, one more segment that is not
/// `*`, and exactly the same context parameters.
pub fn is_member(name: &str, glob: &str) -> bool {
    let Some((prefix, query)) = glob_prefix(glob) else { return false };
    let Some(rest) = name.strip_prefix(prefix) else { return false };
    let (leaf, rest_query) = match rest.find('?') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    !leaf.is_empty() && leaf != GLOB && !leaf.contains('/') && rest_query == query
}

/// The glob collection a normal-form name is a member of, as a normal-form string (the string
/// form of [`XdstpName::collection`], without parsing): `None` for names that are not
/// `xdstp://`, and for globs.
pub fn collection_of(name: &str) -> Option<String> {
    if !is_xdstp(name) {
        return None;
    }
    let (path, query) = split_normal(name)?;
    let slash = path.rfind('/')?;
    let leaf = &path[slash + 1..];
    if leaf.is_empty() || leaf == GLOB {
        return None;
    }
    let mut glob = String::with_capacity(name.len() + 1);
    glob.push_str(&name[..SCHEME.len() + slash + 1]);
    glob.push_str(GLOB);
    glob.push_str(query);
    Some(glob)
}

/// Characters written as they are in the normal form; every other byte is `%XX` (upper-case hex).
/// RFC 3986's unreserved characters plus the sub-delimiters that carry no meaning in an xdstp name
/// (`&`, `=`, `*`, `/`, `?`, `#` and `%` are always escaped, so they can never be mistaken for
/// structure or a glob).
fn kept(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$'()+,;:@".contains(&b)
}

fn encode(s: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    for &b in s.as_bytes() {
        if kept(b) {
            f.write_char(char::from(b))?;
        } else {
            write!(f, "%{b:02X}")?;
        }
    }
    Ok(())
}

fn decode(s: &str, component: &'static str) -> Result<String, XdstpError> {
    if !s.contains('%') {
        return Ok(s.to_owned());
    }
    let bad = || XdstpError::BadEncoding { component };
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or_else(bad)?;
            let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "envoy.config.cluster.v3.Cluster";

    #[test]
    fn c01_parameters_in_any_order_give_one_normal_form() {
        let (a, b) = (
            format!("xdstp://auth/{T}/x/y?b=2&a=1&c="),
            format!("xdstp://auth/{T}/x/y?c=&a=1&b=2"),
        );
        let (a, b) = (normalize(&a).unwrap(), normalize(&b).unwrap());
        assert_eq!(a, b);
        assert_eq!(a, format!("xdstp://auth/{T}/x/y?a=1&b=2&c="));
    }

    #[test]
    fn c01_percent_encoding_is_decoded_and_written_one_way() {
        // `%3a` and `:` are the same character; `%2F` in a segment is not a separator.
        let n = XdstpName::parse(&format!("xdstp://a%2eb/{T}/svc%3a80/p%2Fq?k%20=v%2a")).unwrap();
        assert_eq!(n.authority(), "a.b");
        assert_eq!(n.id_segments(), ["svc:80", "p/q"]);
        assert_eq!(n.context_params()["k "], "v*");
        assert_eq!(n.to_string(), format!("xdstp://a.b/{T}/svc:80/p%2Fq?k%20=v%2A"));
        // The normal form parses back to the same name.
        assert_eq!(XdstpName::parse(&n.to_string()).unwrap(), n);
        // An escaped `*` is an ordinary character, not a glob.
        let star = XdstpName::parse(&format!("xdstp://a/{T}/x/%2A")).unwrap();
        assert!(!star.is_glob());
        assert_eq!(star.to_string(), format!("xdstp://a/{T}/x/%2A"));
    }

    #[test]
    fn c01_opaque_names_are_untouched_and_normal_names_borrowed() {
        for name in ["backend", "*", "rc/host", "xdstp:/nope", "http://a/b/c?z=1&a=2"] {
            assert!(matches!(normalize(name), Ok(Cow::Borrowed(n)) if n == name), "{name}");
        }
        let normal = format!("xdstp:///{T}/a?x=1");
        assert!(matches!(normalize(&normal), Ok(Cow::Borrowed(_))));
        assert_eq!(XdstpName::parse(&normal).unwrap().authority(), "");
    }

    #[test]
    fn c01_malformed_names_are_typed_errors() {
        let cases = [
            ("xdstp://auth".to_owned(), XdstpError::MissingType),
            ("xdstp://auth/".to_owned(), XdstpError::MissingType),
            (format!("xdstp://auth/{T}"), XdstpError::MissingId),
            (format!("xdstp://auth/{T}/"), XdstpError::MissingId),
            (format!("xdstp://auth/{T}/x%zz"), XdstpError::BadEncoding { component: "id" }),
            (format!("xdstp://auth/{T}/x%f"), XdstpError::BadEncoding { component: "id" }),
            (format!("xdstp://auth/{T}/x%ff"), XdstpError::BadEncoding { component: "id" }),
            (format!("xdstp://auth/{T}/x?=1"), XdstpError::EmptyParamKey),
            (format!("xdstp://auth/{T}/x?a=1&a=2"), XdstpError::DuplicateParam { key: "a".into() }),
            (format!("xdstp://auth/{T}/x#alt=y"), XdstpError::Fragment),
            (format!("xdstp://auth/{T}/{}", "x".repeat(MAX_NAME_BYTES)), XdstpError::TooLong),
        ];
        for (name, err) in cases {
            assert_eq!(XdstpName::parse(&name), Err(err), "{name}");
        }
        assert_eq!(XdstpName::parse("cluster"), Err(XdstpError::NotXdstp));
    }

    #[test]
    fn c01_type_segment_is_checked_against_the_stream() {
        let n = XdstpName::parse(&format!("xdstp://a/{T}/x")).unwrap();
        assert!(n.check_type(T).is_ok());
        let err = n.check_type("envoy.config.listener.v3.Listener").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "xdstp name is of type {T}, but the stream is of type envoy.config.listener.v3.Listener"
            )
        );
    }

    #[test]
    fn c02_a_member_names_its_glob_collection() {
        let m = XdstpName::parse(&format!("xdstp://a/{T}/p/q/leaf?z=1&y=2")).unwrap();
        let glob = m.collection().unwrap();
        assert!(glob.is_glob());
        assert_eq!(glob.to_string(), format!("xdstp://a/{T}/p/q/*?y=2&z=1"));
        assert_eq!(glob.collection(), None);
    }

    #[test]
    fn c02_membership_on_normal_forms_matches_the_parsed_collection() {
        let glob = format!("xdstp://a/{T}/p/q/*?y=2&z=1");
        assert!(is_glob_name(&glob) && !is_glob_name(&format!("xdstp://a/{T}/p/q/%2A")));
        assert!(!is_glob_name("*") && !is_glob_name("p/*"));
        assert_eq!(glob_prefix(&glob), Some((format!("xdstp://a/{T}/p/q/").as_str(), "?y=2&z=1")));
        for (name, member) in [
            (format!("xdstp://a/{T}/p/q/leaf?y=2&z=1"), true),
            (format!("xdstp://a/{T}/p/q/%2A?y=2&z=1"), true),
            (format!("xdstp://a/{T}/p/q/leaf?y=2"), false),
            (format!("xdstp://a/{T}/p/q/leaf?y=2&z=1&zz=3"), false),
            (format!("xdstp://a/{T}/p/q/r/leaf?y=2&z=1"), false),
            (format!("xdstp://a/{T}/p/qq/leaf?y=2&z=1"), false),
            (format!("xdstp://a/{T}/p/q/*?y=2&z=1"), false),
            (format!("xdstp://b/{T}/p/q/leaf?y=2&z=1"), false),
        ] {
            assert_eq!(is_member(&name, &glob), member, "{name}");
            let parsed = XdstpName::parse(&name).unwrap();
            let by_parse = parsed.collection().map(|c| c.to_string());
            assert_eq!(collection_of(&name), by_parse, "{name}");
            assert_eq!(by_parse.as_deref() == Some(glob.as_str()), member, "{name}");
        }
        assert_eq!(collection_of(&format!("xdstp://a/{T}/leaf")), Some(format!("xdstp://a/{T}/*")));
        assert_eq!(collection_of("plain"), None);
    }
}
