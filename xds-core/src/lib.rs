//! The xDS protocol, sans-IO: the state machines of whole streams and of their sub-streams.
//!
//! A *sub-stream* ([`SubStream`], SotW or delta by its [`Protocol`]) is one type URL on one
//! stream. This crate decides, for each, what a request means (ACK, NACK, stale, subscription
//! change) and what response the client is owed given a [`View`] of the current resources. A
//! [`Stream`] is one gRPC stream: it checks requests (node, type, limits), orders its sub-streams'
//! responses (rules O1, D10), keeps their TTL heartbeat timers and reports what happened as
//! [`Event`]s. It does no I/O, spawns nothing, reads no clock and knows
//! no wire format: the server converts `DiscoveryRequest`s into [`SotwRequest`]s, and
//! [`SotwResponse`]s back into `DiscoveryResponse`s. It is generic over the resource handle
//! ([`Resource`]), so responses carry the caller's shared handles, never copies.
//!
//! Every rule it implements is numbered in the project's protocol rules (S*, D*), and each has a
//! test named after it.
//!
//! ```
//! use xds_core::{Nonces, Resource, SotwRequest, SotwSubStream, Text, TypeTraits, View};
//!
//! #[derive(Clone)]
//! struct Res(&'static str, &'static str);
//! impl Resource for Res {
//!     fn name(&self) -> &str { self.0 }
//!     fn version(&self) -> &str { self.1 }
//! }
//! struct Clusters(Vec<Res>);
//! impl View for Clusters {
//!     type Resource = Res;
//!     fn revision(&self) -> u64 { 1 }
//!     fn version(&self) -> Text { "v1".into() }
//!     fn get(&self, name: &str) -> Option<Res> { self.0.iter().find(|r| r.0 == name).cloned() }
//!     fn for_each(&self, f: &mut dyn FnMut(&Res)) { self.0.iter().for_each(f) }
//! }
//!
//! let view = Clusters(vec![Res("a", "1"), Res("b", "1")]);
//! let mut nonces = Nonces::new();
//! let mut cds = SotwSubStream::new(TypeTraits { wildcard_capable: true, full_state: true, aliases: false });
//! let _ = cds.handle_request(SotwRequest::default()); // a wildcard subscription
//! let response = cds.poll_response(&view, &mut nonces).unwrap();
//! assert_eq!(response.resources.len(), 2);
//! // Nothing more is owed until the client answers and something changes.
//! assert!(cds.poll_response(&view, &mut nonces).is_none());
//! ```
#![forbid(unsafe_code)]

mod delta;
mod digest;
mod echo;
mod error;
mod flow;
mod held;
mod message;
mod naming;
mod nonce;
mod resource;
mod sotw;
mod stream;
mod subscription;
mod substream;
mod text;
mod tracker;
pub mod xdstp;

pub use digest::NamesDigest;
pub use echo::{Echo, MAX_ECHO_BYTES, echo};
pub use error::{ErrorDetail, ResourceError, code};
pub use message::{
    AddedNames, DeltaRequest, DeltaResource, DeltaResponse, Handled, RequestKind, SotwNames,
    SotwRequest, SotwResponse,
};
pub use nonce::Nonces;
pub use resource::{Resource, ResourceSet, TypeTraits, View};
pub use stream::{
    Admitted, Event, Outgoing, Read, Stream, StreamConfig, StreamError, StreamGuard, TokenBucket,
    TypeKey, TypeRole, Views,
};
pub use subscription::{NameSet, Subscription, WILDCARD, Wildcard};
pub use substream::{Delta, DeltaSubStream, Protocol, Response, Sotw, SotwSubStream, SubStream};
pub use text::Text;
