// kernelopt tune: the workbench page's script. Part of kernelopt (Apache-2.0); no third-party code.
// Every text from the session (LLM answers, messages, logs) is put in with textContent, never as
// markup; the only markup taken from the server is Pygments' highlighting, which escapes the text.
"use strict";

const TOKEN = document.querySelector('meta[name="kernelopt-token"]').content;
const view = { state: null, selected: null, detail: null, tab: "code" };

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

async function api(path, body) {
  const options = { headers: { "X-Kernelopt-Token": TOKEN } };
  if (body !== undefined) {
    options.method = "POST";
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  const data = await response.json().catch(() => ({ error: `HTTP ${response.status}` }));
  if (!response.ok) throw new Error(data.error || `HTTP ${response.status}`);
  return data;
}

function notice(message) {
  $("notices").append(el("li", { class: "local" }, message));
}

async function act(path, body) {
  try { return await api(path, body); } catch (error) { notice(error.message); return null; }
}

// rendering ------------------------------------------------------------------------------------

function speedText(c) {
  if (c.speedup === null || c.speedup === undefined) return "";
  const interval = c.interval ? ` [${c.interval[0].toFixed(2)}, ${c.interval[1].toFixed(2)}]` : "";
  return `${c.speedup.toFixed(3)}x${interval}`;
}

function nodeLabel(c, best) {
  const parts = [
    el("span", { class: "num" }, `#${c.number}`),
    el("span", { class: `status s-${c.status}` }, c.status.replace(/_/g, " ")),
    el("span", { class: "speed" }, speedText(c)),
    el("span", { class: "source" }, c.source + (c.hint ? `: “${c.hint}”` : "")),
  ];
  if (c.flags.length) parts.push(el("span", { class: "flags" }, "flags: " + c.flags.join(", ")));
  if (c.number === best) parts.push(el("span", { class: "best" }, "best"));
  if (c.message && !c.correct && c.status !== "pending") parts.push(el("span", { class: "message" }, c.message.split("\n")[0].slice(0, 120)));
  return parts;
}

function renderTree(state) {
  const children = new Map();
  for (const c of state.candidates) {
    const key = c.parent === null ? 0 : c.parent;
    if (!children.has(key)) children.set(key, []);
    children.get(key).push(c);
  }
  const build = (key) => {
    const list = el("ul");
    for (const c of children.get(key) || []) {
      const row = el("div", { class: "node" + (c.number === view.selected ? " selected" : ""), "data-number": c.number },
                     ...nodeLabel(c, state.best));
      row.addEventListener("click", () => select(c.number));
      list.append(el("li", { "data-number": c.number, class: "candidate" }, row, build(c.number)));
    }
    return list;
  };
  const tree = $("tree");
  tree.replaceChildren(state.candidates.length ? build(0) : el("p", { class: "help" }, "No candidates yet: ask the model, or submit code by hand."));
}

function renderChart(points) {
  const svg = $("chart");
  const ns = "http://www.w3.org/2000/svg";
  const make = (tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  };
  svg.replaceChildren();
  const [w, h, left, bottom] = [360, 180, 40, 24];
  const maxX = Math.max(1, ...points.map((p) => p[0]), view.state ? view.state.usage.llm_calls : 1);
  const maxY = Math.max(1.0, ...points.map((p) => p[1])) * 1.1;
  const x = (v) => left + (v / maxX) * (w - left - 10);
  const y = (v) => h - bottom - (v / maxY) * (h - bottom - 10);
  svg.append(make("line", { x1: left, y1: h - bottom, x2: w - 10, y2: h - bottom, class: "axis" }));
  svg.append(make("line", { x1: left, y1: 10, x2: left, y2: h - bottom, class: "axis" }));
  svg.append(make("line", { x1: left, y1: y(1), x2: w - 10, y2: y(1), class: "parity" }));
  svg.append(make("text", { x: 2, y: y(1) + 4, class: "tick" }, "1x"));
  svg.append(make("text", { x: 2, y: 18, class: "tick" }, maxY.toFixed(1) + "x"));
  svg.append(make("text", { x: w - 10, y: h - 6, class: "tick", "text-anchor": "end" }, `${maxX} calls`));
  if (!points.length) return;
  let path = "";
  points.forEach((p, i) => {
    path += i === 0 ? `M${x(p[0])},${y(p[1])}` : `H${x(p[0])}V${y(p[1])}`;
  });
  path += `H${x(maxX)}`;
  svg.append(make("path", { d: path, class: "line" }));
  for (const p of points) svg.append(make("circle", { cx: x(p[0]), cy: y(p[1]), r: 3, class: "point" }));
}

function renderHeader(state) {
  $("problem").textContent = `— ${state.problem}`;
  $("run").textContent = `run ${state.run_id} · ${state.model} · ${state.device}`;
  const u = state.usage;
  $("usage").textContent = `${u.llm_calls} calls (${u.llm_calls_failed} failed) · ` +
    `${u.prompt_tokens + u.completion_tokens} tokens · ${u.cost === null ? "cost unknown (no price)" : "$" + u.cost.toFixed(4)} · ${u.evaluations} evaluations · ${Math.round(u.wall_s)} s`;
  $("busy").textContent = state.busy ? state.busy + "…" : "idle";
  $("busy-box").className = state.busy ? "busy" : "";
  $("notices").replaceChildren(...state.notices.map((m) => el("li", {}, m)));
  $("accepted").replaceChildren(...state.accepted.map((a) =>
    el("div", { class: "accepted" }, `#${a.number} written to ${a.path}. Re-judge it with:`, el("pre", {}, a.command))));
  const strategy = $("strategy");
  if (!strategy.options.length) {
    for (const name of state.strategies) strategy.append(el("option", { value: name }, name));
    if (state.strategies.includes("refine")) strategy.value = "refine";
  }
}

function renderDiffChoices(state) {
  const select = $("diff-against");
  const current = select.value;
  const options = [el("option", { value: "parent" }, "its parent"), el("option", { value: "reference" }, "the reference")];
  for (const c of state.candidates) {
    if (c.number !== view.selected && c.status !== "llm_error" && c.status !== "format_error") {
      options.push(el("option", { value: String(c.number) }, `#${c.number}`));
    }
  }
  select.replaceChildren(...options);
  if ([...select.options].some((o) => o.value === current)) select.value = current;
}

function renderVerdict(detail) {
  const box = $("verdict");
  if (!detail.verdict) {
    box.replaceChildren(el("p", {}, detail.status === "pending" ? "Waiting for the verdict…" : `${detail.status}: ${detail.error || ""}`));
    return;
  }
  const v = detail.verdict;
  const rows = [["status", v.status], ["speedup", speedText(detail)], ["message", v.message],
    ["flags", v.flags.join(", ")], ["optimization kinds", v.optimization_kinds.join(", ")]];
  if (v.reference_ms !== null) rows.push(["timing", `reference ${v.reference_ms.toPrecision(4)} ms, candidate ${v.candidate_ms.toPrecision(4)} ms` +
    (v.timing ? `, ${v.timing.rounds} rounds × ${v.timing.calls_per_round} calls (${v.timing.method})` : "")]);
  const table = el("table", { class: "verdict" });
  for (const [name, value] of rows) if (value) table.append(el("tr", {}, el("th", {}, name), el("td", {}, value)));
  const trials = el("table", { class: "trials" }, el("tr", {}, el("th", {}, "trial"), el("th", {}, "result"), el("th", {}, "max abs error")));
  for (const t of v.trials) {
    trials.append(el("tr", {}, el("td", {}, t.index), el("td", {}, t.passed ? "passed" : (t.message || "failed")),
      el("td", {}, t.max_abs_error === null || t.max_abs_error === undefined ? "" : t.max_abs_error.toPrecision(3))));
  }
  const parts = [table, el("h3", {}, "Correctness trials"), trials];
  if (v.shapes && v.shapes.length) {  // a problem with several input configurations: each one's verdict
    const shapes = el("table", { class: "shapes" }, el("tr", {}, el("th", {}, "configuration"), el("th", {}, "status"), el("th", {}, "speedup")));
    for (const s of v.shapes) {
      const speed = s.speedup === null || s.speedup === undefined ? "" : `${s.speedup.toFixed(3)}x` +
        (s.speedup_precision === null || s.speedup_precision === undefined ? "" : ` ±${(100 * s.speedup_precision).toFixed(1)}%`);
      shapes.append(el("tr", {}, el("td", {}, s.name + (s.held_out ? " (held out)" : "")), el("td", {}, s.status), el("td", {}, speed)));
    }
    parts.push(el("h3", {}, "Input configurations ", el("span", { class: "help" }, "(the speedup above is their geometric mean)")), shapes);
  }
  if (detail.tool_call) {  // --strategy agent: the tool call that judged it, and what the model read back
    const t = detail.tool_call;
    parts.push(el("h3", {}, `Tool call: ${t.name} `, el("span", { class: "help" }, `(conversation ${t.conversation}, turn ${t.turn}; the answer the model read)`)),
      el("pre", { class: "log" }, t.result));
  }
  if (detail.profile_text) {  // --profile: the table the model's next prompt shows (plain text)
    parts.push(el("h3", {}, "Where the time goes ", el("span", { class: "help" }, "(profiled after the verdict, outside the timed calls; advisory)")),
      el("pre", { class: "profile" }, detail.profile_text));
  }
  if (v.compile_log) parts.push(el("h3", {}, "Compile log"), el("pre", { class: "log" }, v.compile_log));
  if (v.candidate_output) parts.push(el("h3", {}, "Program output"), el("pre", { class: "log" }, v.candidate_output));
  for (const w of v.warnings || []) parts.push(el("p", { class: "warning" }, "warning: " + w));
  box.replaceChildren(...parts);
}

async function renderDetail() {
  if (view.selected === null) {
    $("selected").textContent = "none (asking starts from scratch)";
    $("code").replaceChildren();
    return;
  }
  const detail = await act(`api/candidates/${view.selected}`);
  if (!detail) return;
  view.detail = detail;
  $("selected").textContent = `#${detail.number} — ${detail.status}${detail.speedup !== null ? ", " + speedText(detail) : ""}`;
  $("code").innerHTML = detail.code_html;   // Pygments' output: the code is escaped
  if (!detail.code) $("code").textContent = detail.error || "(no program)";
  if (document.activeElement !== $("editor") && $("editor").dataset.number !== String(detail.number)) {
    $("editor").value = detail.code || "";
    $("editor").dataset.number = String(detail.number);
  }
  renderVerdict(detail);
  await renderDiff();
}

async function renderDiff() {
  if (view.selected === null || !view.detail || !view.detail.code) { $("diff").replaceChildren(); return; }
  let against = $("diff-against").value || "parent";
  if (against === "parent") against = view.detail.parent === null ? "reference" : String(view.detail.parent);
  const diff = await act(`api/diff?old=${encodeURIComponent(against)}&new=${view.selected}`);
  if (diff) $("diff").innerHTML = diff.html || "(no difference)";   // Pygments' output, escaped
}

async function refresh() {
  const state = await act("api/state");
  if (!state) return;
  apply(state);
}

function apply(state) {
  if (view.state && view.state.run_id !== state.run_id) {   // another spot opened: a new run
    view.selected = null;
    view.detail = null;
  }
  view.state = state;
  renderSpots(state.spots);
  renderHeader(state);
  renderTree(state);
  renderChart(state.chart);
  renderDiffChoices(state);
  renderDetail();
}

function renderSpots(spots) {
  $("spots-box").classList.toggle("hidden", !spots);
  if (!spots) return;
  $("spots-model").textContent = `(${spots.model})`;
  const rows = spots.spots.map((spot) => {
    const current = spot.module === spots.open;
    const button = el("button", { type: "button", class: "open-spot", disabled: current || !!view.state.busy },
                      current ? "current" : "Open");
    button.addEventListener("click", () => act("api/open-spot", { module: spot.module }).then((state) => state && apply(state)));
    const share = spot.share === null ? "" : `${(100 * spot.share).toFixed(1)}%`;
    return el("tr", { class: "spot" + (current ? " current" : ""), "data-module": spot.module },
              el("td", {}, spot.module), el("td", { class: "share" }, share), el("td", { class: "help" }, spot.constructor),
              el("td", {}, button));
  });
  for (const skipped of spots.not_extracted) {
    rows.push(el("tr", { class: "not-extracted" }, el("td", {}, skipped.module), el("td", {}, ""),
                 el("td", { class: "help", colSpan: 2 }, `not extracted: ${skipped.reason}`)));
  }
  $("spots").replaceChildren(...rows);
}

function select(number) {
  view.selected = number;
  renderTree(view.state);
  renderDiffChoices(view.state);
  renderDetail();
}

function showTab(name) {
  view.tab = name;
  for (const button of document.querySelectorAll("#tabs button")) button.classList.toggle("active", button.dataset.tab === name);
  for (const tab of document.querySelectorAll(".tab")) tab.classList.toggle("hidden", tab.id !== `tab-${name}`);
}

// the live stream: every event brings the state up to date (debounced) -------------------------

let pending = null;
function soon() {
  if (pending === null) pending = setTimeout(() => { pending = null; refresh(); }, 100);
}

function connect() {
  const stream = new EventSource(`api/events?token=${encodeURIComponent(TOKEN)}`);
  stream.addEventListener("open", () => { $("live").textContent = "live"; $("live").className = "on"; });
  stream.addEventListener("error", () => { $("live").textContent = "reconnecting…"; $("live").className = ""; });
  stream.addEventListener("state", (event) => apply(JSON.parse(event.data)));
  for (const kind of ["started", "answered", "judged", "error", "busy", "accepted"]) {
    stream.addEventListener(kind, soon);
  }
}

// wiring -------------------------------------------------------------------------------------------

function intValue(id) { return parseInt($(id).value, 10); }

function wire() {
  $("ask").addEventListener("click", () => act("api/ask", { parent: view.selected, hint: $("hint").value, n: 1 }));
  $("sample").addEventListener("click", () => act("api/ask", { parent: view.selected, hint: $("hint").value, n: intValue("n") }));
  $("run-strategy").addEventListener("click", () => act("api/run", { strategy: $("strategy").value, calls: intValue("calls") }));
  $("stop").addEventListener("click", () => act("api/stop", {}));
  $("deselect").addEventListener("click", () => select(null));
  $("submit-edit").addEventListener("click", () => act("api/submit", { parent: view.selected, code: $("editor").value }));
  $("accept").addEventListener("click", async () => {
    if (view.selected === null) { notice("select a candidate to accept"); return; }
    // An existing file is overwritten, and a missing folder outside the working directory
    // created, only when the engineer confirms it.
    let body = { number: view.selected, path: $("accept-path").value };
    for (;;) {
      try {
        await api("api/accept", body);
        break;
      } catch (error) {
        const ask = /already exists/.test(error.message) ? ["overwrite", "Overwrite it?"]
          : /does not exist/.test(error.message) ? ["create_dirs", "Create the folder?"] : null;
        if (!ask || body[ask[0]] || !window.confirm(`${error.message}\n\n${ask[1]}`)) {
          notice(error.message);
          return;
        }
        body = { ...body, [ask[0]]: true };
      }
    }
    refresh();
  });
  $("diff-against").addEventListener("change", renderDiff);
  for (const button of document.querySelectorAll("#tabs button")) button.addEventListener("click", () => showTab(button.dataset.tab));
}

wire();
connect();
