//! The console's JSON: one row per proxy (the streams of one node id) and one cell per type,
//! filtered, sorted and paged on the server so that the page stays small and fast with ten
//! thousand proxies.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;
use serde_json::{Value, json};
use xds_proto::{ResourceType, TypeUrl};

use crate::status::{StreamStatus, TypeStatus, bounded_owned, truncate};

/// The most rows one page of the console's table holds (`limit` is clamped to it).
pub const MAX_CONSOLE_PAGE: usize = 500;

/// The rows a page holds unless `limit` says otherwise.
pub const DEFAULT_CONSOLE_PAGE: usize = 100;

/// The longest filter value (`group`, `type`, `q`) accepted: longer is a `400`.
pub const MAX_FILTER_BYTES: usize = 256;

/// The most group names listed for the group filter.
pub const MAX_LISTED_GROUPS: usize = 200;

/// The most bytes of rows one page holds (past its first row): node ids and NACK texts are the
/// clients', up to [`MAX_NACK_TEXT`](crate::MAX_NACK_TEXT) bytes each.
const MAX_PAGE_BYTES: usize = 1 << 20;

/// The most bytes of a NACK's text a table cell carries; the detail view shows all that the
/// server keeps.
const MAX_CELL_ERROR: usize = 1024;

/// Where one type of one proxy is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CellState {
    /// The client rejected the latest response it was sent.
    Nacked,
    /// The latest response awaits its ACK.
    Pending,
    /// The client subscribed and was sent nothing yet.
    NotSent,
    /// The client ACKed the latest response.
    Synced,
}

impl CellState {
    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "nacked" => CellState::Nacked,
            "pending" => CellState::Pending,
            "not_sent" => CellState::NotSent,
            "synced" => CellState::Synced,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            CellState::Nacked => "nacked",
            CellState::Pending => "pending",
            CellState::NotSent => "not_sent",
            CellState::Synced => "synced",
        }
    }

    /// The state of `ts`: a NACK counts only if it names the latest response's nonce (a NACK
    /// of an older response was overtaken by the newer one), as CSDS reads it.
    pub(crate) fn of(ts: &TypeStatus) -> Self {
        let Some(sent) = &ts.sent_version else { return CellState::NotSent };
        if ts.nack.as_ref().is_some_and(|n| ts.sent_nonce.as_deref() == Some(n.nonce.as_str())) {
            return CellState::Nacked;
        }
        // A delta ACK carries no version: the stream records the sent version as ACKed when
        // the ACK names the latest nonce.
        if ts.acked_version.as_ref() == Some(sent) { CellState::Synced } else { CellState::Pending }
    }
}

/// What the table is sorted by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SortKey {
    Node,
    Group,
    Connected,
    Stream,
    /// The row's worst cell first (NACKED, PENDING, NOT SENT, SYNCED).
    State,
}

/// A validated query of `GET /ui/api/proxies`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ProxyQuery {
    group: Option<String>,
    type_label: Option<String>,
    state: Option<CellState>,
    search: Option<String>,
    sort: SortKey,
    descending: bool,
    offset: usize,
    limit: usize,
}

/// The parameters `GET /ui/api/proxies` takes: any other is a `400`, so that a typo never
/// quietly shows every row.
const PARAMETERS: [&str; 8] = ["group", "type", "state", "q", "sort", "order", "offset", "limit"];

/// A bad query: the reason and the parameter, answered as `400` JSON.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BadQuery {
    pub(crate) error: String,
    pub(crate) parameter: String,
}

impl BadQuery {
    fn new(parameter: &str, error: String) -> Self {
        BadQuery { error, parameter: bounded_owned(parameter) }
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({ "error": self.error, "parameter": self.parameter })
    }
}

impl ProxyQuery {
    /// Validates the query: filters at most [`MAX_FILTER_BYTES`] bytes, `state`, `sort` and
    /// `order` from their known values, `offset` and `limit` non-negative integers (`limit`
    /// clamped to 1 ..= [`MAX_CONSOLE_PAGE`]).
    pub(crate) fn parse(query: &HashMap<String, String>) -> Result<Self, BadQuery> {
        if let Some(unknown) = query.keys().filter(|k| !PARAMETERS.contains(&k.as_str())).min() {
            let error = format!(
                "unknown parameter \"{}\" (known: {})",
                xds_core::echo(unknown),
                PARAMETERS.join(", ")
            );
            return Err(BadQuery::new(unknown, error));
        }
        let filter = |key: &str| -> Result<Option<String>, BadQuery> {
            match query.get(key).map(String::as_str) {
                None | Some("") => Ok(None),
                Some(text) if text.len() > MAX_FILTER_BYTES => Err(BadQuery::new(
                    key,
                    format!("{key} is at most {MAX_FILTER_BYTES} bytes, not {}", text.len()),
                )),
                Some(text) => Ok(Some(text.to_owned())),
            }
        };
        let number = |key: &str| -> Result<Option<usize>, BadQuery> {
            let Some(text) = query.get(key) else { return Ok(None) };
            text.parse::<usize>().map(Some).map_err(|_| {
                let error = format!(
                    "{key} must be a non-negative integer, not \"{}\"",
                    xds_core::echo(text)
                );
                BadQuery::new(key, error)
            })
        };
        let state = match filter("state")? {
            None => None,
            Some(text) => Some(CellState::parse(&text).ok_or_else(|| {
                let error = format!(
                    "state must be one of synced, pending, nacked, not_sent, not \"{}\"",
                    xds_core::echo(&text)
                );
                BadQuery::new("state", error)
            })?),
        };
        let sort = match filter("sort")?.as_deref() {
            None | Some("node") => SortKey::Node,
            Some("group") => SortKey::Group,
            Some("connected") => SortKey::Connected,
            Some("stream") => SortKey::Stream,
            Some("state") => SortKey::State,
            Some(other) => {
                let error = format!(
                    "sort must be one of node, group, connected, stream, state, not \"{}\"",
                    xds_core::echo(other)
                );
                return Err(BadQuery::new("sort", error));
            }
        };
        let descending = match filter("order")?.as_deref() {
            None | Some("asc") => false,
            Some("desc") => true,
            Some(other) => {
                let error = format!("order must be asc or desc, not \"{}\"", xds_core::echo(other));
                return Err(BadQuery::new("order", error));
            }
        };
        Ok(ProxyQuery {
            group: filter("group")?,
            type_label: filter("type")?,
            state,
            search: filter("q")?,
            sort,
            descending,
            offset: number("offset")?.unwrap_or(0),
            limit: number("limit")?.unwrap_or(DEFAULT_CONSOLE_PAGE).clamp(1, MAX_CONSOLE_PAGE),
        })
    }
}

/// One type's cell of a row.
struct Cell {
    label: String,
    state: CellState,
    /// When the latest response was sent (PENDING: it waits for its ACK since), or when the
    /// client NACKed it (NACKED).
    since_ms: Option<u64>,
    /// The stream (its index in the row) the cell shows: of the row's streams that carry the
    /// type, the first in the worst state.
    stream: usize,
    /// The type's URL on that stream.
    type_url: String,
    /// How many of the row's streams carry the type (more than one: two proxies share a node
    /// id, or a stream was replaced and the old one is not closed yet).
    streams: usize,
}

/// The most stream ids a row lists; `streams_total` counts them all.
const MAX_ROW_STREAMS: usize = 16;

/// The columns: every type some stream has, built-in types in make-before-break order (the
/// order the server sends them in), then custom types by name.
fn column_order(label: &str) -> (usize, &str) {
    let position = ResourceType::ALL.iter().position(|t| t.label() == label);
    (position.unwrap_or(usize::MAX), label)
}

/// One proxy: the streams of one node id, by stream id. A proxy that does not use ADS opens a
/// stream per type, and its row shows them together, as an operator thinks of it. A stream with
/// no node id (anonymous, or before its first request) is a row of its own: nothing says that
/// two of them are the same proxy.
struct Row {
    streams: Vec<StreamStatus>,
    cells: Vec<Cell>,
    worst: Option<CellState>,
}

impl Row {
    /// The first stream: its node id, cluster and id stand for the row's.
    fn first(&self) -> &StreamStatus {
        &self.streams[0]
    }

    /// The group of the first stream that has one: the streams of one node are grouped alike
    /// but for a regroup in flight.
    fn group(&self) -> Option<&String> {
        self.streams.iter().find_map(|s| s.group.as_ref())
    }

    fn connected_ms(&self) -> u64 {
        self.streams.iter().map(|s| s.opened_ms).min().unwrap_or_default()
    }

    /// The row's cells: one per type any of its streams carries, showing the worst.
    fn merge_cells(&mut self) {
        let mut cells: Vec<Cell> = Vec::new();
        for (stream, status) in self.streams.iter().enumerate() {
            for (type_url, ts) in &status.types {
                let state = CellState::of(ts);
                let since_ms = match state {
                    CellState::Nacked => ts.nack.as_ref().map(|n| n.at_ms),
                    CellState::Pending => Some(ts.sent_ms).filter(|&ms| ms > 0),
                    _ => None,
                };
                let parsed = TypeUrl::parse(type_url);
                let label = parsed.label();
                match cells.iter_mut().find(|c| c.label == label) {
                    Some(cell) => {
                        cell.streams += 1;
                        if state < cell.state {
                            cell.state = state;
                            cell.since_ms = since_ms;
                            cell.stream = stream;
                            type_url.clone_into(&mut cell.type_url);
                        }
                    }
                    None => cells.push(Cell {
                        label: label.to_owned(),
                        state,
                        since_ms,
                        stream,
                        type_url: type_url.to_owned(),
                        streams: 1,
                    }),
                }
            }
        }
        self.worst = cells.iter().map(|c| c.state).min();
        self.cells = cells;
    }
}

/// The streams as rows, one per node id (one per anonymous stream), in the order of their first
/// streams' ids.
fn rows_of(streams: Vec<StreamStatus>) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    let mut by_node: HashMap<String, usize> = HashMap::new();
    for status in streams {
        let known = if status.node_id.is_empty() { None } else { by_node.get(&status.node_id) };
        match known {
            Some(&row) => rows[row].streams.push(status),
            None => {
                if !status.node_id.is_empty() {
                    by_node.insert(status.node_id.clone(), rows.len());
                }
                rows.push(Row { streams: vec![status], cells: Vec::new(), worst: None });
            }
        }
    }
    for row in &mut rows {
        row.streams.sort_by_key(|s| s.stream);
        row.merge_cells();
    }
    rows.sort_by_key(|row| row.first().stream);
    rows
}

/// The page of `GET /ui/api/proxies` for `query`, from the streams' summaries (no details), at
/// `now_ms`.
pub(crate) fn proxies_page(streams: Vec<StreamStatus>, query: &ProxyQuery, now_ms: u64) -> Value {
    let total_streams = streams.len();
    let mut rows = rows_of(streams);
    let total_proxies = rows.len();
    let mut columns = BTreeSet::new();
    let mut groups = BTreeSet::new();
    for row in &rows {
        for cell in &row.cells {
            if !columns.contains(cell.label.as_str()) {
                columns.insert(cell.label.clone());
            }
        }
        for group in row.streams.iter().filter_map(|s| s.group.as_ref()) {
            if groups.len() < MAX_LISTED_GROUPS && !groups.contains(group.as_str()) {
                groups.insert(group.clone());
            }
        }
    }
    let mut columns: Vec<String> = columns.into_iter().collect();
    columns.sort_by(|a, b| column_order(a).cmp(&column_order(b)));

    rows.retain(|row| matches(row, query));
    let mut counts: BTreeMap<&'static str, usize> =
        [CellState::Synced, CellState::Pending, CellState::Nacked, CellState::NotSent]
            .into_iter()
            .map(|s| (s.name(), 0))
            .collect();
    for row in &rows {
        for cell in &row.cells {
            *counts.entry(cell.state.name()).or_default() += 1;
        }
    }
    sort(&mut rows, query);

    let total = rows.len();
    let mut page = Vec::new();
    let mut bytes = 0;
    for row in rows.iter().skip(query.offset).take(query.limit) {
        let shown = row_json(row);
        let size = shown.to_string().len();
        if !page.is_empty() && bytes + size > MAX_PAGE_BYTES {
            break;
        }
        bytes += size;
        page.push(shown);
    }
    let next = query.offset.saturating_add(page.len());
    let mut body = json!({
        "now_ms": now_ms,
        "total_streams": total_streams,
        "total_proxies": total_proxies,
        "total": total,
        "offset": query.offset,
        "limit": query.limit,
        "types": columns,
        "groups": groups,
        "counts": counts,
        "rows": page,
    });
    if next < total {
        body["next_offset"] = json!(next);
    }
    body
}

fn matches(row: &Row, query: &ProxyQuery) -> bool {
    if let Some(group) = &query.group
        && !row.streams.iter().any(|s| s.group.as_ref() == Some(group))
    {
        return false;
    }
    if let Some(search) = &query.search
        && !row.first().node_id.contains(search.as_str())
    {
        return false;
    }
    let typed = |cell: &&Cell| query.type_label.as_ref().is_none_or(|t| &cell.label == t);
    let mut cells = row.cells.iter().filter(typed).peekable();
    if query.type_label.is_some() && cells.peek().is_none() {
        return false;
    }
    match query.state {
        Some(state) => cells.any(|c| c.state == state),
        None => true,
    }
}

fn sort(rows: &mut [Row], query: &ProxyQuery) {
    // The first stream's id breaks every tie (a stream is in one row): the order is total, so
    // pages neither repeat nor skip a row between two polls that see the same streams.
    rows.sort_by(|a, b| {
        let (x, y) = (a.first(), b.first());
        let order = match query.sort {
            SortKey::Node => x.node_id.cmp(&y.node_id),
            SortKey::Group => a.group().cmp(&b.group()),
            SortKey::Connected => a.connected_ms().cmp(&b.connected_ms()),
            SortKey::Stream => std::cmp::Ordering::Equal,
            // A row with no type yet sorts after every row with one.
            SortKey::State => rank(a.worst).cmp(&rank(b.worst)),
        };
        let order = order.then(x.stream.cmp(&y.stream));
        if query.descending { order.reverse() } else { order }
    });
}

/// A row's worst state as a sort key; a row with no type yet sorts after every other.
fn rank(worst: Option<CellState>) -> u8 {
    worst.map_or(u8::MAX, |s| s as u8)
}

fn row_json(row: &Row) -> Value {
    let mut cells = serde_json::Map::new();
    for cell in &row.cells {
        let Some(ts) = row.streams[cell.stream].types.get(&cell.type_url) else { continue };
        let mut shown = json!({ "state": cell.state.name() });
        if cell.streams > 1 {
            shown["streams"] = json!(cell.streams);
        }
        if let Some(v) = &ts.sent_version {
            shown["sent_version"] = json!(v);
        }
        if let Some(v) = &ts.acked_version {
            shown["acked_version"] = json!(v);
        }
        if let Some(since) = cell.since_ms {
            shown["since_ms"] = json!(since);
        }
        if let (CellState::Nacked, Some(nack)) = (cell.state, &ts.nack) {
            shown["rejected_version"] = json!(nack.rejected_version);
            shown["kept_version"] = json!(nack.version);
            shown["error"] = json!(truncate(&nack.error, MAX_CELL_ERROR));
            shown["error_bytes"] = json!(nack.error_bytes);
        }
        cells.insert(cell.label.clone(), shown);
    }
    let first = row.first();
    let ids: Vec<u64> = row.streams.iter().take(MAX_ROW_STREAMS).map(|s| s.stream).collect();
    let mut variants: Vec<&str> = row.streams.iter().map(|s| s.variant).collect();
    variants.sort_unstable();
    variants.dedup();
    let mut shown = json!({
        "stream": first.stream,
        "streams": ids,
        "streams_total": row.streams.len(),
        "node_id": bounded_owned(&first.node_id),
        "node_cluster": bounded_owned(&first.node_cluster),
        "variant": variants.join("+"),
        "connected_ms": row.connected_ms(),
        "state": row.worst.map(CellState::name),
        "cells": cells,
    });
    if let Some(group) = row.group() {
        shown["group"] = json!(bounded_owned(group));
    }
    if let Some(since) = row.streams.iter().filter_map(|s| s.unserved_since_ms).min() {
        shown["unserved_since_ms"] = json!(since);
    }
    shown
}

/// The state of a type as a status page shows it (the same rule as [`CellState::of`]).
fn state_of_json(ts: &Value) -> CellState {
    let sent = ts.get("sent_version").filter(|v| !v.is_null());
    let Some(sent) = sent else { return CellState::NotSent };
    let nonce = ts.get("sent_nonce");
    if ts.get("nack").and_then(|n| n.get("nonce")).is_some_and(|n| Some(n) == nonce) {
        return CellState::Nacked;
    }
    if ts.get("acked_version") == Some(sent) { CellState::Synced } else { CellState::Pending }
}

/// The body of `GET /ui/api/proxy?node=ID`: the node's streams from a status page
/// ([`StatusRegistry::page_json`](crate::StatusRegistry::page_json), bounded the same way) with
/// each stream's types as a list in column order, each with its label (`type`) and `state`.
pub(crate) fn proxy_detail(mut page: Value, now_ms: u64) -> Value {
    let streams = page.get_mut("streams").and_then(Value::as_array_mut);
    for stream in streams.into_iter().flatten() {
        let Some(Value::Object(types)) = stream.get_mut("types").map(Value::take) else {
            continue;
        };
        let mut listed: Vec<(String, Value)> = types
            .into_iter()
            .map(|(type_url, mut ts)| {
                let label = TypeUrl::parse(&type_url).label().to_owned();
                ts["state"] = json!(state_of_json(&ts).name());
                ts["type"] = json!(label);
                ts["type_url"] = json!(type_url);
                (label, ts)
            })
            .collect();
        listed.sort_by(|a, b| column_order(&a.0).cmp(&column_order(&b.0)));
        stream["types"] = Value::Array(listed.into_iter().map(|(_, ts)| ts).collect());
    }
    page["now_ms"] = json!(now_ms);
    page
}
