//! Authorization by identity: the node a client claims must be the one its certificate names.

use xds_proto::pb::envoy::config::core::v3::Node;

use crate::callbacks::{Callbacks, Refusal, StreamInfo};

/// Checks that the client's TLS certificate names its node id: a DNS or URI subject alternative
/// name equal to the node id, or a SPIFFE-style URI whose last path segment is the node id
/// (`spiffe://mesh.example/ns/default/sa/envoy-1` for node `envoy-1`).
///
/// Use it from [`Callbacks::on_node`] (or as [`RequireNodeIdentity`]) on a server with mTLS, so a
/// client cannot ask for another node's configuration.
pub fn check_node_identity(stream: &StreamInfo, node: &Node) -> Result<(), Refusal> {
    let Some(chain) = stream.peer_certificates.as_deref() else {
        return Err(Refusal("a client certificate is required".into()));
    };
    let Some(leaf) = chain.first() else {
        return Err(Refusal("a client certificate is required".into()));
    };
    let (_, cert) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| Refusal(format!("unreadable client certificate: {e}")))?;
    let names: Vec<String> = match cert.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                x509_parser::extensions::GeneralName::DNSName(d) => Some((*d).to_owned()),
                x509_parser::extensions::GeneralName::URI(u) => Some((*u).to_owned()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let matches = |name: &String| {
        name == &node.id
            || (name.starts_with("spiffe://") && name.rsplit('/').next() == Some(node.id.as_str()))
    };
    if !node.id.is_empty() && names.iter().any(matches) {
        Ok(())
    } else {
        Err(Refusal(format!(
            "node id {:?} does not match the client certificate (names: {})",
            node.id,
            if names.is_empty() { "none".to_owned() } else { names.join(", ") }
        )))
    }
}

/// Callbacks that refuse a stream whose node id its certificate does not name (see
/// [`check_node_identity`]); everything else is a no-op.
#[derive(Clone, Copy, Debug, Default)]
pub struct RequireNodeIdentity;

impl Callbacks for RequireNodeIdentity {
    fn on_node(&self, stream: &StreamInfo, node: &Node) -> Result<(), Refusal> {
        check_node_identity(stream, node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use xds_cache::Variant;

    fn stream_with(cert: Option<Vec<u8>>) -> StreamInfo {
        StreamInfo {
            id: 1,
            variant: Variant::Sotw,
            type_url: None,
            remote_addr: None,
            peer_certificates: cert.map(|c| Arc::new(vec![c])),
        }
    }

    fn cert(names: &[&str]) -> Vec<u8> {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        rcgen::generate_simple_self_signed(names).unwrap().cert.der().to_vec()
    }

    fn node(id: &str) -> Node {
        Node { id: id.into(), ..Default::default() }
    }

    #[test]
    fn the_node_id_must_be_named_by_the_certificate() {
        let stream = stream_with(Some(cert(&["envoy-1"])));
        assert_eq!(check_node_identity(&stream, &node("envoy-1")), Ok(()));
        let refused = check_node_identity(&stream, &node("evil")).unwrap_err();
        assert!(refused.0.contains("\"evil\" does not match") && refused.0.contains("envoy-1"));
    }

    #[test]
    fn spiffe_ids_match_by_their_last_segment() {
        let stream = stream_with(Some(cert(&["spiffe://mesh.example/ns/default/sa/envoy-2"])));
        assert_eq!(check_node_identity(&stream, &node("envoy-2")), Ok(()));
        assert!(check_node_identity(&stream, &node("sa")).is_err());
    }

    #[test]
    fn no_certificate_no_service() {
        let refused = check_node_identity(&stream_with(None), &node("envoy-1")).unwrap_err();
        assert!(refused.0.contains("certificate is required"));
        let garbage = check_node_identity(&stream_with(Some(vec![1, 2, 3])), &node("envoy-1"));
        assert!(garbage.unwrap_err().0.contains("unreadable"));
    }
}
