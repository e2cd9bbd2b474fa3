// The extractor playground. Plain JavaScript, no build step, nothing loaded from elsewhere.
// Every piece of text goes into the page through textContent (never innerHTML), so a text or a
// description holding markup shows as text. Offsets from the API are code points (Python);
// JavaScript strings index UTF-16 units, so the text is sliced as Array.from(text).
"use strict";

(function () {
  const PALETTE = 8;
  const POLL_MS = 1000;
  const RETRY_S = 5;
  const KEY_STORAGE = "extractor.apiKey";
  const $ = (id) => document.getElementById(id);
  const state = { tasks: [], detail: null, result: null, selected: null, hidden: new Set(), timer: null };

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "class") node.className = value;
      else if (key.startsWith("data-")) node.setAttribute(key, value);
      else node[key] = value;
    }
    for (const child of children) {
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  // The top-level field a JSON pointer belongs to ("/name/0" -> "name").
  function fieldOf(path) {
    const first = path.split("/")[1] || "";
    return first.replace(/~1/g, "/").replace(/~0/g, "~");
  }

  function pointer(parts) {
    return parts.map((p) => "/" + String(p).replace(/~/g, "~0").replace(/\//g, "~1")).join("");
  }

  function colourOf(field) {
    const names = state.detail ? state.detail.fields.map((f) => f.name) : [];
    const index = names.indexOf(field);
    return "c" + ((index < 0 ? names.length : index) % PALETTE);
  }

  // The API key (when the service needs one) is kept for this tab only and sent with every request.
  function apiKey() {
    return sessionStorage.getItem(KEY_STORAGE) || "";
  }

  async function api(path, options) {
    const headers = { ...((options && options.headers) || {}) };
    if (apiKey()) headers.authorization = `Bearer ${apiKey()}`;
    const response = await fetch(path, { ...(options || {}), headers });
    let body = null;
    try {
      body = await response.json();
    } catch (error) {
      body = { error: "bad_response", message: `HTTP ${response.status}: the answer was not JSON` };
    }
    return { response, body };
  }

  // -- tasks ------------------------------------------------------------------------------

  async function loadTasks() {
    let answer;
    try {
      answer = await api("/tasks");
    } catch (error) {
      setStatus("the service does not answer; retrying", "warn");
      return;
    }
    const { body } = answer;
    const select = $("task");
    const before = select.value;
    const tasks = body.tasks || [];
    const signature = JSON.stringify(tasks.map((t) => [t.name, t.version, t.stale]));
    if (signature !== state.signature) {
      state.signature = signature;
      state.tasks = tasks;
      clear(select);
      for (const task of tasks) {
        const label = task.stale ? `${task.name} (stale)` : task.name;
        select.append(el("option", { value: task.name, "data-stale": String(task.stale) }, label));
      }
      const keep = tasks.some((t) => t.name === before) ? before : tasks.length ? tasks[0].name : "";
      select.value = keep;
      const current = tasks.find((t) => t.name === keep);
      if (keep && (!state.detail || state.detail.name !== keep || state.detail.version !== current.version ||
                   Boolean(state.detail.stale) !== Boolean(current.stale))) {
        await loadTask(keep, keep !== before);
      }
    }
    const errors = body.errors || [];
    const box = $("catalog-errors");
    const list = box.querySelector("ul");
    clear(list);
    for (const error of errors) {
      list.append(el("li", {}, el("code", {}, `${error.file} ${error.pointer}`), " ", error.message));
    }
    box.hidden = errors.length === 0;
  }

  async function loadTask(name, fresh) {
    const { response, body } = await api(`/tasks/${encodeURIComponent(name)}`);
    if (!response.ok) {
      showError(body);
      return;
    }
    state.detail = body;
    document.body.dataset.task = name;  // which task the page shows now (tests wait on it)
    $("task-description").textContent = body.description || body.title || "";
    $("task-version").textContent = body.version ? `version ${body.version}` : "";
    $("task-stale").hidden = !body.stale;
    const taskError = $("task-error");
    taskError.hidden = !body.stale;
    taskError.textContent = body.error
      ? `Stale: the last good version serves. ${body.error.file} ${body.error.pointer}: ${body.error.message}`
      : "";
    const rows = $("fields").querySelector("tbody");
    clear(rows);
    body.fields.forEach((f) => {
      const name = el("td", {}, el("span", { class: `swatch ${colourOf(f.name)}` }), f.name, f.required ? " *" : "");
      rows.append(el("tr", { "data-field": f.name }, name, el("td", {}, f.type), el("td", {}, f.description)));
    });
    const examples = body.example_texts || [];
    const picker = $("example");
    clear(picker);
    picker.append(el("option", { value: "" }, examples.length ? "— pick a worked example —" : "— no worked example —"));
    examples.forEach((example, index) => {
      const text = String(example);
      const label = Array.from(text).length > 60 ? Array.from(text).slice(0, 60).join("") + "…" : text;
      picker.append(el("option", { value: String(index) }, label));
    });
    if (fresh) {
      state.hidden.clear();
      showResult(null);
    }
  }

  // -- the request ------------------------------------------------------------------------

  function requestBody() {
    const options = {};
    const grounding = $("opt-grounding").value;
    if (grounding) options.grounding = grounding;
    for (const [id, key] of [["opt-grounded", "grounded_decoding"], ["opt-chunk", "chunk"]]) {
      const value = $(id).value;
      if (value) options[key] = value === "true";
    }
    const temperature = $("opt-temperature").value;
    if (temperature !== "") options.temperature = Number(temperature);
    const body = { text: $("text").value };
    if (Object.keys(options).length) body.options = options;
    if ($("opt-review").checked) body.review = true;
    return body;
  }

  function chosenFile() {
    const files = $("file").files;
    return files && files.length ? files[0] : null;
  }

  // A document goes as a multipart upload (`file`, `options`, `review`): the same request as the JSON body.
  function uploadBody(file, body) {
    const form = new FormData();
    form.append("file", file, file.name);
    if (body.options) form.append("options", JSON.stringify(body.options));
    if (body.review) form.append("review", "true");
    return form;
  }

  async function run(retries) {
    const task = $("task").value;
    const body = requestBody();
    const file = chosenFile();
    if (!task || (!body.text && !file)) {
      setStatus(task ? "type or paste a text, or choose a document, first" : "no task loaded", "warn");
      return;
    }
    clearTimeout(state.timer);
    $("run").disabled = true;
    setStatus(`running ${task}…`, "busy");
    $("error").hidden = true;
    let answer;
    try {
      const request = file
        ? { method: "POST", body: uploadBody(file, body) }
        : { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) };
      answer = await api(`/extract/${encodeURIComponent(task)}`, request);
    } catch (error) {
      $("run").disabled = false;
      setStatus("the service does not answer", "warn");
      return;
    }
    $("run").disabled = false;
    const { response, body: out } = answer;
    if (response.ok) {
      const queued = out.review_id ? ` · in the review queue as #${out.review_id}` : "";
      setStatus(`done: ${out.latency_ms.toFixed(0)} ms${queued}`, "ok");
      showResult(out, out.document ? out.document.text : body.text);
      if (out.document && file) showPages(out, file);
      return;
    }
    const retryAfter = Number(response.headers.get("retry-after")) || RETRY_S;
    if (response.status === 503 && (retries || 0) < 200) {
      setStatus(`the engine is starting (${out.message}); retrying in ${retryAfter} s`, "busy");
      state.timer = setTimeout(() => run((retries || 0) + 1), retryAfter * 1000);
      return;
    }
    if (response.status === 429) {
      setStatus(`busy (429): try again in ${retryAfter} s`, "warn");
    } else {
      setStatus(`HTTP ${response.status}`, "warn");
    }
    showResult(null);
    showError(out);
    if (out.attempts) showAttempts(out.attempts);
  }

  function setStatus(text, kind) {
    const status = $("status");
    status.textContent = text;
    status.className = kind || "";
  }

  function showError(body) {
    const box = $("error");
    box.hidden = false;
    clear(box);
    box.append(el("strong", {}, body.error || "error"), ": ", body.message || "");
    if (body.task_version) box.append(` (task version ${body.task_version})`);
    if (Array.isArray(body.detail)) {
      const list = el("ul", {});
      for (const item of body.detail) list.append(el("li", {}, JSON.stringify(item)));
      box.append(list);
    }
  }

  // -- the result -------------------------------------------------------------------------

  function showResult(result, text) {
    state.result = result;
    state.selected = null;
    for (const id of ["legend", "highlighted", "pages", "tree", "attempts", "stats"]) clear($(id));
    clear($("ungrounded").querySelector("ul"));
    $("ungrounded").hidden = true;
    if (!result) return;
    showLegend(result);
    showText(text, result.spans);
    showUngrounded(result);
    $("tree").append(tree(result.data, []));
    showAttempts(result.attempts);
    const usage = result.usage || {};
    $("stats").textContent =
      `${result.latency_ms.toFixed(0)} ms · ${usage.prompt_tokens} prompt + ${usage.completion_tokens} output tokens · ` +
      `${result.attempts.length} attempt(s) · model ${result.model} · task version ${result.task_version || "?"}`;
    applyFilter();
  }

  function showLegend(result) {
    const legend = $("legend");
    const fields = state.detail ? state.detail.fields.map((f) => f.name) : [];
    for (const span of result.spans) if (!fields.includes(fieldOf(span.path))) fields.push(fieldOf(span.path));
    for (const field of fields) {
      const button = el("button", { type: "button", class: `legend ${colourOf(field)}`, "data-field": field }, field);
      button.addEventListener("click", () => {
        if (state.hidden.has(field)) state.hidden.delete(field);
        else state.hidden.add(field);
        applyFilter();
      });
      button.addEventListener("mouseenter", () => select(null, field));
      legend.append(button);
    }
  }

  function applyFilter() {
    for (const node of document.querySelectorAll("[data-field]")) {
      const off = state.hidden.has(node.getAttribute("data-field"));
      node.classList.toggle("off", off);
    }
  }

  // Highlights: spans sorted by start (longest first); a span inside another nests in its mark,
  // a span crossing another's edge cannot be one mark and is listed apart (`crossing`).
  function layout(chars, spans) {
    const placed = spans
      .filter((s) => s.start !== null && s.end !== null && s.status !== "missing" && s.end > s.start && s.end <= chars.length)
      .sort((a, b) => a.start - b.start || b.end - a.end);
    const root = { start: 0, end: chars.length, children: [] };
    const stack = [root];
    const crossing = [];
    for (const span of placed) {
      while (stack.length > 1 && span.start >= stack[stack.length - 1].end) stack.pop();
      const parent = stack[stack.length - 1];
      if (span.end > parent.end) {
        crossing.push(span);
        continue;
      }
      const node = { start: span.start, end: span.end, span, children: [] };
      parent.children.push(node);
      stack.push(node);
    }
    return { root, crossing };
  }

  // The text as nodes: plain text, and one element made by `makeMark(span)` around each placed span.
  function render(chars, node, makeMark) {
    const out = node.span ? makeMark(node.span) : document.createDocumentFragment();
    let at = node.start;
    for (const child of node.children) {
      if (child.start > at) out.append(chars.slice(at, child.start).join(""));
      out.append(render(chars, child, makeMark));
      at = child.end;
    }
    if (node.end > at) out.append(chars.slice(at, node.end).join(""));
    return out;
  }

  function showText(text, spans) {
    const chars = Array.from(text);
    const { root, crossing } = layout(chars, spans);
    $("highlighted").append(render(chars, root, mark));
    state.crossing = crossing;
  }

  // A typed value (a date, a number) read from the highlighted evidence: shown beside it.
  function typedOf(span) {
    if (span.normalized === null || span.normalized === undefined) return "";
    return ` → ${JSON.stringify(span.normalized)}${span.unit ? " " + span.unit : ""}`;
  }

  function mark(span) {
    const field = fieldOf(span.path);
    const node = el("mark", {
      class: `${colourOf(field)} ${span.status}`,
      "data-path": span.path,
      "data-field": field,
      title: `${span.path} (${span.status})${typedOf(span)}`,
      tabIndex: 0,
    });
    node.addEventListener("mouseenter", (event) => {
      event.stopPropagation();
      select(span.path, field);
    });
    node.addEventListener("click", (event) => {
      event.stopPropagation();
      select(span.path, field);
    });
    node.addEventListener("focus", () => select(span.path, field));
    return node;
  }

  // -- document pages: each page holding a value, drawn by the service, with the values' boxes on it --

  // A box's points map onto the drawn page as fractions of the page's size (result.document.pages).
  async function showPages(result, file) {
    const sizes = result.document.pages || [];
    const byPage = new Map();
    for (const span of result.spans) {
      for (const box of (span.location && span.location.boxes) || []) {
        if (!byPage.has(box.page)) byPage.set(box.page, []);
        byPage.get(box.page).push([span, box]);
      }
    }
    const box = $("pages");
    for (const number of [...byPage.keys()].sort((a, b) => a - b)) {
      const size = sizes[number - 1];
      if (!size) continue;
      const { response, image } = await pageImage(file, number);
      if (state.result !== result) return;  // another run replaced this result meanwhile
      const sheet = el("div", { class: "sheet" });
      const figure = el("figure", { class: "page", "data-page": String(number) }, sheet, el("figcaption", {}, `page ${number}`));
      if (image) {
        const canvas = el("canvas", { width: image.width, height: image.height });
        canvas.getContext("2d").drawImage(image, 0, 0);
        sheet.append(canvas);
      } else {
        sheet.append(el("p", { class: "error" }, `page ${number} could not be drawn (HTTP ${response.status})`));
      }
      for (const [span, rect] of byPage.get(number)) sheet.append(pageBox(span, rect, size));
      box.append(figure);
    }
    applyFilter();
  }

  async function pageImage(file, number) {
    const headers = { "content-type": "application/pdf" };
    if (apiKey()) headers.authorization = `Bearer ${apiKey()}`;
    const response = await fetch(`/documents/pages/${number}`, { method: "POST", headers, body: file });
    if (!response.ok) return { response, image: null };
    return { response, image: await createImageBitmap(await response.blob()) };
  }

  function pageBox(span, rect, size) {
    const field = fieldOf(span.path);
    const node = el("div", {
      class: `box ${colourOf(field)}`,
      "data-path": span.path,
      "data-field": field,
      "data-page": String(rect.page),
      title: `${span.path}: ${JSON.stringify(span.value)}${typedOf(span)} (page ${rect.page})`,
      tabIndex: 0,
    });
    // CSSOM, not a style attribute: the page's policy allows no inline style
    node.style.left = `${(100 * rect.x0) / size.width}%`;
    node.style.top = `${(100 * rect.y0) / size.height}%`;
    node.style.width = `${(100 * (rect.x1 - rect.x0)) / size.width}%`;
    node.style.height = `${(100 * (rect.y1 - rect.y0)) / size.height}%`;
    for (const kind of ["mouseenter", "click", "focus"]) node.addEventListener(kind, () => select(span.path, field));
    return node;
  }

  function showUngrounded(result) {
    const box = $("ungrounded");
    const list = box.querySelector("ul");
    const apart = result.spans.filter((s) => s.status === "missing" || s.status === "fuzzy" || s.start === null);
    const entries = [
      ...apart.map((s) => [s, s.status === "fuzzy" ? "fuzzy: a near match, not the exact text" : "missing from the text"]),
      ...(state.crossing || []).map((s) => [s, "overlaps another highlight"]),
      ...(result.removed || []).map((s) => [s, "removed (strict grounding, or past maxItems)"]),
    ];
    for (const [span, why] of entries) {
      const field = fieldOf(span.path);
      const item = el("li", { "data-path": span.path, "data-field": field, class: colourOf(field) },
        el("code", {}, span.path), " ", JSON.stringify(span.value), " — ", why);
      item.addEventListener("mouseenter", () => select(span.path, field));
      list.append(item);
    }
    box.hidden = entries.length === 0;
  }

  function tree(value, parts) {
    const path = pointer(parts);
    if (value !== null && typeof value === "object") {
      const list = el("ul", {});
      const entries = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
      for (const [key, child] of entries) {
        const childPath = pointer([...parts, key]);
        const item = el("li", { "data-path": childPath, "data-field": fieldOf(childPath) },
          el("span", { class: "key" }, Array.isArray(value) ? `${key}` : JSON.stringify(String(key))), ": ");
        item.append(tree(child, [...parts, key]));
        item.addEventListener("mouseenter", (event) => {
          event.stopPropagation();
          select(childPath, fieldOf(childPath));
        });
        list.append(item);
      }
      return el("span", { class: Array.isArray(value) ? "array" : "object" }, Array.isArray(value) ? "[" : "{", list,
        Array.isArray(value) ? "]" : "}");
    }
    return el("span", { class: `value ${value === null ? "null" : typeof value}`, "data-value-path": path },
      JSON.stringify(value));
  }

  // Selecting a field: its marks, its tree nodes and its legend entry light up together.
  function select(path, field) {
    state.selected = { path, field };
    for (const node of document.querySelectorAll(".selected")) node.classList.remove("selected");
    for (const node of document.querySelectorAll("[data-field]")) {
      const sameField = node.getAttribute("data-field") === field;
      const p = node.getAttribute("data-path");
      const samePath = path === null || p === null || p === path || p.startsWith(path + "/") || path.startsWith(p + "/");
      if (sameField && samePath && !node.closest("#fields")) node.classList.add("selected");
    }
  }

  function showAttempts(attempts) {
    const box = $("attempts");
    clear(box);
    for (const attempt of attempts) {
      const flags = [
        attempt.errors.length ? "rejected" : "accepted",
        attempt.repaired ? "repaired by json-repair" : null,
        attempt.number > 1 ? "re-asked" : null,
        `finish: ${attempt.finish_reason}`,
        `${attempt.latency_ms.toFixed(0)} ms`,
        `${attempt.prompt_tokens} + ${attempt.completion_tokens} tokens`,
      ].filter(Boolean);
      const item = el("details", { class: attempt.errors.length ? "attempt bad" : "attempt" },
        el("summary", {}, `attempt ${attempt.number}: ${flags.join(" · ")}`),
        el("pre", {}, attempt.raw));
      if (attempt.errors.length) {
        const list = el("ul", {});
        for (const error of attempt.errors) list.append(el("li", {}, error));
        item.append(list);
      }
      item.open = attempts.length === 1 || Boolean(attempt.errors.length);
      box.append(item);
    }
  }

  // -- copy as -------------------------------------------------------------------------

  function shellQuote(text) {
    return "'" + text.replace(/'/g, "'\\''") + "'";
  }

  function snippet(kind) {
    const url = `${location.origin}/extract/${encodeURIComponent($("task").value)}`;
    const body = requestBody();
    const file = chosenFile();
    if (file && kind === "curl") {
      const options = body.options ? ` -F ${shellQuote("options=" + JSON.stringify(body.options))}` : "";
      return `curl -s ${shellQuote(url)} -F ${shellQuote("file=@" + file.name)}${options}`;
    }
    if (file) {
      return [
        "import httpx",
        "",
        `with open(${JSON.stringify(file.name)}, "rb") as document:`,
        `    files = {"file": (${JSON.stringify(file.name)}, document)}`,
        `    result = httpx.post(${JSON.stringify(url)}, files=files, timeout=120).json()`,
        'print(result["data"], [s["location"] for s in result["spans"]])',
      ].join("\n");
    }
    if (kind === "curl") {
      return `curl -s ${shellQuote(url)} -H 'content-type: application/json' \\\n     -d ${shellQuote(JSON.stringify(body))}`;
    }
    return [
      "import httpx",
      "",
      `body = ${JSON.stringify(body, null, 4).replace(/\btrue\b/g, "True").replace(/\bfalse\b/g, "False")}`,
      `result = httpx.post(${JSON.stringify(url)}, json=body, timeout=120).json()`,
      'print(result["data"])',
    ].join("\n");
  }

  async function copy(kind) {
    const text = snippet(kind);
    const box = $("snippet");
    box.hidden = false;
    box.textContent = text;
    try {
      await navigator.clipboard.writeText(text);
      setStatus(`copied as ${kind}`, "ok");
    } catch (error) {
      setStatus(`select the ${kind} below to copy it`, "warn");
    }
  }

  // -- engine state ----------------------------------------------------------------------

  async function readiness() {
    try {
      const { response, body } = await api("/readyz");
      const badge = $("engine");
      badge.textContent = response.ok ? `ready · ${body.model}` : `engine: ${body.reason || "not ready"}`;
      badge.className = response.ok ? "badge ok" : "badge warn";
      return response.ok;
    } catch (error) {
      return false;
    }
  }

  async function reloadCatalog() {
    const { response, body } = await api("/tasks/reload", { method: "POST" });
    setStatus(response.ok ? `catalog reloaded in ${body.duration_ms} ms` : `reload: HTTP ${response.status}`,
      response.ok ? "ok" : "warn");
    await loadTasks();
  }

  // -- views -----------------------------------------------------------------------------

  // Two views, Extract and Review; the address's #review opens the second (so a reload keeps it).
  function showView() {
    const view = location.hash === "#review" ? "review" : "extract";
    for (const name of ["extract", "review"]) {
      $(`${name}-view`).hidden = name !== view;
      $(`tab-${name}`).setAttribute("aria-selected", String(name === view));
    }
    document.dispatchEvent(new CustomEvent("playground:view", { detail: view }));
  }

  function init() {
    $("tab-extract").addEventListener("click", () => {
      history.replaceState(null, "", location.pathname + location.search);
      showView();
    });
    $("tab-review").addEventListener("click", () => {
      location.hash = "review";
    });
    window.addEventListener("hashchange", showView);
    $("api-key").value = apiKey();
    $("api-key").addEventListener("change", () => {
      const key = $("api-key").value.trim();
      if (key) sessionStorage.setItem(KEY_STORAGE, key);
      else sessionStorage.removeItem(KEY_STORAGE);
      loadTasks();
      document.dispatchEvent(new CustomEvent("playground:key"));
    });
    $("task").addEventListener("change", () => loadTask($("task").value, true));
    $("example").addEventListener("change", () => {
      const example = (state.detail.example_texts || [])[Number($("example").value)];
      if (example !== undefined) $("text").value = String(example);
    });
    $("file").addEventListener("change", () => {
      $("clear-file").hidden = !chosenFile();
    });
    $("clear-file").addEventListener("click", () => {
      $("file").value = "";
      $("clear-file").hidden = true;
    });
    $("run").addEventListener("click", () => run(0));
    $("text").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        run(0);
      }
    });
    $("copy-curl").addEventListener("click", () => copy("curl"));
    $("copy-python").addEventListener("click", () => copy("python"));
    $("reload").addEventListener("click", reloadCatalog);
    loadTasks();
    readiness().then((ok) => {
      if (!ok) {
        const poll = setInterval(async () => {
          if (await readiness()) clearInterval(poll);
        }, RETRY_S * 1000);
      }
    });
    setInterval(loadTasks, POLL_MS);  // a catalog edited on disk shows up without a page reload
    showView();
  }

  // What the Review tab (review.js) shares with this view.
  window.Playground = Object.freeze({ el, clear, api, pointer, layout, render });

  document.addEventListener("DOMContentLoaded", init);
})();
