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
    if (cell.state !== "nacked") {
      td.textContent = label;
      td.title = versions.join(", ");
      return;
    }
    const key = row.stream + "/" + type;
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
    $("summary").textContent = data.total_streams + " streams, " + data.total + " shown \u2014 " +
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
      // The stream's recorded events: when it opened, each type's latest request and NACK.
      const events = [[iso(s.opened_ms), "stream opened"]];
      for (const t of s.types) {
        if (t.last_request_ms) events.push([iso(t.last_request_ms), t.type + ": latest request"]);
        if (t.nack) {
          events.push([iso(t.nack.at_ms), t.type + ": NACK of " + t.nack.rejected_version + " (kept " +
            t.nack.version + "): " + t.nack.error]);
        }
        for (const [name, e] of Object.entries(t.errors || {})) {
          events.push(["", t.type + ": " + name + " told error " + e.code + ": " + e.message]);
        }
      }
      events.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
      div.append(el("h4", "Events"));
      div.append(table(["at", "event"], events));
      box.append(div);
    }
    $("d-streams").replaceChildren(box);
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
        return [r.name, r.version, version === undefined || version === null ? "" : version, span];
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

  function start() {
    if (params.has("node")) startNode(params.get("node").slice(0, 4096));
    else startList();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
