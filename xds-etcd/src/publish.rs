//! Writing a whole configuration into etcd as one transaction.
//!
//! A publish is two steps, [`plan`] (read the prefix, work out the transaction) and
//! [`Plan::commit`] (run it); [`publish()`] does both. The transaction applies only if nothing
//! under the prefix changed between the two:
//!
//! - every publish rewrites the guard key ([`guard_key`]) and compares its modification revision
//!   with the one it read, so another publish that committed in between (whatever it wrote or
//!   deleted) fails this one;
//! - every key of the prefix must be unmodified since the read (one range compare), so a key
//!   created or changed by any writer fails it too.
//!
//! A key *deleted* by a tool other than `publish` between the read and the commit leaves no
//! revision to compare (etcd keeps none for a key that is gone) and is not noticed: the publish
//! writes what it planned, and a key it meant to keep unchanged stays deleted until the next
//! publish. Write the prefix with `publish` only (or rewrite the guard key in the same
//! transaction).
//!
//! A publish also keeps to its own keys: the prefix may not be empty or `/`; its marker key
//! ([`deployment_key`]) names the deployment, and a prefix inside another deployment's, or
//! holding one, is refused; only keys of the layout (resources of a known type name, group
//! markers) are ever deleted, and a prefix holding keys outside the layout is refused, naming
//! them, rather than published into (replicas refuse such a revision).

use std::collections::{BTreeMap, BTreeSet};

use prost::Message;
use xds_cache::Snapshot;

use crate::layout::{
    DEPLOYMENT_MARKER, Key, ResourceKey, deployment_key, deployment_prefix, enclosing_prefixes,
    group_key, guard_key,
};
use crate::source::DEFAULT_GROUP;
use crate::wire::{
    COMPARE_EQUAL, COMPARE_LESS, Compare, DeleteRangeRequest, EtcdClient, PutRequest, RangeRequest,
    RequestOp, TARGET_CREATE, TARGET_MOD, TxnRequest, prefix_end, request_op::Request,
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
#[non_exhaustive]
pub enum PublishError {
    /// A group name cannot be a key segment.
    #[error(
        "group {0:?} contains '/' or starts with '@', which the key layout \
         <prefix>/<group>/<type>/<name> cannot hold ('@' names the publisher's own keys)"
    )]
    GroupName(String),
    /// The prefix cannot hold a deployment of its own (empty, `/`, too long).
    #[error("refused, nothing written: {0}")]
    Prefix(String),
    /// Another deployment's marker sits at a prefix that contains this one: publishing here
    /// would put keys into its configuration (its replicas would refuse them, and its next
    /// publish would delete them).
    #[error(
        "refused, nothing written: {prefix} is inside the deployment at {outer} (its marker \
         {outer}{DEPLOYMENT_MARKER} exists); publish under a prefix of its own"
    )]
    InsideAnother {
        /// This publish's prefix.
        prefix: String,
        /// The deployment that contains it.
        outer: String,
    },
    /// Another deployment's marker sits under this prefix: publishing here would delete its
    /// keys or serve them as this deployment's.
    #[error(
        "refused, nothing written: {prefix} contains the deployment at {inner} (its marker \
         {inner}{DEPLOYMENT_MARKER} exists); publish under a prefix that holds no other \
         deployment"
    )]
    ContainsAnother {
        /// This publish's prefix.
        prefix: String,
        /// The deployment inside it.
        inner: String,
    },
    /// Keys under the prefix that are not in the layout: another application's, or a mistake.
    /// A publish deletes only keys of its layout, and replicas refuse a revision holding these.
    #[error(
        "refused, nothing written: {prefix} holds {count} keys outside the layout \
         <prefix>/<group>/<type>/<name> (or <prefix>/<group> with an empty value) that publish \
         did not write (first: {first:?}); replicas refuse a revision holding them. Remove them, \
         or publish under another prefix"
    )]
    ForeignKeys {
        /// This publish's prefix.
        prefix: String,
        /// How many.
        count: usize,
        /// The first, lossily as text (at most 200 bytes).
        first: String,
    },
    /// etcd refused the transaction because it has more operations than its `--max-txn-ops`
    /// allows (128 by default); nothing was written. A publish is one transaction on purpose and
    /// is never split: replicas must never see half a configuration. Raise the limit.
    #[error(
        "etcd refused the publish: it is one transaction of {operations} operations (one per \
         changed or deleted key, and the publish's own two) and etcd allows fewer \
         ({message:?}); nothing was written. Raise \
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
    /// Another publish committed between this one's read and its transaction; nothing was
    /// written. Its configuration is served whole; publish again to replace it.
    #[error(
        "another publish changed {prefix} at revision {revision}; nothing was written; publish \
         again"
    )]
    Conflict {
        /// The prefix.
        prefix: String,
        /// The other publish's revision.
        revision: i64,
    },
    /// Another writer (not a publish) changed a key under the prefix after this publish read it;
    /// nothing was written.
    #[error(
        "another writer changed a key under {prefix} after revision {read}; nothing was written; \
         publish again"
    )]
    ChangedBehind {
        /// The prefix.
        prefix: String,
        /// The revision this publish read.
        read: i64,
    },
}

/// A publish worked out against one read of the prefix, not yet written: [`Plan::commit`] writes
/// it, unless the prefix changed since the read.
#[derive(Debug, Clone)]
pub struct Plan {
    prefix: String,
    read_revision: i64,
    /// The guard key's modification revision at the read (0: absent).
    guard_revision: i64,
    /// The marker keys of every enclosing prefix (all absent at the read).
    enclosing: Vec<String>,
    ops: Vec<RequestOp>,
    done: Published,
}

/// Whether `type_name` is a message type the replicas serve (one of the descriptors they know):
/// the resource keys a publish may delete. A segment that is not (a nested tree's group, another
/// tool's path) makes the key foreign.
fn is_message_name(type_name: &str) -> bool {
    xds_proto::descriptor_pool().get_message_by_name(type_name).is_some()
}

/// Reads `prefix` and works out the transaction that makes its keys exactly `groups` (see
/// [`publish()`]); nothing is written.
///
/// # Errors
///
/// A group name or prefix that cannot be published into, another deployment around or inside
/// the prefix, keys outside the layout, or etcd's error.
pub async fn plan(
    client: &EtcdClient,
    prefix: &str,
    groups: &BTreeMap<String, Snapshot>,
) -> Result<Plan, PublishError> {
    let prefix = deployment_prefix(prefix).map_err(PublishError::Prefix)?;
    let mut wanted: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    wanted.insert(deployment_key(&prefix), prefix.as_bytes().to_vec());
    for (group, snapshot) in groups {
        if group.contains('/') || group.starts_with('@') {
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
    let mut enclosing = Vec::new();
    let outers: Vec<String> = enclosing_prefixes(&prefix).into_iter().map(str::to_owned).collect();
    for outer in outers {
        let marker = deployment_key(&outer);
        if !client.get(marker.as_bytes()).await?.kvs.is_empty() {
            return Err(PublishError::InsideAnother { prefix, outer });
        }
        enclosing.push(marker);
    }
    let current = client.range_prefix(prefix.as_bytes()).await?;
    let read_revision = current.header.map_or(0, |h| h.revision);
    let (guard, marker) = (guard_key(&prefix), deployment_key(&prefix));
    let mut guard_revision = 0;
    let mut ours: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut foreign = Vec::new();
    for kv in current.kvs {
        if kv.key == guard.as_bytes() {
            guard_revision = kv.mod_revision;
            continue;
        }
        let text = String::from_utf8_lossy(&kv.key);
        if kv.key != marker.as_bytes()
            && let Some(inner) = text.strip_suffix(DEPLOYMENT_MARKER)
            && inner.ends_with('/')
        {
            return Err(PublishError::ContainsAnother { prefix, inner: inner.to_owned() });
        }
        match Key::parse(&prefix, &kv.key) {
            Ok(Key::Resource(key)) if is_message_name(&key.type_name) => {}
            // Group markers are empty; one with a value was written by someone else.
            Ok(Key::Group(_)) if kv.value.is_empty() => {}
            Ok(Key::Reserved(_)) if kv.key == marker.as_bytes() => {}
            // Another tool's bookkeeping, kept as it is.
            Ok(Key::Reserved(_)) => continue,
            _ => {
                foreign.push(text.chars().take(200).collect::<String>());
                continue;
            }
        }
        ours.insert(kv.key, kv.value);
    }
    if let Some(first) = foreign.first() {
        let (count, first) = (foreign.len(), first.clone());
        return Err(PublishError::ForeignKeys { prefix, count, first });
    }
    let mut ops = Vec::new();
    let mut done = Published { revision: read_revision, ..Published::default() };
    let mut keep = BTreeSet::new();
    for (key, value) in &wanted {
        keep.insert(key.as_bytes().to_vec());
        // The marker is bookkeeping: counted in neither figure the operator reads.
        let counted = usize::from(*key != marker);
        if ours.get(key.as_bytes()) == Some(value) {
            done.unchanged += counted;
            continue;
        }
        done.put += counted;
        ops.push(put(key.as_bytes().to_vec(), value.clone()));
    }
    for key in ours.keys().filter(|k| !keep.contains(*k)) {
        done.deleted += 1;
        ops.push(RequestOp {
            request: Some(Request::RequestDeleteRange(DeleteRangeRequest {
                key: key.clone(),
                range_end: Vec::new(),
            })),
        });
    }
    Ok(Plan { prefix, read_revision, guard_revision, enclosing, ops, done })
}

fn put(key: Vec<u8>, value: Vec<u8>) -> RequestOp {
    RequestOp { request: Some(Request::RequestPut(PutRequest { key, value })) }
}

impl Plan {
    /// The revision the plan was read at.
    pub fn read_revision(&self) -> i64 {
        self.read_revision
    }

    /// Writes the plan in one transaction, if nothing under the prefix changed since it was
    /// read; a plan with nothing to change writes nothing.
    ///
    /// # Errors
    ///
    /// [`PublishError::Conflict`] (another publish committed since the read) or
    /// [`PublishError::ChangedBehind`] (another writer changed a key), etcd's limits, or etcd's
    /// error; nothing was written in every case.
    pub async fn commit(self, client: &EtcdClient) -> Result<Published, PublishError> {
        let Plan { prefix, read_revision, guard_revision, enclosing, mut ops, mut done } = self;
        if ops.is_empty() {
            return Ok(done);
        }
        let guard = guard_key(&prefix);
        // Every publish rewrites the guard: the next one's compare on it sees this one, deletions
        // included.
        ops.push(put(guard.as_bytes().to_vec(), read_revision.to_string().into_bytes()));
        let mut compare = vec![
            Compare {
                result: COMPARE_EQUAL,
                target: TARGET_MOD,
                key: guard.as_bytes().to_vec(),
                mod_revision: Some(guard_revision),
                ..Compare::default()
            },
            // No key under the prefix was created or modified after the read, by anyone.
            Compare {
                result: COMPARE_LESS,
                target: TARGET_MOD,
                key: prefix.as_bytes().to_vec(),
                mod_revision: Some(read_revision + 1),
                range_end: prefix_end(prefix.as_bytes()),
                ..Compare::default()
            },
        ];
        // No deployment appeared around this one since the read.
        compare.extend(enclosing.into_iter().map(|marker| Compare {
            result: COMPARE_EQUAL,
            target: TARGET_CREATE,
            key: marker.into_bytes(),
            create_revision: Some(0),
            ..Compare::default()
        }));
        let failure = vec![RequestOp {
            request: Some(Request::RequestRange(RangeRequest {
                key: guard.as_bytes().to_vec(),
                ..RangeRequest::default()
            })),
        }];
        let txn = TxnRequest { compare, success: ops, failure };
        let (operations, bytes) = (txn.success.len(), txn.encoded_len());
        let answer = client.txn(txn).await.map_err(|status| refused(status, operations, bytes))?;
        if !answer.succeeded {
            let guard_now = answer
                .responses
                .into_iter()
                .filter_map(|r| r.response_range)
                .flat_map(|r| r.kvs)
                .map(|kv| kv.mod_revision)
                .next()
                .unwrap_or(0);
            return Err(if guard_now != guard_revision {
                PublishError::Conflict { prefix, revision: guard_now }
            } else {
                PublishError::ChangedBehind { prefix, read: read_revision }
            });
        }
        done.revision = answer.header.map_or(0, |h| h.revision);
        Ok(done)
    }
}

/// Makes the keys under `prefix` exactly `groups` in one etcd transaction: values that changed are
/// written, layout keys the configuration lacks deleted, and the transaction only applies if
/// nothing under the prefix changed since it was read (see the module doc: two publishers never
/// interleave). Every replica watching the prefix sees one revision: the whole new configuration
/// or none of it.
///
/// Every named group (not the default one) also gets its marker key
/// ([`group_key`]), so that a group with no resources exists for the replicas as it does in the
/// configuration; the prefix gets its deployment marker ([`deployment_key`]).
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
    plan(client, prefix, groups).await?.commit(client).await
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
