//! VHDS aliases (rules D9, D10): a client subscribes to `<route configuration>/<host>` and is
//! answered with the virtual host of that route configuration whose domains match the host.

use xds_proto::pb::envoy::config::route::v3::VirtualHost;
use xds_proto::{EncodedResource, ResourceType};

/// The domains of a VirtualHost resource, kept for alias lookups; `None` for other types.
pub(crate) fn domains(resource: &EncodedResource) -> Option<Box<[String]>> {
    if resource.type_url().builtin() != Some(ResourceType::VirtualHost) {
        return None;
    }
    resource.decode::<VirtualHost>().ok().map(|vh| vh.domains.into_boxed_slice())
}

/// Splits `<route configuration>/<host>` at its last `/`: a host has none, a route
/// configuration name may (rule D10: match right to left).
pub(crate) fn split_alias(alias: &str) -> Option<(&str, &str)> {
    alias.rsplit_once('/').filter(|(rc, host)| !rc.is_empty() && !host.is_empty())
}

/// How well a domain pattern matches a host, Envoy's way: exact beats suffix wildcards
/// (`*.example.com`, longer first) beats prefix wildcards (`example.*`, longer first) beats `*`.
fn score(pattern: &str, host: &str) -> Option<(u8, usize)> {
    let host = host.to_ascii_lowercase();
    let pattern = pattern.to_ascii_lowercase();
    if pattern == host {
        Some((3, pattern.len()))
    } else if pattern == "*" {
        Some((0, 0))
    } else if let Some(suffix) = pattern.strip_prefix('*') {
        (host.len() > suffix.len() && host.ends_with(suffix)).then_some((2, pattern.len()))
    } else if let Some(prefix) = pattern.strip_suffix('*') {
        (host.len() > prefix.len() && host.starts_with(prefix)).then_some((1, pattern.len()))
    } else {
        None
    }
}

/// The virtual host whose domains match `host` best; ties go to the first by name.
pub(crate) fn best_match<'a>(
    host: &str,
    candidates: impl Iterator<Item = (&'a EncodedResource, &'a [String])>,
) -> Option<&'a EncodedResource> {
    let mut best: Option<((u8, usize), &EncodedResource)> = None;
    for (resource, domains) in candidates {
        let Some(s) = domains.iter().filter_map(|d| score(d, host)).max() else { continue };
        if best.is_none_or(|(b, _)| s > b) {
            best = Some((s, resource));
        }
    }
    best.map(|(_, r)| r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vh(name: &str, domains: &[&str]) -> EncodedResource {
        EncodedResource::new(&VirtualHost {
            name: name.into(),
            domains: domains.iter().map(|d| d.to_string()).collect(),
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn d10_aliases_split_right_to_left() {
        assert_eq!(split_alias("rc/foo.com"), Some(("rc", "foo.com")));
        assert_eq!(split_alias("ns/rc/foo.com"), Some(("ns/rc", "foo.com")));
        assert_eq!(split_alias("foo.com"), None);
        assert_eq!(split_alias("rc/"), None);
    }

    #[test]
    fn d10_domain_precedence_follows_envoy() {
        let exact = vh("rc/exact", &["api.example.com"]);
        let suffix = vh("rc/suffix", &["*.example.com"]);
        let prefix = vh("rc/prefix", &["api.*"]);
        let any = vh("rc/any", &["*"]);
        let all = [&exact, &suffix, &prefix, &any];
        let pick = |host: &str| {
            let ds: Vec<(&EncodedResource, Box<[String]>)> =
                all.iter().map(|r| (*r, domains(r).unwrap())).collect();
            best_match(host, ds.iter().map(|(r, d)| (*r, &**d))).map(|r| r.name().to_owned())
        };
        assert_eq!(pick("api.example.com").as_deref(), Some("rc/exact"));
        assert_eq!(pick("www.example.com").as_deref(), Some("rc/suffix"));
        assert_eq!(pick("api.other.org").as_deref(), Some("rc/prefix"));
        assert_eq!(pick("nothing.here").as_deref(), Some("rc/any"));
    }
}
