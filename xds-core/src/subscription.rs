//! A sub-stream's subscription: the names it asked for and whether it is a wildcard.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::{Arc, Mutex, Weak};

use crate::digest::NamesDigest;
use crate::message::AddedNames;
use crate::xdstp::{self, is_glob_name};

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

/// The sum of [`name_hash`] over `names`: the hash of [`NamesDigest::of`], which the server
/// computes from a request's bytes and [`NameSet::find`] looks up.
fn digest<'a>(names: impl Iterator<Item = &'a String>) -> u128 {
    NamesDigest::of(names).hash()
}

/// A subscription as [`Subscription::has_key`] recognises it: its wildcard state and its
/// shared name and glob sets (`None`: none), held weakly, with their digests.
pub(crate) struct SubscriptionKey {
    wildcard: Wildcard,
    names: KeptSet,
    globs: KeptSet,
}

/// A shared name set held weakly with its digest (`None`: no names).
type KeptSet = Option<(Weak<BTreeSet<String>>, u128)>;

/// Whether `kept` names the set at `set` (`None`: an empty set) with `digest`: the same
/// allocation, unchanged, or both empty. Only addresses are compared, never names.
fn is_kept(kept: &KeptSet, set: Option<*const BTreeSet<String>>, digest: u128) -> bool {
    match (kept, set) {
        (None, None) => true,
        (Some((weak, kept_digest)), Some(set)) => {
            std::ptr::eq(weak.as_ptr(), set) && *kept_digest == digest
        }
        _ => false,
    }
}

impl SubscriptionKey {
    /// Whether both keys were taken of one subscription's state: the same wildcard state and
    /// the same shared sets at the same digests.
    pub(crate) fn same_as(&self, other: &SubscriptionKey) -> bool {
        let same = |mine: &KeptSet, theirs: &KeptSet| match theirs {
            Some((weak, digest)) => is_kept(mine, Some(weak.as_ptr()), *digest),
            None => mine.is_none(),
        };
        self.wildcard == other.wildcard
            && same(&self.names, &other.names)
            && same(&self.globs, &other.globs)
    }
}

/// Name sets smaller than this are not worth sharing.
const MIN_SHARED: usize = 64;

/// An answer of [`Subscription::has_changed_name`]: the set asked (weakly held), the name,
/// whether the set has it.
type Answer = (Weak<BTreeSet<String>>, String, bool);

thread_local! {
    /// The latest [`Answer`] on this thread.
    static LATEST_ANSWER: RefCell<Option<Answer>> = const { RefCell::new(None) };
}

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

/// A large set of plain names that a live subscription holds, found by the digest of a request's
/// list ([`NameSet::find`]) so that the request's names need not be decoded.
///
/// A thousand proxies joining a mesh each subscribe to the endpoints of the same 10,000 clusters
/// in one delta request. Decoding each list (10,000 strings), sorting it and comparing it with
/// the set the first proxy's subscription built was half the server's CPU in such a storm. The
/// server instead digests the names from the request's bytes ([`NamesDigest::push`]: a hash per
/// name, summed, so any order gives the same digest, as proxies list them in their own hash
/// order) and passes the set found as [`DeltaRequest::subscribe_set`](crate::DeltaRequest).
///
/// Only sets of plain names are found: an `xdstp://` name is checked against the type of the
/// stream that names it (rule C1), and `*` means the wildcard on some types and a name on others,
/// so a set holding either is not taken for another stream's list. As with
/// [`SotwNames::Repeated`](crate::SotwNames), a list is recognised by its digest alone: an
/// honest list is taken for another set with a chance of about 2^-64, and a crafted collision
/// subscribes its own stream to names another subscription holds, which the server's policy is
/// asked about as if the client had listed them.
#[derive(Clone, Debug)]
pub struct NameSet {
    names: Arc<BTreeSet<String>>,
    digest: u128,
}

impl PartialEq for NameSet {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.names, &other.names) || self.names == other.names
    }
}

impl Eq for NameSet {}

impl NameSet {
    /// The fewest names a found set has: shorter lists cost little to decode, and subscriptions
    /// of fewer names do not share their sets.
    pub const MIN_LEN: usize = MIN_SHARED;

    /// The set of plain names a live subscription holds whose digest (a [`NamesDigest`] built
    /// with [`NamesDigest::of`] or [`NamesDigest::push`]) is `listed`, if there is one. Lists of
    /// fewer than [`MIN_LEN`](Self::MIN_LEN) names are never found.
    pub fn find(listed: &NamesDigest) -> Option<NameSet> {
        if listed.count() < Self::MIN_LEN {
            return None;
        }
        let names = {
            let shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
            shared.as_ref()?.get(&(listed.hash(), listed.count())).and_then(Weak::upgrade)?
        };
        // Two lookups in the tree, not a pass over it: every `xdstp://` name sorts together,
        // so the first name from the scheme on is one if any is.
        let from_scheme = (Bound::Included(xdstp::SCHEME), Bound::Unbounded);
        let xdstp = names.range::<str, _>(from_scheme).next().is_some_and(|n| xdstp::is_xdstp(n));
        (!xdstp && !names.contains(WILDCARD)).then_some(NameSet { names, digest: listed.hash() })
    }

    /// How many names the set has.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the set is empty (a found set never is).
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The names, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + Clone {
        self.names.iter().map(String::as_str)
    }
}

/// The names a subscription change added and removed. When the wildcard joins or leaves, its
/// marker `*` comes first in `added` or `removed`, before the names in order. (A type without a
/// wildcard may have a resource named `*`: that is an ordinary name, in its sorted place.)
#[derive(Debug, Default)]
pub(crate) struct Change {
    pub(crate) added: Vec<String>,
    /// Every name of this set was added too: a subscription that took a large set whole
    /// (copying its names to say so would cost more than taking the set). Never with names in
    /// `added`: anything else added or removed lists the set's names first ([`Change::list_whole`]).
    whole: Option<NameSet>,
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
    pub(crate) fn added_names(&self) -> impl Iterator<Item = &str> + Clone {
        let listed = self.added[usize::from(self.wildcard_joined)..].iter().map(String::as_str);
        listed.chain(self.whole.iter().flat_map(NameSet::iter))
    }

    /// How many names were added (the wildcard's marker counted).
    fn added_len(&self) -> usize {
        self.added.len() + self.whole.as_ref().map_or(0, NameSet::len)
    }

    /// The set taken whole, listed in `added`: before anything is added to it or taken out.
    fn list_whole(&mut self) {
        if let Some(whole) = self.whole.take() {
            let mut added: Vec<String> = whole.iter().map(str::to_owned).collect();
            added.append(&mut self.added);
            self.added = added;
        }
    }

    /// What the request added and removed, as [`Handled`](crate::Handled) reports them.
    pub(crate) fn into_names(self) -> (AddedNames, Vec<String>) {
        let added = match self.whole {
            Some(set) => AddedNames::whole(set),
            None => self.added.into(),
        };
        (added, self.removed)
    }

    /// The names removed, without the wildcard's marker, in order.
    pub(crate) fn removed_names(&self) -> &[String] {
        &self.removed[usize::from(self.wildcard_left)..]
    }

    /// Puts the wildcard's marker first in `added` or `removed` when the wildcard joined or left.
    fn mark_wildcard(&mut self, was: bool, is: bool) {
        match (was, is) {
            (false, true) => {
                self.list_whole();
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

    /// The names as shared with other subscriptions of the same names, with their digest: what
    /// identifies them to a [`ResourceSet`](crate::ResourceSet) that remembers being named by them.
    pub(crate) fn shared_names(&self) -> (&Arc<BTreeSet<String>>, u128) {
        (&self.names, self.digest)
    }

    /// What identifies this subscription to a comparison kept for other clients
    /// ([`crate::tracker::Step`]): see [`has_key`](Self::has_key).
    pub(crate) fn key(&self) -> SubscriptionKey {
        let kept = |set: &Arc<BTreeSet<String>>, digest| {
            (!set.is_empty()).then(|| (Arc::downgrade(set), digest))
        };
        SubscriptionKey {
            wildcard: self.wildcard,
            names: kept(&self.names, self.digest),
            globs: kept(&self.globs, self.glob_digest),
        }
    }

    /// Whether this subscription is the one `key` was taken of, or one of the very same names,
    /// globs and wildcard state: the same wildcard state, and for names and globs either none
    /// or the same shared set ([`share`]: a thousand proxies of the same 10,000 names hold one),
    /// unchanged. The key holds the sets weakly, as [`has_changed_name`](Self::has_changed_name)
    /// does: while it is kept, no other set can be at that address, and every change goes
    /// through `Arc::make_mut`, which moves a set that a weak pointer names. Two subscriptions
    /// of equal names in sets of their own (fewer than `MIN_SHARED`, which are not shared) do
    /// not match: only a pointer is compared, never the names.
    pub(crate) fn has_key(&self, key: &SubscriptionKey) -> bool {
        let live = |set: &Arc<BTreeSet<String>>| (!set.is_empty()).then_some(Arc::as_ptr(set));
        self.wildcard == key.wildcard
            && is_kept(&key.names, live(&self.names), self.digest)
            && is_kept(&key.globs, live(&self.globs), self.glob_digest)
    }

    /// Whether `name` is explicitly subscribed.
    pub fn has_name(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// [`has_name`](Self::has_name), for the one name a change reported: every subscription
    /// that shares a large set ([`share`]: a thousand proxies subscribed to the same 10,000
    /// endpoints) is asked about it in turn, and the search of 10,000 names was a fortieth of
    /// an update's cost per client. The latest answer is kept per thread, with the set it came
    /// from held weakly: while it is kept, no other set can be at that address, and the set
    /// itself is not changed in place (every change goes through `Arc::make_mut`, which moves the
    /// set to a new allocation while a weak pointer to it lives), so an answer is reused only for
    /// the same set, unchanged, and the same name. A change made in place some other way would
    /// break this.
    pub(crate) fn has_changed_name(&self, name: &str) -> bool {
        if self.names.len() < MIN_SHARED {
            return self.names.contains(name);
        }
        LATEST_ANSWER.with(|latest| {
            let mut latest = latest.borrow_mut();
            let set = Arc::as_ptr(&self.names);
            if let Some((asked, held, found)) = latest.as_ref()
                && std::ptr::eq(asked.as_ptr(), set)
                && held == name
            {
                return *found;
            }
            let found = self.names.contains(name);
            match latest.as_mut() {
                Some((asked, held, answer)) => {
                    if !std::ptr::eq(asked.as_ptr(), set) {
                        *asked = Arc::downgrade(&self.names);
                    }
                    name.clone_into(held);
                    *answer = found;
                }
                None => *latest = Some((Arc::downgrade(&self.names), name.to_owned(), found)),
            }
            found
        })
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

    /// Applies a SotW list that is `set` (rules S8, S9): names without `*` (a found set has
    /// none, and is never empty), so the wildcard ends if it was on (rule S10), as any list of
    /// names ends it.
    pub(crate) fn apply_sotw_set(&mut self, set: &NameSet) -> Change {
        let unchanged = self.wildcard == Wildcard::None
            && set.len() == self.names.len()
            && set.digest == self.digest;
        if unchanged {
            return Change::default();
        }
        let before = self.clone();
        self.wildcard = Wildcard::None;
        self.names = set.names.clone();
        self.digest = set.digest;
        self.change_from(&before)
    }

    /// Applies a delta request's subscribe and unsubscribe lists (rules D2, D3, D8).
    /// `set` is more names to subscribe, found by the server ([`NameSet`]).
    pub(crate) fn apply_delta(
        &mut self,
        subscribe: &[String],
        set: Option<&NameSet>,
        unsubscribe: &[String],
        first: bool,
        wildcard_capable: bool,
    ) -> Change {
        // Worked out name by name: an ACK (no lists) or a one-name change costs nothing like
        // the size of the subscription.
        let was_wildcard = self.is_wildcard();
        let mut change = Change::default();
        let listed = !subscribe.is_empty() || set.is_some_and(|set| !set.is_empty());
        if wildcard_capable && first && !listed {
            self.wildcard = Wildcard::Legacy;
        }
        if let Some(set) = set {
            if self.names.is_empty() {
                // A joining proxy's large subscription: the set is shared as it is.
                self.names = set.names.clone();
                self.digest = set.digest;
                change.whole = Some(set.clone());
            } else {
                for name in set.names.iter() {
                    self.add_name(name, &mut change);
                }
            }
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
            change.whole = Some(NameSet { names: self.names.clone(), digest: self.digest });
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
                } else {
                    self.add_name(name, &mut change);
                }
            }
        }
        // Legacy wildcard ends once the client names resources without `*` (rule S10).
        if self.wildcard == Wildcard::Legacy && listed && !first {
            self.wildcard = Wildcard::None;
        }
        if !unsubscribe.is_empty() {
            change.list_whole();
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
        if !change.added.is_empty() {
            change.list_whole();
        }
        change.added.sort();
        change.removed.sort();
        if change.added_len() + change.removed.len() >= MIN_SHARED {
            self.names = share(std::mem::take(&mut self.names), self.digest);
            self.globs = share(std::mem::take(&mut self.globs), self.glob_digest);
        }
        change.mark_wildcard(was_wildcard, self.is_wildcard());
        change
    }

    /// Adds a name to the subscription, recording it in `change` if it is new.
    fn add_name(&mut self, name: &str, change: &mut Change) {
        if !self.names.contains(name) {
            Arc::make_mut(&mut self.names).insert(name.to_owned());
            self.digest = self.digest.wrapping_add(name_hash(name));
            change.added.push(name.to_owned());
        }
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
        let mut change = if before.names.is_empty() && self.names.len() >= MIN_SHARED {
            // A first large list: every name was added, which the set itself says.
            let whole = NameSet { names: self.names.clone(), digest: self.digest };
            Change { whole: Some(whole), ..Change::default() }
        } else {
            Change {
                added: self.names.difference(&before.names).cloned().collect(),
                removed: before.names.difference(&self.names).cloned().collect(),
                ..Change::default()
            }
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
        a.apply_delta(&many, None, &[], true, false);
        b.apply_delta(&reversed, None, &[], true, false);
        c.apply_sotw(many.clone(), true, false);
        assert!(Arc::ptr_eq(&a.names, &b.names) && Arc::ptr_eq(&a.names, &c.names));
        // Taken from the shared set without building one: with the wildcard among the names,
        // and not with a name twice (a list of the set's length that is not the set).
        let mut starred = reversed.clone();
        starred.insert(500, WILDCARD.to_owned());
        let mut twice = many.clone();
        twice[7] = twice[8].clone();
        let (mut w, mut t) = (Subscription::default(), Subscription::default());
        w.apply_delta(&starred, None, &[], true, true);
        t.apply_delta(&twice, None, &[], true, false);
        assert!(Arc::ptr_eq(&a.names, &w.names) && w.is_wildcard() && w.digest == a.digest);
        assert!(!Arc::ptr_eq(&a.names, &t.names) && t.names().len() == 999);

        // A change copies the set for the one that changed, and leaves the others as they were.
        b.apply_delta(&names(&["extra"]), None, &names(&["cluster-00000"]), false, false);
        assert!(!Arc::ptr_eq(&a.names, &b.names) && Arc::ptr_eq(&a.names, &c.names));
        assert!(a.has_name("cluster-00000") && !a.has_name("extra"));
        assert!(!b.has_name("cluster-00000") && b.has_name("extra") && b.names().len() == 1_000);

        // Small sets are not shared.
        let (mut d, mut e) = (Subscription::default(), Subscription::default());
        d.apply_delta(&many[..10], None, &[], true, false);
        e.apply_delta(&many[..10], None, &[], true, false);
        assert!(!Arc::ptr_eq(&d.names, &e.names) && d == e);
    }

    /// What a fresh subscription's first delta request changes.
    fn change_of(
        subscribe: &[String],
        set: Option<&NameSet>,
        unsubscribe: &[String],
        wildcard_capable: bool,
    ) -> Change {
        Subscription::default().apply_delta(subscribe, set, unsubscribe, true, wildcard_capable)
    }

    /// The answer kept for a changed name is reused only for the same set and the same name:
    /// whatever is asked next (another name, a set of other names, the set changed, a small
    /// set), the answer is the set's own.
    #[test]
    fn a_changed_name_is_answered_as_its_set_answers_it() {
        let many = |prefix: &str| -> Vec<String> {
            (0..100).map(|i| format!("{prefix}-{i:03}")).collect()
        };
        let (mut a, mut b, mut other) =
            (Subscription::default(), Subscription::default(), Subscription::default());
        a.apply_delta(&many("c"), None, &[], true, false);
        b.apply_delta(&many("c"), None, &[], true, false);
        other.apply_delta(&many("e"), None, &[], true, false);
        assert!(Arc::ptr_eq(&a.names, &b.names));
        let mut small = Subscription::default();
        small.apply_delta(&names(&["c-007"]), None, &[], true, false);
        let asks: [(&Subscription, &str); 7] = [
            (&a, "c-007"),
            (&b, "c-007"),
            (&a, "e-007"),
            (&other, "e-007"),
            (&other, "c-007"),
            (&small, "c-007"),
            (&a, "c-007"),
        ];
        for (sub, name) in asks {
            assert_eq!(sub.has_changed_name(name), sub.has_name(name), "{name}");
        }
        // The set changed after its answer was kept: the changed set answers.
        assert!(a.has_changed_name("c-042"));
        a.apply_delta(&[], None, &names(&["c-042"]), false, false);
        assert!(!a.has_name("c-042"));
        assert!(!a.has_changed_name("c-042"));
        assert!(b.has_changed_name("c-042"), "the other subscription kept its set");
        // A set dropped while its answer is kept: its place is not another set's.
        assert!(other.has_changed_name("e-007"));
        drop(other);
        let mut again = Subscription::default();
        again.apply_delta(&many("x"), None, &[], true, false);
        assert!(!again.has_changed_name("e-007"));
        // A large set with one owner and nobody else's pointer (grown past the size shared sets
        // start at a few names at a time, so never shared): a change to it after its answer was
        // kept moves it, and the answer is not reused. A memo that held the set's address alone
        // would answer from before the change (checked: it fails here).
        let mut alone = Subscription::default();
        alone.apply_delta(&many("y")[..MIN_SHARED - 1], None, &[], true, false);
        alone.apply_delta(&names(&["y-extra", "z"]), None, &[], false, false);
        assert_eq!(alone.names().len(), MIN_SHARED + 1);
        assert!(alone.has_changed_name("z"));
        alone.apply_delta(&[], None, &names(&["z"]), false, false);
        assert_eq!(alone.names().len(), MIN_SHARED, "still asked through the kept answer");
        assert!(!alone.has_changed_name("z"));
        alone.apply_delta(&names(&["z"]), None, &[], false, false);
        assert!(alone.has_changed_name("z"));
    }

    /// The server finds a live set by the digest of a request's names, in any order, and the
    /// subscription that takes it holds the same set (not a copy) and reports every name added;
    /// sets with `xdstp://` names or `*`, small lists and sets nobody holds are not found.
    #[test]
    fn a_large_plain_set_is_found_by_the_digest_of_its_names_and_taken_whole() {
        let many: Vec<String> = (0..100).map(|i| format!("found-{i:03}")).collect();
        let mut reversed = many.clone();
        reversed.reverse();
        assert_eq!(NameSet::find(&NamesDigest::of(&many)), None, "nobody holds it yet");
        let mut a = Subscription::default();
        a.apply_delta(&many, None, &[], true, false);
        let found = NameSet::find(&NamesDigest::of(&reversed)).expect("found in any order");
        assert_eq!((found.len(), found.iter().next()), (100, Some("found-000")));

        let mut b = Subscription::default();
        let took = b.apply_delta(&[], Some(&found), &[], true, true);
        assert!(Arc::ptr_eq(&a.names, &b.names) && a == b && !b.is_wildcard());
        assert_eq!(took.added_names().collect::<Vec<_>>(), many);
        // Onto a subscription that has names already, the set's names are added one by one.
        let mut c = Subscription::default();
        c.apply_delta(&names(&["found-000", "other"]), None, &[], true, false);
        let change = c.apply_delta(&[], Some(&found), &[], false, false);
        assert_eq!((change.added.len(), c.names().len()), (99, 101));

        // What was added is the set itself, unless the same request also takes names out of
        // it or enters the wildcard: then the names are listed, `*` first.
        let (whole, _) = change_of(&[], Some(&found), &[], true).into_names();
        assert_eq!(whole.to_vec(), many);
        let (added, removed) =
            change_of(&[], Some(&found), &names(&["found-007"]), false).into_names();
        assert_eq!((added.len(), added.iter().any(|n| n == "found-007")), (99, false));
        assert!(removed.is_empty(), "subscribed and unsubscribed at once: no change");
        let (starred, _) = change_of(&names(&["*"]), Some(&found), &[], true).into_names();
        assert_eq!((starred.len(), starred.iter().next()), (101, Some("*")));
        // A first large SotW list is reported as the set too.
        {
            let mut sotw = Subscription::default();
            let (added, _) = sotw.apply_sotw(reversed.clone(), true, false).into_names();
            assert_eq!(added.to_vec(), many);
        }

        // Not found: a name more, a list too small to be shared.
        let mut more = many.clone();
        more.push("found-100".into());
        assert_eq!(NameSet::find(&NamesDigest::of(&more)), None);
        let mut small = Subscription::default();
        small.apply_delta(&many[..10], None, &[], true, false);
        assert_eq!(NameSet::find(&NamesDigest::of(&many[..10])), None);
        // Nor sets with a name another stream would read otherwise.
        for odd in ["xdstp://authority/envoy.config.cluster.v3.Cluster/x", WILDCARD] {
            let mut with: Vec<String> = many[1..].to_vec();
            with.push(odd.to_owned());
            let mut s = Subscription::default();
            s.apply_delta(&with, None, &[], true, false);
            assert_eq!(s.names().len(), 100, "{odd} is a name here");
            assert_eq!(NameSet::find(&NamesDigest::of(&with)), None, "{odd}");
        }
        // Nor a set nobody holds any more.
        drop((a, b, found, whole, took));
        assert_eq!(NameSet::find(&NamesDigest::of(&many)), None);
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
        s.apply_delta(&[], None, &[], true, true);
        assert_eq!(s.wildcard(), Wildcard::Legacy);
        s.apply_delta(&names(&["x"]), None, &[], false, true);
        assert_eq!(s.wildcard(), Wildcard::None);
        s.apply_delta(&names(&["*"]), None, &[], false, true);
        assert_eq!(s.wildcard(), Wildcard::Explicit);
        s.apply_delta(&names(&["y"]), None, &[], false, true);
        assert_eq!(s.wildcard(), Wildcard::Explicit);
        let change = s.apply_delta(&[], None, &names(&["*", "nope"]), false, true);
        assert_eq!(s.wildcard(), Wildcard::None);
        assert_eq!(change.removed, names(&["*"]));
        assert_eq!(s.names().iter().cloned().collect::<Vec<_>>(), names(&["x", "y"]));
    }
}
