// The operator console. Every value shown comes from a client (node ids, NACK texts, resource
// names): it is put into the page with textContent or as an attribute value, never as HTML.
"use strict";

(function () {
  const POLL_MS = 1000;
  const STATE_TEXT = { synced: "SYNCED", pending: "PENDING", nacked: "NACKED", not_sent: "NOT SENT" };
  const FILTERS = ["q", "group", "type", "state", "sort", "order", "offset", "limit"];

  const $ = (id) => document.getElementById(id);

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  function age(ms, now) {
    let s = Math.max(0, Math.round((now - ms) / 1000));
    if (s < 120) return s + "s";
    const m = Math.floor(s / 60);
    if (m < 120) return m + "m";
    const h = Math.floor(m / 60);
    if (h < 48) return h + "h";
    return Math.floor(h / 24) + "d";
  }

  function iso(ms) {
    return new Date(ms).toISOString();
  }

  // The empty group name is a cache's default group (xds-file-server's unnamed group).
  function groupText(group) {
    if (group === undefined || group === null) return "";
    return group === "" ? "(default)" : group;
  }

  function nodeLink(id) {
    const a = el("a", id === "" ? "(anonymous)" : id);
    a.href = "ui?node=" + encodeURIComponent(id);
    return a;
  }

  function showError(target, message) {
    target.hidden = !message;
    target.textContent = message || "";
  }

  async function getJson(path) {
    const response = await fetch(path, { cache: "no-store", credentials: "same-origin" });
    let body = null;
    try {
      body = await response.json();
    } catch (e) {
      body = null;
    }
    if (!response.ok) {
      const reason = body && body.error ? body.error : response.status + " " + response.statusText;
      const error = new Error(reason);
      error.status = response.status;
      throw error;
    }
    return body;
  }

  let timer = null;
  function schedule(fn) {
    clearTimeout(timer);
    timer = setTimeout(fn, POLL_MS);
  }

  // ---- the table of proxies -------------------------------------------------------------------

  const params = new URLSearchParams(location.search);
  const filters = {};
  for (const key of FILTERS) {
    const value = params.get(key);
    if (value !== null && value !== "") filters[key] = value.slice(0, 256);
  }
  // NACK texts the operator expanded, kept open across refreshes (by stream and type).
  const expanded = new Set();

  function filterQuery() {
    const q = new URLSearchParams();
    for (const key of FILTERS) if (filters[key]) q.set(key, filters[key]);
    return q.toString();
  }

  function setFilter(key, value) {
    if (value) filters[key] = value;
    else delete filters[key];
    if (key !== "offset") delete filters.offset;
    const q = filterQuery();
    history.replaceState(null, "", q ? "ui?" + q : "ui");
    pollList();
  }

  function fillSelect(select, values, chosen) {
    const wanted = ["", ...values];
    if (chosen && !wanted.includes(chosen)) wanted.push(chosen);
    const current = Array.from(select.options).map((o) => o.value);
    if (current.length === wanted.length && current.every((v, i) => v === wanted[i])) {
      select.value = chosen || "";
      return;
    }
    select.replaceChildren();
    for (const value of wanted) {
      const option = el("option", value === "" ? "all" : value);
      option.value = value;
      select.append(option);
    }
    select.value = chosen || "";
  }

  function sortHeader(text, key) {
    const th = el("th", text, "sortable");
    th.dataset.sort = key;
    const active = (filters.sort || "node") === key;
    if (active) th.classList.add("sorted");
    if (active && filters.order === "desc") th.classList.add("desc");
    th.title = "sort by " + text.toLowerCase();
    th.addEventListener("click", () => {
      const desc = active && filters.order !== "desc";
      filters.order = desc ? "desc" : "";
      setFilter("sort", key === "node" ? "" : key);
    });
    return th;
  }

  function renderCell(td, row, type, cell, now) {
    if (!cell) {
      td.append(el("span", "\u2013", "none"));
      td.title = "not subscribed";
      return;
    }
    td.classList.add("cell", cell.state);
    td.dataset.state = cell.state;
    let label = STATE_TEXT[cell.state] || cell.state;
    if (cell.state === "pending" && cell.since_ms) label += " " + age(cell.since_ms, now);
    const versions = [];
    if (cell.sent_version !== undefined) versions.push("sent " + cell.sent_version);
    if (cell.acked_version !== undefined) versions.push("ACKed " + cell.acked_version);
    // Several streams of the proxy carry the type: the cell shows the worst of them.
    if (cell.streams > 1) versions.push("worst of " + cell.streams + " streams");
    if (cell.state !== "nacked") {
      td.textContent = label;
      td.title = versions.join(", ");
      return;
    }
    const key = (row.node_id || "stream " + row.stream) + "/" + type;
    const details = el("details");
    details.open = expanded.has(key);
    details.addEventListener("toggle", () => {
      if (details.open) expanded.add(key);
      else expanded.delete(key);
    });
    details.append(el("summary", label + " " + cell.rejected_version));
    const cut = cell.error_bytes > cell.error.length ? " (cut, " + cell.error_bytes + " bytes)" : "";
    details.append(el("div", cell.error + cut, "nack-text"));
    details.append(el("div", "rejected " + cell.rejected_version + ", kept " + cell.kept_version +
      (cell.since_ms ? ", " + age(cell.since_ms, now) + " ago" : "")));
    td.title = cell.error;
    td.append(details);
  }

  function renderList(data) {
    const now = data.now_ms;
    const c = data.counts;
    const replica = data.control_plane_id === undefined ? "" : "control plane " + data.control_plane_id + ": ";
    $("summary").textContent = replica + data.total_proxies + " proxies (" + data.total_streams + " streams), " +
      data.total + " shown \u2014 " +
      c.synced + " synced, " + c.pending + " pending, " + c.nacked + " NACKed, " + c.not_sent + " not sent";
    $("updated").textContent = "updated " + new Date(now).toLocaleTimeString();
    fillSelect($("f-group"), data.groups.filter((g) => g !== ""), filters.group);
    fillSelect($("f-type"), data.types, filters.type);

    const head = $("head");
    head.replaceChildren(sortHeader("Node", "node"), sortHeader("Group", "group"), el("th", "Variant"),
      sortHeader("Connected", "connected"));
    for (const type of data.types) {
      const th = sortHeader(type, "state");
      th.title = "sort by state (worst first)";
      th.classList.remove("sorted");
      head.append(th);
    }
    const rows = document.createDocumentFragment();
    for (const row of data.rows) {
      const tr = el("tr");
      tr.dataset.node = row.node_id;
      tr.dataset.state = row.state || "";
      const node = el("td", null, "node");
      node.append(nodeLink(row.node_id));
      if (row.streams_total > 1) {
        const streams = el("span", " \u00d7" + row.streams_total, "streams");
        streams.title = row.streams_total + " streams: " + row.streams.join(", ") +
          (row.streams_total > row.streams.length ? ", \u2026" : "");
        node.append(streams);
      }
      tr.append(node);
      tr.append(el("td", groupText(row.group)));
      tr.append(el("td", row.variant));
      const connected = el("td", age(row.connected_ms, now) + " ago");
      connected.title = iso(row.connected_ms);
      tr.append(connected);
      for (const type of data.types) {
        const td = el("td");
        td.dataset.type = type;
        renderCell(td, row, type, row.cells[type], now);
        tr.append(td);
      }
      rows.append(tr);
    }
    $("rows").replaceChildren(rows);
    const first = data.rows.length ? data.offset + 1 : 0;
    $("page").textContent = first + "\u2013" + (data.offset + data.rows.length) + " of " + data.total;
    $("prev").disabled = data.offset === 0;
    $("next").disabled = data.next_offset === undefined;
    $("next").dataset.offset = data.next_offset === undefined ? "" : data.next_offset;
    $("prev").dataset.offset = Math.max(0, data.offset - data.limit);
  }

  // Each poll's number: an answer that arrives after a newer poll started (the filters
  // changed meanwhile) is dropped, so the table never goes back to an older filter.
  let polls = 0;

  async function pollList() {
    clearTimeout(timer);
    const mine = ++polls;
    const q = filterQuery();
    try {
      const data = await getJson("ui/api/proxies" + (q ? "?" + q : ""));
      if (mine !== polls) return;
      showError($("error"), "");
      renderList(data);
    } catch (e) {
      if (mine !== polls) return;
      showError($("error"), "cannot read the proxies: " + e.message);
      if (e.status === 400) {
        // A bad filter from the address bar: start over rather than repeat the error.
        for (const key of FILTERS) delete filters[key];
        history.replaceState(null, "", "ui");
      }
    }
    schedule(pollList);
  }

  function startList() {
    $("list-view").hidden = false;
    for (const key of ["q", "group", "type", "state", "limit"]) {
      const input = $("f-" + key);
      if (filters[key]) input.value = filters[key];
      input.addEventListener(key === "q" ? "input" : "change", () => setFilter(key, input.value.slice(0, 256)));
    }
    $("filters").addEventListener("submit", (e) => e.preventDefault());
    $("prev").addEventListener("click", () => setFilter("offset", $("prev").dataset.offset));
    $("next").addEventListener("click", () => setFilter("offset", $("next").dataset.offset));
    pollList();
  }

  // ---- one node -------------------------------------------------------------------------------

  function table(headers, rows) {
    const t = el("table");
    const tr = el("tr");
    for (const h of headers) tr.append(el("th", h));
    const thead = el("thead");
    thead.append(tr);
    const tbody = el("tbody");
    for (const cells of rows) {
      const row = el("tr");
      for (const cell of cells) {
        if (cell instanceof Node) {
          const td = el("td");
          td.append(cell);
          row.append(td);
        } else {
          row.append(el("td", cell));
        }
      }
      tbody.append(row);
    }
    t.append(thead, tbody);
    return t;
  }

  function stateCell(state) {
    const span = el("span", STATE_TEXT[state] || state, "cell " + state);
    span.dataset.state = state;
    return span;
  }

  // One event of a stream's history as a line of text (the client's texts stay text).
  function eventText(e) {
    switch (e.event) {
      case "subscribed": {
        let text = "subscribed to " + e.added + " more";
        if (e.removed) text += ", unsubscribed from " + e.removed;
        if (e.names.length) text += ": " + e.names.join(", ") + (e.added > e.names.length ? ", \u2026" : "");
        return text;
      }
      case "sent": {
        const answer = !e.acked ? "" : e.latency_ms === undefined ? ", ACKed" : ", ACKed after " + e.latency_ms + " ms";
        return "sent version " + e.version + " (" + e.resources + " resource(s))" + answer;
      }
      case "nacked": return "NACKed " + e.rejected_version + ": " + e.error;
      case "stale": return "answered an older response (stale nonce)";
      case "regrouped": {
        const name = (g) => (g === null || g === undefined ? "(none)" : groupText(g));
        return "moved from group " + name(e.from) + " to " + name(e.to);
      }
      case "unserved": return e.unserved ? "served nothing: its group has no configuration" : "served again";
      default: return e.event;
    }
  }

  function renderStreams(data) {
    const box = document.createDocumentFragment();
    const now = data.now_ms;
    if (!data.streams.length) box.append(el("p", "No open stream of this node."));
    for (const s of data.streams) {
      const div = el("div", null, "stream");
      div.append(el("h3", "Stream " + s.stream + " (" + s.variant + ")"));
      const facts = [
        ["group", s.group === undefined ? "(none yet)" : groupText(s.group)],
        ["cluster", s.node_cluster],
        ["connected", iso(s.opened_ms) + " (" + age(s.opened_ms, now) + " ago)"],
      ];
      if (s.unserved_since_ms) {
        facts.push(["served nothing of " + (s.unserved_types || []).join(", "), "since " + iso(s.unserved_since_ms)]);
      }
      div.append(table(["", ""], facts));
      const rows = s.types.map((t) => [
        t.type,
        stateCell(t.state),
        t.sent_version === null ? "" : t.sent_version,
        t.acked_version === null ? "" : t.acked_version,
        t.wildcard ? "* " + t.names.join(" ") : t.names.join(" "),
        String(t.resources_total === undefined ? Object.keys(t.resources).length : t.resources_total),
        t.last_request_ms ? iso(t.last_request_ms) : "",
      ]);
      div.append(table(["type", "state", "sent", "ACKed", "subscribed", "held", "last request"], rows));
      // The stream's history as the server keeps it (its latest events), oldest first.
      const events = [[iso(s.opened_ms), "", "stream opened (" + s.variant + ")"]];
      for (const e of s.events || []) events.push([iso(e.at_ms), e.type || "", eventText(e)]);
      div.append(el("h4", "Events"));
      div.append(table(["at", "type", "event"], events));
      const errors = [];
      for (const t of s.types) {
        for (const [name, e] of Object.entries(t.errors || {})) errors.push([t.type, name, e.code + ": " + e.message]);
      }
      if (errors.length) {
        div.append(el("h4", "Resource errors told to the client"));
        div.append(table(["type", "name", "error"], errors));
      }
      box.append(div);
    }
    $("d-streams").replaceChildren(box);
  }

  // A served resource: its name, which opens its JSON as /config_dump gives it (sensitive
  // fields redacted, a Secret only named). Stays open across the page's updates.
  function resourceView(type, r) {
    const details = el("details", null, "resource");
    const key = "served/" + type + "/" + r.name;
    details.open = expanded.has(key);
    details.addEventListener("toggle", () => {
      if (details.open) expanded.add(key);
      else expanded.delete(key);
    });
    details.append(el("summary", r.name));
    let text;
    if (r.redacted) text = "(a Secret: its content is never shown)";
    else if (r.resource === undefined) text = r.error || "(no content)";
    else text = JSON.stringify(r.resource, null, 2);
    details.append(el("pre", text, "resource-json"));
    return details;
  }

  function renderServed(dump, streams) {
    const box = document.createDocumentFragment();
    if (!dump) {
      box.append(el("p", "This control plane serves no /config_dump: only what the node holds is shown."));
      $("d-served").replaceChildren(box);
      return;
    }
    box.append(el("p", "group " + dump.group + (dump.note ? " \u2014 " + dump.note : "")));
    const newest = streams.length ? streams[streams.length - 1] : null;
    for (const [type, list] of Object.entries(dump.resources || {})) {
      const held = newest ? newest.types.find((t) => t.type === type) : null;
      // The status lists the versions last sent: the client holds them only once it ACKed
      // (after a NACK it kept older ones, whose per-resource versions the server does not know).
      const rows = list.map((r) => {
        const version = held && Object.prototype.hasOwnProperty.call(held.resources, r.name) ? held.resources[r.name] : undefined;
        let verdict = "not sent";
        if (version !== undefined) verdict = version === r.version ? "same" : "differs";
        if (version !== undefined && held.state === "nacked") verdict = "sent, rejected";
        if (version !== undefined && held.state === "pending") verdict = "sent, not ACKed yet";
        const span = el("span", verdict, verdict === "same" ? "synced" : "differs");
        return [resourceView(type, r), r.version, version === undefined || version === null ? "" : version, span];
      });
      box.append(el("h4", type));
      box.append(table(["name", "served version", "last sent version", ""], rows));
    }
    $("d-served").replaceChildren(box);
  }

  async function pollNode(node) {
    clearTimeout(timer);
    try {
      const data = await getJson("ui/api/proxy?node=" + encodeURIComponent(node));
      showError($("d-error"), "");
      renderStreams(data);
      const cluster = data.streams.length ? data.streams[data.streams.length - 1].node_cluster : "";
      let dump = null;
      try {
        dump = await getJson("config_dump?node=" + encodeURIComponent(node) + "&cluster=" + encodeURIComponent(cluster));
      } catch (e) {
        if (e.status !== 404) throw e;
      }
      renderServed(dump, data.streams);
    } catch (e) {
      showError($("d-error"), "cannot read the node: " + e.message);
    }
    schedule(() => pollNode(node));
  }

  function startNode(node) {
    $("list-view").hidden = true;
    $("detail-view").hidden = false;
    $("d-node").textContent = node === "" ? "(anonymous)" : node;
    document.title = "xDS console: " + node;
    pollNode(node);
  }

  // ---- the panels: configuration, load, health, ACK latency ------------------------------------

  const SVG_NS = "http://www.w3.org/2000/svg";

  function svg(tag, attributes, text) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [key, value] of Object.entries(attributes || {})) node.setAttribute(key, String(value));
    if (text !== undefined) node.textContent = String(text);
    return node;
  }

  // A horizontal bar chart: one bar per item ({label, value, bad}), labels and values as text.
  function barChart(items, title) {
    const rowHeight = 20;
    const labelWidth = 220;
    const barWidth = 360;
    const width = labelWidth + barWidth + 90;
    const chart = svg("svg", { class: "chart", width: width, height: items.length * rowHeight + 8, role: "img" });
    chart.append(svg("title", {}, title));
    const max = Math.max(1, ...items.map((i) => i.value));
    items.forEach((item, i) => {
      const y = 4 + i * rowHeight;
      const label = String(item.label);
      chart.append(svg("text", { x: 4, y: y + 14 }, label.length > 32 ? label.slice(0, 31) + "\u2026" : label));
      const w = Math.round((item.value / max) * barWidth);
      chart.append(svg("rect", { x: labelWidth, y: y + 3, width: Math.max(w, item.value > 0 ? 1 : 0), height: rowHeight - 6, class: item.bad ? "bar bad" : "bar" }));
      chart.append(svg("text", { x: labelWidth + w + 6, y: y + 14 }, item.value));
    });
    return chart;
  }

  function summaryList(summary) {
    const dl = el("dl", null, "summary");
    for (const [key, value] of Object.entries(summary || {})) {
      if (value === null || value === undefined) continue;
      dl.append(el("dt", key.replace(/_/g, " ")));
      dl.append(el("dd", typeof value === "object" ? JSON.stringify(value) : value));
    }
    return dl;
  }

  function changesText(changes) {
    if (!changes) return "";
    const parts = [];
    const named = (what, g) => {
      if (!g || !g.total) return;
      const more = g.total > g.names.length ? " and " + (g.total - g.names.length) + " more" : "";
      parts.push(what + " " + g.names.join(", ") + more);
    };
    named("groups added:", changes.groups_added);
    named("groups removed:", changes.groups_removed);
    if (changes.groups_updated !== undefined) parts.push(changes.groups_updated + " group(s) updated");
    if (changes.resources_changed !== undefined) parts.push(changes.resources_changed + " resource(s) added, changed or removed");
    for (const [type, c] of Object.entries(changes.resource_counts || {})) parts.push(type + " " + c.before + " \u2192 " + c.after);
    return parts.join("; ");
  }

  function renderConfig(data, box) {
    if (data.history === null || data.history === undefined) {
      box.append(el("p", "No configuration history from this server."));
      if (data.summary) box.append(summaryList(data.summary));
      return;
    }
    if (data.summary) box.append(summaryList(data.summary));
    const total = data.history_total !== undefined ? data.history_total : data.history.length;
    box.append(el("h3", "Last reloads (" + data.history.length + " of " + total + ", newest first)"));
    const rows = data.history.map((entry) => {
      const outcome = el("span", entry.outcome === undefined ? "" : String(entry.outcome).toUpperCase(), "cell " + (entry.outcome === "refused" ? "refused" : "applied"));
      const what = entry.error !== undefined && entry.error !== null ? el("div", entry.error, "error-text") : el("span", typeof entry.changes === "string" ? entry.changes : changesText(entry.changes));
      return [typeof entry.at_ms === "number" ? iso(entry.at_ms) : "", entry.source === undefined ? "" : entry.source, outcome, what];
    });
    box.append(rows.length ? table(["time", "source", "outcome", "what changed / why refused"], rows) : el("p", "No reload yet."));
  }

  function renderLoad(data, box) {
    box.append(el("p", data.streams + " LRS stream(s), " + data.reports + " report(s) since start; counts over the last " + data.window_seconds + " s; " + data.clusters_total + " cluster(s)."));
    if (!data.clusters.length) {
      box.append(el("p", "No load reported."));
      return;
    }
    box.append(barChart(data.clusters.map((c) => ({ label: c.name, value: c.issued })), "requests issued per cluster"));
    const rows = [];
    for (const c of data.clusters) {
      rows.push([el("strong", c.name), "(all)", c.issued, c.succeeded, c.errors, c.in_progress, c.dropped]);
      for (const l of c.localities) rows.push(["", l.locality, l.issued, l.succeeded, l.errors, l.in_progress, ""]);
      if (c.localities_total > c.localities.length) rows.push(["", (c.localities_total - c.localities.length) + " more localities not shown", "", "", "", "", ""]);
    }
    box.append(table(["cluster", "locality", "issued", "succeeded", "errors", "in progress", "dropped"], rows));
  }

  function renderHealth(data, box) {
    if (!data.enabled) {
      box.append(el("p", "This server runs no health discovery (HDS)."));
      return;
    }
    box.append(el("p", data.streams + " HDS stream(s), " + data.responses + " health report(s) since start; " + data.clusters_total + " cluster(s)."));
    if (!data.clusters.length) {
      box.append(el("p", "No endpoint health reported."));
      return;
    }
    box.append(barChart(data.clusters.map((c) => ({ label: c.name, value: c.endpoints_total - c.healthy, bad: true })), "endpoints not healthy per cluster"));
    for (const c of data.clusters) {
      const div = el("div", null, "cluster");
      div.append(el("h3", c.name));
      div.append(el("p", c.healthy + " of " + c.endpoints_total + " endpoint(s) healthy"));
      const rows = c.endpoints.map((e) => {
        const nodes = e.nodes.map((n) => n.node + ": " + n.status).join(", ") + (e.nodes_total > e.nodes.length ? ", \u2026" : "");
        return [e.address, el("span", e.healthy ? "HEALTHY" : "NOT HEALTHY", "cell " + (e.healthy ? "synced" : "nacked")), nodes];
      });
      div.append(table(["endpoint", "health", "as each node reports it"], rows));
      if (c.endpoints_total > c.endpoints.length) div.append(el("p", (c.endpoints_total - c.endpoints.length) + " more endpoint(s) not shown"));
      box.append(div);
    }
  }

  function bucketLabel(le) {
    if (le === null) return "> 10 s";
    return le < 1 ? "\u2264 " + Math.round(le * 1000) + " ms" : "\u2264 " + le + " s";
  }

  function renderAck(data, box) {
    const mean = data.mean_seconds === null ? "" : "; mean " + (data.mean_seconds * 1000).toFixed(1) + " ms";
    box.append(el("p", data.count + " ACK(s) measured since start, time from a response to its ACK" + mean + "."));
    const last = data.buckets.length - 1;
    if (last >= 0 && data.buckets[last].le_seconds === null) data.buckets[last].label = "> " + data.buckets[last - 1].le_seconds + " s";
    box.append(barChart(data.buckets.map((b) => ({ label: b.label || bucketLabel(b.le_seconds), value: b.count })), "ACK latency histogram"));
  }

  const PANELS = {
    config: { title: "Configuration", path: "ui/api/config", render: renderConfig },
    load: { title: "Load reported over LRS", path: "ui/api/load", render: renderLoad, paged: true },
    health: { title: "Endpoint health reported over HDS", path: "ui/api/health", render: renderHealth, paged: true },
    ack: { title: "ACK latency", path: "ui/api/ack", render: renderAck },
  };

  let panelOffset = 0;

  async function pollPanel(panel) {
    clearTimeout(timer);
    try {
      const data = await getJson(panel.path + (panel.paged && panelOffset ? "?offset=" + panelOffset : ""));
      showError($("p-error"), "");
      if (data.limit) panel.limit = data.limit;
      const box = document.createDocumentFragment();
      panel.render(data, box);
      $("p-body").replaceChildren(box);
      const pager = $("p-pager");
      pager.hidden = !panel.paged || (!panelOffset && (data.next_offset === null || data.next_offset === undefined));
      if (panel.paged) {
        $("p-prev").disabled = panelOffset === 0;
        $("p-next").disabled = data.next_offset === null || data.next_offset === undefined;
        $("p-next").dataset.offset = data.next_offset === null || data.next_offset === undefined ? "" : data.next_offset;
        $("p-page").textContent = "clusters from " + (panelOffset + 1) + " of " + data.clusters_total;
      }
    } catch (e) {
      showError($("p-error"), "cannot read the panel: " + e.message);
    }
    schedule(() => pollPanel(panel));
  }

  function startPanel(name) {
    const panel = PANELS[name];
    $("list-view").hidden = true;
    $("panel-view").hidden = false;
    $("p-title").textContent = panel.title;
    document.title = "xDS console: " + panel.title;
    $("p-prev").addEventListener("click", () => {
      panelOffset = Math.max(0, panelOffset - (panel.limit || 20));
      pollPanel(panel);
    });
    $("p-next").addEventListener("click", () => {
      const next = parseInt($("p-next").dataset.offset, 10);
      if (next > 0) panelOffset = next;
      pollPanel(panel);
    });
    pollPanel(panel);
  }

  function start() {
    const panel = params.get("panel");
    for (const tab of document.querySelectorAll("#tabs a")) {
      if (tab.dataset.panel === (panel && Object.prototype.hasOwnProperty.call(PANELS, panel) ? panel : "")) tab.classList.add("active");
    }
    if (panel && Object.prototype.hasOwnProperty.call(PANELS, panel)) startPanel(panel);
    else if (params.has("node")) startNode(params.get("node").slice(0, 4096));
    else startList();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
