// The span picker's page: the text with its spans, a range selected with the mouse, typed by a key.
// Streamlit's component protocol (v1): post `streamlit:componentReady` once, receive `streamlit:render`
// with the arguments, post `streamlit:setComponentValue` for each action and `streamlit:setFrameHeight`
// whenever the page's height changes. Offsets here are JavaScript string (UTF-16) indices; the host
// converts them. User text only ever enters the page as text nodes and attribute values, never as markup.
"use strict";

const BAR_PX = 3, STEP_PX = 5;          // one underline level: a bar and the gap above it (render.py's style)

let args = null;
let version = null;
let pending = null;                     // {start, end}: a selection waiting for its type
let chosen = null;                      // index of the shown span picked by a click
let current = null;                     // the last type used: Enter gives it to a new selection
let lastClick = null;                   // {unit, index}: a second click at the same place picks the next span
let sent = 0;
let problem = "";

const $picker = document.getElementById("picker");
const $types = document.getElementById("types");
const $status = document.getElementById("status");
const $text = document.getElementById("text");

function post(type, data) {
  window.parent.postMessage(Object.assign({isStreamlitMessage: true, type: type}, data), "*");
}

function emit(op, data) {
  sent += 1;
  const id = Date.now().toString(36) + "-" + sent + "-" + Math.random().toString(36).slice(2, 8);
  post("streamlit:setComponentValue", {value: Object.assign({id: id, op: op}, data), dataType: "json"});
  pending = null;
  chosen = null;
  draw();
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function colorsOf(type) {
  const c = args.colors[type];
  return c ? {fill: c[0], bar: c[1]} : {fill: "#e3e5e8", bar: "#7d828b"};
}

function quote(start, end) {
  const s = args.text.slice(start, end);
  return "“" + (s.length > 60 ? s.slice(0, 60) + "…" : s) + "”";
}

// ---- drawing -------------------------------------------------------------------------------------

function drawTypes() {
  $types.replaceChildren();
  for (const t of args.types) {
    const b = el("button", "type" + (t.name === current ? " current" : ""));
    b.type = "button";
    b.style.background = colorsOf(t.name).fill;
    b.title = t.keys.length ? "key " + t.keys.join(" or ") : "no key: click it";
    for (const k of t.keys) b.appendChild(el("kbd", "", k));
    b.appendChild(document.createTextNode(t.name));
    b.dataset.type = t.name;
    b.addEventListener("mousedown", (e) => e.preventDefault());      // keep the text's selection
    b.addEventListener("click", () => act(t.name));
    $types.appendChild(b);
  }
}

function drawStatus() {
  $status.replaceChildren();
  let line;
  if (problem) {
    $status.appendChild(el("span", "problem", problem));
    return;
  }
  if (pending) {
    line = "Selected " + quote(pending.start, pending.end) + ": press a type's key or click a type" +
           (current ? " (Enter: " + current + ")" : "") + "; Esc cancels.";
  } else if (chosen !== null) {
    const s = args.spans[chosen];
    line = s.type + " " + quote(s.start, s.end) + ": Delete removes it, a type's key retypes it; Esc lets go.";
  } else if (!args.types.length) {
    line = "This document has no types to give a span: use the form below.";
  } else {
    line = "Select text with the mouse, then press a type's key. Click a span's tag to pick it. " +
           "Enter with nothing selected saves the draft.";
  }
  $status.textContent = line;
}

function drawText() {
  const text = args.text, spans = args.spans;
  const depth = spans.reduce((m, s) => Math.max(m, s.level + 1), 0);
  const cuts = new Set([0, text.length]);
  for (const s of spans) { cuts.add(s.start); cuts.add(s.end); }
  if (pending) { cuts.add(pending.start); cuts.add(pending.end); }
  const points = Array.from(cuts).sort((a, b) => a - b);
  const order = spans.map((s, i) => i).sort((i, j) =>
    spans[i].start - spans[j].start || spans[j].end - spans[i].end);
  $text.replaceChildren();
  $text.style.lineHeight = "calc(2em + " + depth * STEP_PX + "px)";
  let next = 0;
  for (let p = 0; p + 1 < points.length; p++) {
    const a = points[p], b = points[p + 1];
    while (next < order.length && spans[order[next]].start <= a) {   // tags of the spans starting here
      const i = order[next++];
      if (spans[i].start === a) $text.appendChild(chip(i));
    }
    const seg = el("span", "seg", text.slice(a, b));
    seg.dataset.u = String(a);
    const over = spans.map((s, i) => i).filter((i) => spans[i].start <= a && b <= spans[i].end);
    if (over.length) underline(seg, over, depth);
    if (pending && pending.start <= a && b <= pending.end) seg.classList.add("pending");
    if (chosen !== null && over.includes(chosen)) seg.classList.add("chosen");
    $text.appendChild(seg);
  }
}

function chip(i) {
  const s = args.spans[i];
  const c = el("span", "chip" + (i === chosen ? " chosen" : ""), s.type);
  c.style.background = colorsOf(s.type).fill;
  c.title = s.title + ": " + s.type + " " + quote(s.start, s.end);
  c.dataset.span = String(i);
  c.addEventListener("mousedown", (e) => { e.preventDefault(); pick(i); });
  return c;
}

function underline(seg, over, depth) {
  // One bar per covering span at its level, a light fill of the innermost (as render.spans_html draws).
  const spans = args.spans;
  const inner = over.reduce((x, y) => (spans[y].end - spans[y].start < spans[x].end - spans[x].start ? y : x));
  const bars = over.map((i) => colorsOf(spans[i].type).bar);
  seg.classList.add("span");
  seg.style.backgroundColor = colorsOf(spans[inner].type).fill + "66";
  seg.style.backgroundImage = bars.map((c) => "linear-gradient(" + c + "," + c + ")").join(",");
  seg.style.backgroundSize = bars.map(() => "100% " + BAR_PX + "px").join(",");
  seg.style.backgroundPosition = over.map((i) =>
    "0 calc(100% - " + (depth - 1 - spans[i].level) * STEP_PX + "px)").join(",");
  seg.style.paddingBottom = depth * STEP_PX + "px";
}

function draw() {
  if (!args) return;
  drawTypes();
  drawStatus();
  drawText();
  resize();
}

let height = 0;

function resize() {
  // The picker's own height, not the document's: that is at least the frame's, and would only ever grow.
  const h = Math.ceil($picker.getBoundingClientRect().bottom) + 2;
  if (h !== height) {
    height = h;
    post("streamlit:setFrameHeight", {height: h});
  }
}

// ---- where a DOM point is in the text --------------------------------------------------------------

function unitAt(node, offset) {
  // The text offset of a DOM boundary point: segments carry their start (data-u) and hold one text node;
  // a point in a tag or between nodes belongs to the next segment's start.
  for (const seg of $text.querySelectorAll(".seg")) {
    const inside = document.createRange();
    inside.selectNodeContents(seg.firstChild || seg);
    const where = inside.comparePoint(node, offset);
    if (where < 0) return Number(seg.dataset.u);
    if (where === 0) return Number(seg.dataset.u) + (node === seg.firstChild ? offset : 0);
  }
  return args.text.length;
}

function trimmed(start, end) {
  const text = args.text;
  while (start < end && /\s/.test(text[start])) start++;
  while (end > start && /\s/.test(text[end - 1])) end--;
  return {start: start, end: end};
}

// ---- actions -------------------------------------------------------------------------------------

function act(type) {
  problem = "";
  if (pending) {
    current = type;
    emit("add", {type: type, start: pending.start, end: pending.end});
  } else if (chosen !== null) {
    current = type;
    emit("retype", {span: chosen, type: type});
  } else {
    current = type;
    draw();
  }
}

function pick(i) {
  problem = "";
  pending = null;
  chosen = i === chosen ? null : i;
  window.getSelection().removeAllRanges();
  $text.focus();
  draw();
}

$text.addEventListener("mouseup", () => {
  const sel = window.getSelection();
  if (!sel.rangeCount) return;
  const range = sel.getRangeAt(0);
  if (!$text.contains(range.commonAncestorContainer) && range.commonAncestorContainer !== $text) return;
  const a = unitAt(range.startContainer, range.startOffset), b = unitAt(range.endContainer, range.endOffset);
  problem = "";
  if (sel.isCollapsed || a === b) {           // a click: pick the innermost span there, the next one on a repeat
    const here = args.spans.map((s, i) => i).filter((i) => args.spans[i].start <= a && a < args.spans[i].end)
      .sort((i, j) => (args.spans[i].end - args.spans[i].start) - (args.spans[j].end - args.spans[j].start));
    let index = 0;
    if (lastClick && lastClick.unit === a && here.length) index = (lastClick.index + 1) % here.length;
    lastClick = {unit: a, index: index};
    pending = null;
    chosen = here.length ? here[index] : null;
  } else {
    const r = trimmed(Math.min(a, b), Math.max(a, b));
    pending = r.start < r.end ? r : null;
    chosen = null;
    lastClick = null;
  }
  sel.removeAllRanges();
  $text.focus();
  draw();
});

document.addEventListener("keydown", (e) => {
  if (!args || e.ctrlKey || e.metaKey || e.altKey) return;
  const key = e.key.length === 1 ? e.key.toLowerCase() : e.key;
  const type = args.types.find((t) => t.keys.includes(key));
  if (type) {
    e.preventDefault();
    act(type.name);
  } else if (key === "Delete" || key === "Backspace") {
    e.preventDefault();
    if (chosen !== null) emit("remove", {span: chosen});
    else if (pending) { pending = null; draw(); }
  } else if (key === "Enter") {
    e.preventDefault();
    if (pending && current) emit("add", {type: current, start: pending.start, end: pending.end});
    else if (pending) { problem = "Give the selection a type first: press its key or click it."; draw(); }
    else if (chosen === null) emit("accept", {});
  } else if (key === "Escape") {
    pending = null;
    chosen = null;
    problem = "";
    draw();
  }
});

window.addEventListener("message", (e) => {
  if (!e.data || e.data.type !== "streamlit:render") return;
  const theme = e.data.theme;
  if (theme) {
    const root = document.documentElement.style;
    if (theme.textColor) root.setProperty("--text", theme.textColor);
    if (theme.backgroundColor) root.setProperty("--bg", theme.backgroundColor);
    if (theme.primaryColor) root.setProperty("--primary", theme.primaryColor);
    if (theme.font) document.body.style.fontFamily = theme.font;
  }
  const next = e.data.args;
  if (next.version !== version) { pending = null; chosen = null; problem = ""; }
  version = next.version;
  args = next;
  draw();
});

new ResizeObserver(resize).observe($picker);
post("streamlit:componentReady", {apiVersion: 1});
