//! Short texts that a response and its events share: versions and nonces.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use smol_str::SmolStr;

/// An immutable text, kept in place when short and shared when long: a response's version and
/// nonce ([`SotwResponse`](crate::SotwResponse), [`DeltaResponse`](crate::DeltaResponse)), the
/// same texts in its [`Event::Sent`](crate::Event::Sent), and a view's version
/// ([`View::version`](crate::View::version)).
///
/// Every client gets a response per update, and each response's version and nonce were strings
/// of their own, copied again into the stream's records and events: four allocations and their
/// frees per client and update, for texts of 1 to 20 bytes (a nonce's digits, a cache's 16-digit
/// version). A `Text` of up to 23 bytes is kept in place, in the 24 bytes a `String` takes, and
/// copying it allocates nothing; a longer one (a custom view's version) is made once into a
/// shared text, and copying it counts a reference.
///
/// It reads as a `&str` (`Deref`), compares with `str` and `String` either way, and converts from
/// both:
///
/// ```
/// use xds_core::Text;
///
/// let version = Text::from("0123456789abcdef");
/// assert_eq!(version, "0123456789abcdef");
/// assert!(version.starts_with("0123"));
/// assert_eq!(String::from(version.clone()), version.as_str());
/// ```
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Text(SmolStr);

impl Text {
    /// The longest text kept in place; a longer one is shared.
    pub const INLINE: usize = 23;

    /// An empty text.
    pub const fn new() -> Self {
        Text(SmolStr::new_inline(""))
    }

    /// The text as a `&str`.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// Whether the text is kept in place rather than shared: copying it then allocates nothing
    /// and counts nothing.
    pub fn is_inline(&self) -> bool {
        !self.0.is_heap_allocated()
    }
}

impl Deref for Text {
    type Target = str;

    fn deref(&self) -> &str {
        self.0.as_str()
    }
}

impl AsRef<str> for Text {
    fn as_ref(&self) -> &str {
        self.0.as_str()
    }
}

impl Borrow<str> for Text {
    fn borrow(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.0.as_str(), f)
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.0.as_str(), f)
    }
}

impl From<&str> for Text {
    fn from(text: &str) -> Self {
        Text(SmolStr::new(text))
    }
}

impl From<&String> for Text {
    fn from(text: &String) -> Self {
        Text(SmolStr::new(text))
    }
}

/// A short string is copied in place; a long one into a shared text (one copy, made once: its
/// copies after that count a reference).
impl From<String> for Text {
    fn from(text: String) -> Self {
        Text(SmolStr::from(text))
    }
}

impl From<Box<str>> for Text {
    fn from(text: Box<str>) -> Self {
        Text(SmolStr::from(text))
    }
}

impl From<Arc<str>> for Text {
    fn from(text: Arc<str>) -> Self {
        Text(SmolStr::from(text))
    }
}

impl From<Text> for String {
    fn from(text: Text) -> Self {
        text.0.into()
    }
}

impl From<&Text> for String {
    fn from(text: &Text) -> Self {
        text.0.as_str().to_owned()
    }
}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Text {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<Text> for str {
    fn eq(&self, other: &Text) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<Text> for &str {
    fn eq(&self, other: &Text) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<Text> for String {
    fn eq(&self, other: &Text) -> bool {
        self.as_str() == other.as_str()
    }
}

/// Written as the string it is.
#[cfg(feature = "serde")]
impl serde::Serialize for Text {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Read from a string.
#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Text {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Text::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version or nonce up to 23 bytes is kept in place, so that copying it (into a stream's
    /// records, into an event) allocates nothing; a longer one is shared, not copied.
    #[test]
    fn a_short_text_is_kept_in_place_and_a_long_one_shared() {
        let nonce = Text::from(u64::MAX.to_string());
        assert!(nonce.is_inline(), "a nonce's 20 digits");
        let version = Text::from("0123456789abcdef");
        assert!(version.is_inline(), "a cache's 16 hex digits");
        assert!(Text::from("x".repeat(Text::INLINE).as_str()).is_inline());
        let long = Text::from("x".repeat(Text::INLINE + 1));
        assert!(!long.is_inline());
        let copy = long.clone();
        assert_eq!(copy.as_ptr(), long.as_ptr(), "a long text's copy shares its bytes");
        assert_eq!(copy, long);
    }

    #[test]
    fn a_text_compares_and_converts_as_its_string() {
        let text = Text::from("v1");
        assert_eq!(text, "v1");
        assert_eq!("v1", text);
        assert_eq!(text, String::from("v1"));
        assert_eq!(String::from("v1"), text);
        assert_ne!(text, "v2");
        assert_eq!(String::from(text.clone()), "v1");
        assert_eq!(format!("{text} {text:?}"), "v1 \"v1\"");
        assert!(Text::new().is_empty());
        let (a, b) = (Text::from("a"), Text::from("b"));
        assert!(a < b, "ordered as strings");
    }

    #[cfg(feature = "serde")]
    #[test]
    fn a_text_is_written_and_read_as_a_json_string() {
        let text = Text::from("0123456789abcdef");
        assert_eq!(serde_json::to_string(&text).unwrap(), r#""0123456789abcdef""#);
        assert_eq!(serde_json::from_str::<Text>(r#""v2""#).unwrap(), "v2");
    }
}
