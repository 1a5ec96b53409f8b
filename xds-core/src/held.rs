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
    own: Own<R>,
    /// Everything else: resources held under an alias, declared versions, absent names.
    other: BTreeMap<Arc<str>, Held<R>>,
}

impl<R> Default for HeldMap<R> {
    fn default() -> Self {
        HeldMap { own: Own::Few(Vec::new()), other: BTreeMap::new() }
    }
}

impl<R: Resource> HeldMap<R> {
    pub(crate) fn get(&self, name: &str) -> Option<HeldRef<'_, R>> {
        match self.own.get(name) {
            Some(r) => Some(HeldRef::Sent(r)),
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
                self.own.replace(r);
            }
            held => {
                self.own.remove(&name);
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
        self.own.retain(|r| keep(r.name()));
        self.other.retain(|name, _| keep(name));
    }

    /// Keeps the entries for which `keep` says so.
    pub(crate) fn retain_held(&mut self, mut keep: impl FnMut(HeldRef<'_, R>) -> bool) {
        self.own.retain(|r| keep(HeldRef::Sent(r)));
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
            own: self.own.iter().map(|r| (r.name(), HeldRef::Sent(r))).peekable(),
            other: self.other.iter().map(|(n, h)| (&**n, h.as_ref())).peekable(),
        }
    }
}

/// Resources held under their own name, in name order: a sorted list while they are few, a
/// B-tree once many.
///
/// An up-to-date client keeps here only the changes it took since its base (about the tracker's
/// `REBASE_AFTER`, and none after each rebase), one more per update: the list finds,
/// inserts and removes by moving a few pointers, where the B-tree walked, split and freed nodes
/// (per client and update, 540 instructions to insert the change, and as much again to remove
/// it at the next rebase). A client without a base (a view with no shared set) holds every
/// resource here: 10,000 of them take the B-tree, whose insertion does not move them all.
#[derive(Clone, Debug)]
enum Own<R> {
    Few(Vec<ByName<R>>),
    Many(BTreeSet<ByName<R>>),
}

/// The most resources [`Own::Few`] holds; it is taken again at half as many, so that a size
/// near the bound does not move them back and forth.
const FEW: usize = 64;

/// Where `name` is in a sorted list of [`Own::Few`], or where it would go.
fn position<R: Resource>(few: &[ByName<R>], name: &str) -> Result<usize, usize> {
    few.binary_search_by(|r| r.0.name().cmp(name))
}

impl<R: Resource> Own<R> {
    fn get(&self, name: &str) -> Option<&R> {
        match self {
            Own::Few(few) => position(few, name).ok().map(|i| &few[i].0),
            Own::Many(many) => many.get(name).map(|r| &r.0),
        }
    }

    fn len(&self) -> usize {
        match self {
            Own::Few(few) => few.len(),
            Own::Many(many) => many.len(),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Holds `r`, in place of a resource of its name.
    fn replace(&mut self, r: R) {
        match self {
            Own::Few(few) => match position(few, r.name()) {
                Ok(i) => few[i] = ByName(r),
                Err(i) if few.len() < FEW => few.insert(i, ByName(r)),
                Err(_) => {
                    let mut many: BTreeSet<_> = std::mem::take(few).into_iter().collect();
                    many.insert(ByName(r));
                    *self = Own::Many(many);
                }
            },
            Own::Many(many) => {
                many.replace(ByName(r));
            }
        }
    }

    /// Whether a resource of `name` was held (it no longer is).
    fn remove(&mut self, name: &str) -> bool {
        let removed = match self {
            Own::Few(few) => match position(few, name) {
                Ok(i) => {
                    few.remove(i);
                    true
                }
                Err(_) => false,
            },
            Own::Many(many) => many.remove(name),
        };
        if removed {
            self.settle();
        }
        removed
    }

    fn retain(&mut self, mut keep: impl FnMut(&R) -> bool) {
        match self {
            Own::Few(few) => few.retain(|r| keep(&r.0)),
            Own::Many(many) => many.retain(|r| keep(&r.0)),
        }
        self.settle();
    }

    /// A list again once few (a rebase took most of them), and no room kept once empty: every
    /// type of every connected client has one.
    fn settle(&mut self) {
        match self {
            Own::Many(many) if many.len() <= FEW / 2 => {
                *self = Own::Few(std::mem::take(many).into_iter().collect());
            }
            Own::Few(few) if few.is_empty() && few.capacity() > 0 => *few = Vec::new(),
            _ => {}
        }
    }

    fn iter(&self) -> impl Iterator<Item = &R> {
        let (few, many) = match self {
            Own::Few(few) => (Some(few.iter()), None),
            Own::Many(many) => (None, Some(many.iter())),
        };
        few.into_iter().flatten().chain(many.into_iter().flatten()).map(|r| &r.0)
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

    /// Resources held under their own names are kept in a list while few, in a B-tree beyond
    /// [`FEW`], and in a list again at half as many; every lookup, replacement and the order are
    /// the same whichever holds them, and an emptied list keeps no room.
    #[test]
    fn own_resources_move_between_a_list_and_a_tree_with_their_count() {
        let names: Vec<&'static str> = (0..FEW * 2)
            .map(|i| &*Box::leak(format!("n{:03}", (i * 37) % (FEW * 2)).into()))
            .collect();
        let mut held = HeldMap::default();
        let is_few = |held: &HeldMap<Res>| matches!(held.own, Own::Few(_));
        for (i, name) in names.iter().enumerate() {
            held.insert((*name).into(), Held::Sent(Res(name, "1")));
            assert_eq!(is_few(&held), i < FEW, "{} held", i + 1);
        }
        let mut sorted = names.clone();
        sorted.sort();
        let order =
            |held: &HeldMap<Res>| held.iter().map(|(n, _)| n.to_owned()).collect::<Vec<_>>();
        assert_eq!(order(&held), sorted);
        held.insert(names[3].into(), Held::Sent(Res(names[3], "2")));
        assert_eq!(
            held.get(names[3]).and_then(HeldRef::version),
            Some("2"),
            "replaced in the tree"
        );
        assert_eq!(held.len(), FEW * 2);

        // Down to half as many: a list again, in order, with what it held.
        held.retain(|n| sorted.iter().position(|s| *s == n).is_some_and(|i| i < FEW / 2));
        assert!(is_few(&held));
        assert_eq!(order(&held), sorted[..FEW / 2]);
        held.insert(sorted[0].into(), Held::Sent(Res(sorted[0], "3")));
        assert_eq!(
            held.get(sorted[0]).and_then(HeldRef::version),
            Some("3"),
            "replaced in the list"
        );
        assert!(held.get(sorted[FEW]).is_none());

        for name in &sorted[..FEW / 2] {
            held.remove(name);
        }
        assert!(held.is_empty());
        assert!(matches!(&held.own, Own::Few(few) if few.capacity() == 0), "no room kept");
    }

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
