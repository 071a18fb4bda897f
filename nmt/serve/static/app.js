// nmt serve page: POST /translate with attention (beam search, or sampling with a temperature
// and seed), list the translations with their alternatives, draw the chosen sentence's attention
// on a canvas: cross (target rows x source columns, from /translate), or through POST /attention
// the encoder's self-attention (source x source) or the decoder's masked self-attention
// (<s> + target x the same). No libraries, no build step.
"use strict";

const $ = (id) => document.getElementById(id);
let answer = null; // the last /translate answer
let selected = 0; // the sentence whose attention is shown
let drawing = 0; // the latest heatmap asked for: an older /attention answer is not drawn
const AXES = {
  cross: "Rows: target pieces; columns: source pieces; last decoder layer",
  self: "Rows and columns: source pieces; last encoder layer",
  decoder: "Rows and columns: <s> and the target pieces, each row over itself and those before; last decoder layer",
};

async function loadInfo() {
  const res = await fetch("/info").catch(() => null);
  if (!res || res.status === 503) {
    const health = res ? await fetch("/health").then((r) => r.json()).catch(() => ({})) : {};
    setStatus(health.status === "failed" ? "failed" : "loading", health.detail);
    if (health.status !== "failed") setTimeout(loadInfo, 1000);
    return;
  }
  const info = await res.json();
  const arch = info.architecture;
  const langs = info.languages.source ? `${info.languages.source} → ${info.languages.target} · ` : "";
  const layers = arch.encoder_layers !== undefined ? ` ${arch.encoder_layers}+${arch.decoder_layers} layers` : "";
  const params = arch.parameters ? ` · ${(arch.parameters / 1e6).toFixed(1)}M parameters` : "";
  const name = info.ensemble ? `ensemble of ${info.ensemble.length} (${info.ensemble.join(", ")})` : info.model;
  const engine = info.runtime ? ` · ${info.runtime}` : "";
  $("model").textContent = `${name} · ${langs}${arch.type}${layers}${params} · ${info.device}${engine}`;
  $("beam").value = info.decoding.beam_size;
  $("sample").disabled = !info.sampling; // an export's CTranslate2 does not sample
  if (!info.sampling) $("sample").parentElement.title = "sampling needs a model directory";
  for (const option of $("attention-kind").options) {
    if (option.value === "cross") continue; // /translate's attention
    option.disabled = !info.attention_kinds.includes(option.value);
    if (option.disabled) option.title = "this model does not have it";
  }
  setStatus("ready");
}

function setStatus(status, detail) {
  const el = $("status");
  el.className = `status ${status}`;
  el.textContent = status;
  el.title = detail || "";
}

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

async function translate() {
  const lines = $("source").value.split("\n").map((s) => s.trim()).filter((s) => s);
  if (!lines.length) return showError("Type at least one sentence.");
  showError("");
  const button = $("translate");
  button.disabled = true;
  $("timings").textContent = "translating…";
  const body = requestBody(lines);
  const t0 = performance.now();
  try {
    const res = await fetch("/translate", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    const data = await res.json().catch(() => ({ detail: res.statusText }));
    if (!res.ok) {
      $("timings").textContent = "";
      return showError(`${res.status}: ${data.detail}`);
    }
    render(data, performance.now() - t0);
  } catch (e) {
    $("timings").textContent = "";
    showError(`request failed: ${e.message}`);
  } finally {
    button.disabled = false;
  }
}

// The glossary box as [[source term, target term], ...]: one "source = target" (or
// tab-separated) entry a line; a line without a separator is shown as an error by the API.
function glossaryPairs() {
  return $("glossary").value.split("\n").map((s) => s.trim()).filter((s) => s).map((entry) => {
    const at = entry.includes("\t") ? entry.indexOf("\t") : entry.indexOf("=");
    return at < 0 ? [entry] : [entry.slice(0, at).trim(), entry.slice(at + 1).trim()];
  });
}

// What the controls ask for: beam search (beam size, alternatives = n-best) or sampling
// (alternatives = samples per sentence, drawn at the temperature from the seed), with the
// glossary's entries where it has any.
function requestBody(lines) {
  const body = controlsBody(lines);
  const glossary = glossaryPairs();
  if (glossary.length) body.glossary = glossary;
  return body;
}

function controlsBody(lines) {
  if ($("split").checked) {
    // one translation per line, its sentences joined: no alternatives, sampling or attention
    const beam = parseInt($("beam").value, 10);
    return beam > 0 ? { text: lines, split_sentences: true, beam_size: beam } : { text: lines, split_sentences: true };
  }
  const body = { text: lines, with_attention: true };
  const nbest = parseInt($("nbest").value, 10);
  if (nbest > 1) body.nbest = nbest;
  if ($("sample").checked) {
    body.sampling = {
      temperature: parseFloat($("temperature").value) || 1.0,
      seed: parseInt($("seed").value, 10) || 0,
    };
  } else {
    const beam = parseInt($("beam").value, 10);
    if (beam > 0) body.beam_size = beam;
  }
  return body;
}

function toggleSampling() {
  const on = $("sample").checked && !$("split").checked;
  $("beam").disabled = on;
  $("temperature").disabled = !on;
  $("seed").disabled = !on;
}

function toggleSplit() {
  const on = $("split").checked;
  $("sample").disabled = on;
  $("nbest").disabled = on;
  toggleSampling();
}

function render(data, roundTripMs) {
  answer = data;
  const n = data.translations.length;
  $("timings").textContent =
    `${n} sentence${n === 1 ? "" : "s"}: server ${data.elapsed_ms} ms ` +
    `(decoding ${data.decode_ms} ms, batch of ${data.batch.lines} lines from ${data.batch.requests} ` +
    `request${data.batch.requests === 1 ? "" : "s"}), round trip ${roundTripMs.toFixed(0)} ms`;
  const list = $("results");
  list.replaceChildren();
  data.translations.forEach((record, i) => {
    const li = document.createElement("li");
    li.className = "result";
    li.dataset.index = i;
    const best = record.hypotheses[0];
    li.append(span("src", record.source), document.createElement("br"));
    li.append(span("translation", best.translation), span("score", `score ${best.score.toFixed(3)}`));
    if (best.at_limit) li.append(span("cut", "stopped at the length limit: may be cut short"));
    if (record.hypotheses.length > 1) {
      const alternatives = document.createElement("ol");
      alternatives.className = "alternatives";
      alternatives.start = 2; // the best is the first
      record.hypotheses.slice(1).forEach((hyp) => {
        const item = document.createElement("li");
        item.append(span("alternative", hyp.translation), span("score", `score ${hyp.score.toFixed(3)}`));
        alternatives.append(item);
      });
      li.append(alternatives);
    }
    li.addEventListener("click", () => select(i));
    list.append(li);
  });
  select(0);
}

function span(cls, text) {
  const el = document.createElement("span");
  el.className = cls;
  el.textContent = text;
  return el;
}

function select(i) {
  document.querySelectorAll("#results > li").forEach((li) => li.classList.toggle("selected", +li.dataset.index === i));
  selected = i;
  showAttention();
}

// The selected sentence's attention of the chosen kind, for its shown (best) translation: cross
// as /translate gave it, the other kinds from POST /attention with that translation as target.
async function showAttention() {
  const record = answer.translations[selected];
  const hyp = record.hypotheses[0];
  const kind = $("attention-kind").value;
  const ticket = ++drawing;
  $("attention").hidden = record.sentences !== undefined; // a split line: several translations
  if (record.sentences !== undefined) return;
  $("attention-title").textContent = `(sentence ${selected + 1})`;
  $("attention-axes").textContent = AXES[kind];
  if (kind === "cross") {
    return drawHeatmap($("heatmap"), record.source_tokens, [...hyp.tokens, "</s>"], hyp.attention, kind);
  }
  const body = { text: record.source, kind };
  if (hyp.translation) body.target = hyp.translation; // else the search finds the same nothing
  try {
    const res = await fetch("/attention", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    const data = await res.json().catch(() => ({ detail: res.statusText }));
    if (ticket !== drawing) return; // another sentence or kind was chosen meanwhile
    if (!res.ok) return showError(`${res.status}: ${data.detail}`);
    showError("");
    drawHeatmap($("heatmap"), data.columns, data.rows, data.weights, kind);
  } catch (e) {
    if (ticket === drawing) showError(`request failed: ${e.message}`);
  }
}

// Rows attend over columns; darker = more weight (0..1, row sums are 1). The canvas says what it
// shows in data- attributes: kind, rows, cols, and where the cells are (left, top, cell size).
function drawHeatmap(canvas, cols, rows, weights, kind) {
  const ctx = canvas.getContext("2d");
  const font = "12px system-ui, sans-serif";
  ctx.font = font;
  const widest = (labels) => Math.max(0, ...labels.map((s) => ctx.measureText(s).width));
  const cell = 24;
  const left = Math.ceil(widest(rows)) + 10;
  const top = Math.ceil(widest(cols)) + 10;
  const width = left + cols.length * cell + 2;
  const height = top + rows.length * cell + 2;
  const ratio = window.devicePixelRatio || 1;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, width, height);
  ctx.font = font;
  ctx.fillStyle = "#1d2430";
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  rows.forEach((label, r) => ctx.fillText(label, left - 6, top + r * cell + cell / 2));
  cols.forEach((label, c) => {
    ctx.save();
    ctx.translate(left + c * cell + cell / 2, top - 6);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left";
    ctx.fillText(label, 0, 0);
    ctx.restore();
  });
  const top1 = Math.max(1e-6, ...weights.flat()); // the darkest cell: the largest weight
  weights.forEach((row, r) =>
    row.forEach((w, c) => {
      const shade = Math.round(255 * (1 - Math.min(1, Math.max(0, w / top1))));
      ctx.fillStyle = `rgb(${shade}, ${Math.round(shade * 0.9 + 25)}, 255)`;
      ctx.fillRect(left + c * cell, top + r * cell, cell - 1, cell - 1);
    }),
  );
  $("scale").textContent = `white = 0, darkest = ${top1.toFixed(3)}`;
  Object.assign(canvas.dataset, { kind, rows: rows.length, cols: cols.length, left, top, cell });
  canvas.onmousemove = (e) => {
    const box = canvas.getBoundingClientRect();
    const c = Math.floor((e.clientX - box.left - left) / cell);
    const r = Math.floor((e.clientY - box.top - top) / cell);
    const inside = r >= 0 && r < rows.length && c >= 0 && c < cols.length;
    $("cell").textContent = inside ? `${rows[r]} ← ${cols[c]}: ${weights[r][c].toFixed(3)}` : "\u00a0";
  };
}

$("translate").addEventListener("click", translate);
$("sample").addEventListener("change", toggleSampling);
$("split").addEventListener("change", toggleSplit);
$("attention-kind").addEventListener("change", () => answer && showAttention());
$("source").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) translate();
});
loadInfo();
