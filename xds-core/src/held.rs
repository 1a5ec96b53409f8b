//! What a client holds, by name, stored compactly.
//!
//! Nearly every entry is "the client holds resource R under R's own name": a server streaming
//! 10,000 clusters and 10,000 endpoint assignments to each of 1,000 clients keeps 20 million
//! such entries. Those are stored as the resource handle alone, in a set ordered by the
//! resource's name (one pointer per entry with the caches' handles). Everything else (an alias
//! subscription, a version declared on reconnect, a name known to be absent) goes in a map.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::iter::Peekable;
use std::sync::Arc;

use crate::resource::Resource;

/// What the client holds under one subscribed name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Held<R> {
    /// The resource as it was sent. Keeping the handle (a pointer) costs less than a copy of its
    /// version string and lets a removal be put off while the resource is still in use (rule O1).
    Sent(R),
    /// A version the client declared on reconnect (rule D7), of a resource this stream never sent.
    Declared(Box<str>),
    /// The client was told (delta) or may conclude (SotW full state) that the name does not exist.
    Absent,
    /// The client does not hold the name, whatever the tracker's shared base says (see
    /// `Tracker::base`): an exception to the base, not a fact told to the client.
    Dropped,
}

/// A borrowed [`Held`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HeldRef<'a, R> {
    Sent(&'a R),
    Declared(&'a str),
    Absent,
    Dropped,
}

impl<R> Clone for HeldRef<'_, R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R> Copy for HeldRef<'_, R> {}

impl<'a, R: Resource> HeldRef<'a, R> {
    /// The version held, `None` when the client holds the name as absent.
    pub(crate) fn version(self) -> Option<&'a str> {
        match self {
            HeldRef::Sent(r) => Some(r.version()),
            HeldRef::Declared(v) => Some(v),
            HeldRef::Absent | HeldRef::Dropped => None,
        }
    }
}

impl<R> Held<R> {
    fn as_ref(&self) -> HeldRef<'_, R> {
        match self {
            Held::Sent(r) => HeldRef::Sent(r),
            Held::Declared(v) => HeldRef::Declared(v),
            Held::Absent => HeldRef::Absent,
            Held::Dropped => HeldRef::Dropped,
        }
    }
}

/// A resource ordered, compared and looked up by its name.
#[derive(Clone, Debug)]
struct ByName<R>(R);

impl<R: Resource> PartialEq for ByName<R> {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name()
    }
}

impl<R: Resource> Eq for ByName<R> {}

impl<R: Resource> PartialOrd for ByName<R> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<R: Resource> Ord for ByName<R> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.name().cmp(other.0.name())
    }
}

impl<R: Resource> Borrow<str> for ByName<R> {
    fn borrow(&self) -> &str {
        self.0.name()
    }
}

/// Held state by name. A name is in at most one of the two collections.
#[derive(Clone, Debug)]
pub(crate) struct HeldMap<R> {
    /// Resources held under their own name.
    own: BTreeSet<ByName<R>>,
    /// Everything else: resources held under an alias, declared versions, absent names.
    other: BTreeMap<Arc<str>, Held<R>>,
}

impl<R> Default for HeldMap<R> {
    fn default() -> Self {
        HeldMap { own: BTreeSet::new(), other: BTreeMap::new() }
    }
}

impl<R: Resource> HeldMap<R> {
    pub(crate) fn get(&self, name: &str) -> Option<HeldRef<'_, R>> {
        match self.own.get(name) {
            Some(r) => Some(HeldRef::Sent(&r.0)),
            None => self.other.get(name).map(Held::as_ref),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.own.len() + self.other.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.own.is_empty() && self.other.is_empty()
    }

    /// Records `held` under `name`, replacing what was there.
    pub(crate) fn insert(&mut self, name: Arc<str>, held: Held<R>) {
        match held {
            Held::Sent(r) if r.name() == &*name => {
                self.other.remove(&*name);
                self.own.replace(ByName(r));
            }
            held => {
                self.own.remove(&*name);
                self.other.insert(name, held);
            }
        }
    }

    pub(crate) fn remove(&mut self, name: &str) {
        if !self.own.remove(name) {
            self.other.remove(name);
        }
    }

    /// Keeps the names for which `keep` says so.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.own.retain(|r| keep(r.0.name()));
        self.other.retain(|name, _| keep(name));
    }

    /// Keeps the entries for which `keep` says so.
    pub(crate) fn retain_held(&mut self, mut keep: impl FnMut(HeldRef<'_, R>) -> bool) {
        self.own.retain(|r| keep(HeldRef::Sent(&r.0)));
        self.other.retain(|_, held| keep(held.as_ref()));
    }

    /// Records declared versions (rule D7), in name order. Into an empty map (a new stream's
    /// first request, always) they are built in one pass, not inserted one by one: a resuming
    /// proxy declares 10,000 names per type.
    pub(crate) fn declare(&mut self, declared: impl Iterator<Item = (Arc<str>, Box<str>)>) {
        if self.is_empty() {
            self.other = declared.map(|(name, version)| (name, Held::Declared(version))).collect();
        } else {
            for (name, version) in declared {
                self.insert(name, Held::Declared(version));
            }
        }
    }

    /// Forgets every declared version (rule D7): once a resumed client's declarations were
    /// compared, what matched the base is held through it.
    pub(crate) fn drop_declared(&mut self) {
        self.other.retain(|_, held| !matches!(held, Held::Declared(_)));
    }

    /// Every entry, in name order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, HeldRef<'_, R>)> {
        Merge {
            own: self.own.iter().map(|r| (r.0.name(), HeldRef::Sent(&r.0))).peekable(),
            other: self.other.iter().map(|(n, h)| (&**n, h.as_ref())).peekable(),
        }
    }
}

/// Two name-ordered iterators over disjoint names, merged in name order.
struct Merge<A: Iterator, B: Iterator> {
    own: Peekable<A>,
    other: Peekable<B>,
}

impl<'a, R: 'a, A, B> Iterator for Merge<A, B>
where
    A: Iterator<Item = (&'a str, HeldRef<'a, R>)>,
    B: Iterator<Item = (&'a str, HeldRef<'a, R>)>,
{
    type Item = (&'a str, HeldRef<'a, R>);

    fn next(&mut self) -> Option<Self::Item> {
        match (self.own.peek(), self.other.peek()) {
            (Some((a, _)), Some((b, _))) if b < a => self.other.next(),
            (Some(_), _) => self.own.next(),
            (None, _) => self.other.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::TestRes as Res;

    #[test]
    fn a_name_lives_in_one_place_and_iteration_is_in_name_order() {
        let mut held = HeldMap::default();
        held.insert("b".into(), Held::Sent(Res("b", "1")));
        held.insert("alias".into(), Held::Sent(Res("vh", "1")));
        held.insert("c".into(), Held::Declared("7".into()));
        held.insert("a".into(), Held::Absent);
        held.insert("d".into(), Held::Sent(Res("d", "2")));

        let all: Vec<_> = held.iter().map(|(n, h)| (n, h.version())).collect();
        assert_eq!(
            all,
            [
                ("a", None),
                ("alias", Some("1")),
                ("b", Some("1")),
                ("c", Some("7")),
                ("d", Some("2"))
            ]
        );
        assert_eq!(held.get("alias"), Some(HeldRef::Sent(&Res("vh", "1"))));

        // A declared version replaced by the resource itself moves to the compact set, and back.
        held.insert("c".into(), Held::Sent(Res("c", "7")));
        assert_eq!(held.get("c"), Some(HeldRef::Sent(&Res("c", "7"))));
        held.insert("b".into(), Held::Absent);
        assert_eq!(held.get("b"), Some(HeldRef::Absent));
        assert_eq!(held.iter().map(|(n, _)| n).collect::<Vec<_>>(), ["a", "alias", "b", "c", "d"]);

        held.remove("c");
        held.remove("b");
        held.retain(|n| n != "d");
        assert_eq!(held.iter().map(|(n, _)| n).collect::<Vec<_>>(), ["a", "alias"]);
        assert!(held.get("alias").is_some() && held.get("d").is_none());
    }
}
