//! The ways a client reaches its configuration besides an xDS stream: CSDS, the one-shot
//! fetches (unary `Fetch*` RPCs and REST-JSON long polls), and files written for filesystem
//! subscriptions. Each goes through the server's [`Authorizer`](crate::Authorizer) as a
//! stream does, and reads the cache through the same views.

pub(crate) mod csds;
pub(crate) mod fetch;
pub(crate) mod files;
pub(crate) mod rest;
