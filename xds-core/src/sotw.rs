//! The state-of-the-world (SotW) variant: what a SotW request means and how its responses look.

use crate::digest::NamesDigest;
use crate::message::{Handled, RequestKind, SotwNames, SotwRequest, SotwResponse};
use crate::nonce::Nonces;
use crate::resource::{Resource, ResourceSet, View};
use crate::substream::{Protocol, Sotw, SotwSubStream, SubStream};
use crate::tracker::HeldRef;

impl Protocol for Sotw {
    type Request = SotwRequest;
    type Response<R: Resource> = SotwResponse<R>;

    fn handle<R: Resource>(sub: &mut SubStream<Self, R>, request: SotwRequest) -> Handled {
        let mut kind = sub.flow.classify(
            &request.response_nonce,
            request.error_detail.as_ref(),
            &request.version_info,
        );
        if kind == RequestKind::Spontaneous && sub.flow.last_nonce.is_some() {
            // Rule S7: a SotW request always names the latest nonce it saw; one without is stale.
            kind = RequestKind::Stale { nonce: String::new() };
        }
        match &kind {
            // Rule S7: a stale request changes nothing.
            RequestKind::Stale { .. } => {
                return Handled { kind, subscribed: Vec::new(), unsubscribed: Vec::new() };
            }
            RequestKind::Ack { version, .. } => sub.acked_version = Some(version.clone()),
            RequestKind::Initial if !request.version_info.is_empty() => {
                sub.reconnect_version = Some(request.version_info.clone());
                sub.acked_version = Some(request.version_info.clone());
            }
            // Rule S5: after a NACK the client keeps its previous version; nothing is resent
            // until the resources change (the tracker already counts the rejected ones as sent).
            _ => {}
        }
        let first = kind == RequestKind::Initial;
        let names = match request.resource_names {
            SotwNames::Listed(names) => {
                sub.listed = Some(NamesDigest::of(&names));
                names
            }
            SotwNames::Digested(names, digest) => {
                sub.listed = Some(digest);
                names
            }
            // The list taken in last time, taken in again: the subscription, the refused names
            // and the client's spellings would come out as they are (every step below is
            // idempotent), so there is nothing to do.
            SotwNames::Repeated if sub.listed.is_some() => {
                return Handled { kind, subscribed: Vec::new(), unsubscribed: Vec::new() };
            }
            SotwNames::Repeated => {
                sub.listed = Some(NamesDigest::default());
                Vec::new()
            }
        };
        // Rule C1: every name is normalized once, here; refused names go no further.
        let names = sub.naming.admit_sotw(names, &request.denied);
        let change = sub.subscription.apply_sotw(names, first, sub.traits.wildcard_capable);
        if change.wildcard_joined() {
            sub.tracker.synced = None;
        }
        sub.tracker.subscription_grew(&change, &sub.subscription);
        for name in change.added_names() {
            // Rule S12: newly requested names are sent even if sent before.
            sub.tracker.force(name, &sub.subscription);
        }
        sub.tracker.subscription_shrank(&change, &sub.subscription);
        Handled { kind, subscribed: change.added, unsubscribed: change.removed }
    }

    fn respond<R: Resource, V: View<Resource = R> + ?Sized>(
        sub: &mut SubStream<Self, R>,
        view: &V,
        nonces: &mut Nonces,
        defer_removals: bool,
    ) -> Option<SotwResponse<R>> {
        if let Some(version) = sub.reconnect_version.take()
            && resume(sub, &version, view)
        {
            return None;
        }
        let (diff, resource_errors) = sub.diff(view, defer_removals);
        let owed_first =
            !sub.responded && (sub.traits.full_state || sub.subscription.is_wildcard());
        let (resources, shared) = if sub.traits.full_state {
            if diff.is_empty() && resource_errors.is_empty() && !owed_first {
                return None;
            }
            full_state(sub, view)
        } else {
            let shared = diff.whole.filter(|set| !set.is_empty());
            if shared.is_none() && diff.send.is_empty() && resource_errors.is_empty() && !owed_first
            {
                return None;
            }
            (diff.send.into_iter().map(|(resource, _)| resource).collect(), shared)
        };
        Some(SotwResponse {
            version_info: view.version(),
            nonce: sub.flow.sent(nonces),
            resources,
            shared,
            heartbeat: false,
            resource_errors,
        })
    }

    fn heartbeat<R: Resource>(
        sub: &SubStream<Self, R>,
        held: Vec<R>,
        nonce: String,
    ) -> SotwResponse<R> {
        SotwResponse {
            version_info: sub.last_sent_version.clone().unwrap_or_default(),
            nonce,
            resources: held,
            shared: None,
            heartbeat: true,
            resource_errors: Vec::new(),
        }
    }
}

/// Rule S15: a client reconnecting with the version the view still has holds its resources.
///
/// Only trusted for a wildcard subscription of a full-state type, where that version's
/// responses carried every resource. For named subscriptions the client may have asked for a
/// name on the old stream and lost the answer with it; it is sent everything again.
fn resume<R: Resource, V: View<Resource = R> + ?Sized>(
    sub: &mut SotwSubStream<R>,
    version: &str,
    view: &V,
) -> bool {
    let resumable = sub.traits.full_state && sub.subscription.is_wildcard();
    if !resumable || view.version() != version {
        return false;
    }
    sub.tracker.hold_all(view);
    sub.tracker.forced.clear();
    sub.tracker.synced = Some(view.revision());
    sub.responded = true;
    true
}

/// Every subscribed resource that exists, by name, each once (rules S11, S14): for a wildcard
/// with nothing deferred, the view's shared set whole (see [`SotwResponse::shared`]).
///
/// The comparison that came before has recorded every one of them as held: each is either
/// unchanged since the client got it or was just compared and sent.
fn full_state<R: Resource, V: View<Resource = R> + ?Sized>(
    sub: &SotwSubStream<R>,
    view: &V,
) -> (Vec<R>, Option<ResourceSet<R>>) {
    let mut all = Vec::new();
    if sub.subscription.is_wildcard()
        && sub.tracker.deferred.is_empty()
        && let Some(set) = view.resource_set()
    {
        return (all, Some(set).filter(|set| !set.is_empty()));
    }
    if sub.subscription.is_wildcard() {
        match view.resource_set() {
            Some(set) => all.extend(set.iter().cloned()),
            None => view.for_each(&mut |r| all.push(r.clone())),
        }
    } else {
        all.extend(sub.subscription.names().iter().filter_map(|name| view.get(name)));
    }
    // Removals put off (rule O1) stay in the full state, as the client last got them.
    for name in &sub.tracker.deferred {
        if let Some(HeldRef::Sent(r)) = sub.tracker.get(name, &sub.subscription) {
            all.push(r.clone());
        }
    }
    // Stable: of two with one name, the view's (first) stays.
    all.sort_by(|a, b| a.name().cmp(b.name()));
    all.dedup_by(|later, earlier| later.name() == earlier.name());
    (all, None)
}
