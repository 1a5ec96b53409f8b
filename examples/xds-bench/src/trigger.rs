//! The update trigger: `GET` a URL naming the cluster, or run a command naming it; the answer (the
//! body, or the command's standard output) carries the new port.

use std::process::Stdio;
use std::time::Duration;

use super::http::Url;

/// Where an update is triggered; `{k}` stands for the cluster index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// An `http://host:port/path` URL template, e.g. `xds-bench-server`'s `/bench/update?i={k}`.
    Http(Url),
    /// A shell command (`sh -c`), e.g. one that rewrites a configuration file and runs
    /// `xds-file-server publish`: a server that has no update endpoint of its own (the replicas
    /// over etcd of `reliability/replicas.sh`). It must exit 0 once the update is published and
    /// print the new port.
    Command(String),
}

impl Trigger {
    /// Parses a template such as `http://127.0.0.1:18001/bench/update?i={k}`.
    pub fn parse(template: &str) -> Result<Self, String> {
        Ok(Trigger::Http(Url::parse(template).map_err(|e| format!("the trigger: {e}"))?))
    }

    /// A command template such as `bash update.sh {k}`.
    pub fn command(template: &str) -> Result<Self, String> {
        if !template.contains("{k}") {
            return Err("the trigger command must name the cluster with {k}".into());
        }
        Ok(Trigger::Command(template.to_owned()))
    }

    /// Triggers an update of cluster `k`; returns the port in the answer once the update is
    /// published (the server answered 200, or the command exited 0).
    pub async fn fire(&self, k: u32, timeout: Duration) -> Result<u32, String> {
        match self {
            Trigger::Http(url) => {
                let path = url.path.replace("{k}", &k.to_string());
                let body = url.get(&path, timeout).await.map_err(|e| format!("trigger: {e}"))?;
                port_of(&body)
            }
            Trigger::Command(template) => {
                let line = template.replace("{k}", &k.to_string());
                let run = tokio::process::Command::new("sh")
                    .args(["-c", &line])
                    .stdin(Stdio::null())
                    .kill_on_drop(true)
                    .output();
                let out = match tokio::time::timeout(timeout, run).await {
                    Ok(Ok(out)) => out,
                    Ok(Err(e)) => return Err(format!("trigger: cannot run `{line}`: {e}")),
                    Err(_) => return Err(format!("trigger: `{line}` took more than {timeout:?}")),
                };
                if !out.status.success() {
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    return Err(format!(
                        "trigger: `{line}` failed ({}): {}",
                        out.status,
                        stderr.trim()
                    ));
                }
                port_of(&String::from_utf8_lossy(&out.stdout))
            }
        }
    }
}

/// The port: the first non-empty line of the answer.
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
        let Trigger::Http(url) = t else { panic!("an HTTP trigger") };
        assert_eq!(url.authority, "127.0.0.1:18001");
        assert!(Trigger::parse("https://x/").is_err());
        assert!(Trigger::command("echo 1").is_err(), "no {{k}}");
        assert_eq!(port_of("\n10042\n"), Ok(10042));
        assert!(port_of("no port").is_err());
    }

    #[tokio::test]
    async fn a_command_trigger_answers_its_port_or_its_failure() {
        let t = Trigger::command("echo $((20000 + {k}))").unwrap();
        assert_eq!(t.fire(7, Duration::from_secs(10)).await, Ok(20007));
        let failing = Trigger::command("echo nope {k} >&2; exit 3").unwrap();
        let e = failing.fire(1, Duration::from_secs(10)).await.unwrap_err();
        assert!(e.contains("nope 1"), "{e}");
    }
}
