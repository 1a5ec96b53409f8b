//! Writing a whole configuration into etcd as one transaction.

use std::collections::{BTreeMap, BTreeSet};

use prost::Message;
use xds_cache::Snapshot;

use crate::layout::{ResourceKey, group_key, normalize_prefix};
use crate::source::DEFAULT_GROUP;
use crate::wire::{
    COMPARE_LESS, Compare, DeleteRangeRequest, EtcdClient, PutRequest, RequestOp, TARGET_MOD,
    TxnRequest, prefix_end, request_op::Request,
};

/// What a publish did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Published {
    /// Keys written (new or changed values).
    pub put: usize,
    /// Keys deleted (resources the new configuration lacks).
    pub deleted: usize,
    /// Keys left as they were.
    pub unchanged: usize,
    /// The etcd revision of the transaction (the revision read, when nothing changed).
    pub revision: i64,
}

/// Why a publish failed.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// A group name cannot be a key segment.
    #[error(
        "group {0:?} contains '/', which the key layout <prefix>/<group>/<type>/<name> cannot hold"
    )]
    GroupName(String),
    /// etcd refused the transaction because it has more operations than its `--max-txn-ops`
    /// allows (128 by default); nothing was written. A publish is one transaction on purpose and
    /// is never split: replicas must never see half a configuration. Raise the limit.
    #[error(
        "etcd refused the publish: it is one transaction of {operations} operations (one per \
         changed or deleted key) and etcd allows fewer ({message:?}); nothing was written. Raise \
         etcd's --max-txn-ops (default 128) to at least {operations} on every member: a publish \
         is never split into several transactions, so that replicas never serve half a \
         configuration"
    )]
    TooManyOperations {
        /// Operations in the transaction.
        operations: usize,
        /// etcd's message.
        message: String,
    },
    /// etcd refused the transaction as larger than its `--max-request-bytes` allows (1.5 MiB by
    /// default); nothing was written. As with the operations, the publish is never split.
    #[error(
        "etcd refused the publish: it is one transaction of {bytes} bytes and etcd accepts less \
         ({message:?}); nothing was written. Raise etcd's --max-request-bytes (default 1.5 MiB) \
         above {bytes} on every member: a publish is never split into several transactions, so \
         that replicas never serve half a configuration"
    )]
    TooLarge {
        /// The encoded transaction's size.
        bytes: usize,
        /// etcd's message.
        message: String,
    },
    /// etcd refused or could not be reached; nothing was written.
    #[error("etcd: {0}")]
    Etcd(#[from] tonic::Status),
    /// Another writer changed the prefix between our read and our transaction; nothing was
    /// written. Publish again.
    #[error("the prefix changed while publishing (another publisher?); nothing was written")]
    Conflict,
}

/// Makes the keys under `prefix` exactly `groups` in one etcd transaction: values that changed are
/// written, keys the configuration lacks deleted, and the transaction only applies if no key under
/// the prefix changed since it was read (so two publishers never interleave). Every replica
/// watching the prefix sees one revision: the whole new configuration or none of it.
///
/// Every named group (not the default one) also gets its marker key
/// ([`group_key`]), so that a group with no resources exists for the replicas as it does in the
/// configuration.
///
/// The caller validates `groups` first (the file server loads the directory with its loader).
/// etcd limits a transaction to `--max-txn-ops` operations (128 by default) and
/// `--max-request-bytes` (1.5 MiB): run etcd with limits that fit the configuration (a publish
/// past them fails with [`PublishError::TooManyOperations`] or [`PublishError::TooLarge`]).
///
/// # Errors
///
/// See [`PublishError`]; on any error nothing was written.
pub async fn publish(
    client: &EtcdClient,
    prefix: &str,
    groups: &BTreeMap<String, Snapshot>,
) -> Result<Published, PublishError> {
    let prefix = normalize_prefix(prefix);
    let mut wanted: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (group, snapshot) in groups {
        if group.contains('/') {
            return Err(PublishError::GroupName(group.clone()));
        }
        if group != DEFAULT_GROUP {
            wanted.insert(group_key(&prefix, group), Vec::new());
        }
        for t in snapshot.types() {
            for resource in snapshot.resources(t) {
                wanted.insert(
                    ResourceKey::of(&prefix, group, resource),
                    resource.to_any().encode_to_vec(),
                );
            }
        }
    }
    let current = client.range_prefix(prefix.as_bytes()).await?;
    let read_revision = current.header.map_or(0, |h| h.revision);
    let existing: BTreeMap<Vec<u8>, Vec<u8>> =
        current.kvs.into_iter().map(|kv| (kv.key, kv.value)).collect();
    let mut ops = Vec::new();
    let mut done = Published { revision: read_revision, ..Published::default() };
    let mut keep = BTreeSet::new();
    for (key, value) in &wanted {
        keep.insert(key.as_bytes().to_vec());
        if existing.get(key.as_bytes()) == Some(value) {
            done.unchanged += 1;
            continue;
        }
        done.put += 1;
        ops.push(RequestOp {
            request: Some(Request::RequestPut(PutRequest {
                key: key.as_bytes().to_vec(),
                value: value.clone(),
            })),
        });
    }
    for key in existing.keys().filter(|k| !keep.contains(*k)) {
        done.deleted += 1;
        ops.push(RequestOp {
            request: Some(Request::RequestDeleteRange(DeleteRangeRequest {
                key: key.clone(),
                range_end: Vec::new(),
            })),
        });
    }
    if ops.is_empty() {
        return Ok(done);
    }
    // No key under the prefix was modified after our read.
    let guard = Compare {
        result: COMPARE_LESS,
        target: TARGET_MOD,
        key: prefix.as_bytes().to_vec(),
        mod_revision: Some(read_revision + 1),
        range_end: prefix_end(prefix.as_bytes()),
    };
    let txn = TxnRequest { compare: vec![guard], success: ops, failure: Vec::new() };
    let (operations, bytes) = (txn.success.len(), txn.encoded_len());
    let answer = client.txn(txn).await.map_err(|status| refused(status, operations, bytes))?;
    if !answer.succeeded {
        return Err(PublishError::Conflict);
    }
    done.revision = answer.header.map_or(0, |h| h.revision);
    Ok(done)
}

/// Names etcd's refusals of a transaction too large for its limits (etcd says only "too many
/// operations in txn request" or "request is too large", with no figure).
fn refused(status: tonic::Status, operations: usize, bytes: usize) -> PublishError {
    let message = status.message().to_owned();
    match status.code() {
        tonic::Code::InvalidArgument if message.contains("too many operations") => {
            PublishError::TooManyOperations { operations, message }
        }
        tonic::Code::InvalidArgument if message.contains("too large") => {
            PublishError::TooLarge { bytes, message }
        }
        // Past etcd's gRPC receive limit (`--max-request-bytes` plus some overhead), gRPC itself
        // refuses the message.
        tonic::Code::ResourceExhausted if message.contains("larger than max") => {
            PublishError::TooLarge { bytes, message }
        }
        _ => PublishError::Etcd(status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_limits_are_named_with_the_figures_and_the_flag_to_raise() {
        let status =
            tonic::Status::invalid_argument("etcdserver: too many operations in txn request");
        let e = refused(status, 300, 9000).to_string();
        assert!(e.contains("300 operations") && e.contains("--max-txn-ops"), "{e}");
        assert!(e.contains("too many operations in txn request") && e.contains("never split"));
        let e =
            refused(tonic::Status::invalid_argument("etcdserver: request is too large"), 3, 9000);
        assert!(matches!(e, PublishError::TooLarge { bytes: 9000, .. }), "{e}");
        assert!(e.to_string().contains("--max-request-bytes"));
        let other = refused(tonic::Status::unavailable("down"), 1, 1);
        assert!(matches!(other, PublishError::Etcd(_)));
    }
}
