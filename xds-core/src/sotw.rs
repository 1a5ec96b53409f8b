//! The state-of-the-world (SotW) variant: what a SotW request means and how its responses look.

use crate::digest::NamesDigest;
use crate::message::{AddedNames, Handled, RequestKind, SotwNames, SotwRequest, SotwResponse};
use crate::nonce::Nonces;
use crate::resource::{Resource, ResourceSet, View};
use crate::subscription::Change;
use crate::substream::{Protocol, Sotw, SotwSubStream, SubStream};
use crate::tracker::HeldRef;

impl Protocol for Sotw {
    type Request = SotwRequest;
    type Response<R: Resource> = SotwResponse<R>;

    fn handle<R: Resource>(sub: &mut SubStream<Self, R>, mut request: SotwRequest) -> Handled {
        let mut kind = sub.flow.classify(
            &mut request.response_nonce,
            request.error_detail.as_ref(),
            &mut request.version_info,
        );
        if kind == RequestKind::Spontaneous && sub.flow.last_nonce.is_some() {
            // Rule S7: a SotW request always names the latest nonce it saw; one without is stale.
            kind = RequestKind::Stale { nonce: crate::Text::new() };
        }
        match &kind {
            // Rule S7: a stale request changes nothing.
            RequestKind::Stale { .. } => {
                return Handled {
                    kind,
                    subscribed: AddedNames::default(),
                    unsubscribed: Vec::new(),
                };
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
            SotwNames::Found(set, digest) if sub.naming.admits_as_listed(&request.denied) => {
                // Plain names, none refused: the naming keeps nothing of them (as
                // `admit_sotw` does for such a list), and the set is taken whole.
                sub.listed = Some(digest);
                sub.naming.admit_sotw(Vec::new(), &request.denied);
                let change = sub.subscription.apply_sotw_set(&set);
                return finish(sub, kind, change);
            }
            // Some name is refused: each goes through the naming as if listed.
            SotwNames::Found(set, digest) => {
                sub.listed = Some(digest);
                set.iter().map(str::to_owned).collect()
            }
            // The list taken in last time, taken in again: the subscription, the refused names
            // and the client's spellings would come out as they are (every step below is
            // idempotent), so there is nothing to do.
            SotwNames::Repeated if sub.listed.is_some() => {
                sub.quiet_request = true;
                return Handled {
                    kind,
                    subscribed: AddedNames::default(),
                    unsubscribed: Vec::new(),
                };
            }
            SotwNames::Repeated => {
                sub.listed = Some(NamesDigest::default());
                Vec::new()
            }
        };
        // Rule C1: every name is normalized once, here; refused names go no further.
        let names = sub.naming.admit_sotw(names, &request.denied);
        let change = sub.subscription.apply_sotw(names, first, sub.traits.wildcard_capable);
        finish(sub, kind, change)
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
        // A SotW response removes only by leaving a resource out of a full state (rule S11).
        let untold_removals = !sub.traits.full_state;
        let (diff, resource_errors) = sub.diff(view, defer_removals, untold_removals);
        let owed_first =
            !sub.responded && (sub.traits.full_state || sub.subscription.is_wildcard());
        let mut version_info = None;
        let (resources, shared) = if sub.traits.full_state {
            if diff.is_empty() && resource_errors.is_empty() && !owed_first {
                return None;
            }
            let (resources, shared, interim) = full_state(sub, view);
            version_info = interim;
            (resources, shared)
        } else {
            let shared = diff.whole.filter(|set| !set.is_empty());
            if shared.is_none() && diff.send.is_empty() && resource_errors.is_empty() && !owed_first
            {
                return None;
            }
            (diff.send.into_iter().map(|(resource, _)| resource).collect(), shared)
        };
        let mut resource_errors = resource_errors;
        crate::naming::drop_sent(&mut resource_errors, |name| {
            resources.binary_search_by(|r| r.name().cmp(name)).is_ok()
                || shared.as_ref().is_some_and(|set| set.get(name).is_some())
        });
        Some(SotwResponse {
            version_info: version_info.map_or_else(|| view.version(), crate::Text::from),
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
        nonce: crate::Text,
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
    if !resumable || view.version() != *version {
        return false;
    }
    sub.tracker.resume_at(view);
    sub.responded = true;
    true
}

/// Every subscribed resource that exists, by name, each once (rules S11, S14): for a wildcard
/// with nothing deferred, the view's shared set whole (see [`SotwResponse::shared`]). With
/// removals put off (rule O1), also the resources they keep with the client, and the version
/// of that interim state ([`interim_version`]).
///
/// The comparison that came before has recorded every one of them as held: each is either
/// unchanged since the client got it or was just compared and sent.
fn full_state<R: Resource, V: View<Resource = R> + ?Sized>(
    sub: &SotwSubStream<R>,
    view: &V,
) -> (Vec<R>, Option<ResourceSet<R>>, Option<String>) {
    let mut all = Vec::new();
    if sub.subscription.is_wildcard()
        && sub.tracker.deferred().is_empty()
        && let Some(set) = view.resource_set()
    {
        return (all, Some(set).filter(|set| !set.is_empty()), None);
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
    let mut kept = Vec::new();
    for name in sub.tracker.deferred() {
        if let Some(HeldRef::Sent(r)) = sub.tracker.get(name, &sub.subscription)
            && view.get(name).is_none()
        {
            kept.push(r.clone());
        }
    }
    let interim = (!kept.is_empty()).then(|| interim_version(&view.version(), &kept));
    all.extend(kept);
    // Stable: of two with one name, the view's (first) stays.
    all.sort_by(|a, b| a.name().cmp(b.name()));
    all.dedup_by(|later, earlier| later.name() == earlier.name());
    (all, None, interim)
}

/// The version of a full-state answer that keeps removed resources with the client for now
/// (rule O1): the view's version, `+`, and a hash of the names and versions kept, in name order.
///
/// Rule S16: the interim answer and the final one (the view's resources only) differ, so their
/// versions must. Were they the same, a client that got the interim answer and reconnected with
/// its version (rule S15) would be taken to hold the final state and be sent nothing: it would
/// keep the removed resources until some later change. With its own version, that client is
/// sent the full state again; a client that got the final answer still resumes with nothing
/// sent. The version comes from the content alone (the view's version is a content hash on the
/// caches), so every replica names one interim state alike; and the caches' versions are hex
/// digits only, so one with this suffix never names a final state.
pub(crate) fn interim_version<R: Resource>(version: &str, kept: &[R]) -> String {
    let mut bytes = Vec::new();
    for r in kept {
        bytes.extend_from_slice(r.name().as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(r.version().as_bytes());
        bytes.push(0);
    }
    // 64 bits are plenty to tell apart the interim states of one final version.
    let hash = crate::digest::hash(&bytes) as u64;
    format!("{version}+{hash:016x}")
}

/// What a change of a SotW subscription does to what the client is owed.
fn finish<R: Resource>(sub: &mut SotwSubStream<R>, kind: RequestKind, change: Change) -> Handled {
    if change.wildcard_joined() {
        sub.tracker.resync();
    }
    sub.tracker.subscription_grew(&change, &sub.subscription);
    // Rule S12: newly requested names are sent even if sent before. A client that holds nothing
    // and was never compared is sent everything it subscribes to at its first comparison: there
    // is nothing to mark, and a joining proxy's 10,000 names cost no lookup each (as for delta).
    if sub.tracker.has_compared() || !sub.tracker.holds_nothing() {
        for name in change.added_names() {
            sub.tracker.force(name, &sub.subscription);
        }
    }
    sub.tracker.subscription_shrank(&change, &sub.subscription);
    let (subscribed, unsubscribed) = change.into_names();
    Handled { kind, subscribed, unsubscribed }
}
