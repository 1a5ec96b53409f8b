//! The nonce handshake of one sub-stream: at most one response in flight, ACK/NACK by nonce.

use crate::error::ErrorDetail;
use crate::message::RequestKind;
use crate::nonce::Nonces;
use crate::text::Text;

/// Where a sub-stream is in its request/response exchange.
///
/// ```text
///   Unstarted ──first request──► Ready ──response sent──► InFlight(nonce)
///                                  ▲                           │
///                                  └──── ACK or NACK of nonce ─┘
/// ```
/// A sub-stream sends at most one response and then waits for the client to answer it: a slow
/// client is never queued more than one response, and when it answers it gets the newest state
/// ("latest wins"). Envoy and gRPC clients answer every response.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Phase {
    #[default]
    Unstarted,
    Ready,
    InFlight,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Flow {
    pub(crate) phase: Phase,
    /// The nonce of the latest response sent on this sub-stream.
    pub(crate) last_nonce: Option<Text>,
}

impl Flow {
    /// Classifies a request by its nonce (rules S4, S5, S7, D1) and moves the phase on. The
    /// answer's texts are taken from the request, not copied: an ACK is one per update per
    /// client, and its nonce was read into a text of its own already.
    ///
    /// Nothing can be stale before the first response: a request whose nonce comes from another
    /// stream (a client that reconnected) is then taken as it is rather than ignored, which would
    /// leave that client waiting forever.
    pub(crate) fn classify(
        &mut self,
        nonce: &mut Text,
        error: Option<&ErrorDetail>,
        version: &mut Text,
    ) -> RequestKind {
        if self.phase == Phase::Unstarted {
            self.phase = Phase::Ready;
            return RequestKind::Initial;
        }
        match &self.last_nonce {
            None => RequestKind::Spontaneous,
            Some(last) if last == nonce => {
                self.phase = Phase::Ready;
                let (nonce, version) = (std::mem::take(nonce), std::mem::take(version));
                match error {
                    None => RequestKind::Ack { nonce, version },
                    Some(e) => RequestKind::Nack { nonce, version, error: e.clone() },
                }
            }
            // Delta: a request that answers nothing is a subscription change. SotW turns this
            // into `Stale` (rule S7): its requests always name the latest nonce they saw.
            Some(_) if nonce.is_empty() => RequestKind::Spontaneous,
            Some(_) => RequestKind::Stale { nonce: std::mem::take(nonce) },
        }
    }

    /// Whether a request came before: the next one is not the sub-stream's first.
    pub(crate) fn started(&self) -> bool {
        self.phase != Phase::Unstarted
    }

    pub(crate) fn ready(&self) -> bool {
        self.phase == Phase::Ready
    }

    /// Records a response as sent and returns its nonce.
    pub(crate) fn sent(&mut self, nonces: &mut Nonces) -> Text {
        let nonce = nonces.next_nonce();
        self.last_nonce = Some(nonce.clone());
        self.phase = Phase::InFlight;
        nonce
    }
}
