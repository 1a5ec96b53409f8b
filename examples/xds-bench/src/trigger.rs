//! The update trigger: `GET` a URL naming the cluster; the answer carries the new port.

use std::time::Duration;

use super::http::Url;

/// An `http://host:port/path` URL template with `{k}` where the cluster index goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    url: Url,
}

impl Trigger {
    /// Parses a template such as `http://127.0.0.1:18001/bench/update?i={k}`.
    pub fn parse(template: &str) -> Result<Self, String> {
        Ok(Trigger { url: Url::parse(template).map_err(|e| format!("the trigger: {e}"))? })
    }

    /// Triggers an update of cluster `k`; returns the port in the answer's body once the server
    /// answered 200.
    pub async fn fire(&self, k: u32, timeout: Duration) -> Result<u32, String> {
        let path = self.url.path.replace("{k}", &k.to_string());
        let body = self.url.get(&path, timeout).await.map_err(|e| format!("trigger: {e}"))?;
        port_of(&body)
    }
}

/// The port: the first non-empty line of the body.
fn port_of(body: &str) -> Result<u32, String> {
    body.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .and_then(|l| l.parse().ok())
        .ok_or_else(|| format!("trigger: the answer carries no port: {:?}", body.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_templates_and_ports() {
        let t = Trigger::parse("http://127.0.0.1:18001/bench/update?i={k}").unwrap();
        assert_eq!(t.url.authority, "127.0.0.1:18001");
        assert!(Trigger::parse("https://x/").is_err());
        assert_eq!(port_of("\n10042\n"), Ok(10042));
        assert!(port_of("no port").is_err());
    }
}
