//! The gRPC wire of the streaming xDS methods, one job per file: [`frame`] (the length-prefixed
//! header both directions use), [`decode`] (requests read from the HTTP body), [`messages`]
//! (responses over encoded resources, where a whole shared set or a list is chosen once),
//! `encode` (their protobuf field writers), `encodings` (whole-set encodings shared by every
//! response that carries the set, the last few kept per server) and [`body`] (a response
//! stream written as the client's flow-control window opens).

pub(crate) mod body;
pub(crate) mod decode;
mod encode;
mod encodings;
pub(crate) mod frame;
pub(crate) mod messages;

pub use encodings::EncodedSet;
pub(crate) use encodings::RecentEncodings;
pub(crate) use messages::Framed;
pub use messages::{DeltaWire, SotwWire};
