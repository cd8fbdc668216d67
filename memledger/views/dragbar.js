// Drag to preview (memledger/views/preview_panel.py): a native range input over one setting's values
// and an SVG chart drawn from memledger/views/preview.py's data, redrawn on every `input` event
// with no server round trip. Release (pointer `change`, or `keyup` of a key that moved it)
// reports the value with setTriggerValue("commit", {axis, value}); the page applies it as a
// sidebar change. Streamlit calls this function again whenever `data` changes (every rerun):
// the elements and listeners are made once per mount and only the data is swapped.
// Every string from the data goes in with textContent or setAttribute, never as markup: a
// model's name comes from a share link.
const SVG = "http://www.w3.org/2000/svg";
const GIB = 2 ** 30;
const NAV = new Set(["ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown", "Home", "End",
                     "PageUp", "PageDown"]);

function el(tag, cls, parent) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (parent) parent.appendChild(e);
  return e;
}

function svgEl(tag, attrs, parent) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (parent) parent.appendChild(e);
  return e;
}

function text(parent, x, y, s, attrs = {}) {
  const t = svgEl("text", { x, y, ...attrs }, parent);
  t.textContent = s;
  return t;
}

function niceTicks(max, n) {
  const raw = max / n, mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map(k => k * mag).find(s => s >= raw);
  const out = [];
  for (let v = 0; v <= max + 1e-9; v += step) out.push(v);
  return out;
}

function build(parent) {
  const root = el("div", "mlp-root", parent);
  const s = { root, held: false, keyboard: false };
  s.title = el("div", "mlp-title", root);
  s.sub = el("div", "mlp-sub", root);
  s.head = el("div", "mlp-head", root);
  s.svg = svgEl("svg", { class: "mlp-chart", role: "img" }, root);
  s.legend = el("div", "mlp-legend", root);
  const lab = el("label", "mlp-label", root);
  s.label = el("span", "", lab);
  s.input = el("input", "mlp-range", lab);
  s.input.type = "range";
  s.input.min = "0";
  s.input.step = "1";
  s.ticks = el("div", "mlp-ticks", root);
  s.status = el("div", "mlp-status", root);
  s.status.setAttribute("aria-live", "polite");
  const inp = s.input;
  inp.addEventListener("input", () => {
    draw(s, +inp.value);
    const d = s.data, v = d.values[+inp.value];
    s.status.textContent = !v.ok ? `${d.label} = ${v.v} is not valid here.`
      : v.v === s.committed ? "" : `Release to set ${d.label} = ${v.v}.`;
  });
  inp.addEventListener("pointerdown", () => { s.held = true; });
  const letGo = () => { s.held = false; };  // wherever the pointer is released
  window.addEventListener("pointerup", letGo, true);
  window.addEventListener("pointercancel", letGo, true);
  s.unlisten = () => {
    window.removeEventListener("pointerup", letGo, true);
    window.removeEventListener("pointercancel", letGo, true);
    s.resize.disconnect();
  };
  inp.addEventListener("keydown", e => { if (NAV.has(e.key)) s.keyboard = true; });
  inp.addEventListener("change", () => { if (!s.keyboard) commit(s); });
  inp.addEventListener("keyup", e => {
    if (NAV.has(e.key)) { s.keyboard = false; commit(s); }
  });
  s.resize = new ResizeObserver(() => {
    const w = Math.max(320, Math.round(root.getBoundingClientRect().width - 20));
    if (w !== s.width) { s.width = w; if (s.data) draw(s, +s.input.value); }
  });
  s.resize.observe(root);
  root.__mlp = s;
  return s;
}

function commit(s) {
  const d = s.data, v = d.values[+s.input.value];
  if (!v.ok) {
    // back to the set value: a panel left on the invalid one read as if it had been set
    const back = d.values.findIndex(x => x.v === s.committed);
    if (back >= 0) { s.input.value = String(back); draw(s, back); }
    s.status.textContent = `${d.label} = ${v.v} is not valid here: nothing set, back to ` +
      `${d.label} = ${s.committed}.`;
    return;
  }
  if (v.v === s.committed) return;
  s.committed = v.v;
  s.pending = { v: v.v, until: performance.now() + 3000 };
  s.status.textContent = `${d.label} = ${v.v}: set in the sidebar.`;
  s.root.dataset.committed = String(v.v);
  s.send("commit", { axis: d.axis, value: v.v });
}

// The page's own chart's axis for this configuration: to past the capacity or the tallest bar
function scale(d, v) {
  let top = d.capacity;
  if (v.ok) for (const r of v.ranks) top = Math.max(top, r[1]);
  return top / GIB * (d.kind === "ledger" ? 1.08 : 1.15);
}

function draw(s, i) {
  const d = s.data, v = d.values[i];
  s.root.dataset.idx = String(i);
  s.root.dataset.value = String(v.v);
  s.root.dataset.ok = v.ok ? "1" : "0";
  s.label.textContent = `Drag to preview · ${d.label} = ${v.v}${v.ok ? "" : " ✕"}`;
  s.input.setAttribute("aria-valuetext", v.ok ? String(v.v) : `${v.v}, not valid here`);
  s.root.classList.toggle("mlp-invalid", !v.ok);
  s.max = scale(d, v);
  if (v.ok) {
    s.title.textContent = v.title;
    s.sub.textContent = v.sub;
    s.head.textContent = v.head;
    s.head.className = "mlp-head " + (v.fits ? "mlp-fits" : "mlp-over");
  } else {
    s.title.textContent = `${d.label} = ${v.v}: not valid here`;
    s.sub.textContent = v.reason;
    s.head.textContent = "";
    s.head.className = "mlp-head";
  }
  (d.kind === "ledger" ? drawBar : drawStairs)(s, d, v);
  drawLegend(s, d, v);
}

// Drawn at the width it is shown (text keeps its size on a phone), 720 before layout; measured
// when data arrives or the element resizes, not on every step (that would force a layout)
function width(s) {
  return s.width || 720;
}

function seg(g, d, k, rank, bytes, box) {
  const r = svgEl("rect", { ...box, fill: d.rows[k].color, class: "mlp-seg",
                            "data-row": d.rows[k].key, "data-rank": rank, "data-bytes": bytes },
                  g);
  const t = svgEl("title", {}, r);
  t.textContent = `${d.rows[k].label}: ${(bytes / GIB).toFixed(2)} GiB ` +
                  `(${BigInt(bytes).toLocaleString("en-US")} bytes), pp rank ${rank}`;
  return r;
}

// The Ledger page: one horizontal stacked bar (the most loaded rank), capacity as a line.
function drawBar(s, d, v) {
  const W = width(s), H = 150, L = 92, R = 20, T = 30, B = 34, svg = s.svg;
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const max = s.max, x = g => L + (W - L - R) * g / max, g = svgEl("g", {}, svg);
  for (const t of niceTicks(max, 6)) {
    svgEl("line", { x1: x(t), x2: x(t), y1: T, y2: H - B, class: "mlp-grid" }, g);
    text(g, x(t), H - B + 16, t.toFixed(0), { class: "mlp-tick", "text-anchor": "middle" });
  }
  text(g, L + (W - L - R) / 2, H - 2, "memory per GPU (GiB = 2³⁰ bytes)",
       { class: "mlp-axis", "text-anchor": "middle" });
  const y0 = T + 14, h = H - B - T - 28;
  if (v.ok) {
    const [rank, total, rows] = v.ranks[0];
    text(g, L - 8, y0 + h / 2 + 4, `pp rank ${rank}`, { class: "mlp-tick", "text-anchor": "end" });
    let acc = 0;
    rows.forEach((b, k) => {
      const x0 = x(acc / GIB), w = x((acc + b) / GIB) - x0;
      seg(g, d, k, rank, b, { x: x0, y: y0, width: Math.max(0, w), height: h });
      if (w > 34) text(g, x0 + w / 2, y0 + h / 2 + 4, (b / GIB).toFixed(1),
                       { class: "mlp-in", "text-anchor": "middle" });
      acc += b;
    });
    text(g, Math.min(x(total / GIB), W - R), y0 - 4, `${(total / GIB).toFixed(1)} GiB`,
         { class: "mlp-total", "text-anchor": "end" });
  } else {
    svgEl("rect", { x: L, y: y0, width: W - L - R, height: h, class: "mlp-grey" }, g);
    text(g, L + (W - L - R) / 2, y0 + h / 2 + 7, `✕ ${d.label} = ${v.v}`,
         { class: "mlp-cross", "text-anchor": "middle" });
  }
  const cx = x(d.capacity / GIB);
  svgEl("line", { x1: cx, x2: cx, y1: T, y2: H - B, stroke: d.cap_color, class: "mlp-cap" }, g);
  text(g, cx, T - 6, `${d.gpu} capacity ${(d.capacity / GIB).toFixed(1)} GiB`,
       { fill: d.cap_color, class: "mlp-capnote",
         "text-anchor": cx > 0.6 * W ? "end" : "start" });
}

// The staircase: stacked rows per pipeline rank, capacity as a line.
function drawStairs(s, d, v) {
  const W = width(s), H = 320, L = 56, R = 96, T = 14, B = 44, svg = s.svg;
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const max = s.max, y = g => H - B - (H - B - T) * g / max, g = svgEl("g", {}, svg);
  for (const t of niceTicks(max, 5)) {
    svgEl("line", { x1: L, x2: W - R, y1: y(t), y2: y(t), class: "mlp-grid" }, g);
    text(g, L - 6, y(t) + 4, t.toFixed(0), { class: "mlp-tick", "text-anchor": "end" });
  }
  text(g, L + (W - L - R) / 2, H - 4, "pipeline-parallel rank (0 = first stage)",
       { class: "mlp-axis", "text-anchor": "middle" });
  if (v.ok) {
    const n = v.ranks.length, band = (W - L - R) / n, bw = band * 0.65;
    v.ranks.forEach(([rank, total, rows], j) => {
      const x0 = L + band * j + (band - bw) / 2;
      let acc = 0;
      rows.forEach((b, k) => {
        const top = y((acc + b) / GIB);
        seg(g, d, k, rank, b, { x: x0, y: top, width: bw, height: Math.max(0, y(acc / GIB) - top) });
        acc += b;
      });
      if (n <= 32 && band >= 14) text(g, x0 + bw / 2, H - B + 14, String(rank),
                        { class: "mlp-tick", "text-anchor": "middle" });
      if (rank === v.peak) text(g, x0 + bw / 2, y(total / GIB) - 5,
                                `most loaded: ${(total / GIB).toFixed(1)} GiB`,
                                { class: "mlp-total", "text-anchor": "middle" });
    });
  } else {
    svgEl("rect", { x: L, y: T, width: W - L - R, height: H - B - T, class: "mlp-grey" }, g);
    text(g, L + (W - L - R) / 2, (H - B + T) / 2, `✕ ${d.label} = ${v.v}`,
         { class: "mlp-cross", "text-anchor": "middle" });
  }
  const cy = y(d.capacity / GIB);
  svgEl("line", { x1: L, x2: W - R, y1: cy, y2: cy, stroke: d.cap_color, class: "mlp-cap" }, g);
  text(g, W - R + 4, cy - 2, d.gpu, { fill: d.cap_color, class: "mlp-capnote" });
  text(g, W - R + 4, cy + 12, `${(d.capacity / GIB).toFixed(1)} GiB`,
       { fill: d.cap_color, class: "mlp-capnote" });
}

function drawLegend(s, d, v) {
  s.legend.replaceChildren();
  d.rows.forEach((r, k) => {
    const item = el("span", "mlp-key", s.legend);
    const sw = el("span", "mlp-swatch", item);
    sw.style.background = v.ok ? r.color : "#c8c8c8";
    const name = el("span", "", item);
    name.textContent = v.ok && d.kind === "ledger"
      ? `${r.short} ${(v.ranks[0][2][k] / GIB).toFixed(1)} GiB` : r.short;
  });
}

function drawTicks(s, d) {
  s.ticks.replaceChildren();
  for (const v of d.values) {
    const t = el("span", v.ok ? "" : "mlp-bad", s.ticks);
    t.textContent = v.ok ? String(v.v) : `${v.v} ✕`;
  }
}

export default function ({ data, parentElement, setTriggerValue }) {
  const s = (parentElement.querySelector(".mlp-root") || build(parentElement).root).__mlp;
  const fresh = !s.data || s.data.axis !== data.axis || s.data.kind !== data.kind
                || s.data.values.length !== data.values.length;
  s.data = data;
  s.send = setTriggerValue;
  s.committed = data.values[data.current].v;
  s.input.max = String(data.values.length - 1);
  s.input.setAttribute("aria-label", `Preview ${data.label}; release to set it`);
  drawTicks(s, data);
  // Not under a holding hand, nor back to a value older than the last release (a rerun for an
  // earlier release may arrive after a later one)
  const cur = data.values[data.current].v, p = s.pending;
  if (p && (p.v === cur || performance.now() > p.until)) s.pending = undefined;
  if (fresh || (!s.held && !s.keyboard && !s.pending)) s.input.value = String(data.current);
  s.root.dataset.current = String(data.values[data.current].v);
  draw(s, +s.input.value);
  // Streamlit calls the last cleanup on unmount (and may call a stale one early): act only
  // once this mount's elements are gone
  return () => { if (!s.root.isConnected) s.unlisten(); };
}
