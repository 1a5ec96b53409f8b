//! The core's own small descriptions of requests and responses. The server converts to and from
//! the wire messages (`DiscoveryRequest`, `DeltaDiscoveryResponse`, ...).

use std::collections::BTreeMap;

use crate::error::ErrorDetail;

/// One SotW request for one sub-stream (`DiscoveryRequest` without `node` and `type_url`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SotwRequest {
    /// The version the client holds (`version_info`).
    pub version_info: crate::Text,
    /// The full desired set of names (rule S9), or that it is the same as last time.
    pub resource_names: SotwNames,
    /// The nonce of the response this request answers; empty on the first request.
    pub response_nonce: crate::Text,
    /// Set when the client rejected the response (a NACK, rule S5).
    pub error_detail: Option<ErrorDetail>,
    /// Listed names (normal forms) the server's policy refuses, with the reason: they are not
    /// subscribed, and the client is told once, `PERMISSION_DENIED` in `resource_errors` (rule
    /// C4). The caller asks its policy with no lock held; the core only records the answer.
    pub denied: BTreeMap<String, String>,
}

/// The names of a SotW request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SotwNames {
    /// The request's list, as the client sent it. The sub-stream digests it with
    /// [`NamesDigest::of`](crate::NamesDigest::of), for [`Repeated`](Self::Repeated) next time.
    Listed(Vec<String>),
    /// The request's list with the caller's own digest of it (the server's is
    /// [`NamesDigest::of_encoded_keyed`](crate::NamesDigest::of_encoded_keyed), from the
    /// request's bytes),
    /// which the sub-stream keeps for [`Repeated`](Self::Repeated) next time.
    Digested(Vec<String>, crate::NamesDigest),
    /// The request's list as a set a live subscription holds, found by the digest of its names
    /// ([`NameSet::find`](crate::NameSet::find)) so that they need not be decoded (a proxy
    /// joining a mesh lists the endpoints of the same 10,000 clusters as the proxies before
    /// it), with the caller's digest of the list as for [`Digested`](Self::Digested).
    Found(crate::NameSet, crate::NamesDigest),
    /// The same list as the last request the sub-stream took in, recognised by its digest
    /// without being decoded ([`Stream::repeats_names`](crate::Stream::repeats_names)): what
    /// every ACK sends. On a sub-stream that took no list yet it stands for the empty list.
    Repeated,
}

impl Default for SotwNames {
    fn default() -> Self {
        SotwNames::Listed(Vec::new())
    }
}

impl From<Vec<String>> for SotwNames {
    fn from(names: Vec<String>) -> Self {
        SotwNames::Listed(names)
    }
}

/// One delta request for one sub-stream (`DeltaDiscoveryRequest` without `node` and `type_url`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeltaRequest {
    /// Names (or aliases) to add to the subscription (rule D2).
    pub subscribe: Vec<String>,
    /// More names to add, as a set a live subscription already holds: what the server passes
    /// instead of decoding a large list it recognised by its digest ([`NameSet::find`]). Taken
    /// as if its names were listed in `subscribe`.
    ///
    /// [`NameSet::find`]: crate::NameSet::find
    pub subscribe_set: Option<crate::NameSet>,
    /// Names to remove from the subscription (rule D3).
    pub unsubscribe: Vec<String>,
    /// On the first request of a stream: the versions the client already holds (rule D7).
    pub initial_resource_versions: BTreeMap<String, String>,
    /// The nonce of the response this request answers; empty for a spontaneous request.
    pub response_nonce: crate::Text,
    /// Set when the client rejected the response (a NACK).
    pub error_detail: Option<ErrorDetail>,
    /// Subscribed names (normal forms) the server's policy refuses, with the reason, as for
    /// [`SotwRequest::denied`].
    pub denied: BTreeMap<String, String>,
}

impl DeltaRequest {
    /// Whether the request names nothing: no name or set to subscribe or unsubscribe, no
    /// declared version, nothing refused. A synced client's ACK or NACK is this.
    pub(crate) fn names_nothing(&self) -> bool {
        self.subscribe.is_empty()
            && self.subscribe_set.is_none()
            && self.unsubscribe.is_empty()
            && self.initial_resource_versions.is_empty()
            && self.denied.is_empty()
    }
}

/// What a request meant, as the sub-stream classified it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestKind {
    /// The first request of the sub-stream.
    Initial,
    /// The client accepted the response with this nonce (rules S4, D1).
    Ack {
        /// The nonce of the accepted response.
        nonce: crate::Text,
        /// SotW: the version the client now holds. Delta: empty.
        version: crate::Text,
    },
    /// The client rejected the response with this nonce (rules S5, D1).
    Nack {
        /// The nonce of the rejected response.
        nonce: crate::Text,
        /// SotW: the version the client keeps. Delta: empty.
        version: crate::Text,
        /// Why the client rejected it.
        error: ErrorDetail,
    },
    /// The request names a nonce that is not the latest sent (rules S7, D1). SotW: the request was
    /// ignored. Delta: its subscription changes still applied.
    Stale {
        /// The stale nonce.
        nonce: crate::Text,
    },
    /// A delta request that answers no response: a subscription change.
    Spontaneous,
}

/// What a request did to the sub-stream.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "the outcome says whether the client ACKed or NACKed; record it"]
pub struct Handled {
    /// How the request was classified.
    pub kind: RequestKind,
    /// Names newly in the subscription (`*` for a wildcard entered).
    pub subscribed: AddedNames,
    /// Names no longer in the subscription (`*` for a wildcard left).
    pub unsubscribed: Vec<String>,
}

impl Handled {
    /// Whether the subscription changed.
    pub fn subscription_changed(&self) -> bool {
        !self.subscribed.is_empty() || !self.unsubscribed.is_empty()
    }
}

/// A SotW response to send (`DiscoveryResponse` without `type_url`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SotwResponse<R> {
    /// The type's version (rule S16).
    pub version_info: crate::Text,
    /// A fresh nonce (rule D1 applies to SotW too).
    pub nonce: crate::Text,
    /// The resources, by name, each name once (rules S11, S14), beside those of `shared`.
    pub resources: Vec<R>,
    /// Every resource of this set is sent too, before `resources` (no name is in both): the
    /// response of a client that gets all of a view's shared set, as every joining client of a
    /// wildcard or of every name does, every response of a full-state type (rule S11) to a
    /// wildcard client, and an update's change to every client that takes one step (clients of
    /// one shared set and subscription: the step's change is a set of its own). A thousand such
    /// clients then share one set where each had a list of its handles, and the transport can
    /// encode the set once for all of them (see
    /// [`ResourceSet::memo`](crate::ResourceSet::memo)). [`into_listed`](Self::into_listed)
    /// makes it one list.
    pub shared: Option<crate::ResourceSet<R>>,
    /// A heartbeat: the resources (all with a TTL) are refreshed, not changed; they go on the wire
    /// as `Resource` wrappers without a body, at the version the client holds.
    pub heartbeat: bool,
    /// Why subscribed resources are not sent (rule C4), sorted by name; each is sent once.
    pub resource_errors: Vec<crate::error::ResourceError>,
}

impl<R: crate::Resource> SotwResponse<R> {
    /// The same response with the resources of `shared` in `resources`, all in name order.
    #[must_use]
    pub fn into_listed(mut self) -> Self {
        if let Some(set) = self.shared.take() {
            self.resources = merged(set.iter().cloned(), self.resources, |r| r.name());
        }
        self
    }
}

/// One entry of a delta response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeltaResource<R> {
    /// The resource, with the aliases it was subscribed by (rule D9).
    Present {
        /// The resource (its name and per-resource version go on the wire).
        resource: R,
        /// The subscribed aliases that matched it, sorted.
        aliases: Vec<String>,
    },
    /// The subscribed name does not exist (rule D6): a `Resource` with this name and no body.
    Absent {
        /// The subscribed name.
        name: String,
        /// For an alias subscription (VHDS): the alias, which is also the name (rule D10).
        aliases: Vec<String>,
    },
}

/// A delta response to send (`DeltaDiscoveryResponse` without `type_url`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeltaResponse<R> {
    /// For debugging only (rule D4): the type's version.
    pub system_version_info: crate::Text,
    /// A fresh nonce (rule D1).
    pub nonce: crate::Text,
    /// Created or changed resources and does-not-exist answers, sorted by name (rule D4),
    /// beside those of `shared`.
    pub resources: Vec<DeltaResource<R>>,
    /// Every resource of this set is sent too, without aliases, before `resources` (no name is in
    /// both): as for [`SotwResponse::shared`]. [`into_listed`](Self::into_listed) makes it one
    /// list.
    pub shared: Option<crate::ResourceSet<R>>,
    /// Names the client holds that no longer exist (rule D5), sorted.
    pub removed_resources: Vec<String>,
    /// A heartbeat: every entry is a resource with a TTL that the client holds at this version,
    /// to be sent without its body so that the client renews its TTL.
    pub heartbeat: bool,
    /// Why subscribed resources are not sent (rule C4), sorted by name; each is sent once.
    pub resource_errors: Vec<crate::error::ResourceError>,
    /// Rule C1: the client's own spelling of the `xdstp://` names in this response whose normal
    /// form differs (normal form -> as the client wrote it). The entries, `removed_resources`
    /// and errors above are by normal form; the wire names each as the client asked.
    pub spellings: BTreeMap<String, String>,
}

impl<R: crate::Resource> DeltaResponse<R> {
    /// The same response with the resources of `shared` in `resources`, all in name order.
    #[must_use]
    pub fn into_listed(mut self) -> Self {
        if let Some(set) = self.shared.take() {
            let shared =
                set.iter().map(|r| DeltaResource::Present { resource: r.clone(), aliases: vec![] });
            self.resources = merged(shared, self.resources, DeltaResource::name);
        }
        self
    }
}

/// Two lists in name order as one, in name order.
fn merged<T>(a: impl Iterator<Item = T>, b: Vec<T>, name: impl Fn(&T) -> &str) -> Vec<T> {
    let mut out = Vec::with_capacity(a.size_hint().0 + b.len());
    let mut b = b.into_iter().peekable();
    for x in a {
        while let Some(y) = b.next_if(|y| name(y) < name(&x)) {
            out.push(y);
        }
        out.push(x);
    }
    out.extend(b);
    out
}

/// The names a request added to a subscription, in order, with the wildcard's `*` first when it
/// joined ([`Handled::subscribed`], [`Event::Request`](crate::Event::Request)).
///
/// A list; but when a subscription took a large set of names whole (a proxy joining a mesh,
/// subscribing to the endpoints of 10,000 clusters), the subscription's own set, shared: saying
/// what was added then copies no name. Copying them was a tenth of the server's CPU in a storm of
/// joining proxies, to report a count and a few names.
#[derive(Clone, Debug, Default)]
pub struct AddedNames {
    listed: Vec<String>,
    /// Every name of the set was added (and `listed` is empty).
    whole: Option<crate::NameSet>,
}

impl AddedNames {
    /// The names of a set a subscription took whole.
    pub(crate) fn whole(set: crate::NameSet) -> Self {
        AddedNames { listed: Vec::new(), whole: Some(set) }
    }

    /// How many names were added.
    pub fn len(&self) -> usize {
        self.whole.as_ref().map_or(self.listed.len(), crate::NameSet::len)
    }

    /// Whether no name was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The names, in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> + Clone {
        let listed = self.listed.iter().map(String::as_str);
        listed.chain(self.whole.iter().flat_map(crate::NameSet::iter))
    }

    /// The names, copied.
    pub fn to_vec(&self) -> Vec<String> {
        self.iter().map(str::to_owned).collect()
    }
}

impl From<Vec<String>> for AddedNames {
    fn from(listed: Vec<String>) -> Self {
        AddedNames { listed, whole: None }
    }
}

/// The same names, however they are kept.
impl PartialEq for AddedNames {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for AddedNames {}
