//! The status a response or a request carries about one resource or one response: a
//! `google.rpc.Status` as the core sees it, and the codes per-resource errors use (rule C4).
//! Apart from the messages and the naming rules so that both, and views, can name it.

/// A client's report that it rejected a response (`error_detail` of a request).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErrorDetail {
    /// The `google.rpc.Code` the client gave.
    pub code: i32,
    /// The client's message: why it rejected the response.
    pub message: String,
}

impl ErrorDetail {
    /// A status with `code` (see [`code`]) and `message`.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        ErrorDetail { code, message: message.into() }
    }

    /// Whether the code is a data error (`NOT_FOUND`, `PERMISSION_DENIED`): the client may drop
    /// what it holds. Every other code is transient (TP3).
    pub fn is_data_error(&self) -> bool {
        matches!(self.code, code::NOT_FOUND | code::PERMISSION_DENIED)
    }
}

/// The `google.rpc.Code` values that per-resource errors use.
pub mod code {
    /// The client's name is malformed or of another type (rule C1).
    pub const INVALID_ARGUMENT: i32 = 3;
    /// The resource does not exist: a data error, the client may drop what it has.
    pub const NOT_FOUND: i32 = 5;
    /// The client may not have the resource: a data error.
    pub const PERMISSION_DENIED: i32 = 7;
    /// Transient: the client keeps what it has.
    pub const UNKNOWN: i32 = 2;
    /// Transient: the client keeps what it has.
    pub const INTERNAL: i32 = 13;
    /// Transient: the client keeps what it has.
    pub const UNAVAILABLE: i32 = 14;
}

/// One entry of `resource_errors`: why the server does not send a subscribed resource (rule C4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceError {
    /// The name as the client subscribed to it (`*` or a glob for a collection's error).
    pub name: String,
    /// The `google.rpc.Status` (code and message) to send.
    pub error: ErrorDetail,
}
