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

/// What a delta request's lists become after normalization.
pub(crate) struct DeltaNames {
    pub(crate) subscribe: Vec<String>,
    pub(crate) unsubscribe: Vec<String>,
    pub(crate) initial: BTreeMap<String, String>,
}

impl Naming {
    pub(crate) fn configure(&mut self, resource_type: Option<&str>, resource_errors: bool) {
        self.resource_type = resource_type.map(Into::into);
        self.silent = !resource_errors;
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
        if !self.refused.contains_key(&name) {
            self.pending.insert(name.clone(), detail.clone());
        }
        self.refused.insert(name, detail);
    }

    /// A SotW request's full set, normalized; refused names are left out.
    pub(crate) fn admit_sotw(
        &mut self,
        names: Vec<String>,
        denied: &BTreeMap<String, String>,
    ) -> Vec<String> {
        if denied.is_empty() && !names.iter().any(|n| xdstp::is_xdstp(n)) {
            // The common case costs one prefix check per name.
            self.refused.clear();
            self.spellings.clear();
            return names;
        }
        let before = std::mem::take(&mut self.refused);
        self.spellings.clear();
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            match self.admit(&name, denied, true) {
                Ok(normal) => {
                    if normal != name {
                        self.spellings.insert(normal.clone(), name);
                    }
                    out.push(normal);
                }
                // Told once: a name refused before (and listed again) is remembered, not
                // reported again.
                Err(detail) => match before.get(&name) {
                    Some(told) if *told == detail => {
                        self.refused.insert(name, detail);
                    }
                    _ => self.refuse_with(name, detail),
                },
            }
        }
        out
    }

    /// Whether names listed now are taken as they are when plain: nothing is refused now
    /// (`denied`) and nothing was before (a refused name listed again is looked at again).
    pub(crate) fn admits_as_listed(&self, denied: &BTreeMap<String, String>) -> bool {
        denied.is_empty() && self.refused.is_empty()
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
                        if self.refused.remove(&name).is_some() {
                            self.pending.remove(&name);
                        }
                        if normal != name {
                            self.spellings.insert(normal.clone(), name);
                        } else {
                            self.spellings.remove(&normal);
                        }
                        out.subscribe.push(normal);
                    }
                    Err(detail) => self.refuse_with(name, detail),
                }
            }
        }
        for name in unsubscribe {
            if self.refused.remove(&name).is_some() {
                self.pending.remove(&name);
                continue;
            }
            if let Ok(normal) = self.normal(&name) {
                self.spellings.remove(&normal);
                self.reported.remove(&normal);
                out.unsubscribe.push(normal);
            }
        }
        if !initial.keys().any(|n| xdstp::is_xdstp(n)) {
            // Plain names are their own normal form: a resuming proxy's 10,000 declarations are
            // taken as they came, not copied and re-inserted one by one.
            out.initial = initial;
            return out;
        }
        for (name, version) in initial {
            // A declared name that is not valid cannot be held under any name the server knows.
            if let Ok(normal) = self.normal(&name) {
                if normal != name {
                    self.spellings.insert(normal.clone(), name);
                }
                out.initial.insert(normal, version);
            }
        }
        out
    }

    /// The errors the client was told that still stand, by name as the client wrote it: those
    /// of names still subscribed (`*` and globs included) whose resource has not come since,
    /// and those of refused names. Nothing when the server turned errors off.
    pub(crate) fn standing(&self, sub: &Subscription) -> Vec<ResourceError> {
        if self.silent {
            return Vec::new();
        }
        let mut out = BTreeMap::new();
        for (name, error) in &self.reported {
            let subscribed = if name == WILDCARD {
                sub.is_wildcard()
            } else {
                sub.has_name(name) || sub.has_glob(name)
            };
            if subscribed {
                out.insert(self.spelled(name).to_owned(), error.clone());
            }
        }
        for (name, error) in &self.refused {
            if !self.pending.contains_key(name) {
                out.insert(name.clone(), error.clone());
            }
        }
        out.into_iter().map(|(name, error)| ResourceError { name, error }).collect()
    }

    /// How many refused names are remembered (they count against a stream's subscription limit:
    /// a delta client could otherwise make the sub-stream remember any number of bad names).
    pub(crate) fn refused_len(&self) -> usize {
        self.refused.len()
    }

    /// The client's spelling of a normal-form name.
    pub(crate) fn spelled<'a>(&'a self, name: &'a str) -> &'a str {
        self.spellings.get(name).map_or(name, String::as_str)
    }

    /// The spellings of the names in a response that differ from their normal form.
    pub(crate) fn spellings_for<'a>(
        &self,
        names: impl Iterator<Item = &'a str>,
    ) -> BTreeMap<String, String> {
        if self.spellings.is_empty() {
            return BTreeMap::new();
        }
        names.filter_map(|n| self.spellings.get(n).map(|s| (n.to_owned(), s.clone()))).collect()
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
            self.pending.clear();
            return Vec::new();
        }
        if !self.reported.is_empty() {
            for name in sent {
                self.reported.remove(name);
            }
        }
        let wildcard = sub.is_wildcard().then_some(WILDCARD);
        if self.pending.is_empty()
            && absent.is_empty()
            && gone.is_empty()
            && recheck.is_empty()
            && wildcard.is_none()
        {
            // Nothing owed and nothing to look up: most responses (a changed resource sent).
            return Vec::new();
        }
        let mut owed = std::mem::take(&mut self.pending);
        absent.retain(|(name, _)| {
            let error = view
                .resource_error(name)
                .unwrap_or_else(|| ErrorDetail::new(code::NOT_FOUND, "resource does not exist"));
            let not_found = error.code == code::NOT_FOUND;
            self.reported.insert(name.clone(), error.clone());
            owed.insert(self.spelled(name).to_owned(), error);
            not_found
        });
        for name in gone {
            let error = view
                .resource_error(name)
                .unwrap_or_else(|| ErrorDetail::new(code::NOT_FOUND, "resource does not exist"));
            self.reported.insert(name.clone(), error.clone());
            owed.insert(self.spelled(name).to_owned(), error);
        }
        for name in recheck.iter().map(String::as_str).chain(wildcard) {
            if let Some(error) = view.resource_error(name)
                && self.reported.get(name) != Some(&error)
            {
                self.reported.insert(name.to_owned(), error.clone());
                owed.insert(self.spelled(name).to_owned(), error);
            }
        }
        owed.into_iter().map(|(name, error)| ResourceError { name, error }).collect()
    }
}
