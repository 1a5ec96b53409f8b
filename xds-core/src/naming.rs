//! Names as they enter a sub-stream, and per-resource errors as they leave it (rules C1, C4).
//!
//! Every name a request carries passes through [`Naming`] once, before the subscription sees
//! it: `xdstp://` names are parsed and replaced by their normal form (rule C1), so the
//! subscription, what the client holds and the caches' keys all speak one spelling. A name that
//! does not parse, or whose type segment is not the sub-stream's type, is *refused*: it never
//! enters the subscription, and the client is told why once, as a per-resource error
//! (`INVALID_ARGUMENT` in `resource_errors`), while the rest of the stream goes on. A stream error
//! would have cut every other resource of the client off for one bad name; TP3 exists to avoid
//! exactly that.
//!
//! A name the server's policy refuses (the caller passes its answers in the request's
//! `denied`) is refused the same way, with `PERMISSION_DENIED`.
//!
//! On the way out, `resource_errors` (rule C4) carry:
//! - `INVALID_ARGUMENT` for a refused name, `PERMISSION_DENIED` for a denied one;
//! - the error a cache attached to a subscribed name that does not exist ([`View::resource_error`],
//!   e.g. `UNAVAILABLE`: "upstream inventory unreachable"), or to `*` for a wildcard;
//! - `NOT_FOUND` for a subscribed name that does not exist. On delta it goes beside the bodiless
//!   `Resource` of rule D6, which says the same to clients that do not read the field; on SotW,
//!   where a missing name otherwise gets silence until the client's does-not-exist timer fires
//!   (15 s on gRPC), it is the only answer.
//!
//! No client feature asks for them: TP3 has the server send the field, and older clients, which
//! do not know it, skip it (an unknown protobuf field); gRPC A88 reads it whenever present. A
//! wildcard subscription gets no `NOT_FOUND`: it names no resource that could be missing. A
//! server may still turn the field off (`SubStream::configure_names`, `Stream::set_resource_errors`)
//! for a client that breaks on it; none is known.
//!
//! Each error is sent once, and forgotten when the resource is sent (the client keeps the error
//! until then, TP3).

use std::collections::BTreeMap;

use crate::error::{ErrorDetail, ResourceError, code};
use crate::resource::View;
use crate::subscription::{Subscription, WILDCARD};
use crate::xdstp::{self, XdstpError};

/// Rule C4: a name is never both a resource and an error in one response. Drops the errors of
/// names that `sent` says go out as resources (a name the policy refused as listed that a
/// wildcard still delivers, say): the resource is the answer.
pub(crate) fn drop_sent(errors: &mut Vec<ResourceError>, sent: impl Fn(&str) -> bool) {
    if !errors.is_empty() {
        errors.retain(|e| !sent(&e.name));
    }
}

/// A sub-stream's name handling: normalization on the way in, errors on the way out.
#[derive(Clone, Debug, Default)]
pub(crate) struct Naming {
    /// The sub-stream's type as a message name, for the type segment of `xdstp://` names.
    resource_type: Option<Box<str>>,
    /// The server's opt-out: responses carry no `resource_errors` at all.
    silent: bool,
    /// Made the first time a name is respelled, refused or told an error. Most sub-streams
    /// never need it (plain names, every one served), and its four maps would take 96 bytes
    /// of every type of every connected client.
    told: Option<Box<Told>>,
}

/// What a sub-stream remembers of names it normalized, refused or told an error.
#[derive(Clone, Debug, Default)]
struct Told {
    /// Normal form -> the client's spelling, only where they differ: a resource is answered
    /// under the name the client asked for (rule C1).
    spellings: BTreeMap<String, String>,
    /// Names refused (as the client wrote them): told once, and not again while the client
    /// repeats them (a SotW client repeats its whole set with every ACK).
    refused: BTreeMap<String, ErrorDetail>,
    /// Errors owed in the next response.
    pending: BTreeMap<String, ErrorDetail>,
    /// Errors sent (by normal form) and not yet superseded by the resource.
    reported: BTreeMap<String, ErrorDetail>,
}

/// What a sub-stream that was never told anything reads.
static NOTHING_TOLD: Told = Told {
    spellings: BTreeMap::new(),
    refused: BTreeMap::new(),
    pending: BTreeMap::new(),
    reported: BTreeMap::new(),
};

/// What a delta request's lists become after normalization.
pub(crate) struct DeltaNames {
    pub(crate) subscribe: Vec<String>,
    pub(crate) unsubscribe: Vec<String>,
    pub(crate) initial: BTreeMap<String, String>,
}

impl Told {
    /// Whether nothing is remembered.
    fn is_empty(&self) -> bool {
        self.spellings.is_empty()
            && self.refused.is_empty()
            && self.pending.is_empty()
            && self.reported.is_empty()
    }

    /// Forgets that `name` was refused, if it was: the client unsubscribed it, or the policy
    /// now takes it (a refusal would otherwise count against the limit for good).
    fn forget_refusal(&mut self, name: &str) -> bool {
        let refused = self.refused.remove(name).is_some();
        if refused {
            self.pending.remove(name);
        }
        refused
    }

    /// The client's spelling of a normal-form name.
    fn spelled<'a>(&'a self, name: &'a str) -> &'a str {
        self.spellings.get(name).map_or(name, String::as_str)
    }

    /// Records `error` as told for `name` (normal form), and owes it under the client's
    /// spelling.
    fn report(&mut self, name: &str, error: ErrorDetail, owed: &mut BTreeMap<String, ErrorDetail>) {
        owed.insert(self.spelled(name).to_owned(), error.clone());
        self.reported.insert(name.to_owned(), error);
    }
}

impl Naming {
    pub(crate) fn configure(&mut self, resource_type: Option<&str>, resource_errors: bool) {
        self.resource_type = resource_type.map(Into::into);
        self.silent = !resource_errors;
    }

    /// What the sub-stream was told, for reading.
    fn told(&self) -> &Told {
        self.told.as_deref().unwrap_or(&NOTHING_TOLD)
    }

    /// What the sub-stream was told, made on first use, for writing.
    fn told_mut(&mut self) -> &mut Told {
        self.told.get_or_insert_with(Box::default)
    }

    /// Gives what the sub-stream was told back once all of it is forgotten: a name missing at
    /// first (an endpoint's before its cluster's) would otherwise keep the maps for the life of
    /// the stream.
    fn shed(&mut self) {
        if self.told.as_ref().is_some_and(|told| told.is_empty()) {
            self.told = None;
        }
    }

    /// The normal form of `name`, or why it is refused.
    fn normal(&self, name: &str) -> Result<String, XdstpError> {
        if !xdstp::is_xdstp(name) {
            return Ok(name.to_owned());
        }
        let parsed = xdstp::XdstpName::parse(name)?;
        if let Some(expected) = &self.resource_type {
            parsed.check_type(expected)?;
        }
        Ok(parsed.to_string())
    }

    /// The normal form of `name`, or why it is refused: malformed or of another type
    /// (`INVALID_ARGUMENT`), a glob on SotW, or `denied` by the server's policy
    /// (`PERMISSION_DENIED`).
    fn admit(
        &self,
        name: &str,
        denied: &BTreeMap<String, String>,
        sotw: bool,
    ) -> Result<String, ErrorDetail> {
        let invalid = |e: XdstpError| ErrorDetail::new(code::INVALID_ARGUMENT, format!("{e}"));
        let normal = self.normal(name).map_err(invalid)?;
        // Rule C2: glob collections are delta-only; on SotW a glob is refused like any other
        // name the server cannot take.
        if sotw && xdstp::is_glob_name(&normal) {
            return Err(invalid(XdstpError::GlobOnSotw));
        }
        match denied.get(&normal) {
            Some(reason) => Err(ErrorDetail::new(code::PERMISSION_DENIED, reason.clone())),
            None => Ok(normal),
        }
    }

    /// Refuses `name` (as the client wrote it): told once, in the next response.
    fn refuse_with(&mut self, name: String, detail: ErrorDetail) {
        let told = self.told_mut();
        if !told.refused.contains_key(&name) {
            told.pending.insert(name.clone(), detail.clone());
        }
        told.refused.insert(name, detail);
    }

    /// A SotW request's full set, normalized; refused names are left out.
    pub(crate) fn admit_sotw(
        &mut self,
        names: Vec<String>,
        denied: &BTreeMap<String, String>,
    ) -> Vec<String> {
        if denied.is_empty() && !names.iter().any(|n| xdstp::is_xdstp(n)) {
            // The common case costs one prefix check per name.
            if let Some(told) = &mut self.told {
                told.refused.clear();
                told.spellings.clear();
            }
            self.shed();
            return names;
        }
        let before = match &mut self.told {
            Some(told) => {
                told.spellings.clear();
                std::mem::take(&mut told.refused)
            }
            None => BTreeMap::new(),
        };
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            match self.admit(&name, denied, true) {
                Ok(normal) => {
                    if normal != name {
                        self.told_mut().spellings.insert(normal.clone(), name);
                    }
                    out.push(normal);
                }
                // Told once: a name refused before (and listed again) is remembered, not
                // reported again.
                Err(detail) => match before.get(&name) {
                    Some(told) if *told == detail => {
                        self.told_mut().refused.insert(name, detail);
                    }
                    _ => self.refuse_with(name, detail),
                },
            }
        }
        self.shed();
        out
    }

    /// Whether names listed now are taken as they are when plain: nothing is refused now
    /// (`denied`) and nothing was before (a refused name listed again is looked at again).
    pub(crate) fn admits_as_listed(&self, denied: &BTreeMap<String, String>) -> bool {
        denied.is_empty() && self.told().refused.is_empty()
    }

    /// A delta request's lists, normalized; refused subscriptions are left out.
    pub(crate) fn admit_delta(
        &mut self,
        subscribe: Vec<String>,
        unsubscribe: Vec<String>,
        initial: BTreeMap<String, String>,
        denied: &BTreeMap<String, String>,
    ) -> DeltaNames {
        let mut out = DeltaNames {
            subscribe: Vec::new(),
            unsubscribe: Vec::with_capacity(unsubscribe.len()),
            initial: BTreeMap::new(),
        };
        let plain = self.admits_as_listed(denied) && !subscribe.iter().any(|n| xdstp::is_xdstp(n));
        if plain {
            // The common case (a joining proxy's 10,000 plain names) costs one prefix check per
            // name: nothing to normalize, refuse or forget, and nothing copied. (Nor respell: a
            // spelling is kept under an `xdstp://` normal form, never under a plain name.)
            out.subscribe = subscribe;
        } else {
            out.subscribe.reserve(subscribe.len());
            for name in subscribe {
                match self.admit(&name, denied, false) {
                    Ok(normal) => {
                        // Refused before, taken now (the policy changed its mind): forget the
                        // refusal, which would otherwise count against the limit for good.
                        if normal != name {
                            let told = self.told_mut();
                            told.forget_refusal(&name);
                            told.spellings.insert(normal.clone(), name);
                        } else if let Some(told) = &mut self.told {
                            told.forget_refusal(&name);
                            told.spellings.remove(&normal);
                        }
                        out.subscribe.push(normal);
                    }
                    Err(detail) => self.refuse_with(name, detail),
                }
            }
        }
        for name in unsubscribe {
            if self.told.as_mut().is_some_and(|told| told.forget_refusal(&name)) {
                continue;
            }
            if let Ok(normal) = self.normal(&name) {
                if let Some(told) = &mut self.told {
                    told.spellings.remove(&normal);
                    told.reported.remove(&normal);
                }
                out.unsubscribe.push(normal);
            }
        }
        if !initial.keys().any(|n| xdstp::is_xdstp(n)) {
            // Plain names are their own normal form: a resuming proxy's 10,000 declarations are
            // taken as they came, not copied and re-inserted one by one.
            out.initial = initial;
            self.shed();
            return out;
        }
        for (name, version) in initial {
            // A declared name that is not valid cannot be held under any name the server knows.
            if let Ok(normal) = self.normal(&name) {
                if normal != name {
                    self.told_mut().spellings.insert(normal.clone(), name);
                }
                out.initial.insert(normal, version);
            }
        }
        self.shed();
        out
    }

    /// The errors the client was told that still stand, by name as the client wrote it: those
    /// of names still subscribed (`*` and globs included) whose resource has not come since,
    /// and those of refused names. Nothing when the server turned errors off.
    pub(crate) fn standing(&self, sub: &Subscription) -> Vec<ResourceError> {
        if self.silent {
            return Vec::new();
        }
        let told = self.told();
        let mut out = BTreeMap::new();
        for (name, error) in &told.reported {
            let subscribed = if name == WILDCARD {
                sub.is_wildcard()
            } else {
                sub.has_name(name) || sub.has_glob(name)
            };
            if subscribed {
                out.insert(told.spelled(name).to_owned(), error.clone());
            }
        }
        for (name, error) in &told.refused {
            if !told.pending.contains_key(name) {
                out.insert(name.clone(), error.clone());
            }
        }
        out.into_iter().map(|(name, error)| ResourceError { name, error }).collect()
    }

    /// How many refused names are remembered (they count against a stream's subscription limit:
    /// a delta client could otherwise make the sub-stream remember any number of bad names).
    pub(crate) fn refused_len(&self) -> usize {
        self.told().refused.len()
    }

    /// The spellings of the names in a response that differ from their normal form.
    pub(crate) fn spellings_for<'a>(
        &self,
        names: impl Iterator<Item = &'a str>,
    ) -> BTreeMap<String, String> {
        let spellings = &self.told().spellings;
        if spellings.is_empty() {
            return BTreeMap::new();
        }
        names.filter_map(|n| spellings.get(n).map(|s| (n.to_owned(), s.clone()))).collect()
    }

    /// Works out the errors a response carries, once the tracker compared the subscription with
    /// the view. `absent` are subscribed names found missing for the first time (rule D6): each
    /// gets `NOT_FOUND`, or the error the cache attached to it; a name whose error is not
    /// `NOT_FOUND` is taken out of `absent` (a transient error does not say that the name does
    /// not exist, and the error is the answer). `gone` are subscribed names the client held
    /// that no longer exist where the response cannot say so (a SotW type that is not
    /// full-state carries no removals): each gets the same error, its only word of the removal.
    /// `recheck` are names the client already holds as absent that may have changed (a cache
    /// attaching an error). `sent` are the names of the resources going out: their errors are
    /// cleared.
    pub(crate) fn errors<'a, V: View + ?Sized>(
        &mut self,
        view: &V,
        sub: &Subscription,
        (absent, gone): (&mut Vec<(String, bool)>, &[String]),
        recheck: &[String],
        sent: impl Iterator<Item = &'a str>,
    ) -> Vec<ResourceError> {
        if self.silent {
            // Absent names keep their rule D6 answer; refusals are remembered, never told.
            if let Some(told) = &mut self.told {
                told.pending.clear();
            }
            self.shed();
            return Vec::new();
        }
        if let Some(told) = self.told.as_mut().filter(|told| !told.reported.is_empty()) {
            for name in sent {
                told.reported.remove(name);
            }
        }
        self.shed();
        let wildcard = sub.is_wildcard().then_some(WILDCARD);
        if self.told().pending.is_empty()
            && absent.is_empty()
            && gone.is_empty()
            && recheck.is_empty()
            && wildcard.is_none()
        {
            // Nothing owed and nothing to look up: most responses (a changed resource sent).
            return Vec::new();
        }
        // Made only when an error is told: a wildcard's look-up of its own error usually finds
        // none.
        let mut owed =
            self.told.as_mut().map(|told| std::mem::take(&mut told.pending)).unwrap_or_default();
        absent.retain(|(name, _)| {
            let error = view
                .resource_error(name)
                .unwrap_or_else(|| ErrorDetail::new(code::NOT_FOUND, "resource does not exist"));
            let not_found = error.code == code::NOT_FOUND;
            self.told_mut().report(name, error, &mut owed);
            not_found
        });
        for name in gone {
            let error = view
                .resource_error(name)
                .unwrap_or_else(|| ErrorDetail::new(code::NOT_FOUND, "resource does not exist"));
            self.told_mut().report(name, error, &mut owed);
        }
        for name in recheck.iter().map(String::as_str).chain(wildcard) {
            if let Some(error) = view.resource_error(name)
                && self.told().reported.get(name) != Some(&error)
            {
                self.told_mut().report(name, error, &mut owed);
            }
        }
        owed.into_iter().map(|(name, error)| ResourceError { name, error }).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::TestRes;

    /// A view of no resources, with the errors a cache attached to some names.
    struct Errors(BTreeMap<String, ErrorDetail>);

    impl View for Errors {
        type Resource = TestRes;
        fn revision(&self) -> u64 {
            1
        }
        fn version(&self) -> crate::Text {
            "1".into()
        }
        fn get(&self, _: &str) -> Option<TestRes> {
            None
        }
        fn for_each(&self, _: &mut dyn FnMut(&TestRes)) {}
        fn resource_error(&self, name: &str) -> Option<ErrorDetail> {
            self.0.get(name).cloned()
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|n| (*n).to_owned()).collect()
    }

    const CLUSTER: &str = "envoy.config.cluster.v3.Cluster";

    /// Most sub-streams (plain names, a wildcard whose cache attached no error) are never told
    /// anything: they keep no state for it, so every connected client's types stay small.
    #[test]
    fn a_sub_stream_told_nothing_keeps_nothing_for_it() {
        let none = Errors(BTreeMap::new());
        let mut naming = Naming::default();
        naming.configure(Some(CLUSTER), true);
        let mut sub = Subscription::default();
        sub.apply_sotw(names(&["*", "a"]), true, true);
        assert_eq!(naming.admit_sotw(names(&["*", "a"]), &BTreeMap::new()), names(&["*", "a"]));
        let delta =
            naming.admit_delta(names(&["b"]), names(&["c"]), BTreeMap::new(), &BTreeMap::new());
        assert_eq!((delta.subscribe, delta.unsubscribe), (names(&["b"]), names(&["c"])));
        let sent = ["a"].into_iter();
        assert!(naming.errors(&none, &sub, (&mut Vec::new(), &[]), &[], sent).is_empty());
        assert!(naming.standing(&sub).is_empty());
        assert!(naming.told.is_none(), "nothing was told, nothing is kept");
        assert!(std::mem::size_of::<Naming>() <= 32, "the maps stay out of every sub-stream");

        // The wildcard's own error, once the cache attaches one, is told and remembered.
        let failing =
            Errors([("*".to_owned(), ErrorDetail::new(code::UNAVAILABLE, "down"))].into());
        let errors = naming.errors(&failing, &sub, (&mut Vec::new(), &[]), &[], [].into_iter());
        assert_eq!(errors.len(), 1);
        assert_eq!((errors[0].name.as_str(), errors[0].error.code), ("*", code::UNAVAILABLE));
        assert!(naming.told.is_some());
        assert_eq!(naming.standing(&sub).len(), 1, "the error stands while the wildcard does");
    }

    /// A name missing at first (an endpoint's before its cluster's) is told `NOT_FOUND`, and
    /// what the sub-stream kept for it goes when the resource comes.
    #[test]
    fn what_was_told_goes_once_all_of_it_is_forgotten() {
        let none = Errors(BTreeMap::new());
        let mut naming = Naming::default();
        let mut sub = Subscription::default();
        sub.apply_delta(&names(&["e"]), None, &[], true, true);
        let mut absent = vec![("e".to_owned(), true)];
        let errors = naming.errors(&none, &sub, (&mut absent, &[]), &[], [].into_iter());
        assert_eq!(errors.len(), 1);
        assert_eq!(naming.standing(&sub).len(), 1);
        assert!(naming.told.is_some());
        assert!(
            naming.errors(&none, &sub, (&mut Vec::new(), &[]), &[], ["e"].into_iter()).is_empty()
        );
        assert!(naming.standing(&sub).is_empty(), "the resource is the answer");
        assert!(naming.told.is_none(), "nothing is left to remember");
    }

    /// What is told is kept whether or not the sub-stream was told anything before: a
    /// respelled name is answered under the client's spelling, a refusal is told once and
    /// forgotten when the client unsubscribes.
    #[test]
    fn what_a_sub_stream_is_told_is_kept_from_the_first_time() {
        let none = Errors(BTreeMap::new());
        let mut naming = Naming::default();
        naming.configure(Some(CLUSTER), true);
        let spelled = format!("xdstp://auth/{CLUSTER}/c?b=2&a=1");
        let normal = format!("xdstp://auth/{CLUSTER}/c?a=1&b=2");
        let bad = "xdstp://auth/wrong.Type/x".to_owned();
        let delta = naming.admit_delta(
            vec![spelled.clone(), bad.clone()],
            Vec::new(),
            BTreeMap::new(),
            &BTreeMap::new(),
        );
        assert_eq!(delta.subscribe, vec![normal.clone()]);
        assert_eq!(naming.told().spelled(&normal), spelled);
        assert_eq!(naming.refused_len(), 1);
        let mut sub = Subscription::default();
        sub.apply_delta(&delta.subscribe, None, &[], true, true);
        let mut absent = vec![(normal.clone(), true)];
        let errors = naming.errors(&none, &sub, (&mut absent, &[]), &[], [].into_iter());
        let told: Vec<_> = errors.iter().map(|e| (e.name.as_str(), e.error.code)).collect();
        assert_eq!(
            told,
            [(spelled.as_str(), code::NOT_FOUND), (bad.as_str(), code::INVALID_ARGUMENT)]
        );
        // Told once: the next response owes nothing; both still stand.
        assert!(naming.errors(&none, &sub, (&mut Vec::new(), &[]), &[], [].into_iter()).is_empty());
        assert_eq!(naming.standing(&sub).len(), 2);
        naming.admit_delta(Vec::new(), vec![bad], BTreeMap::new(), &BTreeMap::new());
        assert_eq!(naming.refused_len(), 0, "an unsubscribed refusal is forgotten");
    }
}
