//! The incremental (delta) variant: what a delta request means and how its responses look.

use std::collections::BTreeMap;

use crate::error::ErrorDetail;
use crate::message::{DeltaRequest, DeltaResource, DeltaResponse, Handled, RequestKind};
use crate::nonce::Nonces;
use crate::resource::{Resource, View};
use crate::subscription::NameSet;
use crate::substream::{Delta, Protocol, SubStream};
use crate::text::Text;

impl<R: Resource> SubStream<Delta, R> {
    /// A request that names nothing, of a sub-stream that took one before: an ACK, a NACK or
    /// an answer to an older response, classified by its nonce (rules S4, D1). Every request
    /// of a synced proxy is one (one per update): no name to admit, subscribe, force or forget.
    pub(crate) fn answer(&mut self, nonce: &mut Text, error: Option<&ErrorDetail>) -> RequestKind {
        let kind = self.flow.classify(nonce, error, &mut Text::new());
        self.quiet_request = true;
        kind
    }
}

impl Protocol for Delta {
    type Request = DeltaRequest;
    type Response<R: Resource> = DeltaResponse<R>;

    fn handle<R: Resource>(sub: &mut SubStream<Self, R>, mut request: DeltaRequest) -> Handled {
        if sub.flow.started() && request.names_nothing() {
            // An ACK or NACK and nothing else (every request of a synced proxy, one per update):
            // no name to admit, subscribe, force or forget, which the steps below would each
            // find in turn. A first request is never this: its empty list subscribes to the
            // wildcard (rule D8).
            let kind = sub.answer(&mut request.response_nonce, request.error_detail.as_ref());
            return Handled { kind, subscribed: Default::default(), unsubscribed: Vec::new() };
        }
        // A set the server found stands for its names listed; unless some name is refused now
        // or was before, when each name goes through the naming below as if listed.
        let mut set = request.subscribe_set.take();
        if !sub.naming.admits_as_listed(&request.denied)
            && let Some(set) = set.take()
        {
            request.subscribe.extend(set.iter().map(str::to_owned));
        }
        // Rule C1: every name is normalized once, here; refused names go no further.
        let names = sub.naming.admit_delta(
            std::mem::take(&mut request.subscribe),
            std::mem::take(&mut request.unsubscribe),
            std::mem::take(&mut request.initial_resource_versions),
            &request.denied,
        );
        request.subscribe = names.subscribe;
        request.unsubscribe = names.unsubscribe;
        request.initial_resource_versions = names.initial;
        let error = request.error_detail.as_ref();
        let kind = sub.flow.classify(&mut request.response_nonce, error, &mut Text::new());
        let first = kind == RequestKind::Initial;
        let mut declared_names = Vec::new();
        if first {
            // Rule D7: what the client says it holds is held; it is sent only what differs.
            sub.tracker.declare(&request.initial_resource_versions);
            declared_names = request.initial_resource_versions.into_keys().collect();
        }
        // Rule D1: a stale nonce voids the ACK meaning, but the subscription changes still apply.
        let change = sub.subscription.apply_delta(
            &request.subscribe,
            set.as_ref(),
            &request.unsubscribe,
            first,
            sub.traits.wildcard_capable,
        );
        if change.wildcard_joined() {
            sub.tracker.resync();
        }
        sub.tracker.subscription_grew(&change, &sub.subscription);
        // Rule D2: every subscribed name is (re)sent, even one the client may hold, except what
        // a reconnecting client declared it holds (rule D7). A client that holds nothing and
        // has not been compared yet is sent everything it subscribes to anyway: nothing to mark
        // (a joining proxy's 10,000 names cost no lookups here).
        if sub.tracker.has_compared() || !sub.tracker.holds_nothing() {
            let set_names = set.iter().flat_map(NameSet::iter);
            for name in request.subscribe.iter().map(String::as_str).chain(set_names) {
                let declared = first && sub.tracker.get(name, &sub.subscription).is_some();
                if sub.subscription.has_name(name) && !declared {
                    sub.tracker.force(name, &sub.subscription);
                }
            }
        }
        // Rule C2: a (re)subscribed glob's members are all sent, and the glob is answered even
        // when it has none.
        for glob in request.subscribe.iter().filter(|name| sub.subscription.has_glob(name)) {
            sub.tracker.force_glob(glob);
        }
        sub.tracker.subscription_shrank(&change, &sub.subscription);
        if !sub.subscription.is_wildcard() {
            // Rule D7 is about what the client subscribes to: a declared name outside the
            // subscription (by name or through a glob, rule C2) is forgotten, as the client
            // drops what it does not subscribe to. Kept, a removal of it could be put off
            // (rule O1) and the server would go on believing the client holds it.
            declared_names.retain(|name| !sub.subscription.covers(name));
            sub.tracker.forget(&declared_names, &sub.subscription);
        }
        let (subscribed, unsubscribed) = change.into_names();
        Handled { kind, subscribed, unsubscribed }
    }

    fn respond<R: Resource, V: View<Resource = R> + ?Sized>(
        sub: &mut SubStream<Self, R>,
        view: &V,
        nonces: &mut Nonces,
        defer_removals: bool,
    ) -> Option<DeltaResponse<R>> {
        let (diff, resource_errors) = sub.diff(view, defer_removals, false);
        // A wildcard's first response is owed even when empty: the client knows it has everything.
        let first_wildcard = !sub.responded && sub.subscription.is_wildcard();
        if diff.is_empty() && resource_errors.is_empty() && !first_wildcard && !diff.answer_owed {
            return None;
        }
        // A set sent whole has none of the absent names (they are not in it).
        let shared = diff.whole.filter(|set| !set.is_empty());
        // Both lists are in name order: merged, a name found under the name wins over its
        // absence (rule S14: never a name twice).
        let mut resources = Vec::with_capacity(diff.send.len() + diff.absent.len());
        let mut absent = diff.absent.into_iter().peekable();
        for (resource, aliases) in diff.send {
            while let Some((name, _)) = absent.peek()
                && name.as_str() <= resource.name()
            {
                let (name, alias) = absent.next().unwrap_or_default();
                if name != resource.name() {
                    resources.push(absent_entry(name, alias));
                }
            }
            resources.push(DeltaResource::Present { resource, aliases });
        }
        resources.extend(absent.map(|(name, alias)| absent_entry(name, alias)));
        let mut removed_resources = diff.removed;
        removed_resources.sort();
        let spellings = sub.naming.spellings_for(
            shared
                .iter()
                .flat_map(|set| set.iter().map(Resource::name))
                .chain(resources.iter().map(DeltaResource::name))
                .chain(removed_resources.iter().map(String::as_str)),
        );
        let mut resource_errors = resource_errors;
        crate::naming::drop_sent(&mut resource_errors, |name| {
            let listed = resources.binary_search_by(|r| r.name().cmp(name));
            listed.is_ok_and(|i| matches!(resources[i], DeltaResource::Present { .. }))
                || shared.as_ref().is_some_and(|set| set.get(name).is_some())
        });
        Some(DeltaResponse {
            system_version_info: view.version(),
            nonce: sub.flow.sent(nonces),
            resources,
            shared,
            removed_resources,
            heartbeat: false,
            resource_errors,
            spellings,
        })
    }

    fn heartbeat<R: Resource>(
        _: &SubStream<Self, R>,
        held: Vec<R>,
        nonce: Text,
    ) -> DeltaResponse<R> {
        let resources = held
            .into_iter()
            .map(|resource| DeltaResource::Present { resource, aliases: Vec::new() });
        DeltaResponse {
            system_version_info: Text::new(),
            nonce,
            resources: resources.collect(),
            shared: None,
            removed_resources: Vec::new(),
            heartbeat: true,
            resource_errors: Vec::new(),
            spellings: BTreeMap::new(),
        }
    }
}

/// Helps callers name a resource entry.
impl<R: Resource> DeltaResource<R> {
    /// The name the entry goes under on the wire.
    pub fn name(&self) -> &str {
        match self {
            DeltaResource::Present { resource, .. } => resource.name(),
            DeltaResource::Absent { name, .. } => name,
        }
    }
}

/// The answer for a subscribed name that does not exist (rule D6): the name without a body.
fn absent_entry<R>(name: String, alias: bool) -> DeltaResource<R> {
    let aliases = if alias { vec![name.clone()] } else { Vec::new() };
    DeltaResource::Absent { name, aliases }
}
