// The playground's Review tab: the review queue, one item at a time, decided with the mouse or the keyboard.
// Plain JavaScript beside playground.js (whose helpers it takes from window.Playground). As there,
// every text goes into the page through textContent, and offsets are code points: the item's text
// is kept as Array.from(text), and a selection's ends are counted in code points.
"use strict";

(function () {
  const PAGE = 25;
  const REVIEWER_STORAGE = "extractor.reviewer";
  const $ = (id) => document.getElementById(id);
  const SCALARS = ["string", "integer", "number", "boolean", "enum"];
  // The queue as listed (filters, loaded items, the next page's cursor, the open item's index),
  // task details by name, and the open item (`item`: null when none).
  const queue = { items: [], cursor: null, index: -1, loading: false, loads: 0, opening: 0, busy: 0 };
  const tasks = new Map();
  let item = null;
  let P = null;

  // -- the task's fields, from its schema ---------------------------------------------------

  function resolveRef(root, ref) {
    if (ref === "#") return root;
    if (typeof ref !== "string" || !ref.startsWith("#/")) return null;
    let node = root;
    for (const part of ref.slice(2).split("/")) {
      const key = decodeURIComponent(part).replace(/~1/g, "/").replace(/~0/g, "~");
      if (node === null || typeof node !== "object") return null;
      node = node[key];
    }
    return node;
  }

  // What a schema node allows, merged over $ref, anyOf and oneOf: its JSON types, its enum,
  // its items, and whether a string there must be found in the text (no "x-grounded": false).
  function shapeOf(root, node, ungrounded, depth) {
    const shape = { types: new Set(), values: null, items: null, ungrounded: Boolean(ungrounded) };
    for (let hops = 0; node && typeof node.$ref === "string" && hops < 16; hops += 1) {
      if (node["x-grounded"] === false) shape.ungrounded = true;
      node = resolveRef(root, node.$ref);
    }
    if (!node || typeof node !== "object" || depth > 16) return shape;
    if (node["x-grounded"] === false) shape.ungrounded = true;
    const types = Array.isArray(node.type) ? node.type : typeof node.type === "string" ? [node.type] : [];
    types.forEach((t) => shape.types.add(t));
    if (Array.isArray(node.enum)) shape.values = [...node.enum];
    if ("const" in node) shape.values = [node.const];
    if (node.items && typeof node.items === "object") shape.items = node.items;
    for (const branch of [...(node.anyOf || []), ...(node.oneOf || [])]) {
      const inner = shapeOf(root, branch, shape.ungrounded, depth + 1);
      inner.types.forEach((t) => shape.types.add(t));
      if (inner.values) shape.values = [...(shape.values || []), ...inner.values];
      if (inner.items && !shape.items) shape.items = inner.items;
      if (inner.ungrounded) shape.ungrounded = true;
    }
    return shape;
  }

  // A field's kind: `main` is string (grounded or typed), integer, number, boolean, enum, array
  // (of `item`) or json (anything else, edited as JSON).
  function kindOf(root, node, ungrounded, depth) {
    const shape = shapeOf(root, node, ungrounded, depth || 0);
    const values = shape.values ? shape.values.filter((v) => v !== null) : null;
    const nullable = shape.types.has("null") || Boolean(shape.values && shape.values.includes(null));
    let main = ["array", "object", "string", "integer", "number", "boolean"].find((t) => shape.types.has(t)) || "json";
    if (values && values.length && values.every((v) => typeof v !== "object")) main = "enum";
    if (main === "object") main = "json";
    const kind = { main, nullable, values, grounded: main === "string" && !shape.ungrounded, item: null };
    if (main === "array") {
      kind.item = kindOf(root, shape.items, shape.ungrounded, (depth || 0) + 1);
      if (!SCALARS.includes(kind.item.main)) kind.main = "json";
    }
    return kind;
  }

  // The fields of an item: the schema's top-level properties (a non-object top level is one field,
  // the whole answer), then any other key the data holds.
  function fieldsOf(detail, data) {
    const schema = (detail && detail.schema) || {};
    const root = schema;
    const top = shapeOf(root, schema, false, 0);
    const node = (() => {
      let n = schema;
      for (let hops = 0; n && typeof n.$ref === "string" && hops < 16; hops += 1) n = resolveRef(root, n.$ref);
      return n || {};
    })();
    if (detail && !(top.types.has("object") || node.properties)) {
      return [{ name: "value", pointer: "", required: true, kind: kindOf(root, schema, false) }];
    }
    const required = new Set(Array.isArray(node.required) ? node.required : []);
    const fields = Object.entries(node.properties || {}).map(([name, sub]) => ({
      name,
      pointer: P.pointer([name]),
      required: required.has(name),
      kind: kindOf(root, sub, node["x-grounded"] === false),
    }));
    if (data !== null && typeof data === "object" && !Array.isArray(data)) {
      for (const name of Object.keys(data)) {
        if (!fields.some((f) => f.name === name)) {
          fields.push({ name, pointer: P.pointer([name]), required: false, kind: { main: "json", nullable: true } });
        }
      }
    }
    return fields;
  }

  // The fields a selection in the text can go to: strings (set) and lists of strings (add).
  function targets() {
    return item.fields.filter((f) => f.kind.main === "string" || (f.kind.main === "array" && f.kind.item.main === "string"));
  }

  // -- the open item's data -----------------------------------------------------------------

  function valueOf(field) {
    if (field.pointer === "") return item.data;
    return item.data && typeof item.data === "object" ? item.data[field.name] : undefined;
  }

  function setValue(field, value) {
    if (field.pointer === "") item.data = value;
    else {
      if (item.data === null || typeof item.data !== "object" || Array.isArray(item.data)) item.data = {};
      item.data[field.name] = value;
    }
    item.edited.add(field.pointer);
  }

  // Removing a value: an optional field loses its key, a required one that may be null is null.
  function removeValue(field) {
    if (field.pointer === "") item.data = null;
    else if (item.data === null || typeof item.data !== "object") item.data = {};
    else if (!field.required || !field.kind.nullable) delete item.data[field.name];
    else item.data[field.name] = null;
    dropSpans(field.pointer);
    item.edited.add(field.pointer);
  }

  function dropSpans(pointer) {
    item.spans = item.spans.filter((s) => s.path !== pointer && !s.path.startsWith(pointer + "/"));
  }

  // An array lost its element `index`: the spans of the elements after it move down by one.
  function shiftSpans(pointer, index) {
    const prefix = pointer + "/";
    item.spans = item.spans.flatMap((span) => {
      if (!span.path.startsWith(prefix)) return [span];
      const rest = span.path.slice(prefix.length).split("/");
      const at = Number(rest[0]);
      if (at === index) return [];
      if (at < index) return [span];
      return [{ ...span, path: prefix + [String(at - 1), ...rest.slice(1)].join("/") }];
    });
  }

  function confidenceAt(pointer) {
    const confidences = item.raw.result.confidences || {};
    if (pointer in confidences) return confidences[pointer];
    const span = item.raw.result.spans.find((s) => s.path === pointer);
    return span && typeof span.confidence === "number" ? span.confidence : null;
  }

  // A field's confidence: its value's, or the lowest of its elements'.
  function fieldConfidence(field) {
    const confidences = item.raw.result.confidences || {};
    const found = Object.entries(confidences)
      .filter(([p]) => p === field.pointer || p.startsWith(field.pointer + "/"))
      .map(([, c]) => c);
    for (const span of item.raw.result.spans) {
      if ((span.path === field.pointer || span.path.startsWith(field.pointer + "/")) && typeof span.confidence === "number") {
        found.push(span.confidence);
      }
    }
    return found.length ? Math.min(...found) : null;
  }

  function same(a, b) {
    if (a === b) return true;
    if (a === null || b === null || typeof a !== "object" || typeof b !== "object") return false;
    if (Array.isArray(a) !== Array.isArray(b)) return false;
    const keys = Object.keys(a);
    if (keys.length !== Object.keys(b).length) return false;
    return keys.every((k) => Object.prototype.hasOwnProperty.call(b, k) && same(a[k], b[k]));
  }

  function edited() {
    return item !== null && !same(item.data, item.original);
  }

  function pending() {
    return item !== null && item.raw.status === "pending";
  }

  // -- the queue ---------------------------------------------------------------------------

  // aria-busy on the view while the queue or an item loads (what a test, or a screen reader, waits out).
  async function busy(work) {
    queue.busy += 1;
    $("review-view").setAttribute("aria-busy", "true");
    try {
      return await work();
    } finally {
      queue.busy -= 1;
      if (!queue.busy) $("review-view").setAttribute("aria-busy", "false");
    }
  }

  function reviewerHeaders() {
    const name = $("reviewer").value.trim();
    return name ? { "x-reviewer": name } : {};
  }

  function band(confidence) {
    if (typeof confidence !== "number") return "conf-none";
    return confidence >= 0.9 ? "conf-high" : confidence >= 0.6 ? "conf-mid" : "conf-low";
  }

  function percent(confidence) {
    return typeof confidence === "number" ? `${Math.round(confidence * 100)}%` : "–";
  }

  function when(iso) {
    return iso ? new Date(iso).toLocaleString(undefined, { dateStyle: "short", timeStyle: "short" }) : "";
  }

  async function loadTaskFilter() {
    const { response, body } = await P.api("/tasks");
    if (!response.ok) return;
    const select = $("queue-task");
    const before = select.value;
    P.clear(select);
    select.append(P.el("option", { value: "" }, "all"));
    for (const task of body.tasks || []) select.append(P.el("option", { value: task.name }, task.name));
    select.value = (body.tasks || []).some((t) => t.name === before) ? before : "";
  }

  // The first page again (`fresh`: it supersedes any load in flight), or the next one; opens
  // `open` (an index) once loaded.
  function loadQueue(fresh, open) {
    if (!fresh && (queue.loading || !queue.cursor)) return Promise.resolve();
    const ticket = ++queue.loads;
    queue.loading = true;
    return busy(() => fetchQueue(fresh, open, ticket));
  }

  async function fetchQueue(fresh, open, ticket) {
    const params = new URLSearchParams({ order: $("queue-order").value, limit: String(PAGE) });
    for (const [id, key] of [["queue-task", "task"], ["queue-status", "status"]]) {
      if ($(id).value) params.set(key, $(id).value);
    }
    if (!fresh) params.set("cursor", queue.cursor);
    let answer;
    try {
      answer = await P.api(`/review?${params}`);
    } catch (error) {
      answer = null;
    }
    if (ticket !== queue.loads) return;  // a newer load answers instead
    queue.loading = false;
    if (!answer || !answer.response.ok) {
      say(answer ? `the queue: ${problem(answer)}` : "the service does not answer", "bad");
      return;
    }
    const { body } = answer;
    if (fresh) {
      queue.items = [];
      queue.index = -1;
    }
    queue.items.push(...body.items);
    queue.cursor = body.next_cursor;
    showQueue();
    if (open !== undefined && open < queue.items.length) await openItem(open, true);
    else if (fresh && !queue.items.length) closeItem();
  }

  function showQueue() {
    const rows = $("queue-list").querySelector("tbody");
    P.clear(rows);
    queue.items.forEach((entry, index) => {
      const row = P.el("tr", { "data-id": String(entry.id), class: index === queue.index ? "current" : "" },
        P.el("td", {}, String(entry.id)),
        P.el("td", {}, entry.task),
        P.el("td", {}, P.el("span", { class: `conf ${band(entry.confidence)}` }, percent(entry.confidence))),
        P.el("td", { class: `status status-${entry.status}` }, entry.status),
        P.el("td", {}, when(entry.created_at)));
      row.addEventListener("click", () => openItem(index, false));
      rows.append(row);
    });
    $("queue-empty").hidden = queue.items.length > 0;
    $("queue-more").hidden = !queue.cursor;
    const current = rows.querySelector("tr.current");
    if (current) current.scrollIntoView({ block: "nearest" });
  }

  async function move(step) {
    const next = queue.index + step;
    if (next < 0) return;
    if (next >= queue.items.length) {
      if (queue.cursor) await loadQueue(false, next);
      return;
    }
    await openItem(next, false);
  }

  // -- one item ----------------------------------------------------------------------------

  // The item's task as it serves now (its schema says how each field is edited); null: not loaded.
  async function taskDetail(name) {
    if (!tasks.has(name)) {
      try {
        const { response, body } = await P.api(`/tasks/${encodeURIComponent(name)}`);
        if (!response.ok) return null;
        tasks.set(name, body);
      } catch (error) {
        return null;
      }
    }
    return tasks.get(name);
  }

  // Open the queue's item `index`, read afresh (another reviewer may have decided it since it was
  // listed); when keys move faster than the answers, only the last item asked for is shown.
  function openItem(index, keepMessage) {
    const entry = queue.items[index];
    if (!entry) return Promise.resolve();
    queue.index = index;
    const ticket = ++queue.opening;
    if (!keepMessage) say("");
    return busy(async () => {
      let answer;
      try {
        answer = await P.api(`/review/${entry.id}`);
      } catch (error) {
        say("the service does not answer", "bad");
        return;
      }
      if (!answer.response.ok) {
        say(problem(answer), "bad");
        return;
      }
      const detail = await taskDetail(answer.body.task);
      if (ticket !== queue.opening) return;
      const at = queue.items.findIndex((e) => e.id === answer.body.id);
      if (at >= 0) queue.items[at] = answer.body;
      showItem(answer.body, detail);
      showQueue();
    });
  }

  function showItem(raw, detail) {
    const data = raw.status === "corrected" ? raw.corrected : raw.result.data;
    item = {
      raw,
      chars: Array.from(raw.text),
      fields: fieldsOf(detail, data),
      original: structuredClone(data),
      data: structuredClone(data),
      spans: raw.result.spans.map((s) => ({ ...s })),
      edited: new Set(),
      invalid: new Set(),
      selection: null,
      active: null,
      busy: false,
    };
    if (!detail) say(`task ${raw.task} is not loaded now: its values are edited as JSON`, "warn");
    $("item-empty").hidden = true;
    $("item-body").hidden = false;
    $("item-title").textContent = `#${raw.id} · ${raw.task}`;
    $("item-status").textContent = raw.status;
    $("item-status").className = `badge status-${raw.status}`;
    const decided = raw.reviewed_at ? ` · ${raw.status}${raw.reviewer ? ` by ${raw.reviewer}` : ""} ${when(raw.reviewed_at)}` : "";
    $("item-meta").textContent = `lowest confidence ${percent(raw.confidence)} · task version ${raw.task_version} · ` +
      `created ${when(raw.created_at)}${decided}`;
    cancelSelection();
    refresh();
  }

  function closeItem() {
    item = null;
    $("item-body").hidden = true;
    $("item-empty").hidden = false;
    $("item-empty").textContent = "Nothing to review here.";
  }

  function refresh() {
    showText();
    showFields();
    showButtons();
  }

  function showButtons() {
    const open = pending() && !item.busy;
    $("do-accept").disabled = !open;
    $("do-reject").disabled = !open;
    $("do-correct").disabled = !open || !edited() || item.invalid.size > 0;
    $("do-reset").disabled = !open || !edited();
  }

  // -- the text ----------------------------------------------------------------------------

  function fieldAt(path) {
    return item.fields.find((f) => f.pointer === "" || path === f.pointer || path.startsWith(f.pointer + "/"));
  }

  function showText() {
    const view = $("review-text");
    P.clear(view);
    const { root, crossing } = P.layout(item.chars, item.spans);
    item.crossing = new Set(crossing.map((s) => s.path));
    view.append(P.render(item.chars, root, mark));
    view.classList.toggle("selecting", Boolean(item.selection));
  }

  function mark(span) {
    const field = fieldAt(span.path);
    const fresh = span.status === "edited";
    const confidence = typeof span.confidence === "number" ? span.confidence : null;
    const node = P.el("mark", {
      class: `conf ${fresh ? "edited" : band(confidence)}${field && field.pointer === item.active ? " active" : ""}`,
      "data-pointer": span.path,
      "data-badge": fresh ? "new" : percent(confidence),
      title: `${span.path}: ${fresh ? "set by you" : `confidence ${percent(confidence)} (${span.status})`}`,
    });
    node.addEventListener("click", () => {
      if (field && window.getSelection().isCollapsed) activate(field.pointer);
    });
    return node;
  }

  function activate(pointer) {
    item.active = pointer;
    for (const row of document.querySelectorAll("#review-fields tr[data-pointer]")) {
      row.classList.toggle("active", row.getAttribute("data-pointer") === pointer);
    }
    for (const node of document.querySelectorAll("#review-text mark")) {
      const field = fieldAt(node.getAttribute("data-pointer"));
      node.classList.toggle("active", Boolean(field) && field.pointer === pointer);
    }
    if (item.selection && targets().some((f) => f.pointer === pointer)) $("assign-field").value = pointer;
  }

  // -- selecting a value in the text ---------------------------------------------------------

  function codePoints(view, node, offset) {
    const range = document.createRange();
    range.setStart(view, 0);
    range.setEnd(node, offset);
    return Array.from(range.toString()).length;  // marks add no text (their badges are CSS)
  }

  // The selection in the item's text as code points, trimmed of spaces: {start, end, value};
  // null when the selection is empty, undefined when it is not in the text. A drag that
  // overshoots the text (past its end, from above it) keeps the part inside the text.
  function readSelection() {
    const selection = window.getSelection();
    if (!selection || selection.rangeCount === 0) return undefined;
    const range = selection.getRangeAt(0);
    const view = $("review-text");
    if (!range.intersectsNode(view)) return undefined;
    if (range.collapsed) return null;
    const inside = document.createRange();
    inside.selectNodeContents(view);
    if (range.compareBoundaryPoints(Range.START_TO_START, inside) > 0) inside.setStart(range.startContainer, range.startOffset);
    if (range.compareBoundaryPoints(Range.END_TO_END, inside) < 0) inside.setEnd(range.endContainer, range.endOffset);
    let start = codePoints(view, inside.startContainer, inside.startOffset);
    let end = codePoints(view, inside.endContainer, inside.endOffset);
    while (start < end && /\s/u.test(item.chars[start])) start += 1;
    while (end > start && /\s/u.test(item.chars[end - 1])) end -= 1;
    if (start >= end) return null;
    return { start, end, value: item.chars.slice(start, end).join("") };
  }

  function onSelect() {
    if (!pending()) return;
    const found = readSelection();
    if (found === undefined) return;  // a selection elsewhere leaves the one made in the text
    if (found === null) {
      if (item.selection) cancelSelection();
      return;
    }
    const choices = targets();
    if (!choices.length) {
      say("no field of this task takes a value from the text: type it in its field", "warn");
      return;
    }
    item.selection = found;
    const picker = $("assign-field");
    P.clear(picker);
    choices.forEach((field, n) => {
      const label = `${n + 1}. ${field.name}${field.kind.main === "array" ? " (add)" : ""}`;
      picker.append(P.el("option", { value: field.pointer }, label));
    });
    picker.value = defaultTarget(choices).pointer;
    $("assign-value").textContent = found.value;
    $("assign").hidden = false;
    $("review-text").classList.add("selecting");
  }

  // The field a selection most likely goes to: the one last picked, else the least confident.
  function defaultTarget(choices) {
    const active = choices.find((f) => f.pointer === item.active);
    if (active) return active;
    let best = choices[0];
    for (const field of choices) {
      const c = fieldConfidence(field);
      const b = fieldConfidence(best);
      if (c !== null && (b === null || c < b)) best = field;
    }
    return best;
  }

  function cancelSelection() {
    if (item) item.selection = null;
    if ($("assign").contains(document.activeElement)) document.activeElement.blur();
    $("assign").hidden = true;
    $("review-text").classList.remove("selecting");
    const selection = window.getSelection();
    if (selection && selection.rangeCount && $("review-text").contains(selection.anchorNode)) selection.removeAllRanges();
  }

  // The selection becomes the field's value (a list field gets it added).
  function assign(pointer) {
    if (!item || !item.selection || !pending()) return;
    const field = targets().find((f) => f.pointer === (pointer || $("assign-field").value));
    if (!field) return;
    const { start, end, value } = item.selection;
    let path = field.pointer;
    if (field.kind.main === "array") {
      const list = Array.isArray(valueOf(field)) ? [...valueOf(field)] : [];
      path = `${field.pointer}/${list.length}`;
      list.push(value);
      setValue(field, list);
    } else {
      dropSpans(field.pointer);
      setValue(field, value);
    }
    item.spans.push({ path, value, start, end, status: "edited", confidence: null });
    item.active = field.pointer;
    cancelSelection();
    say(`${field.name} ← “${value}”: Enter sends the correction`, "ok");
    refresh();
  }

  // -- the fields ----------------------------------------------------------------------------

  function showFields() {
    const rows = $("review-fields").querySelector("tbody");
    P.clear(rows);
    const choices = targets();
    for (const field of item.fields) {
      const number = choices.indexOf(field);
      const name = P.el("td", { class: "name" }, number >= 0 ? P.el("kbd", {}, String(number + 1)) : "", " ",
        field.name || "(value)", field.required ? " *" : "");
      const confidence = fieldConfidence(field);
      const conf = item.edited.has(field.pointer)
        ? P.el("span", { class: "conf edited" }, "edited")
        : P.el("span", { class: `conf ${band(confidence)}` }, percent(confidence));
      const row = P.el("tr", { "data-pointer": field.pointer, class: field.pointer === item.active ? "active" : "" },
        name, P.el("td", { class: "value" }, editor(field)), P.el("td", {}, conf));
      name.addEventListener("click", () => activate(field.pointer));
      rows.append(row);
    }
  }

  function changed() {
    showText();
    showButtons();
  }

  function removeButton(label, action) {
    const button = P.el("button", { type: "button", class: "remove", title: `remove ${label}`, disabled: !pending() }, "×");
    button.addEventListener("click", () => {
      action();
      refresh();
    });
    return button;
  }

  function spanNote(path) {
    const span = item.spans.find((s) => s.path === path);
    if (!span || span.status === "edited" || span.status === "exact" || span.status === "normalized") {
      return item.crossing.has(path) ? P.el("span", { class: "hint" }, " (overlaps another value: not highlighted)") : "";
    }
    return P.el("span", { class: "missing" }, span.status === "fuzzy" ? " near match only" : " not in the text");
  }

  function shown(value) {
    return typeof value === "string" ? `“${value}”` : JSON.stringify(value);
  }

  function editor(field) {
    const value = valueOf(field);
    const kind = field.kind;
    const box = P.el("div", { class: "editor" });
    if (kind.main === "string" && kind.grounded) {
      if (value === null || value === undefined) {
        box.append(P.el("span", { class: "empty" }, value === null ? "null" : "(none)"), " ",
          P.el("span", { class: "hint" }, "select it in the text"));
      } else {
        box.append(P.el("span", { class: "text-value" }, shown(value)), spanNote(field.pointer), " ",
          removeButton(field.name, () => removeValue(field)));
      }
    } else if (kind.main === "array") {
      const list = Array.isArray(value) ? value : [];
      list.forEach((element, index) => {
        // an element's confidence travels with its span when elements before it are removed
        const path = `${field.pointer}/${index}`;
        const span = item.spans.find((s) => s.path === path);
        const confidence = span ? span.confidence : item.edited.has(field.pointer) ? null : confidenceAt(path);
        const chip = P.el("span", { class: "chip", "data-pointer": path }, shown(element), spanNote(path));
        if (confidence !== null) chip.append(" ", P.el("span", { class: `conf ${band(confidence)}` }, percent(confidence)));
        chip.append(removeButton(`${field.name} ${index + 1}`, () => {
          const rest = [...list];
          rest.splice(index, 1);
          shiftSpans(field.pointer, index);
          setValue(field, rest);
        }));
        box.append(chip);
      });
      if (kind.item.main === "string" && kind.item.grounded) {
        box.append(P.el("span", { class: "hint" }, list.length ? " add: select in the text" : "none: select in the text to add"));
      } else if (pending()) {
        box.append(adder(field, list));
      }
    } else if (kind.main === "json") {
      box.append(jsonEditor(field, value));
    } else {
      box.append(typedEditor(field, kind, value));
    }
    return box;
  }

  function parseTyped(kind, raw) {
    if (raw === "") return undefined;
    if (kind.main === "integer" || kind.main === "number") return Number(raw);
    if (kind.main === "boolean") return raw === "true";
    if (kind.main === "enum") return kind.values[Number(raw)];
    return raw;
  }

  // An input for a value that is typed, not selected: a number, a boolean, an enum member, or a
  // string that need not occur in the text; its empty choice stands for no value.
  function typedInput(kind, value, label) {
    let input;
    if (kind.main === "enum" || kind.main === "boolean") {
      const options = kind.main === "boolean" ? [true, false] : kind.values;
      input = P.el("select", {}, P.el("option", { value: "" }, kind.nullable ? "null" : "(none)"));
      options.forEach((option, index) => {
        const key = kind.main === "boolean" ? String(option) : String(index);
        input.append(P.el("option", { value: key }, JSON.stringify(option)));
      });
      const at = options.findIndex((o) => same(o, value));
      input.value = at < 0 ? "" : kind.main === "boolean" ? String(options[at]) : String(at);
    } else {
      const numeric = kind.main === "integer" || kind.main === "number";
      input = P.el("input", { type: numeric ? "number" : "text", step: kind.main === "integer" ? "1" : "any" });
      input.value = value === null || value === undefined ? "" : String(value);
      input.placeholder = value === null ? "null" : "(none)";
    }
    input.disabled = !pending();
    input.setAttribute("aria-label", label);
    return input;
  }

  // A typed field's editor: each change is the field's new value (none: removed); Enter sends the correction.
  function typedEditor(field, kind, value) {
    const input = typedInput(kind, value, field.name);
    const update = () => {
      const next = parseTyped(kind, input.value);
      const bad = typeof next === "number" && !Number.isFinite(next);
      input.classList.toggle("invalid", bad);
      if (bad) item.invalid.add(field.pointer);
      else item.invalid.delete(field.pointer);
      if (bad) {
        changed();
        return;
      }
      if (next === undefined) removeValue(field);
      else setValue(field, next);
      dropSpans(field.pointer);
      const row = input.closest("tr");
      if (row) row.lastChild.replaceChildren(P.el("span", { class: "conf edited" }, "edited"));
      changed();
    };
    input.addEventListener(input.tagName === "SELECT" ? "change" : "input", update);
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") {
        event.preventDefault();
        decide("correct");
      }
    });
    return input;
  }

  // Adding a typed value to a list (of numbers, booleans, enum members or ungrounded strings).
  function adder(field, list) {
    const input = typedInput({ ...field.kind.item, nullable: false }, undefined, `add to ${field.name}`);
    const add = P.el("button", { type: "button" }, "Add");
    const commit = () => {
      const next = parseTyped(field.kind.item, input.value);
      if (next === undefined) return;
      setValue(field, [...list, next]);
      refresh();
    };
    add.addEventListener("click", commit);
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") {
        event.preventDefault();
        commit();
      }
    });
    return P.el("span", { class: "adder" }, input, add);
  }

  function jsonEditor(field, value) {
    const area = P.el("textarea", { rows: 3, spellcheck: false, disabled: !pending() });
    area.value = value === undefined ? "" : JSON.stringify(value, null, 1);
    area.setAttribute("aria-label", `${field.name} (JSON)`);
    area.addEventListener("input", () => {
      try {
        const next = area.value.trim() === "" ? undefined : JSON.parse(area.value);
        if (next === undefined) removeValue(field);
        else setValue(field, next);
        dropSpans(field.pointer);
        item.invalid.delete(field.pointer);
        area.classList.remove("invalid");
      } catch (error) {
        item.invalid.add(field.pointer);
        area.classList.add("invalid");
      }
      changed();
    });
    return area;
  }

  // -- decisions -----------------------------------------------------------------------------

  // One line above the item: what the last action did (kept while the queue moves on to the next item).
  function say(text, kind) {
    const box = $("review-message");
    box.textContent = text;
    box.className = kind || "";
  }

  function problem(answer) {
    const { response, body } = answer;
    const said = body.message || `HTTP ${response.status}`;
    return response.status === 401 ? `${said} (type the key in the API key box at the top)` : said;
  }

  async function undo() {
    if (!item) return;
    const raw = item.raw;
    showItem(raw, await taskDetail(raw.task));
  }

  // Accept, correct or reject the open item; on success the queue moves on to the next item.
  async function decide(decision) {
    if (!item || item.busy) return;
    if (!pending()) {
      say(`item #${item.raw.id} is ${item.raw.status} already`, "warn");
      return;
    }
    if (decision === "accept" && edited()) {
      say("you changed values: Enter sends them as a correction (or Undo edits, then accept)", "warn");
      return;
    }
    if (decision === "correct" && (!edited() || item.invalid.size)) {
      say(item.invalid.size ? "a field holds a value that does not parse" : "nothing changed: select a value, or Accept", "warn");
      return;
    }
    const body = { version: item.raw.version };
    if (decision === "correct") body.data = item.data;
    const id = item.raw.id;
    item.busy = true;
    showButtons();
    let answer;
    try {
      answer = await P.api(`/review/${id}/${decision}`, {
        method: "POST",
        headers: { "content-type": "application/json", ...reviewerHeaders() },
        body: JSON.stringify(body),
      });
    } catch (error) {
      answer = null;
    }
    if (item && item.raw.id === id) item.busy = false;
    if (!answer) {
      say("the service does not answer", "bad");
      showButtons();
      return;
    }
    const { response, body: out } = answer;
    if (response.status === 409) {
      say(`Decided by someone else: ${out.message}`, "warn");
      await openItem(queue.index, true);
      return;
    }
    if (!response.ok) {
      say(response.status === 422 ? `Not saved: ${out.message}` : problem(answer), "bad");
      showButtons();
      return;
    }
    tasks.delete(out.task);  // the pool grew: the task's version changed
    const where = out.pool ? `: added to ${out.pool.file} (task version ${out.pool.task_version})`
      : out.note ? ` (${out.note})` : "";
    say(`#${out.id} ${out.status}${where}`, "ok");
    await advance(out);
  }

  async function advance(decided) {
    const index = queue.index;
    const filter = $("queue-status").value;
    if (filter && filter !== decided.status) {
      queue.items.splice(index, 1);  // out of this view: the next one takes its place
      if (index < queue.items.length) await openItem(index, true);
      else if (queue.cursor) await loadQueue(false, index);
      else if (queue.items.length) await openItem(queue.items.length - 1, true);
      else closeItem();
    } else {
      queue.items[index] = decided;
      if (index + 1 < queue.items.length) await openItem(index + 1, true);
      else if (queue.cursor) await loadQueue(false, index + 1);
      else await openItem(index, true);
    }
    showQueue();
  }

  // -- keys ----------------------------------------------------------------------------------

  function onKey(event) {
    if ($("review-view").hidden || event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target instanceof Element ? event.target : null;
    if (target === $("assign-field")) {
      if (event.key === "Enter") assign();
      else if (event.key === "Escape") cancelSelection();
      else if (/^[1-9]$/.test(event.key)) assign((targets()[Number(event.key) - 1] || {}).pointer);
      else return;
      event.preventDefault();
      return;
    }
    if (event.key === "Escape") {
      if (target && target.closest("input, textarea, select")) target.blur();
      cancelSelection();
      return;
    }
    if (target && target.closest("input, textarea, select")) return;
    if ((event.key === "Enter" || event.key === " ") && target && target.closest("button")) return;  // its own click
    const selecting = item !== null && item.selection !== null;
    if (event.key === "j") move(1);
    else if (event.key === "k") move(-1);
    else if (event.key === "a") decide("accept");
    else if (event.key === "r") decide("reject");
    else if (event.key === "Enter") {
      if (selecting) assign();
      else decide("correct");
    } else if (selecting && /^[1-9]$/.test(event.key)) assign((targets()[Number(event.key) - 1] || {}).pointer);
    else return;
    event.preventDefault();
  }

  // -- wiring --------------------------------------------------------------------------------

  function show() {
    say("");
    loadTaskFilter();
    loadQueue(true, item ? undefined : 0).then(() => {
      if (item) {
        const at = queue.items.findIndex((e) => e.id === item.raw.id);
        if (at >= 0) {
          queue.index = at;
          showQueue();
        }
      }
    });
  }

  function init() {
    P = window.Playground;
    $("reviewer").value = localStorage.getItem(REVIEWER_STORAGE) || "";
    $("reviewer").addEventListener("change", () => localStorage.setItem(REVIEWER_STORAGE, $("reviewer").value.trim()));
    for (const id of ["queue-task", "queue-status", "queue-order"]) {
      $(id).addEventListener("change", () => loadQueue(true, 0));
    }
    $("queue-refresh").addEventListener("click", () => loadQueue(true, 0));
    $("queue-more").addEventListener("click", () => loadQueue(false));
    $("do-accept").addEventListener("click", () => decide("accept"));
    $("do-correct").addEventListener("click", () => decide("correct"));
    $("do-reject").addEventListener("click", () => decide("reject"));
    $("do-reset").addEventListener("click", undo);
    $("assign-ok").addEventListener("click", () => assign());
    $("assign-cancel").addEventListener("click", cancelSelection);
    $("review-text").addEventListener("mouseup", () => setTimeout(onSelect, 0));
    document.addEventListener("mouseup", (event) => {
      if (!$("review-text").contains(event.target)) setTimeout(onSelect, 0);  // a drag that ended outside the text
    });
    document.addEventListener("keydown", onKey);
    document.addEventListener("playground:view", (event) => {
      if (event.detail === "review") show();
    });
    document.addEventListener("playground:key", () => {
      if (!$("review-view").hidden) show();
    });
    if (!$("review-view").hidden) show();
  }

  document.addEventListener("DOMContentLoaded", init);
})();
