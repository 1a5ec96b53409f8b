//! The last reloads and etcd revisions, applied or refused, for the console's Configuration
//! panel: when, from where, what changed, and the error of a refused one.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

/// How many reloads the history keeps (newest first); older ones are dropped.
pub(crate) const MAX_HISTORY: usize = 20;

/// The most bytes of a refused configuration's error the history keeps: a YAML error quotes
/// the file, and the panel polls the history every second.
pub(crate) const MAX_ERROR_BYTES: usize = 2048;

/// The most group names listed as added or removed in one entry; the rest are counted.
const MAX_NAMED_GROUPS: usize = 10;

/// What one publish changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Changed {
    /// Groups that appeared and groups that went away.
    pub(crate) groups_added: Vec<String>,
    pub(crate) groups_removed: Vec<String>,
    /// Groups whose snapshot was set again (their content or version changed).
    pub(crate) groups_updated: usize,
    /// Resources created, changed or deleted over every group.
    pub(crate) resources_changed: usize,
    /// Resources served by type label after the publish, where the count moved: (before, after).
    pub(crate) counts: BTreeMap<&'static str, (u64, u64)>,
}

impl Changed {
    /// The difference between the groups and per-type counts served before and after.
    pub(crate) fn between(
        old_groups: &[String],
        new_groups: &[String],
        old_counts: &BTreeMap<&'static str, u64>,
        new_counts: &BTreeMap<&'static str, u64>,
    ) -> Self {
        let old: BTreeSet<&String> = old_groups.iter().collect();
        let new: BTreeSet<&String> = new_groups.iter().collect();
        let labels: BTreeSet<&'static str> =
            old_counts.keys().chain(new_counts.keys()).copied().collect();
        let counts = labels
            .into_iter()
            .filter_map(|l| {
                let (a, b) = (old_counts.get(l).copied(), new_counts.get(l).copied());
                (a != b).then(|| (l, (a.unwrap_or(0), b.unwrap_or(0))))
            })
            .collect();
        Changed {
            groups_added: new.difference(&old).map(|g| (*g).clone()).collect(),
            groups_removed: old.difference(&new).map(|g| (*g).clone()).collect(),
            counts,
            ..Changed::default()
        }
    }

    fn to_json(&self) -> Value {
        let named = |groups: &[String]| -> Value {
            let shown: Vec<&str> = groups
                .iter()
                .take(MAX_NAMED_GROUPS)
                .map(|g| if g.is_empty() { "(default)" } else { g.as_str() })
                .collect();
            json!({ "names": shown, "total": groups.len() })
        };
        let counts: BTreeMap<&str, Value> = self
            .counts
            .iter()
            .map(|(l, (before, after))| (*l, json!({ "before": before, "after": after })))
            .collect();
        json!({
            "groups_added": named(&self.groups_added),
            "groups_removed": named(&self.groups_removed),
            "groups_updated": self.groups_updated,
            "resources_changed": self.resources_changed,
            "resource_counts": counts,
        })
    }
}

/// One reload.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    at_ms: u64,
    source: String,
    outcome: Outcome,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Applied(Changed),
    Refused(String),
}

/// The last [`MAX_HISTORY`] reloads, newest first.
#[derive(Debug, Default)]
pub(crate) struct History {
    entries: VecDeque<Entry>,
    /// Reloads recorded since start, including those dropped from `entries`.
    recorded: u64,
}

impl History {
    /// Records a configuration served from `source` (e.g. `files`, `etcd revision 7`).
    pub(crate) fn applied(&mut self, source: String, changed: Changed) {
        self.push(source, Outcome::Applied(changed));
    }

    /// Records a configuration refused, with why (cut to [`MAX_ERROR_BYTES`]).
    pub(crate) fn refused(&mut self, source: String, error: &str) {
        self.push(source, Outcome::Refused(cut(error, MAX_ERROR_BYTES)));
    }

    fn push(&mut self, source: String, outcome: Outcome) {
        let at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.entries.push_front(Entry { at_ms, source, outcome });
        self.entries.truncate(MAX_HISTORY);
        self.recorded += 1;
    }

    /// The history as the console's Configuration panel takes it (`history`, newest first).
    pub(crate) fn to_json(&self) -> Value {
        let history: Vec<Value> = self
            .entries
            .iter()
            .map(|e| {
                let mut v = json!({ "at_ms": e.at_ms, "source": e.source });
                match &e.outcome {
                    Outcome::Applied(changed) => {
                        v["outcome"] = "applied".into();
                        v["changes"] = changed.to_json();
                    }
                    Outcome::Refused(error) => {
                        v["outcome"] = "refused".into();
                        v["error"] = error.as_str().into();
                    }
                }
                v
            })
            .collect();
        json!({ "history": history, "recorded": self.recorded })
    }
}

/// `text` cut to at most `max` bytes on a character boundary, marked when cut.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… (cut at {max} bytes)", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_keeps_the_newest_entries_first_and_bounded() {
        let mut h = History::default();
        for i in 0..MAX_HISTORY + 5 {
            h.applied(format!("files #{i}"), Changed::default());
        }
        h.refused("etcd revision 9".into(), &"é".repeat(MAX_ERROR_BYTES));
        let json = h.to_json();
        let history = json["history"].as_array().unwrap();
        assert_eq!(history.len(), MAX_HISTORY);
        assert_eq!(json["recorded"], MAX_HISTORY as u64 + 6);
        assert_eq!(history[0]["outcome"], "refused");
        assert_eq!(history[0]["source"], "etcd revision 9");
        let error = history[0]["error"].as_str().unwrap();
        assert!(error.len() <= MAX_ERROR_BYTES + 32, "{}", error.len());
        assert!(error.ends_with("(cut at 2048 bytes)"), "{error}");
        assert_eq!(history[1]["source"], format!("files #{}", MAX_HISTORY + 4));
        assert_eq!(history[1]["outcome"], "applied");
    }

    #[test]
    fn changes_name_the_groups_and_the_counts_that_moved() {
        let old = vec![String::new(), "edge".to_owned()];
        let new = vec![String::new(), "mesh".to_owned()];
        let before = BTreeMap::from([("cluster", 2), ("listener", 1)]);
        let after = BTreeMap::from([("cluster", 3), ("listener", 1), ("route", 1)]);
        let mut changed = Changed::between(&old, &new, &before, &after);
        changed.groups_updated = 2;
        changed.resources_changed = 4;
        assert_eq!(changed.groups_added, ["mesh"]);
        assert_eq!(changed.groups_removed, ["edge"]);
        let json = changed.to_json();
        assert_eq!(json["groups_added"], json!({"names": ["mesh"], "total": 1}));
        assert_eq!(json["resource_counts"]["cluster"], json!({"before": 2, "after": 3}));
        assert_eq!(json["resource_counts"]["route"], json!({"before": 0, "after": 1}));
        assert!(json["resource_counts"].get("listener").is_none(), "{json}");
        assert_eq!(json["resources_changed"], 4);
        let all: Vec<String> = (0..15).map(|i| format!("g{i:02}")).collect();
        let json = Changed::between(&[], &all, &before, &before).to_json();
        assert_eq!(json["groups_added"]["names"].as_array().unwrap().len(), MAX_NAMED_GROUPS);
        assert_eq!(json["groups_added"]["total"], 15);
    }
}
