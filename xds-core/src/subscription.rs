//! A sub-stream's subscription: the names it asked for and whether it is a wildcard.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Weak};

use crate::xdstp::is_glob_name;

/// The name that subscribes to every resource of a wildcard-capable type (rule S10).
pub const WILDCARD: &str = "*";

/// How a subscription takes in every resource of its type (rules S10, D8).
///
/// ```text
///            first request with no names
///   (start) ───────────────────────────────► Legacy ──┐ later request with no names: stays
///      │                                       │ ◄────┘
///      │ names with `*`                        │ names without `*`
///      ▼                                       ▼
///   Explicit ◄──────── names with `*` ─────── None
///      │                                       ▲
///      └──────────── names without `*` ────────┘ (SotW), or `*` unsubscribed (delta)
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Wildcard {
    /// Only the named resources.
    #[default]
    None,
    /// The first request named nothing: the legacy wildcard.
    Legacy,
    /// The client named `*`, perhaps with other names.
    Explicit,
}

/// The names one sub-stream subscribes to, and its wildcard state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subscription {
    wildcard: Wildcard,
    /// Shared with every other subscription of the same names (see [`share`]), copied on the
    /// first change: a thousand proxies asking for the same 10,000 endpoint names keep one set.
    names: Arc<BTreeSet<String>>,
    /// The wrapping sum of a 128-bit hash of each name: recognises a SotW request that repeats
    /// the set (as every ACK does) in one pass over its bytes, without a lookup per name.
    digest: u128,
    /// Glob collections (rule C2, delta only), normal forms: each covers every resource that is
    /// its member. Kept apart from `names`, so that every path over explicit names (and a
    /// subscription without globs) is as it was; shared like `names`, as a proxy with LEDS
    /// subscribes to one glob per locality of every cluster.
    globs: Arc<BTreeSet<String>>,
    /// `digest` of `globs`.
    glob_digest: u128,
}

/// A 128-bit hash of a name ([`crate::digest::hash`]).
fn name_hash(name: &str) -> u128 {
    crate::digest::hash(name.as_bytes())
}

fn digest<'a>(names: impl Iterator<Item = &'a String>) -> u128 {
    names.fold(0u128, |acc, n| acc.wrapping_add(name_hash(n)))
}

/// Name sets smaller than this are not worth sharing.
const MIN_SHARED: usize = 64;

/// Name sets by digest and size.
type Sets = HashMap<(u128, usize), Weak<BTreeSet<String>>>;

/// The name sets of live subscriptions, for [`share`].
static SHARED: Mutex<Option<Sets>> = Mutex::new(None);

/// The set of live subscriptions equal to `names`, if there is one, else `names` itself, which
/// later subscriptions of the same names will share.
///
/// Process-wide: the core has no other place that every stream sees, and the table is only a
/// memory optimisation (a miss or a digest collision costs sharing, never correctness: sets are
/// compared in full before one replaces another). Dead entries are swept as the table grows, so it
/// holds about as many entries as there are distinct large subscriptions.
fn share(names: Arc<BTreeSet<String>>, digest: u128) -> Arc<BTreeSet<String>> {
    if names.len() < MIN_SHARED {
        return names;
    }
    let key = (digest, names.len());
    let existing = {
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        let table = shared.get_or_insert_default();
        match table.get(&key).and_then(Weak::upgrade) {
            Some(existing) => existing,
            None => {
                if table.len() >= 64 && table.len().is_power_of_two() {
                    table.retain(|_, set| set.strong_count() > 0);
                }
                table.insert(key, Arc::downgrade(&names));
                return names;
            }
        }
    };
    // Compared outside the lock: O(n), and other streams need not wait for it.
    if Arc::ptr_eq(&existing, &names) || *existing == *names { existing } else { names }
}

/// The live set shared by other subscriptions that is equal to `names` (with `digest` as
/// [`share`] keys it), found without building a set of `names`: a thousand proxies subscribing to
/// the same 10,000 names in one request then build one set between them. The names are put in
/// order by reference (no string is copied) when the client did not send them in order.
fn shared_equal(mut names: Vec<&String>, digest: u128) -> Option<Arc<BTreeSet<String>>> {
    if names.len() < MIN_SHARED {
        return None;
    }
    let existing = {
        let shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        shared.as_ref()?.get(&(digest, names.len())).and_then(Weak::upgrade)?
    };
    // Compared outside the lock, as in `share`. A list with a name twice is never equal to a
    // set of its length.
    if !names.is_sorted() {
        names.sort_unstable();
    }
    (existing.len() == names.len() && existing.iter().zip(&names).all(|(e, n)| e == *n))
        .then_some(existing)
}

/// The names a subscription change added and removed. When the wildcard joins or leaves, its
/// marker `*` comes first in `added` or `removed`, before the names in order. (A type without a
/// wildcard may have a resource named `*`: that is an ordinary name, in its sorted place.)
#[derive(Debug, Default)]
pub(crate) struct Change {
    pub(crate) added: Vec<String>,
    pub(crate) removed: Vec<String>,
    wildcard_joined: bool,
    wildcard_left: bool,
}

impl Change {
    /// Whether the wildcard joined the subscription with this change.
    pub(crate) fn wildcard_joined(&self) -> bool {
        self.wildcard_joined
    }

    /// Whether the wildcard left the subscription with this change.
    pub(crate) fn wildcard_left(&self) -> bool {
        self.wildcard_left
    }

    /// The names added, without the wildcard's marker, in order.
    pub(crate) fn added_names(&self) -> &[String] {
        &self.added[usize::from(self.wildcard_joined)..]
    }

    /// The names removed, without the wildcard's marker, in order.
    pub(crate) fn removed_names(&self) -> &[String] {
        &self.removed[usize::from(self.wildcard_left)..]
    }

    /// Puts the wildcard's marker first in `added` or `removed` when the wildcard joined or left.
    fn mark_wildcard(&mut self, was: bool, is: bool) {
        match (was, is) {
            (false, true) => {
                self.added.insert(0, WILDCARD.to_owned());
                self.wildcard_joined = true;
            }
            (true, false) => {
                self.removed.insert(0, WILDCARD.to_owned());
                self.wildcard_left = true;
            }
            _ => {}
        }
    }
}

impl Subscription {
    /// The wildcard state.
    pub fn wildcard(&self) -> Wildcard {
        self.wildcard
    }

    /// Whether every resource of the type is subscribed.
    pub fn is_wildcard(&self) -> bool {
        self.wildcard != Wildcard::None
    }

    /// The explicitly subscribed names (without `*`), sorted.
    pub fn names(&self) -> &BTreeSet<String> {
        &self.names
    }

    /// Whether `name` is explicitly subscribed.
    pub fn has_name(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// The subscribed glob collections (rule C2), normal forms, sorted.
    pub fn globs(&self) -> &BTreeSet<String> {
        &self.globs
    }

    /// Whether the glob collection `glob` (normal form) is subscribed.
    pub fn has_glob(&self, glob: &str) -> bool {
        self.globs.contains(glob)
    }

    /// Whether `name` is a member of a subscribed glob collection (rule C2). Free for a
    /// subscription without globs; otherwise one string split and one lookup.
    pub fn in_glob(&self, name: &str) -> bool {
        !self.globs.is_empty()
            && crate::xdstp::collection_of(name).is_some_and(|glob| self.globs.contains(&glob))
    }

    /// Whether the subscription wants the resource `name`: by the wildcard, by name, or as a
    /// member of a subscribed glob.
    pub fn covers(&self, name: &str) -> bool {
        self.is_wildcard() || self.names.contains(name) || self.in_glob(name)
    }

    /// Whether nothing is subscribed (rule S9: an empty set means no interest).
    pub fn is_empty(&self) -> bool {
        !self.is_wildcard() && self.names.is_empty() && self.globs.is_empty()
    }

    /// Replaces the subscription with a SotW request's full set (rules S8, S9, S10).
    ///
    /// SotW clients repeat the whole set with every ACK (10,000 names for the endpoints of a
    /// large mesh): an unchanged set is recognised without copying or rebuilding anything, and a
    /// changed one takes the request's strings without copying them.
    pub(crate) fn apply_sotw(
        &mut self,
        names: Vec<String>,
        first: bool,
        wildcard_capable: bool,
    ) -> Change {
        let stars =
            if wildcard_capable { names.iter().filter(|n| *n == WILDCARD).count() } else { 0 };
        let wildcard = if !wildcard_capable {
            Wildcard::None
        } else if stars > 0 {
            Wildcard::Explicit
        } else if names.is_empty() && (first || self.wildcard == Wildcard::Legacy) {
            Wildcard::Legacy
        } else {
            Wildcard::None
        };
        // The same set again (a list with duplicates has another length or digest and takes
        // the slow path, which is equally correct).
        let unchanged = wildcard == self.wildcard
            && names.len() - stars == self.names.len()
            && digest(names.iter().filter(|n| !(stars > 0 && *n == WILDCARD))) == self.digest;
        if unchanged {
            return Change::default();
        }
        let before = self.clone();
        self.wildcard = wildcard;
        let names: BTreeSet<String> =
            names.into_iter().filter(|n| !(wildcard_capable && n == WILDCARD)).collect();
        self.digest = digest(names.iter());
        self.names = share(Arc::new(names), self.digest);
        self.change_from(&before)
    }

    /// Applies a delta request's subscribe and unsubscribe lists (rules D2, D3, D8).
    pub(crate) fn apply_delta(
        &mut self,
        subscribe: &[String],
        unsubscribe: &[String],
        first: bool,
        wildcard_capable: bool,
    ) -> Change {
        // Worked out name by name: an ACK (no lists) or a one-name change costs nothing like
        // the size of the subscription.
        let was_wildcard = self.is_wildcard();
        let mut change = Change::default();
        if wildcard_capable && first && subscribe.is_empty() {
            self.wildcard = Wildcard::Legacy;
        }
        if self.names.is_empty() && subscribe.len() >= MIN_SHARED {
            // A first large subscription (a proxy asking for every cluster's endpoints) is built
            // in one go, as a bulk-loaded tree, rather than name by name; or, when another
            // subscription has the same names, not built at all.
            let plain: Vec<&String> = subscribe
                .iter()
                .filter(|name| !(is_glob_name(name) || (wildcard_capable && *name == WILDCARD)))
                .collect();
            let listed = digest(plain.iter().copied());
            match shared_equal(plain.clone(), listed) {
                Some(shared) => {
                    self.names = shared;
                    self.digest = listed;
                }
                None => {
                    let names: BTreeSet<String> = plain.into_iter().cloned().collect();
                    self.digest = digest(names.iter());
                    self.names = Arc::new(names);
                }
            }
            change.added.extend(self.names.iter().cloned());
            if wildcard_capable && subscribe.iter().any(|name| name == WILDCARD) {
                self.wildcard = Wildcard::Explicit;
            }
            for glob in subscribe.iter().filter(|name| is_glob_name(name)) {
                self.add_glob(glob, &mut change);
            }
        } else {
            for name in subscribe {
                if wildcard_capable && name == WILDCARD {
                    self.wildcard = Wildcard::Explicit;
                } else if is_glob_name(name) {
                    self.add_glob(name, &mut change);
                } else if !self.names.contains(name) {
                    Arc::make_mut(&mut self.names).insert(name.clone());
                    self.digest = self.digest.wrapping_add(name_hash(name));
                    change.added.push(name.clone());
                }
            }
        }
        // Legacy wildcard ends once the client names resources without `*` (rule S10).
        if self.wildcard == Wildcard::Legacy && !subscribe.is_empty() && !first {
            self.wildcard = Wildcard::None;
        }
        for name in unsubscribe {
            if wildcard_capable && name == WILDCARD {
                self.wildcard = Wildcard::None;
            } else if self.globs.contains(name) {
                Arc::make_mut(&mut self.globs).remove(name);
                self.glob_digest = self.glob_digest.wrapping_sub(name_hash(name));
                match change.added.iter().position(|n| n == name) {
                    Some(i) => drop(change.added.swap_remove(i)),
                    None => change.removed.push(name.clone()),
                }
            } else if self.names.contains(name) {
                Arc::make_mut(&mut self.names).remove(name);
                self.digest = self.digest.wrapping_sub(name_hash(name));
                // Subscribed and unsubscribed in one request: no change at all.
                match change.added.iter().position(|n| n == name) {
                    Some(i) => drop(change.added.swap_remove(i)),
                    None => change.removed.push(name.clone()),
                }
            }
        }
        change.added.sort();
        change.removed.sort();
        if change.added.len() + change.removed.len() >= MIN_SHARED {
            self.names = share(std::mem::take(&mut self.names), self.digest);
            self.globs = share(std::mem::take(&mut self.globs), self.glob_digest);
        }
        change.mark_wildcard(was_wildcard, self.is_wildcard());
        change
    }

    /// Adds a glob collection (rule C2) to the subscription, recording it in `change`.
    fn add_glob(&mut self, glob: &str, change: &mut Change) {
        if !self.globs.contains(glob) {
            Arc::make_mut(&mut self.globs).insert(glob.to_owned());
            self.glob_digest = self.glob_digest.wrapping_add(name_hash(glob));
            change.added.push(glob.to_owned());
        }
    }

    fn change_from(&self, before: &Subscription) -> Change {
        let mut change = Change {
            added: self.names.difference(&before.names).cloned().collect(),
            removed: before.names.difference(&self.names).cloned().collect(),
            ..Change::default()
        };
        change.mark_wildcard(before.is_wildcard(), self.is_wildcard());
        change
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn subscriptions_of_the_same_many_names_share_one_set_until_one_changes() {
        let many: Vec<String> = (0..1_000).map(|i| format!("cluster-{i:05}")).collect();
        let mut reversed = many.clone();
        reversed.reverse();
        let (mut a, mut b, mut c) =
            (Subscription::default(), Subscription::default(), Subscription::default());
        a.apply_delta(&many, &[], true, false);
        b.apply_delta(&reversed, &[], true, false);
        c.apply_sotw(many.clone(), true, false);
        assert!(Arc::ptr_eq(&a.names, &b.names) && Arc::ptr_eq(&a.names, &c.names));
        // Taken from the shared set without building one: with the wildcard among the names,
        // and not with a name twice (a list of the set's length that is not the set).
        let mut starred = reversed.clone();
        starred.insert(500, WILDCARD.to_owned());
        let mut twice = many.clone();
        twice[7] = twice[8].clone();
        let (mut w, mut t) = (Subscription::default(), Subscription::default());
        w.apply_delta(&starred, &[], true, true);
        t.apply_delta(&twice, &[], true, false);
        assert!(Arc::ptr_eq(&a.names, &w.names) && w.is_wildcard() && w.digest == a.digest);
        assert!(!Arc::ptr_eq(&a.names, &t.names) && t.names().len() == 999);

        // A change copies the set for the one that changed, and leaves the others as they were.
        b.apply_delta(&names(&["extra"]), &names(&["cluster-00000"]), false, false);
        assert!(!Arc::ptr_eq(&a.names, &b.names) && Arc::ptr_eq(&a.names, &c.names));
        assert!(a.has_name("cluster-00000") && !a.has_name("extra"));
        assert!(!b.has_name("cluster-00000") && b.has_name("extra") && b.names().len() == 1_000);

        // Small sets are not shared.
        let (mut d, mut e) = (Subscription::default(), Subscription::default());
        d.apply_delta(&many[..10], &[], true, false);
        e.apply_delta(&many[..10], &[], true, false);
        assert!(!Arc::ptr_eq(&d.names, &e.names) && d == e);
    }

    #[test]
    fn a_sotw_set_that_swaps_one_name_is_a_change() {
        let mut s = Subscription::default();
        let before: Vec<String> = (0..1000).map(|i| format!("c{i}")).collect();
        s.apply_sotw(before.clone(), true, false);
        let mut reordered = before.clone();
        reordered.reverse();
        assert!(s.apply_sotw(reordered, false, false).added.is_empty(), "the same set");
        let mut swapped = before;
        swapped[500] = "c1000".into();
        let change = s.apply_sotw(swapped, false, false);
        assert_eq!((change.added, change.removed), (names(&["c1000"]), names(&["c500"])));
    }

    #[test]
    fn s10_legacy_wildcard_survives_empty_requests_and_ends_on_names() {
        let mut s = Subscription::default();
        s.apply_sotw(vec![], true, true);
        assert_eq!(s.wildcard(), Wildcard::Legacy);
        s.apply_sotw(vec![], false, true);
        assert_eq!(s.wildcard(), Wildcard::Legacy);
        let change = s.apply_sotw(names(&["a"]), false, true);
        assert_eq!(s.wildcard(), Wildcard::None);
        assert_eq!(change.removed, names(&["*"]));
        assert_eq!(change.added, names(&["a"]));
    }

    #[test]
    fn s10_explicit_wildcard_combines_with_names_and_can_be_removed() {
        let mut s = Subscription::default();
        s.apply_sotw(names(&["*", "a"]), true, true);
        assert_eq!(s.wildcard(), Wildcard::Explicit);
        assert!(s.has_name("a") && !s.has_name("*"));
        s.apply_sotw(names(&["a"]), false, true);
        assert_eq!(s.wildcard(), Wildcard::None);
        // An empty list after explicit names means no interest, not a wildcard (rule S9).
        s.apply_sotw(vec![], false, true);
        assert!(s.is_empty());
    }

    #[test]
    fn s08_the_same_full_set_again_is_no_change() {
        let mut s = Subscription::default();
        s.apply_sotw(names(&["b", "a"]), true, false);
        let again = s.apply_sotw(names(&["a", "b"]), false, false);
        assert!(again.added.is_empty() && again.removed.is_empty());
        // Duplicates and a real change still take effect.
        let dup = s.apply_sotw(names(&["a", "a", "c"]), false, false);
        assert_eq!((dup.added, dup.removed), (names(&["c"]), names(&["b"])));
        let mut w = Subscription::default();
        w.apply_sotw(names(&["*", "x"]), true, true);
        assert!(w.apply_sotw(names(&["x", "*"]), false, true).added.is_empty());
        let left = w.apply_sotw(names(&["x"]), false, true);
        assert_eq!(left.removed, names(&["*"]));
    }

    #[test]
    fn s09_empty_set_on_a_non_wildcard_type_is_no_interest() {
        let mut s = Subscription::default();
        s.apply_sotw(vec![], true, false);
        assert!(s.is_empty());
        // `*` is an ordinary name for a type that has no wildcard.
        s.apply_sotw(names(&["*"]), false, false);
        assert!(s.has_name("*") && !s.is_wildcard());
    }

    #[test]
    fn d08_delta_wildcard_entered_and_left() {
        let mut s = Subscription::default();
        s.apply_delta(&[], &[], true, true);
        assert_eq!(s.wildcard(), Wildcard::Legacy);
        s.apply_delta(&names(&["x"]), &[], false, true);
        assert_eq!(s.wildcard(), Wildcard::None);
        s.apply_delta(&names(&["*"]), &[], false, true);
        assert_eq!(s.wildcard(), Wildcard::Explicit);
        s.apply_delta(&names(&["y"]), &[], false, true);
        assert_eq!(s.wildcard(), Wildcard::Explicit);
        let change = s.apply_delta(&[], &names(&["*", "nope"]), false, true);
        assert_eq!(s.wildcard(), Wildcard::None);
        assert_eq!(change.removed, names(&["*"]));
        assert_eq!(s.names().iter().cloned().collect::<Vec<_>>(), names(&["x", "y"]));
    }
}
