//! What a client holds, and the comparison of that with a view: the part SotW and delta share.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub(crate) use crate::held::{Held, HeldMap, HeldRef};
use crate::resource::{Resource, TypeTraits, View};
use crate::subscription::{Subscription, WILDCARD};

/// Whether a response may remove resources now (rule O1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Removals {
    /// Send removals with everything else.
    Send,
    /// Keep removed resources with the client for now; they are looked at again next time.
    Defer,
}

/// The client's side of one sub-stream, and how far the core has compared it with the view.
#[derive(Clone, Debug)]
pub(crate) struct Tracker<R> {
    /// Per subscribed name (or alias, or wildcard-delivered name): what the client holds.
    /// A resource held under its own name costs one handle (see [`HeldMap`]): tens of
    /// thousands of resources per client cost pointers, not copies.
    pub(crate) held: HeldMap<R>,
    /// The held resources that have a TTL, with it: usually few or none, so heartbeat checks
    /// (on every wake of the stream) never walk everything held. Kept by `hold`/`unhold`.
    ttls: BTreeMap<Arc<str>, std::time::Duration>,
    /// Names to send in the next response even if the client holds them (rules S12, D2).
    pub(crate) forced: BTreeSet<String>,
    /// Removals put off by [`Removals::Defer`], to look at again.
    pub(crate) deferred: BTreeSet<String>,
    /// The view revision the held state was last compared at; `None`: compare everything.
    pub(crate) synced: Option<u64>,
}

impl<R> Default for Tracker<R> {
    fn default() -> Self {
        Tracker {
            held: HeldMap::default(),
            ttls: BTreeMap::new(),
            forced: BTreeSet::new(),
            deferred: BTreeSet::new(),
            synced: None,
        }
    }
}

/// The outcome of comparing the client's state with a view. The tracker is already updated as if
/// the response built from it had been sent.
pub(crate) struct Diff<R> {
    /// Resources to send, by resource name, with the aliases they were subscribed by.
    pub(crate) send: BTreeMap<String, (R, BTreeSet<String>)>,
    /// Held names that no longer exist or no longer belong to a wildcard (rule D5).
    pub(crate) removed: Vec<String>,
    /// Explicitly subscribed names that do not exist and that the client was not yet told about
    /// (rule D6), with whether the name was an alias subscription.
    pub(crate) absent: Vec<(String, bool)>,
    /// Subscribed names the client already holds as absent that the view reported as changed:
    /// an error may have been attached to them since (rule C4).
    pub(crate) recheck: Vec<String>,
}

impl<R> Diff<R> {
    pub(crate) fn is_empty(&self) -> bool {
        self.send.is_empty() && self.removed.is_empty() && self.absent.is_empty()
    }
}

impl<R: Resource> Tracker<R> {
    /// Records what the client holds under `key`.
    pub(crate) fn hold(&mut self, key: Arc<str>, held: Held<R>) {
        match &held {
            Held::Sent(r) if r.ttl().is_some() => {
                self.ttls.insert(key.clone(), r.ttl().unwrap_or_default());
            }
            _ => {
                self.ttls.remove(&key);
            }
        }
        self.held.insert(key, held);
    }

    /// Forgets what the client holds under `key`.
    fn unhold(&mut self, key: &str) {
        self.held.remove(key);
        self.ttls.remove(key);
    }

    /// The resources the client holds that have a TTL, by name.
    pub(crate) fn held_with_ttl(&self) -> Vec<R> {
        let mut out = BTreeMap::new();
        for key in self.ttls.keys() {
            if let Some(HeldRef::Sent(r)) = self.held.get(key) {
                out.entry(r.name().to_owned()).or_insert_with(|| r.clone());
            }
        }
        out.into_values().collect()
    }

    /// The shortest TTL among the resources the client holds.
    pub(crate) fn min_ttl(&self) -> Option<std::time::Duration> {
        self.ttls.values().min().copied()
    }

    /// Forgets what the client held under names (and the wildcard, `*`) that left the
    /// subscription: the client drops those itself.
    pub(crate) fn subscription_shrank(&mut self, removed: &[String], sub: &Subscription) {
        for name in removed {
            if name == WILDCARD {
                self.wildcard_left(sub);
            } else {
                self.unsubscribed(name, sub);
            }
        }
    }

    /// What the client holds, by subscribed name: `Some(version)`, or `None` when told absent.
    pub(crate) fn held_versions(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        self.held.iter().map(|(name, held)| (name, held.version()))
    }

    /// Forgets held state for a name that left the subscription (the client drops it itself),
    /// unless a wildcard still covers it.
    fn unsubscribed(&mut self, name: &str, sub: &Subscription) {
        self.forced.remove(name);
        if !sub.is_wildcard() {
            self.unhold(name);
            self.deferred.remove(name);
        }
    }

    /// Forgets what the client holds of every resource a wildcard delivered but no name asked for.
    fn wildcard_left(&mut self, sub: &Subscription) {
        self.held.retain(|name| sub.has_name(name));
        self.ttls.retain(|name, _| sub.has_name(name));
        self.deferred.retain(|name| sub.has_name(name));
    }

    /// Marks subscribed names for resending, whatever the client holds (rule D10: after a
    /// RouteConfiguration change a client's virtual hosts are all resent).
    pub(crate) fn force_where(&mut self, sub: &Subscription, pred: &mut dyn FnMut(&str) -> bool) {
        for name in sub.names() {
            if pred(name) {
                self.forced.insert(name.clone());
            }
        }
    }

    /// Compares what the client holds with `view` for subscription `sub` and records the result as
    /// sent. Looks only at what changed since the last comparison when the view can tell.
    pub(crate) fn diff<V: View<Resource = R> + ?Sized>(
        &mut self,
        sub: &Subscription,
        traits: TypeTraits,
        view: &V,
        removals: Removals,
    ) -> Diff<R> {
        let candidates = self.candidates(sub, traits, view);
        self.deferred.clear();
        let mut diff = Diff {
            send: BTreeMap::new(),
            removed: Vec::new(),
            absent: Vec::new(),
            recheck: Vec::new(),
        };
        for name in candidates {
            self.compare(&name, sub, traits, view, removals, &mut diff);
        }
        self.forced.clear();
        self.synced = Some(view.revision());
        diff
    }

    fn candidates<V: View<Resource = R> + ?Sized>(
        &self,
        sub: &Subscription,
        traits: TypeTraits,
        view: &V,
    ) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        let incremental = match self.synced {
            Some(revision) => view.changed_since(revision, &mut |n| {
                names.insert(n.to_owned());
            }),
            None => false,
        };
        if !incremental {
            names.clear();
            if sub.is_wildcard() {
                view.for_each(&mut |r| {
                    names.insert(r.name().to_owned());
                });
            }
            names.extend(sub.names().iter().cloned());
            names.extend(self.held.keys().map(str::to_owned));
        } else if traits.aliases {
            // An alias resolves through the content of other resources: look at every alias
            // subscription again (VHDS subscriptions are small).
            names.extend(sub.names().iter().cloned());
        }
        names.extend(self.forced.iter().cloned());
        names.extend(self.deferred.iter().cloned());
        names
    }

    fn compare<V: View<Resource = R> + ?Sized>(
        &mut self,
        name: &str,
        sub: &Subscription,
        traits: TypeTraits,
        view: &V,
        removals: Removals,
        diff: &mut Diff<R>,
    ) {
        let explicit = sub.has_name(name);
        let direct = view.get(name);
        let interested = explicit || (sub.is_wildcard() && direct.is_some());
        let found = match direct {
            Some(r) => Some((r, false)),
            None if traits.aliases && explicit => view.resolve_alias(name).map(|r| (r, true)),
            None => None,
        };
        let forced = self.forced.contains(name);
        match found {
            Some((resource, via_alias)) if interested => {
                let held = self.held.get(name);
                let declared = matches!(held, Some(HeldRef::Declared(_)));
                if forced || held.and_then(HeldRef::version) != Some(resource.version()) {
                    let key = if via_alias { Arc::from(name) } else { resource.shared_name() };
                    self.hold(key, Held::Sent(resource.clone()));
                    let entry = diff
                        .send
                        .entry(resource.name().to_owned())
                        .or_insert_with(|| (resource, BTreeSet::new()));
                    if via_alias {
                        entry.1.insert(name.to_owned());
                    }
                } else if declared {
                    // The client declared on reconnect the version it holds (rule D7): from
                    // now on it holds this very resource, which costs a handle, not a copy.
                    let key = if via_alias { Arc::from(name) } else { resource.shared_name() };
                    self.hold(key, Held::Sent(resource));
                }
            }
            Some(_) => {
                // Exists but is no longer of interest: the client drops it on its own.
                self.unhold(name);
            }
            None => match self.held.get(name) {
                // Rule O1 puts a removal off, unless the client just (re)subscribed to the name
                // (rules D2, S12): it waits for that answer, and ordering must never hold back
                // what a client waits for (rule O2).
                Some(HeldRef::Sent(_) | HeldRef::Declared(_))
                    if removals == Removals::Defer && !forced =>
                {
                    self.deferred.insert(name.to_owned());
                }
                Some(HeldRef::Sent(_) | HeldRef::Declared(_)) => {
                    diff.removed.push(name.to_owned());
                    if explicit {
                        self.hold(Arc::from(name), Held::Absent);
                    } else {
                        self.unhold(name);
                    }
                }
                Some(HeldRef::Absent) if !forced => diff.recheck.push(name.to_owned()),
                _ if explicit => {
                    self.hold(Arc::from(name), Held::Absent);
                    diff.absent.push((name.to_owned(), traits.aliases));
                }
                _ => {}
            },
        }
    }
}
