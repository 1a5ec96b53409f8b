//! The request side of a streaming xDS method: gRPC frames read from the HTTP body and decoded.
//!
//! tonic's request stream copies every message into one buffer per stream and keeps that
//! buffer's capacity for the life of the stream: after a proxy subscribes to the endpoints of
//! 10,000 clusters in one request (~150 KB), every connected proxy pins 150 KB it will not need
//! again, which was the largest single cost of an idle connected client. [`Requests`] reads a
//! message into a buffer sized for it and lets the buffer go once the message is decoded: between
//! requests a stream holds no buffer.
//!
//! A SotW request is read as a [`SotwIncoming`]: every field but its names, which are only
//! digested on the way ([`NamesDigest`]). A SotW client repeats its whole subscription with every
//! ACK (10,000 names for the endpoints of a large mesh, from every proxy after every update); the
//! stream compares the digest with the list its sub-stream last took in and decodes the names
//! only when they changed. A large list a stream sent lately is recognised by the hash of its
//! bytes alone ([`KnownLists`]), without walking its 10,000 fields.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::ops::Range;
use std::pin::Pin;
use std::sync::LazyLock;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body::Body;
use prost::encoding::{DecodeContext, WireType, decode_key, decode_varint, skip_field};
use prost::{DecodeError, Message};
use tonic::Status;
use xds_core::NamesDigest;
use xds_proto::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use xds_proto::{ResourceType, TypeUrl};

use super::frame::{self, HEADER};

/// A request message as a stream reads it off the wire.
pub(crate) trait Incoming: Sized {
    /// What a stream's reader keeps from one message to read the next.
    type Memo: Default + Send;
    /// Decodes one message (the bytes of one gRPC frame, without its header).
    fn decode(message: Bytes, memo: &mut Self::Memo) -> Result<Self, Malformed>;
    /// Reads a message of a shape that needs nothing more than its own fields (a delta ACK:
    /// [`DeltaAck`]) from the bytes where they arrived, without a copy of the message; `None`
    /// for any other, which [`decode`](Self::decode) takes.
    fn read_in_place(_message: &[u8]) -> Option<Self> {
        None
    }
}

/// Why a request message did not decode.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Malformed {
    #[error(transparent)]
    Message(#[from] DecodeError),
    #[error("resource_names: {0}")]
    Names(&'static str),
}

/// `DiscoveryRequest.resource_names` and `DeltaDiscoveryRequest.resource_names_subscribe`: the
/// same field number in both.
const RESOURCE_NAMES: u32 = 3;

/// The one-byte key of a `resource_names` entry: field 3, length-delimited.
const NAME_KEY: u8 = (RESOURCE_NAMES as u8) << 3 | WireType::LengthDelimited as u8;

/// A name field of a message: the range of the whole field (key and length included) and the
/// name's bytes.
type NameField<'a> = (Range<usize>, &'a [u8]);

/// One pass over a request message: prost decodes every field into the request but the names
/// of field 3, which are skipped and handed to the caller in place.
struct Fields<'a, M> {
    message: &'a [u8],
    /// Where the next field starts.
    at: usize,
    request: M,
}

impl<'a, M: Message> Fields<'a, M> {
    fn new(message: &'a [u8], request: M) -> Self {
        Fields { message, at: 0, request }
    }

    /// The next name field. Every other field on the way is decoded into the request.
    fn next_name(&mut self) -> Result<Option<NameField<'a>>, Malformed> {
        let message = self.message;
        while let Some(mut buf) = message.get(self.at..).filter(|rest| !rest.is_empty()) {
            let start = self.at;
            // A name, most likely: its key and (under 128 bytes) its length are one byte each.
            // Read inline, it costs a few instructions; prost's varint decoding, not inlined,
            // was a third of the server's CPU at every update.
            let short = match buf {
                [NAME_KEY, len, ..] if *len < 0x80 => Some(usize::from(*len)),
                _ => None,
            };
            let value = if let Some(len) = short {
                let value = buf.get(2..2 + len).ok_or(Malformed::Names("buffer underflow"))?;
                buf = &buf[2 + len..];
                Some(value)
            } else {
                let (tag, wire_type) = decode_key(&mut buf)?;
                if tag == RESOURCE_NAMES {
                    Some(bytes_field(wire_type, &mut buf)?)
                } else {
                    let context = DecodeContext::default();
                    self.request.merge_field(tag, wire_type, &mut buf, context)?;
                    None
                }
            };
            self.at = message.len() - buf.len();
            if let Some(value) = value {
                return Ok(Some((start..self.at, value)));
            }
        }
        Ok(None)
    }

    /// Goes on reading at `at`, past bytes known without reading them.
    fn skip_to(&mut self, at: usize) {
        self.at = at;
    }
}

/// Adds a name field to the runs of consecutive name fields: the last run grows when the
/// field follows it, else the field starts a run of its own.
fn extend_runs(runs: &mut Vec<Range<usize>>, field: Range<usize>) {
    match runs.last_mut() {
        Some(run) if run.end == field.start => run.end = field.end,
        _ => runs.push(field),
    }
}

/// Each name of field 3, as bytes (a second pass over the message, the other fields skipped).
fn each_name<'a>(
    message: &'a [u8],
    mut name: impl FnMut(&'a [u8]) -> Result<(), Malformed>,
) -> Result<(), Malformed> {
    let mut buf = message;
    while buf.has_remaining() {
        let (tag, wire_type) = decode_key(&mut buf)?;
        if tag == RESOURCE_NAMES {
            name(bytes_field(wire_type, &mut buf)?)?;
        } else {
            skip_field(wire_type, tag, &mut buf, DecodeContext::default())?;
        }
    }
    Ok(())
}

/// The names of field 3, decoded from the message.
fn decode_names(message: &[u8], count: usize) -> Result<Vec<String>, Malformed> {
    let mut names = Vec::with_capacity(count);
    each_name(message, |name| {
        let name =
            std::str::from_utf8(name).map_err(|_| Malformed::Names("a name is not UTF-8"))?;
        names.push(name.to_owned());
        Ok(())
    })?;
    Ok(names)
}

/// A delta request as read: an ACK by its bytes alone, anything else decoded.
#[derive(Debug)]
pub(crate) enum DeltaIncoming {
    /// A request that answers a response and says nothing more: every ACK of a synced client,
    /// one per response. Not decoded: its two fields are found in place.
    Ack(DeltaAck),
    /// Any other request, decoded. Boxed: a decoded request is some 700 bytes, which the
    /// reader, the driver and the protocol moved from one to the next for every ACK.
    Read(Box<DeltaRead>),
}

/// `DeltaDiscoveryRequest.type_url` (field 2) and `response_nonce` (field 6), each a
/// length-delimited field's one-byte key.
const TYPE_URL_KEY: u8 = 2 << 3 | WireType::LengthDelimited as u8;
const NONCE_KEY: u8 = 6 << 3 | WireType::LengthDelimited as u8;

/// A delta request that holds a type URL and a nonce, each once, and nothing else: no name,
/// no node, no error (an ACK, not a NACK), no declared version. Its two fields are found in
/// place, where the message arrived, and copied out: prost's decoding of the same two strings,
/// from a copy of the message, took ~1,300 instructions, a fifth of what taking an ACK cost.
/// Neither takes an allocation of its own for a client of this server: a built-in type is
/// known by its URL, and a nonce of this server's (at most 20 digits) is kept in place (see
/// [`Text`](xds_core::Text)); a custom type's URL, or a longer nonce, takes one.
#[derive(Debug)]
pub(crate) struct DeltaAck {
    pub(crate) type_url: TypeUrl,
    /// Moved into the request the core takes.
    pub(crate) nonce: xds_core::Text,
}

impl DeltaAck {
    /// Finds the two fields, or `None` for any message of another shape (a field of another
    /// number, a field twice, a length over 127 bytes, a string that is not UTF-8, an empty
    /// nonce): those are decoded in full, which also tells a malformed one why.
    fn read(message: &[u8]) -> Option<DeltaAck> {
        let (mut type_url, mut nonce) = (None, None);
        let mut at = 0;
        while let Some(&key) = message.get(at) {
            let len = usize::from(*message.get(at + 1).filter(|len| **len < 0x80)?);
            let value = at + 2..at + 2 + len;
            let slot = match key {
                TYPE_URL_KEY => &mut type_url,
                NONCE_KEY => &mut nonce,
                _ => return None,
            };
            if value.end > message.len() || slot.replace(value.clone()).is_some() {
                return None;
            }
            at = value.end;
        }
        let (type_url, nonce) = (type_url?, nonce.filter(|n| !n.is_empty())?);
        let text = |range: Range<usize>| std::str::from_utf8(&message[range]).ok();
        // A built-in type is known by its bytes, which are then its (ASCII) text.
        let type_url = match ResourceType::from_type_url_bytes(&message[type_url.clone()]) {
            Some(builtin) => TypeUrl::from(builtin),
            None => TypeUrl::parse(text(type_url)?),
        };
        Some(DeltaAck { type_url, nonce: text(nonce)?.into() })
    }
}

impl DeltaIncoming {
    /// The request decoded, as every path but an ACK's takes it: an ACK becomes the request
    /// prost would have decoded from its bytes.
    pub(crate) fn read(&mut self) -> &mut DeltaRead {
        if let DeltaIncoming::Ack(ack) = self {
            let request = DeltaDiscoveryRequest {
                type_url: ack.type_url.as_str().to_owned(),
                response_nonce: std::mem::take(&mut ack.nonce).into(),
                ..Default::default()
            };
            // An ACK names nothing: no name is ever read from its (empty) message.
            *self = DeltaIncoming::Read(Box::new(DeltaRead {
                request,
                subscribe: NamesDigest::default(),
                message: Bytes::new(),
                set: None,
                run: None,
                shared: &SHARED_LISTS,
            }));
        }
        match self {
            DeltaIncoming::Read(read) => read,
            DeltaIncoming::Ack(_) => unreachable!("an ACK was just decoded in full"),
        }
    }

    /// [`read`](Self::read), by value.
    #[cfg(test)]
    pub(crate) fn into_read(mut self) -> DeltaRead {
        self.read();
        match self {
            DeltaIncoming::Read(read) => *read,
            DeltaIncoming::Ack(_) => unreachable!("an ACK was just decoded in full"),
        }
    }
}

/// A delta request with the names it subscribes to digested, not decoded.
#[derive(Debug)]
pub(crate) struct DeltaRead {
    /// Every field but `resource_names_subscribe`, which stays empty until
    /// [`names`](Self::names).
    pub(crate) request: DeltaDiscoveryRequest,
    /// The digest of `resource_names_subscribe`, name by name in any order
    /// ([`NamesDigest::push`]), as [`NameSet::find`](xds_core::NameSet::find) looks sets up.
    pub(crate) subscribe: NamesDigest,
    /// The whole message, to read the names from when they are needed.
    message: Bytes,
    /// The live set the names were recognised as, when they were not decoded.
    pub(crate) set: Option<xds_core::NameSet>,
    /// The names' fields, when they are one run that was walked (not recognised).
    run: Option<Range<usize>>,
    /// Where [`remember_list`](Self::remember_list) keeps the list for other streams.
    shared: &'static SharedLists,
}

/// The lists every stream's reader shares ([`SharedLists`]): a delta stream's reader keeps
/// nothing of its own (a delta ACK lists no names).
#[derive(Debug)]
pub(crate) struct Shared(&'static SharedLists);

impl Default for Shared {
    fn default() -> Self {
        Shared(&SHARED_LISTS)
    }
}

impl Incoming for DeltaIncoming {
    type Memo = Shared;

    /// An ACK by its bytes ([`DeltaAck`]), anything else in full ([`DeltaRead::decode`]).
    fn decode(message: Bytes, shared: &mut Shared) -> Result<Self, Malformed> {
        match Self::read_in_place(&message) {
            Some(ack) => Ok(ack),
            None => DeltaRead::decode(message, shared).map(|read| DeltaIncoming::Read(read.into())),
        }
    }

    fn read_in_place(message: &[u8]) -> Option<Self> {
        DeltaAck::read(message).map(DeltaIncoming::Ack)
    }
}

impl DeltaRead {
    /// One pass over the message, as [`SotwIncoming`] reads one, with a hash of each name
    /// instead of one over the list: proxies list the same names in their own order. UTF-8 is
    /// checked when the names are decoded; names recognised as a live set never are (see
    /// [`NameSet`](xds_core::NameSet) for what a collision could do).
    ///
    /// A large list some stream read before (a joining proxy's endpoints, as other proxies of
    /// its service listed them) is recognised by its bytes ([`SharedLists`]) and not walked; a
    /// list walked is remembered for the next stream, with one hash more of its bytes.
    fn decode(message: Bytes, shared: &mut Shared) -> Result<Self, Malformed> {
        let mut fields = Fields::new(&message, DeltaDiscoveryRequest::default());
        let mut subscribe = NamesDigest::default();
        let (mut runs, mut recognised) = (Vec::<Range<usize>>::new(), false);
        while let Some((field, name)) = fields.next_name()? {
            if runs.is_empty()
                && let Some((len, _, any_order)) = shared.0.recognise(&message, field.start)
            {
                let run = field.start..field.start + len;
                fields.skip_to(run.end);
                (subscribe, recognised) = (any_order, true);
                runs.push(run);
                continue;
            }
            // A digest in any order is a sum: names after a recognised list add to it.
            subscribe.push(name);
            extend_runs(&mut runs, field);
        }
        // Remembered for other streams once the request is admitted (`remember_list`).
        let run = match &runs[..] {
            [run] if !recognised => Some(run.clone()),
            _ => None,
        };
        let request = fields.request;
        Ok(DeltaRead { request, subscribe, message, set: None, run, shared: shared.0 })
    }

    /// The subscribed names, decoded from the message: as many as the digest counted (which
    /// may come from a list recognised by its bytes), or the request is refused.
    pub(crate) fn names(&self) -> Result<Vec<String>, Malformed> {
        let names = decode_names(&self.message, self.subscribe.count())?;
        counted(names.len(), self.subscribe)?;
        Ok(names)
    }

    /// Keeps a large list this request walked for the next stream that sends it
    /// ([`SharedLists`]): called once the request is admitted, so that a refused one costs no
    /// hash and displaces no list.
    pub(crate) fn remember_list(&self) {
        let Some(run) = &self.run else { return };
        let bytes = &self.message[run.clone()];
        // Checked before the hash: `SharedLists::remember` would keep no shorter list.
        if self.subscribe.count() >= xds_core::NameSet::MIN_LEN
            && bytes.len() >= KNOWN_LIST_MIN_BYTES
        {
            self.shared.remember(
                bytes,
                list_digest(self.subscribe.count(), [bytes]),
                self.subscribe,
            );
        }
    }
}

/// A SotW request with its names digested, not decoded.
#[derive(Debug)]
pub(crate) struct SotwIncoming {
    /// Every field but `resource_names`, which stays empty until [`names`](Self::names).
    pub(crate) request: DiscoveryRequest,
    /// The digest of `resource_names` as the client encoded them ([`list_digest`]).
    pub(crate) digest: NamesDigest,
    /// The whole message, to read the names from when they are needed.
    message: Bytes,
    /// The names repeat the sub-stream's last list: the core gets
    /// [`SotwNames::Repeated`](xds_core::SotwNames::Repeated).
    pub(crate) repeated: bool,
    /// The live set the names were recognised as, when they were not decoded: the core gets
    /// [`SotwNames::Found`](xds_core::SotwNames::Found).
    pub(crate) set: Option<xds_core::NameSet>,
    /// The names' fields, when they are one run of the message.
    run: Option<Range<usize>>,
    /// The digest of the names in any order, when the list was recognised as one another stream
    /// sent ([`SharedLists`]): [`names_digest`](Self::names_digest) then walks nothing.
    any_order: Option<NamesDigest>,
    /// Where a list walked for its digest in any order is remembered for other streams.
    shared: &'static SharedLists,
}

impl Incoming for SotwIncoming {
    type Memo = KnownLists;

    /// One pass over the message: prost decodes every other field, the names' fields are
    /// skipped and their bytes digested in place, in one go, under the process's key
    /// ([`LIST_KEY`]). Whether the names are UTF-8 is checked when they are decoded, and names
    /// that repeat the sub-stream's last list never are: that costs the chance (about 2^-64; a
    /// client cannot aim it without the key) that a malformed list passes for the last one, and
    /// then it changes nothing.
    fn decode(message: Bytes, known: &mut KnownLists) -> Result<Self, Malformed> {
        let mut fields = Fields::new(&message, DiscoveryRequest::default());
        let mut count = 0;
        // The runs of consecutive name fields, as offsets into the message: one run, as every
        // encoder writes fields in order, unless the client interleaves them with others.
        let mut runs: Vec<Range<usize>> = Vec::new();
        let (mut recognised, mut any_order) = (None, None);
        while let Some((field, _)) = fields.next_name()? {
            if runs.is_empty() {
                // The stream's own lists first (an ACK repeating its list), then those of
                // other streams (a joining proxy's first list, the same as another's).
                let found = match known.recognise(&message, field.start) {
                    Some((len, digest)) => Some((len, digest, None)),
                    None => known
                        .shared
                        .recognise(&message, field.start)
                        .map(|(len, digest, names)| (len, digest, Some(names))),
                };
                if let Some((len, digest, names)) = found {
                    let run = field.start..field.start + len;
                    fields.skip_to(run.end);
                    (count, recognised, any_order) = (digest.count(), Some(digest), names);
                    runs.push(run);
                    continue;
                }
            }
            // A name after a recognised list makes another list: its digest is made anew.
            (recognised, any_order) = (None, None);
            count += 1;
            extend_runs(&mut runs, field);
        }
        let request = fields.request;
        let digest = match (&runs[..], recognised) {
            ([_], Some(digest)) => digest,
            _ => list_digest(count, runs.iter().map(|run| &message[run.clone()])),
        };
        let run = match &runs[..] {
            [run] => Some(run.clone()),
            _ => None,
        };
        if let Some(run) = &run {
            known.remember(&message[run.clone()], digest);
        }
        let shared = known.shared;
        Ok(SotwIncoming {
            request,
            digest,
            message,
            repeated: false,
            set: None,
            run,
            any_order,
            shared,
        })
    }
}

/// How many lists a SotW stream remembers: one per resource type whose requests name many
/// resources (endpoints, routes, secrets, ...).
const KNOWN_LISTS: usize = 4;

/// A list is remembered from this size on: below it, walking its fields costs little.
const KNOWN_LIST_MIN_BYTES: usize = 1024;

/// The key SotW name lists are digested under, drawn at random once per process: a client that
/// could craft a list with another's digest could pass bytes it chose (a longer list, a field
/// hidden among the names) for a list [`KnownLists`] remembers.
static LIST_KEY: LazyLock<u64> =
    LazyLock::new(|| RandomState::new().hash_one(0x7864_735f_6c69_7374_u64));

/// The digest of a SotW list from its fields' bytes, under [`LIST_KEY`]: what a request's list
/// and a remembered one are compared by.
fn list_digest<'a>(count: usize, runs: impl IntoIterator<Item = &'a [u8]>) -> NamesDigest {
    NamesDigest::of_encoded_keyed(*LIST_KEY, count, runs)
}

/// The large name lists a SotW stream's requests carried lately, by their bytes.
///
/// A SotW client repeats its list with every ACK, byte for byte, and the fields in a message
/// before the list (`version_info`, `node`) do not move it from a list of the same type. Walking
/// 10,000 name fields to find where the list ends took half of the time an ACK's names cost;
/// a list remembered is recognised instead by one hash of the bytes where it would be, the same
/// hash its digest is made of ([`NamesDigest::of_encoded_keyed`]). The other fields are read as
/// before. Bytes that hash like the remembered list are taken as that list: under the process's
/// secret [`LIST_KEY`], a client cannot craft bytes that do (and should a 2^-64 chance pass other
/// bytes for the list, the names are counted again whenever they are decoded).
#[derive(Debug)]
pub(crate) struct KnownLists {
    lists: Vec<KnownList>,
    /// The lists of every stream, for a list this stream has not sent before.
    shared: &'static SharedLists,
    /// How many lists were recognised, for tests.
    #[cfg(test)]
    recognised: usize,
}

impl Default for KnownLists {
    fn default() -> Self {
        KnownLists {
            lists: Vec::new(),
            shared: &SHARED_LISTS,
            #[cfg(test)]
            recognised: 0,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct KnownList {
    /// The list's fields, as bytes.
    len: usize,
    /// Its first bytes: a cheap check before the hash.
    head: [u8; 16],
    digest: NamesDigest,
}

impl KnownLists {
    /// The length and digest of the remembered list that `message` holds at `start`, if any.
    /// At most one candidate is hashed here and one in [`SharedLists`], so a request costs at
    /// most two hashes more than its names' own.
    fn recognise(&mut self, message: &[u8], start: usize) -> Option<(usize, NamesDigest)> {
        let at = self.lists.iter().position(|list| list.may_be_at(message, start))?;
        // Most recently seen first.
        self.lists[..=at].rotate_right(1);
        let list = self.lists[0];
        let found = list.is_at(message, start);
        #[cfg(test)]
        {
            self.recognised += usize::from(found);
        }
        found.then_some((list.len, list.digest))
    }

    /// Remembers a list read in one run: `bytes` are its fields.
    fn remember(&mut self, bytes: &[u8], digest: NamesDigest) {
        let Some(list) = KnownList::of(bytes, digest) else { return };
        if self.lists.first().is_some_and(|first| first.len == list.len && first.digest == digest) {
            return;
        }
        self.lists.retain(|list| list.digest != digest);
        self.lists.insert(0, list);
        self.lists.truncate(KNOWN_LISTS);
    }
}

impl KnownList {
    /// The list whose fields are `bytes`, with their `digest`: none below
    /// [`KNOWN_LIST_MIN_BYTES`], not worth remembering.
    fn of(bytes: &[u8], digest: NamesDigest) -> Option<Self> {
        let head = bytes.first_chunk::<16>().filter(|_| bytes.len() >= KNOWN_LIST_MIN_BYTES)?;
        Some(KnownList { len: bytes.len(), head: *head, digest })
    }

    /// Whether `message` may hold this list at `start`: as long a message, the same first
    /// bytes, and no name field right after (the list would be longer than this one, and
    /// hashing its first part would be for nothing: the walk reads it whole anyway).
    fn may_be_at(&self, message: &[u8], start: usize) -> bool {
        let end = start + self.len;
        message.get(start..end).is_some_and(|bytes| bytes.starts_with(&self.head))
            && message.get(end) != Some(&NAME_KEY)
    }

    /// Whether `message` holds this list at `start`: its bytes hash to the list's digest. One
    /// hash of the list's length.
    fn is_at(&self, message: &[u8], start: usize) -> bool {
        let bytes = &message[start..start + self.len];
        list_digest(self.digest.count(), [bytes]) == self.digest
    }
}

/// How many lists every stream's readers share: a few large ones at a time (the endpoints of
/// the services that proxies subscribe to, one list per group of alike proxies).
const SHARED_LISTS_MAX: usize = 8;

/// The server's lists, for [`KnownLists`] made without a set of their own.
static SHARED_LISTS: SharedLists = SharedLists::new();

/// Large SotW lists some stream read lately, with the digest of their names in any order
/// ([`NamesDigest::push`], what [`NameSet::find`](xds_core::NameSet::find) looks sets up by).
///
/// A joining proxy's first list of endpoints is most often the very list other proxies sent:
/// the proxies of one service ask for the same clusters, in the same order when they are the
/// same client. Its names were walked twice (to find where the list ends, then to digest them
/// in any order), some 200 instructions per name, most of a SotW join's CPU. A list another
/// stream sent is recognised instead as a stream recognises its own ([`KnownLists`]): by its
/// length and first bytes, then one hash of its bytes under the process's key, the same as the
/// list's own digest. A client cannot craft bytes that pass for another's list without the key.
/// At most [`SHARED_LISTS_MAX`] lists, each some 80 bytes (no names are kept): the most recent.
#[derive(Debug)]
pub(crate) struct SharedLists {
    lists: std::sync::Mutex<Vec<(KnownList, NamesDigest)>>,
}

impl SharedLists {
    pub(crate) const fn new() -> Self {
        SharedLists { lists: std::sync::Mutex::new(Vec::new()) }
    }

    /// The length, digest and digest in any order of a list some stream read, if `message` holds
    /// it at `start`. At most one candidate is hashed, with the lock released.
    fn recognise(&self, message: &[u8], start: usize) -> Option<(usize, NamesDigest, NamesDigest)> {
        if message.len().saturating_sub(start) < KNOWN_LIST_MIN_BYTES {
            // Shorter than any list kept: no lock taken (a small list's every ACK comes here).
            return None;
        }
        let (list, any_order) = {
            let mut lists = crate::status::lock(&self.lists);
            let at = lists.iter().position(|(list, _)| list.may_be_at(message, start))?;
            // Most recently seen first: a list joiners keep sending is not pushed out by
            // lists walked once.
            lists[..=at].rotate_right(1);
            lists[0]
        };
        list.is_at(message, start).then_some((list.len, list.digest, any_order))
    }

    /// Remembers a list read in one run (`bytes`, its fields), by its digest and its digest in
    /// any order.
    fn remember(&self, bytes: &[u8], digest: NamesDigest, any_order: NamesDigest) {
        let Some(list) = KnownList::of(bytes, digest) else { return };
        let mut lists = crate::status::lock(&self.lists);
        lists.retain(|(list, _)| list.digest != digest);
        lists.insert(0, (list, any_order));
        lists.truncate(SHARED_LISTS_MAX);
    }
}

impl SotwIncoming {
    /// The names, decoded from the message (a second pass, over the names only). As many as
    /// the digest counted, or the request is refused: a list recognised by its bytes was counted
    /// as the list remembered.
    pub(crate) fn names(&self) -> Result<Vec<String>, Malformed> {
        let names = decode_names(&self.message, self.digest.count())?;
        counted(names.len(), self.digest)?;
        Ok(names)
    }

    /// The digest of the names in any order, as [`DeltaIncoming`] has it: a second pass, for
    /// a list that does not repeat the sub-stream's last one (a joining proxy's first), to find
    /// it among the sets live subscriptions hold.
    pub(crate) fn names_digest(&self) -> Result<NamesDigest, Malformed> {
        if let Some(any_order) = self.any_order {
            return Ok(any_order);
        }
        let mut digest = NamesDigest::default();
        each_name(&self.message, |name| {
            digest.push(name);
            Ok(())
        })?;
        counted(digest.count(), self.digest)?;
        if let Some(run) = &self.run {
            self.shared.remember(&self.message[run.clone()], self.digest, digest);
        }
        Ok(digest)
    }
}

/// A decoded list has as many names as its digest counted.
fn counted(names: usize, digest: NamesDigest) -> Result<(), Malformed> {
    if names == digest.count() {
        Ok(())
    } else {
        Err(Malformed::Names("the names are not the list their bytes were taken for"))
    }
}

/// A length-delimited field's value, borrowed from the message.
fn bytes_field<'a>(wire_type: WireType, buf: &mut &'a [u8]) -> Result<&'a [u8], Malformed> {
    if wire_type != WireType::LengthDelimited {
        return Err(Malformed::Names("not a length-delimited field"));
    }
    let len = usize::try_from(decode_varint(buf)?).unwrap_or(usize::MAX);
    if len > buf.len() {
        return Err(Malformed::Names("buffer underflow"));
    }
    let (value, rest) = buf.split_at(len);
    *buf = rest;
    Ok(value)
}

/// The messages of one request body, each at most `max` bytes.
pub(crate) struct Requests<T: Incoming> {
    body: axum::body::Body,
    /// What arrived and is not decoded yet: a frame header, part of a message, or whole ones.
    buf: BytesMut,
    max: usize,
    /// The body ended (the client closed its side).
    ended: bool,
    memo: T::Memo,
}

impl<T: Incoming> Requests<T> {
    pub(crate) fn new(body: axum::body::Body, max: usize) -> Self {
        Requests { body, buf: BytesMut::new(), max, ended: false, memo: T::Memo::default() }
    }

    /// [`poll_message`](Self::poll_message) as a future, for tests.
    #[cfg(test)]
    async fn message(&mut self) -> Result<Option<T>, Status> {
        std::future::poll_fn(|cx| self.poll_message(cx)).await
    }

    /// The next message; `None` once the client closed its side. Errors as tonic's request
    /// stream gives them: `OutOfRange` for a message over the limit, `Internal` for one that does
    /// not decode, the transport's status for a broken connection. Everything read is kept in
    /// `self`: a `Pending` loses nothing.
    pub(crate) fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<T>, Status>> {
        loop {
            if let Some(message) = self.decode()? {
                return Poll::Ready(Ok(Some(message)));
            }
            if self.ended {
                return Poll::Ready(if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(Status::internal("the request stream ended inside a message"))
                });
            }
            match ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    // Trailers (a client may send them) carry nothing for us.
                    if let Ok(data) = frame.into_data()
                        && let Some(message) = self.take(data)?
                    {
                        return Poll::Ready(Ok(Some(message)));
                    }
                }
                Some(Err(e)) => return Poll::Ready(Err(Status::from_error(e.into()))),
                None => self.ended = true,
            }
        }
    }

    /// Takes in a chunk of the body. A chunk that starts a message and holds all of it (a
    /// synced client's ACK, every update) is decoded from one copy of exactly its bytes, not
    /// through `buf` (which grows, then splits the message off); what follows the message waits
    /// in `buf`. Any other chunk goes to `buf`. A copy, not a slice of the chunk: the chunk is a
    /// part of the connection's read buffer, which a request kept a while (a joining stream's
    /// first, while it waits for a join permit) would keep whole. A message read in place (a
    /// delta ACK) is not copied at all.
    fn take(&mut self, data: Bytes) -> Result<Option<T>, Status> {
        if self.buf.is_empty()
            && let Some(&header) = data.first_chunk::<HEADER>()
        {
            let len = self.length(header)?;
            if data.len() >= HEADER + len {
                self.buf.put(&data[HEADER + len..]);
                if let Some(read) = T::read_in_place(&data[HEADER..HEADER + len]) {
                    return Ok(Some(read));
                }
                let message = Bytes::copy_from_slice(&data[HEADER..HEADER + len]);
                return self.decode_message(message).map(Some);
            }
        }
        self.buf.put(data);
        Ok(None)
    }

    /// The length a message's header gives, checked: not compressed, at most `max`.
    fn length(&self, header: [u8; HEADER]) -> Result<usize, Status> {
        let (compressed, len) = frame::parse(header);
        if compressed {
            // Compressed requests were refused when the stream opened (`grpc-encoding`).
            return Err(Status::internal("a compressed request without a grpc-encoding"));
        }
        if len > self.max {
            return Err(Status::out_of_range(format!(
                "decoded message length too large: found {len} bytes, the limit is: {} bytes",
                self.max
            )));
        }
        Ok(len)
    }

    fn decode_message(&mut self, message: Bytes) -> Result<T, Status> {
        T::decode(message, &mut self.memo)
            .map_err(|e| Status::internal(format!("failed to decode Protobuf message: {e}")))
    }

    /// Decodes the first message of `buf` if all of it is there.
    fn decode(&mut self) -> Result<Option<T>, Status> {
        let Some(&header) = self.buf.first_chunk::<HEADER>() else { return Ok(None) };
        let len = self.length(header)?;
        if self.buf.len() < HEADER + len {
            // One allocation for the whole message, not a doubling per chunk.
            self.buf.reserve(HEADER + len - self.buf.len());
            return Ok(None);
        }
        let mut frame = self.buf.split_to(HEADER + len);
        frame.advance(HEADER);
        let message = self.decode_message(frame.freeze());
        if self.buf.is_empty() {
            // Let the buffer go: the next message gets one of its own size.
            self.buf = BytesMut::new();
        }
        message.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, Bytes};
    use futures_util::stream;
    use http_body::Frame;
    use prost::Message;

    fn framed(message: &impl Message) -> Vec<u8> {
        let mut out = vec![0];
        out.put_u32(message.encoded_len() as u32);
        message.encode(&mut out).unwrap_or_default();
        out
    }

    fn body(chunks: Vec<Vec<u8>>) -> axum::body::Body {
        let frames =
            chunks.into_iter().map(|c| Ok::<_, std::io::Error>(Frame::data(Bytes::from(c))));
        axum::body::Body::new(http_body_util::StreamBody::new(stream::iter(frames)))
    }

    fn request(names: usize) -> DeltaDiscoveryRequest {
        DeltaDiscoveryRequest {
            type_url: "t".into(),
            resource_names_subscribe: (0..names).map(|i| format!("cluster-{i}")).collect(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn messages_split_across_chunks_and_sharing_chunks_decode_and_leave_no_buffer() {
        let (a, b) = (request(2_000), request(3));
        let mut bytes = framed(&a);
        bytes.extend(framed(&b));
        // Cut at odd places: inside the first header, inside the first message, inside the
        // second header.
        let cuts = [3, 4_000, framed(&a).len() + 2, bytes.len()];
        let mut chunks = Vec::new();
        let mut at = 0;
        for cut in cuts {
            chunks.push(bytes[at..cut].to_vec());
            at = cut;
        }
        let mut requests = Requests::<DeltaIncoming>::new(body(chunks), 1 << 20);
        assert_eq!(
            requests.message().await.ok().flatten().map(DeltaIncoming::into_read).map(whole),
            Some(a)
        );
        assert_eq!(
            requests.message().await.ok().flatten().map(DeltaIncoming::into_read).map(whole),
            Some(b)
        );
        assert_eq!(requests.buf.capacity(), 0, "no buffer kept between requests");
        assert!(matches!(requests.message().await, Ok(None)), "the client closed its side");
    }

    /// A chunk that holds a whole message and more (the next message whole, the start of the
    /// one after) is decoded from a copy of the message's bytes, and what follows it is read from
    /// the buffer; a message
    /// bigger than the limit is refused from its header, in a chunk of its own as in the buffer.
    #[tokio::test]
    async fn a_chunk_holding_whole_messages_decodes_each_and_keeps_what_follows() {
        let (a, b, c) = (request(1), request(2), request(3));
        let mut first = framed(&a);
        first.extend(framed(&b));
        let third = framed(&c);
        first.extend(&third[..3]);
        let chunks = vec![first, third[3..].to_vec()];
        let mut requests = Requests::<DeltaIncoming>::new(body(chunks), 1 << 20);
        for expected in [a, b, c] {
            assert_eq!(
                requests.message().await.ok().flatten().map(DeltaIncoming::into_read).map(whole),
                Some(expected)
            );
        }
        assert!(matches!(requests.message().await, Ok(None)));
        let big = framed(&request(100));
        let mut requests = Requests::<DeltaIncoming>::new(body(vec![big.clone()]), 100);
        let refused = requests.message().await.err().map(|s| s.code());
        assert_eq!(refused, Some(tonic::Code::OutOfRange), "a whole chunk over the limit");
        let mut head = framed(&request(1));
        head.extend(&big[..2]);
        let mut requests = Requests::<DeltaIncoming>::new(body(vec![head, big[2..].to_vec()]), 100);
        assert!(requests.message().await.is_ok());
        let refused = requests.message().await.err().map(|s| s.code());
        assert_eq!(refused, Some(tonic::Code::OutOfRange), "one read from the buffer");
    }

    /// An ACK that arrives whole in a chunk, with the next request after it, is read as an ACK
    /// and the next request after it; one that arrives in pieces is the same ACK. (Whether the
    /// first is read in place or from a copy is not seen from here: the instruction counts of
    /// docs/benchmarks.md are.)
    #[tokio::test]
    async fn an_ack_is_read_where_it_arrived_and_what_follows_it_next() {
        let ack = DeltaDiscoveryRequest {
            type_url: "t".into(),
            response_nonce: "7".into(),
            ..Default::default()
        };
        let next = request(3);
        let mut chunk = framed(&ack);
        chunk.extend(framed(&next));
        let split = framed(&ack);
        let pieces = vec![split[..4].to_vec(), split[4..].to_vec()];
        for chunks in [vec![chunk], pieces] {
            let mut requests = Requests::<DeltaIncoming>::new(body(chunks.clone()), 1 << 20);
            let read = requests.message().await.ok().flatten();
            assert!(matches!(read, Some(DeltaIncoming::Ack(_))), "{read:?}");
            assert_eq!(read.map(DeltaIncoming::into_read).map(whole), Some(ack.clone()));
            if chunks.len() == 1 {
                let read = requests.message().await.ok().flatten();
                assert_eq!(read.map(DeltaIncoming::into_read).map(whole), Some(next.clone()));
            }
            assert!(matches!(requests.message().await, Ok(None)));
        }
    }

    /// A delta request as read, with its names decoded.
    fn whole(read: DeltaRead) -> DeltaDiscoveryRequest {
        let names = read.names().unwrap_or_default();
        DeltaDiscoveryRequest { resource_names_subscribe: names, ..read.request }
    }

    /// A delta request read with its subscriptions digested says what prost's decoding says, and
    /// its digest is the digest of its names in any order: the one a subscription of those names
    /// keys its set by, so that proxies listing the same names in their own order find it.
    #[test]
    fn a_delta_request_digested_decodes_as_prost_decodes_it_and_its_digest_ignores_order() {
        let names: Vec<String> = (0..300).map(|i| format!("cluster-{i}")).collect();
        let long = "x".repeat(200);
        let mut listed = names.clone();
        listed.push(long.clone());
        let request = DeltaDiscoveryRequest {
            type_url: "t".into(),
            resource_names_subscribe: listed.clone(),
            resource_names_unsubscribe: vec!["gone".into()],
            initial_resource_versions: [("a".to_owned(), "1".to_owned())].into(),
            response_nonce: "7".into(),
            ..Default::default()
        };
        let read = <DeltaIncoming as Incoming>::decode(
            Bytes::from(request.encode_to_vec()),
            &mut Shared::default(),
        );
        let read = read.expect("decodes").into_read();
        assert!(read.request.resource_names_subscribe.is_empty(), "names left in the bytes");
        let mut reversed = listed.clone();
        reversed.reverse();
        assert_eq!(read.subscribe, NamesDigest::of(&reversed));
        assert_ne!(read.subscribe, NamesDigest::of(&names), "a name more is another digest");
        assert_eq!(whole(read), request);
    }

    /// An ACK (a type URL and a nonce, in either order) is read in place and, decoded in full,
    /// is what prost decodes; any other shape (a node, an error, no nonce, names, versions, a
    /// long type URL, a field twice) is decoded in full, as prost decodes it, and a malformed
    /// one is refused as before.
    #[test]
    fn a_delta_ack_is_read_in_place_and_any_other_shape_is_decoded_in_full() {
        let decode = |bytes: Vec<u8>| {
            <DeltaIncoming as Incoming>::decode(Bytes::from(bytes), &mut Shared::default())
        };
        let field = |key: u8, value: &str| {
            let mut out = vec![key, value.len() as u8];
            out.extend(value.as_bytes());
            out
        };
        let url = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
        let ack = DeltaDiscoveryRequest {
            type_url: url.into(),
            response_nonce: "42".into(),
            ..Default::default()
        };
        let mut reversed = field(NONCE_KEY, "42");
        reversed.extend(field(TYPE_URL_KEY, url));
        for bytes in [ack.encode_to_vec(), reversed] {
            let read = decode(bytes).expect("decodes");
            let DeltaIncoming::Ack(found) = &read else { panic!("not read in place: {read:?}") };
            assert_eq!((found.type_url.as_str(), found.nonce.as_str()), (url, "42"));
            assert_eq!(whole(read.into_read()), ack);
        }
        let others = [
            DeltaDiscoveryRequest {
                node: Some(xds_proto::pb::envoy::config::core::v3::Node {
                    id: "n".into(),
                    ..Default::default()
                }),
                ..ack.clone()
            },
            DeltaDiscoveryRequest {
                error_detail: Some(xds_proto::pb::google::rpc::Status {
                    code: 3,
                    message: "no".into(),
                    details: Vec::new(),
                }),
                ..ack.clone()
            },
            DeltaDiscoveryRequest { response_nonce: String::new(), ..ack.clone() },
            DeltaDiscoveryRequest { resource_names_subscribe: vec!["a".into()], ..ack.clone() },
            DeltaDiscoveryRequest { resource_names_unsubscribe: vec!["a".into()], ..ack.clone() },
            DeltaDiscoveryRequest {
                initial_resource_versions: [("a".to_owned(), "1".to_owned())].into(),
                ..ack.clone()
            },
            DeltaDiscoveryRequest { type_url: "t".repeat(200), ..ack.clone() },
        ];
        for other in others {
            let read = decode(other.encode_to_vec()).expect("decodes");
            assert!(matches!(read, DeltaIncoming::Read(_)), "read in place: {other:?}");
            assert_eq!(whole(read.into_read()), other);
        }
        // A field twice: protobuf keeps the last one.
        let mut twice = ack.encode_to_vec();
        twice.extend(field(NONCE_KEY, "43"));
        let read = decode(twice).expect("decodes");
        assert!(matches!(read, DeltaIncoming::Read(_)));
        assert_eq!(read.into_read().request.response_nonce, "43");
        // Not UTF-8, or cut short: refused, as prost refuses them.
        let mut bad = field(TYPE_URL_KEY, url);
        bad.extend([NONCE_KEY, 1, 0xff]);
        assert!(decode(bad).is_err(), "a nonce that is not UTF-8");
        let mut cut = field(TYPE_URL_KEY, url);
        cut.extend([NONCE_KEY, 5, b'4']);
        assert!(decode(cut).is_err(), "a nonce cut short");
        // A built-in type is known by its bytes; any other type URL is checked as text.
        let custom = "type.googleapis.com/acme.v1.Widget";
        let mut widget = field(TYPE_URL_KEY, custom);
        widget.extend(field(NONCE_KEY, "7"));
        let read = decode(widget).expect("decodes");
        let DeltaIncoming::Ack(found) = &read else { panic!("not read in place: {read:?}") };
        assert_eq!(found.type_url, TypeUrl::parse(custom));
        assert!(found.type_url.builtin().is_none());
        let mut garbled = vec![TYPE_URL_KEY, 2, 0xff, 0xfe];
        garbled.extend(field(NONCE_KEY, "7"));
        assert!(decode(garbled).is_err(), "a type URL that is not UTF-8");
    }

    /// A SotW request read with its names digested says what prost's decoding says, field for
    /// field, also when the names come in two runs around other fields (a merge of two messages,
    /// which protobuf allows).
    #[test]
    fn a_sotw_request_digested_decodes_as_prost_decodes_it() {
        let first = DiscoveryRequest {
            version_info: "v1".into(),
            node: Some(xds_proto::pb::envoy::config::core::v3::Node {
                id: "n".into(),
                ..Default::default()
            }),
            resource_names: vec!["a".into(), "xdstp://x/t/é".into(), String::new()],
            type_url: "t".into(),
            response_nonce: "7".into(),
            ..Default::default()
        };
        let second = DiscoveryRequest {
            // A name of 200 bytes has a two-byte length.
            resource_names: vec!["a".into(), "b".repeat(200)],
            response_nonce: "8".into(),
            error_detail: Some(xds_proto::pb::google::rpc::Status {
                code: 3,
                message: "no".into(),
                details: Vec::new(),
            }),
            ..Default::default()
        };
        let mut bytes = first.encode_to_vec();
        bytes.extend(second.encode_to_vec());
        let expected = <DiscoveryRequest as Message>::decode(&bytes[..]).unwrap_or_default();
        assert_eq!(expected.resource_names.len(), 5);

        let read =
            <SotwIncoming as Incoming>::decode(Bytes::from(bytes), &mut KnownLists::default())
                .expect("decodes");
        assert!(read.request.resource_names.is_empty(), "names are not decoded on the way in");
        let names = read.names().expect("names decode");
        assert_eq!(names, expected.resource_names);
        assert_eq!(DiscoveryRequest { resource_names: names, ..read.request }, expected);
        // The same names, encoded the same way, with other fields changed: the same digest
        // (what an ACK sends). In two runs, or in another order: another one.
        let ack = DiscoveryRequest {
            version_info: "v2".into(),
            resource_names: expected.resource_names.clone(),
            response_nonce: "9".into(),
            ..Default::default()
        };
        let digest = |m: &DiscoveryRequest| {
            <SotwIncoming as Incoming>::decode(
                Bytes::from(m.encode_to_vec()),
                &mut KnownLists::default(),
            )
            .map(|r| r.digest)
            .ok()
        };
        let one_run = digest(&ack);
        assert!(one_run.is_some_and(|d| d.count() == 5));
        assert_eq!(
            digest(&DiscoveryRequest { response_nonce: "10".into(), ..ack.clone() }),
            one_run
        );
        assert_ne!(Some(read.digest), one_run, "two runs");
        let mut reordered = ack.clone();
        reordered.resource_names.swap(0, 1);
        assert_ne!(digest(&reordered), one_run);
    }

    /// A stream's reader remembers its large lists and recognises an ACK's list by the hash of
    /// its bytes, without walking its fields: whatever the stream sends next (the same list
    /// after another node or version, a longer, shorter or changed list, another type's list,
    /// a name more in a second run), it reads what a reader that remembers nothing reads.
    #[test]
    fn a_remembered_list_is_recognised_and_reads_as_a_fresh_reader_reads_it() {
        let names = |prefix: &str, n: usize| -> Vec<String> {
            (0..n).map(|i| format!("{prefix}-{i}")).collect()
        };
        let request =
            |version: &str, resource_names: Vec<String>, type_url: &str| DiscoveryRequest {
                version_info: version.into(),
                resource_names,
                type_url: type_url.into(),
                response_nonce: format!("n{version}"),
                ..Default::default()
            };
        let eds = names("cluster", 1_000);
        let mut changed = eds.clone();
        changed[500] = "cluster-x00".into();
        let mut longer = eds.clone();
        longer.push("cluster-1000".into());
        let first = DiscoveryRequest {
            node: Some(xds_proto::pb::envoy::config::core::v3::Node {
                id: "n".into(),
                ..Default::default()
            }),
            ..request("", eds.clone(), "e")
        };
        let mut two_runs = request("7", eds.clone(), "e").encode_to_vec();
        two_runs.extend(request("", vec!["cluster-1000".into()], "").encode_to_vec());
        // The list, then one name more right after it, its key written in two bytes (protobuf
        // allows that): not a name key where the list ends, yet the list goes on.
        let mut run_on = request("11", Vec::new(), "").encode_to_vec();
        let only_names = DiscoveryRequest { resource_names: eds.clone(), ..Default::default() };
        run_on.extend(only_names.encode_to_vec());
        run_on.extend([NAME_KEY | 0x80, 0x00, 12]);
        run_on.extend(b"cluster-1000");
        run_on.extend(request("", Vec::new(), "e").encode_to_vec());
        let sequence = [
            first.encode_to_vec(),
            request("1", eds.clone(), "e").encode_to_vec(),
            request("", names("route", 300), "r").encode_to_vec(),
            request("2", eds.clone(), "e").encode_to_vec(),
            request("3", changed.clone(), "e").encode_to_vec(),
            request("4", eds[..999].to_vec(), "e").encode_to_vec(),
            request("5", longer.clone(), "e").encode_to_vec(),
            request("6", eds.clone(), "e").encode_to_vec(),
            two_runs,
            request("8", names("route", 300), "r").encode_to_vec(),
            request("9", Vec::new(), "e").encode_to_vec(),
            request("10", eds.clone(), "e").encode_to_vec(),
            run_on,
            // The list alone: it ends where the message does.
            only_names.encode_to_vec(),
        ];
        let mut known = KnownLists::default();
        let mut digests = Vec::new();
        let mut recognised = Vec::new();
        for (i, bytes) in sequence.into_iter().enumerate() {
            let hits = known.recognised;
            let expected = <DiscoveryRequest as Message>::decode(&bytes[..]).unwrap_or_default();
            let bytes = Bytes::from(bytes);
            let fresh =
                <SotwIncoming as Incoming>::decode(bytes.clone(), &mut KnownLists::default())
                    .expect("decodes");
            let read = <SotwIncoming as Incoming>::decode(bytes, &mut known).expect("decodes");
            assert_eq!(read.digest, fresh.digest, "request {i}");
            assert_eq!(read.digest.count(), expected.resource_names.len(), "request {i}");
            let names = read.names().expect("names decode");
            assert_eq!(names, expected.resource_names, "request {i}");
            assert_eq!(DiscoveryRequest { resource_names: names, ..read.request }, expected);
            digests.push(read.digest);
            recognised.push(known.recognised > hits);
        }
        // Recognised without a walk: the list repeated (also before a second run, or with a name
        // more right after it, or at the end of the message). Not: the first of each list, a
        // changed, shorter or longer one, a list forgotten (four are kept), and the list right
        // after a changed one of the same length was seen (one candidate is hashed per request,
        // and the changed list was the most recent).
        let expected = [0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 1].map(|hit| hit == 1);
        assert_eq!(recognised, expected);
        // The same list, recognised, has the same digest; every other list another one.
        assert_eq!(digests[0], digests[1]);
        assert_eq!(digests[1], digests[3]);
        assert_eq!(digests[3], digests[7]);
        assert_eq!(digests[7], digests[11]);
        assert_eq!(digests[2], digests[9]);
        for i in [4, 5, 6, 8, 12] {
            assert_ne!(digests[i], digests[0], "request {i}");
        }
        assert_eq!(digests[12].count(), 1_001);
        // Both large lists are remembered (and the longer, the shorter and the changed ones,
        // within the bound), most recent first.
        assert_eq!(known.lists.len(), KNOWN_LISTS);
        assert_eq!(known.lists[0].digest, digests[13]);
        assert!(known.lists.iter().any(|list| list.digest == digests[9]));
    }

    /// Names taken for a remembered list that turn out not to be that many when decoded (what a
    /// collision would do) refuse the request rather than pass for the list counted.
    #[test]
    fn names_decoded_are_counted_against_the_digest() {
        let two =
            DiscoveryRequest { resource_names: vec!["a".into(), "b".into()], ..Default::default() };
        let bytes = Bytes::from(two.encode_to_vec());
        let read = <SotwIncoming as Incoming>::decode(bytes.clone(), &mut KnownLists::default())
            .expect("decodes");
        assert_eq!(read.names().map(|n| n.len()).ok(), Some(2));
        assert!(read.names_digest().is_ok());
        let miscounted = SotwIncoming { digest: list_digest(3, [&bytes[..]]), ..read };
        assert!(matches!(miscounted.names(), Err(Malformed::Names(_))));
        assert!(matches!(miscounted.names_digest(), Err(Malformed::Names(_))));
    }

    /// A large list one stream read and digested in any order is recognised on another
    /// stream by its bytes, with that digest, and its names are not walked; a list of the same
    /// length and first bytes that differs, or that more names follow, is walked.
    #[test]
    fn a_list_another_stream_read_is_recognised_with_its_digest_in_any_order() {
        let shared: &'static SharedLists = Box::leak(Box::new(SharedLists::new()));
        let reader = || KnownLists { lists: Vec::new(), shared, recognised: 0 };
        let eds: Vec<String> = (0..1_000).map(|i| format!("cluster-{i:05}")).collect();
        let request = |names: &[String], nonce: &str| DiscoveryRequest {
            type_url: "t".into(),
            resource_names: names.to_vec(),
            response_nonce: nonce.into(),
            ..Default::default()
        };
        let decode = |r: &DiscoveryRequest| {
            <SotwIncoming as Incoming>::decode(Bytes::from(r.encode_to_vec()), &mut reader())
                .expect("decodes")
        };
        let first = decode(&request(&eds, ""));
        assert!(first.any_order.is_none(), "nobody read it before");
        let in_any_order = first.names_digest().expect("digested");
        assert_eq!(in_any_order, NamesDigest::of(&eds));

        // Another stream, other fields around the same list.
        let second = decode(&request(&eds, "n1"));
        assert_eq!(second.any_order, Some(in_any_order), "recognised");
        assert_eq!(second.digest, first.digest);
        assert_eq!(second.names_digest().ok(), Some(in_any_order));
        assert_eq!(second.names().ok(), Some(eds.clone()), "the names are the list's");

        // The last name changed (same length, same first bytes): not this list.
        let mut changed = eds.clone();
        changed[999] = "cluster-99999".into();
        let third = decode(&request(&changed, ""));
        assert!(third.any_order.is_none());
        assert_eq!(third.names_digest().ok(), Some(NamesDigest::of(&changed)));
        // The list and a name more after it (two runs: the list is not all the names).
        let mut bytes = request(&eds, "").encode_to_vec();
        bytes.extend(
            DiscoveryRequest { resource_names: vec!["x".into()], ..Default::default() }
                .encode_to_vec(),
        );
        let more =
            <SotwIncoming as Incoming>::decode(Bytes::from(bytes), &mut reader()).expect("decodes");
        assert!(more.any_order.is_none());
        assert_eq!(more.digest.count(), 1_001);
        let mut all = eds.clone();
        all.push("x".into());
        assert_eq!(more.names_digest().ok(), Some(NamesDigest::of(&all)));
    }

    /// A delta proxy's first list that another stream read (delta or SotW: the same field, the
    /// same bytes) is recognised, with the digest of its names in any order; names in another
    /// run after it add to that digest.
    #[test]
    fn a_delta_list_another_stream_read_is_recognised_and_further_names_add_to_it() {
        let shared: &'static SharedLists = Box::leak(Box::new(SharedLists::new()));
        let eds: Vec<String> = (0..1_000).map(|i| format!("cluster-{i:05}")).collect();
        let delta = |names: &[String], nonce: &str| DeltaDiscoveryRequest {
            type_url: "t".into(),
            resource_names_subscribe: names.to_vec(),
            response_nonce: nonce.into(),
            ..Default::default()
        };
        let decode = |bytes: Vec<u8>| {
            <DeltaIncoming as Incoming>::decode(Bytes::from(bytes), &mut Shared(shared))
                .expect("decodes")
                .into_read()
        };
        let remembered = |digest: NamesDigest| {
            crate::status::lock(&shared.lists).iter().any(|(_, any)| *any == digest)
        };
        let first = decode(delta(&eds, "").encode_to_vec());
        assert_eq!(first.subscribe, NamesDigest::of(&eds));
        assert!(!remembered(first.subscribe), "not before the request is admitted");
        first.remember_list();
        assert!(remembered(first.subscribe), "walked, and remembered for the next stream");
        let again = decode(delta(&eds, "n").encode_to_vec());
        assert_eq!(again.subscribe, first.subscribe);
        assert_eq!(again.names().ok(), Some(eds.clone()));
        // Taken from the memo, not walked: a digest planted there is what the reader reports.
        let planted = NamesDigest::of(["planted"]);
        crate::status::lock(&shared.lists)[0].1 = planted;
        assert_eq!(decode(delta(&eds, "p").encode_to_vec()).subscribe, planted);
        crate::status::lock(&shared.lists)[0].1 = first.subscribe;

        // The list, then a name in a run of its own: the digest of all 1,001.
        let mut bytes = delta(&eds, "").encode_to_vec();
        bytes.extend(delta(&["x".to_owned()], "").encode_to_vec());
        let more = decode(bytes);
        let mut all = eds.clone();
        all.push("x".into());
        assert_eq!(more.subscribe, NamesDigest::of(&all));
        assert_eq!(more.names().ok(), Some(all));
        more.remember_list();
        assert!(!remembered(more.subscribe), "two runs: not a list to remember");

        // A list read by a SotW stream and digested is recognised on a delta stream.
        let sotw_names: Vec<String> = (0..1_000).map(|i| format!("route-{i:05}")).collect();
        let sotw = DiscoveryRequest { resource_names: sotw_names.clone(), ..Default::default() };
        let mut reader = KnownLists { lists: Vec::new(), shared, recognised: 0 };
        let read =
            <SotwIncoming as Incoming>::decode(Bytes::from(sotw.encode_to_vec()), &mut reader)
                .expect("decodes");
        let any_order = read.names_digest().expect("digested");
        assert!(remembered(any_order));
        let joined = decode(delta(&sotw_names, "").encode_to_vec());
        assert_eq!(joined.subscribe, any_order);
    }

    #[test]
    fn a_sotw_request_with_a_malformed_name_is_refused_as_prost_refuses_it() {
        let cases: [(&str, &[u8]); 4] = [
            ("not UTF-8", &[0x1a, 2, 0xc3, 0x28]),
            ("not length-delimited", &[0x18, 1]),
            ("longer than the message", &[0x1a, 5, b'a']),
            (
                "a length that is not a varint",
                &[0x1a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            ),
        ];
        for (why, bytes) in cases {
            assert!(<DiscoveryRequest as Message>::decode(bytes).is_err(), "prost: {why}");
            // Refused as it is read, or (a name that is not UTF-8) once its names are decoded.
            let read = <SotwIncoming as Incoming>::decode(
                Bytes::from_static(bytes),
                &mut KnownLists::default(),
            );
            assert!(read.is_err() || read.is_ok_and(|r| r.names().is_err()), "{why}");
        }
    }

    #[tokio::test]
    async fn oversized_cut_and_malformed_messages_are_refused_with_tonics_codes() {
        let big = framed(&request(100));
        let mut r = Requests::<DeltaIncoming>::new(body(vec![big.clone()]), 100);
        let status = r.message().await.err();
        assert_eq!(status.map(|s| s.code()), Some(tonic::Code::OutOfRange));

        let cut = big[..big.len() - 1].to_vec();
        let mut r = Requests::<DeltaIncoming>::new(body(vec![cut]), 1 << 20);
        assert_eq!(r.message().await.err().map(|s| s.code()), Some(tonic::Code::Internal));

        let junk = vec![0, 0, 0, 0, 2, 0xff, 0xff];
        let mut r = Requests::<DeltaIncoming>::new(body(vec![junk]), 1 << 20);
        assert_eq!(r.message().await.err().map(|s| s.code()), Some(tonic::Code::Internal));

        let compressed = vec![1, 0, 0, 0, 0];
        let mut r = Requests::<DeltaIncoming>::new(body(vec![compressed]), 1 << 20);
        assert_eq!(r.message().await.err().map(|s| s.code()), Some(tonic::Code::Internal));
    }
}
