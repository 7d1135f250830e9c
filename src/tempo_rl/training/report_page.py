"""The static parts of the ``tempo-rl report`` page: its HTML skeleton, stylesheet and script.

The script reads the run's data from ``<script type="application/json" id="report-data">`` and draws the
update list; an update's start states, and a start's branches and critic samples, are built only when they are
first expanded (a main-job run holds thousands of branches). Text from the run is always inserted as text
(``textContent``), never as markup.
"""

from __future__ import annotations

__all__ = ["PAGE_CSS", "PAGE_JS", "PAGE_TEMPLATE"]

PAGE_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>@TITLE@</title>
<style>@CSS@</style>
</head>
<body>
<header>
  <nav><a href="#curves">curves</a> &middot; <a href="#browse">updates</a></nav>
  <h1 id="title"></h1>
  <p id="run-info"></p>
  <div id="banner" class="partial-banner" role="alert" hidden></div>
  <ul id="notes" class="notes"></ul>
</header>
<main>
<section id="curves">
<h2>Curves</h2>
@CURVES@
</section>
<section id="browse">
<h2>Updates</h2>
<form id="filters" onsubmit="return false">
  <label>phase <select id="f-phase">
    <option value="">all</option><option value="warmup">warm-up</option><option value="td">TD</option>
    <option value="grpo">GRPO</option><option value="gigpo">GiGPO</option></select></label>
  <label>updates <input id="f-umin" type="number" min="0" step="1" placeholder="from" size="5">
    &ndash; <input id="f-umax" type="number" min="0" step="1" placeholder="to" size="5"></label>
  <label>game <select id="f-game"><option value="">all</option></select></label>
  <label>outcome <select id="f-outcome">
    <option value="">any</option><option value="won">won</option><option value="not_won">not won</option>
    <option value="terminated">terminated</option><option value="truncated">truncated (bootstrapped)</option>
    <option value="token_budget">token budget</option><option value="error">error</option>
    <option value="invalid">has invalid actions</option><option value="quarantined">a state quarantined</option>
  </select></label>
  <label>search <input id="f-q" type="search" placeholder="actions, observations, critic text"></label>
  <span id="f-count"></span>
</form>
<div id="updates"></div>
<div id="unplaced"></div>
</section>
</main>
<script type="application/json" id="report-data">@DATA@</script>
<script>@JS@</script>
</body>
</html>
"""

PAGE_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d2330; background: #f6f7fb; }
header { background: #1f3a60; color: #fff; padding: 12px 20px; }
header nav { float: right; } header nav a { color: #cfe0ff; }
header h1 { margin: 0 0 4px; font-size: 20px; }
header p { margin: 0; color: #d5e1f2; }
main { padding: 0 20px 40px; }
h2 { border-bottom: 2px solid #1f3a60; padding-bottom: 2px; margin-top: 24px; }
h3 { margin: 14px 0 6px; }
.partial-banner { background: #ffcf4d; color: #3b2a00; font-weight: 600; padding: 8px 12px; margin-top: 8px;
  border-radius: 4px; }
.partial-banner ul { margin: 4px 0 0; font-weight: 400; }
.notes { color: #ffe9b0; margin: 6px 0 0; }
.note { color: #6b7280; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(460px, 1fr)); gap: 10px; }
.chart { background: #fff; border: 1px solid #dde2ec; border-radius: 4px; }
#filters { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; background: #fff; padding: 8px 10px;
  border: 1px solid #dde2ec; border-radius: 4px; position: sticky; top: 0; z-index: 5; }
#filters input[type=number] { width: 5em; }
#f-count { color: #4b5563; margin-left: auto; }
details { margin: 4px 0; }
summary { cursor: pointer; }
details.update { background: #fff; border: 1px solid #dde2ec; border-radius: 4px; padding: 4px 8px; }
details.update > summary { font-weight: 600; }
details.start { border-left: 3px solid #7aa2d6; padding-left: 8px; margin-left: 8px; }
details.start.restored { border-left-color: #3b9b5d; }
.phase { display: inline-block; min-width: 64px; padding: 0 6px; border-radius: 3px; color: #fff;
  text-align: center; font-size: 12px; }
.phase-warmup { background: #8a5fbf; } .phase-td { background: #1f6fc0; } .phase-grpo { background: #c0641f; } .phase-gigpo { background: #2f8f5b; }
.badge { display: inline-block; padding: 0 5px; border-radius: 3px; font-size: 12px; background: #e5e9f2; }
.badge.fresh { background: #dbe8fb; } .badge.restored { background: #d4f0dd; }
.badge.quarantined, .badge.invalid, .badge.error { background: #f8d0d0; color: #7a1010; }
.badge.won { background: #c9efc9; }
.start-body { display: grid; grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); gap: 14px; margin: 6px 0 10px; }
.panel { background: #fafbfd; border: 1px solid #e3e7ef; border-radius: 4px; padding: 6px 8px; }
.panel h4 { margin: 2px 0 6px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { border-bottom: 1px solid #e6e9f0; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #eef1f7; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.invalid td { background: #fdecec; }
tr.hit td, details.hit > summary { background: #fff6c7; }
pre { white-space: pre-wrap; word-break: break-word; margin: 0; font-size: 12px; }
.obs { color: #374151; }
.dim { color: #6b7280; }
.diff { background: #fff; border: 1px solid #eee; padding: 4px; max-height: 240px; overflow: auto; }
"""

PAGE_JS = r"""
(function () {
  "use strict";
  const DATA = JSON.parse(document.getElementById("report-data").textContent);

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") e.className = v;
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }
  const isNum = (v) => typeof v === "number" && isFinite(v);
  const fmt = (v) => (isNum(v) ? v.toFixed(3) : "\u2014");
  function num(v) {
    return el("td", { class: "num", "data-v": isNum(v) ? String(v) : "" }, fmt(v));
  }
  function advCell(v) {  // GiGPO's advantage is one number per round: the first, all of them on hover
    if (!Array.isArray(v)) return num(v);
    return el("td", { class: "num", "data-v": v.length && isNum(v[0]) ? String(v[0]) : "", title: v.map(fmt).join(" ") },
      v.length ? fmt(v[0]) + (v.length > 1 ? " \u2026" : "") : "\u2014");
  }
  const GROUPED = (p) => p === "grpo" || p === "gigpo";  // full-episode groups, no critic
  function badge(text, cls) { return el("span", { class: "badge " + (cls || "") }, text); }
  function phaseTag(p) {
    const names = { warmup: "warm-up", td: "TD", grpo: "GRPO", gigpo: "GiGPO" };
    return el("span", { class: "phase phase-" + p }, names[p] || String(p));
  }
  const END = {
    terminated: "terminated",
    macro_boundary: "truncated at H (bootstrapped)",
    max_rounds: "truncated at T",
    token_budget: "token budget",
    error: "error",
  };
  function outcomes(b) {
    const o = [b.won ? "won" : "not_won"];
    if (b.end_reason === "terminated") o.push("terminated");
    if (b.end_reason === "macro_boundary" || b.end_reason === "max_rounds") o.push("truncated");
    if (b.end_reason === "token_budget") o.push("token_budget");
    if (b.end_reason === "error") o.push("error");
    if ((b.invalid_actions || 0) > 0) o.push("invalid");
    return o;
  }
  function critics(s) {
    const out = [];
    if (s.start && s.start.critic) out.push(s.start.critic);
    for (const b of s.branches) for (const m of b.boundaries || []) if (m.critic) out.push(m.critic);
    return out;
  }
  function branchText(b) {
    const parts = [...(b.actions || []), ...(b.observations || []), b.error || ""];
    for (const m of b.boundaries || []) if (m.critic) for (const k of m.critic.samples) parts.push(k.text);
    return parts.join("\n").toLowerCase();
  }
  function startText(s) {
    if (s._text === undefined) {
      const st = s.start || {};
      const parts = [s.game_id || "", st.task || "", st.observation || "", ...(st.history_actions || [])];
      if (st.critic) for (const k of st.critic.samples) parts.push(k.text);
      s._text = parts.join("\n").toLowerCase() + "\n" + s.branches.map(branchText).join("\n");
    }
    return s._text;
  }

  // ------------------------------------------------------------------------------------------ filters
  const F = { phase: "", umin: null, umax: null, game: "", outcome: "", q: "" };
  function readFilters() {
    const v = (id) => document.getElementById(id).value;
    F.phase = v("f-phase"); F.game = v("f-game"); F.outcome = v("f-outcome");
    F.q = v("f-q").trim().toLowerCase();
    F.umin = v("f-umin") === "" ? null : Number(v("f-umin"));
    F.umax = v("f-umax") === "" ? null : Number(v("f-umax"));
  }
  function updateShown(u) {
    if (F.phase && u.phase !== F.phase) return false;
    if (F.umin !== null && u.update < F.umin) return false;
    if (F.umax !== null && u.update > F.umax) return false;
    return true;
  }
  function branchMatches(b) {
    if (F.outcome && F.outcome !== "quarantined" && !outcomes(b).includes(F.outcome)) return false;
    return !F.q || branchText(b).includes(F.q);
  }
  function startMatches(s) {
    if (F.game && s.game_id !== F.game) return false;
    if (F.outcome === "quarantined") return false;
    if (F.outcome && !s.branches.some((b) => outcomes(b).includes(F.outcome))) return false;
    return !F.q || startText(s).includes(F.q);
  }
  function quarantineMatches(q) {
    if (F.game && q.game_id !== F.game) return false;
    if (F.outcome && F.outcome !== "quarantined") return false;
    const text = [q.game_id, q.reason, q.diff].join("\n").toLowerCase();
    return !F.q || text.includes(F.q);
  }

  // ------------------------------------------------------------------------------------------ rendering
  function criticPanel(c, label) {
    const box = el("div", { class: "panel critic" });
    box.append(el("h4", {}, label + ": G = " + fmt(c.target)));
    const flags = [];
    if (c.degenerate) flags.push(badge("degenerate group (no critic Datum)", ""));
    else if (!c.trained) flags.push(badge("not trained", ""));
    if (c.prompt_too_long) flags.push(badge(c.samples.length ? "prompt too long: " + c.omitted_turns +
      " history turns omitted" : "prompt too long even without history: nothing sampled", "invalid"));
    if (flags.length) box.append(el("p", {}, ...flags));
    if (!c.samples.length) return box;
    const tbody = el("tbody");
    c.samples.forEach((k, i) => {
      tbody.append(el("tr", { "data-sample": i },
        el("td", {}, String(i + 1)), num(k.value), el("td", {}, k.status),
        num(k.reward), num(k.advantage), el("td", {}, el("pre", {}, k.text))));
    });
    box.append(el("table", { class: "samples" },
      el("thead", {}, el("tr", {}, ...["k", "value", "parse", "reward", "advantage", "critic text"].map(
        (h) => el("th", {}, h)))), tbody));
    return box;
  }
  function turnsTable(b, s) {
    const tbody = el("tbody");
    const base = s.start_round || 0;
    (b.actions || []).forEach((a, t) => {
      const invalid = b.invalid_turns ? !!b.invalid_turns[t] : null;
      const obs = b.observations ? b.observations[t] : undefined;
      tbody.append(el("tr", { class: invalid ? "invalid" : null, "data-turn": t },
        el("td", { class: "num" }, String(base + t + 1)),
        el("td", {}, a, invalid ? " " : null, invalid ? badge("invalid", "invalid") : null),
        el("td", { class: "obs" }, obs === undefined ? el("span", { class: "dim" }, "not recorded") : el("pre", {}, obs)),
        num((b.rewards || [])[t])));
    });
    return el("table", { class: "turns" },
      el("thead", {}, el("tr", {}, ...["round", "action", "observation", "reward"].map((h) => el("th", {}, h)))),
      tbody);
  }
  function branchDetails(b, s) {
    const d = el("details", { class: "branch" + (F.q && branchMatches(b) ? " hit" : ""), "data-branch": b.branch });
    d.append(el("summary", {}, "branch " + (b.branch !== undefined ? b.branch : "?") + ": " +
      (b.actions || []).length + " turns, " + (END[b.end_reason] || b.end_reason) + (b.won ? ", won" : "")));
    if (b.error) d.append(el("p", {}, badge("error", "error"), " ", b.error));
    d.append(turnsTable(b, s));
    for (const m of b.boundaries || []) {
      if (m.critic) d.append(criticPanel(m.critic, "boundary state at round " + ((s.start_round || 0) + m.round) +
        " (Monte Carlo target)"));
    }
    return d;
  }
  function branchTable(s) {
    const td = s.phase === "td";
    const heads = ["#", "end", "turns", "invalid", "r_n"];
    if (td) heads.push("V\u0302_n", "R_n", "A_n", "kept");
    else heads.push(GROUPED(s.phase) ? "R_n" : "G_0 (return)", ...(GROUPED(s.phase) ? ["A_n"] : []));
    const tbody = el("tbody");
    s.branches.forEach((b, j) => {
      const cells = [
        el("td", {}, String(b.branch !== undefined ? b.branch : j)),
        el("td", {}, END[b.end_reason] || String(b.end_reason), b.won ? " " : null, b.won ? badge("won", "won") : null),
        el("td", { class: "num" }, String((b.actions || []).length)),
        el("td", { class: "num" }, String(b.invalid_actions || 0)),
        num(b.r),
      ];
      if (td) cells.push(num(b.endpoint_value), num(b["return"]), num(b.advantage), el("td", {}, b.kept ? "yes" : "no"));
      else { cells.push(num(b["return"])); if (GROUPED(s.phase)) cells.push(advCell(b.advantage)); }
      tbody.append(el("tr", { "data-branch": j, class: F.q && branchMatches(b) ? "hit" : null }, ...cells));
    });
    return el("table", { class: "branches" },
      el("thead", {}, el("tr", {}, ...heads.map((h) => el("th", {}, h)))), tbody);
  }
  function startBody(s) {
    const body = el("div", { class: "start-body" });
    const left = el("div", {});
    const st = s.start;
    if (st) {
      const info = el("div", { class: "panel" });
      info.append(el("h4", {}, "start state"));
      if (st.task) info.append(el("p", {}, el("b", {}, "task: "), st.task));
      if (st.history_actions && st.history_actions.length)
        info.append(el("p", {}, el("b", {}, "reached by: "), st.history_actions.join(" \u2192 ")));
      if (st.observation) info.append(el("pre", { class: "obs" }, st.observation));
      left.append(info);
    }
    left.append(el("h4", {}, s.branches.length + " branches"));
    left.append(branchTable(s));
    for (const b of s.branches) left.append(branchDetails(b, s));
    body.append(left);
    const right = el("div", {});
    if (st && st.critic) {
      right.append(criticPanel(st.critic, s.phase === "td" ? "critic on the start state" :
        "critic on the start state (mean episode return)"));
    } else {
      right.append(el("p", { class: "dim" }, GROUPED(s.phase) ? "GRPO and GiGPO have no critic." : !st ?
        "critic samples not recorded (trajectories.jsonl written before tempo-rl recorded them)" :
        s.phase === "td" ? "no critic samples: no branch of this start was kept (all dropped), so the critic " +
        "was not asked about it" : "no critic samples on this start state"));
    }
    body.append(right);
    return body;
  }
  function startSummary(s) {
    const won = s.branches.filter((b) => b.won).length;
    const parts = [el("b", {}, s.game_id || "?"), " "];
    if (!GROUPED(s.phase)) {
      parts.push(s.fresh ? badge("fresh", "fresh") : badge("restored \u00b7 verified", "restored"), " ");
      parts.push("depth " + (s.start_round || 0) + " rounds (" + (s.start_macro_index || 0) + " macro-steps)");
      if (s.start_policy_version !== null && s.start_policy_version !== undefined)
        parts.push(" \u00b7 state from policy v" + s.start_policy_version);
    }
    if (s.policy_version !== null && s.policy_version !== undefined) parts.push(" \u00b7 sampled by v" + s.policy_version);
    parts.push(" \u00b7 won " + won + "/" + s.branches.length);
    if (s.start && s.start.critic) parts.push(" \u00b7 G = " + fmt(s.start.critic.target));
    return el("summary", {}, ...parts);
  }
  function quarantineBox(list) {
    const box = el("div", { class: "panel quarantine" });
    box.append(el("h4", {}, list.length + " stored state(s) quarantined: their restore diverged"));
    for (const q of list) {
      box.append(el("p", {}, badge("quarantined", "quarantined"), " ", el("b", {}, q.game_id || "?"),
        " \u00b7 " + (q.macro_index || 0) + " macro-steps \u00b7 state from policy v" + q.policy_version +
        " \u00b7 id " + q.id));
      if (q.reason) box.append(el("pre", {}, q.reason));
      if (q.diff) box.append(el("pre", { class: "diff" }, q.diff));
    }
    return box;
  }
  function updateSummary(u, starts) {
    const n = u.starts.reduce((a, s) => a + s.branches.length, 0);
    const won = u.starts.reduce((a, s) => a + s.branches.filter((b) => b.won).length, 0);
    const fresh = u.starts.filter((s) => s.fresh).length;
    const parts = [phaseTag(u.phase), " update " + u.update + " \u00b7 " + u.starts.length + " starts"];
    if (u.phase === "td") parts.push(" (" + fresh + " fresh, " + (u.starts.length - fresh) + " restored)");
    parts.push(" \u00b7 " + n + " branches \u00b7 won " + won + "/" + n);
    if (u.quarantined.length) parts.push(" ", badge(u.quarantined.length + " quarantined", "quarantined"));
    const m = u.metrics || {};
    if (isNum(m["critic/abs_error_mean"])) parts.push(" \u00b7 critic |V-G| " + fmt(m["critic/abs_error_mean"]));
    if (starts.length !== u.starts.length) parts.push(el("span", { class: "dim" }, " \u00b7 " + starts.length + " match"));
    return el("summary", {}, ...parts);
  }
  function lazy(details, build) {
    details.addEventListener("toggle", () => {
      if (details.open && !details.dataset.built) { details.dataset.built = "1"; details.append(build()); }
    });
  }
  function renderUpdates() {
    readFilters();
    const root = document.getElementById("updates");
    root.replaceChildren();
    let nu = 0, ns = 0;
    for (const u of DATA.updates) {
      if (!updateShown(u)) continue;
      const starts = u.starts.filter(startMatches);
      const quarantined = u.quarantined.filter(quarantineMatches);
      if (!starts.length && !quarantined.length) continue;
      nu += 1; ns += starts.length;
      const d = el("details", { class: "update", "data-update": u.update, "data-phase": u.phase });
      d.append(updateSummary(u, starts));
      lazy(d, () => {
        const body = el("div", { class: "update-body" });
        if (quarantined.length) body.append(quarantineBox(quarantined));
        starts.forEach((s) => {
          const sd = el("details", { class: "start " + (s.fresh ? "fresh" : "restored") + (F.q ? " hit" : ""),
            "data-start": s.start_id || "", "data-index": u.starts.indexOf(s) });
          sd.append(startSummary(s));
          lazy(sd, () => startBody(s));
          body.append(sd);
        });
        return body;
      });
      root.append(d);
    }
    if (!nu) root.append(el("p", { class: "note" }, DATA.updates.length ? "nothing matches the filters" :
      "trajectories.jsonl holds no record yet"));
    document.getElementById("f-count").textContent = nu + " updates, " + ns + " start states shown";
  }

  // ------------------------------------------------------------------------------------------ header
  const run = DATA.run;
  document.getElementById("title").textContent = "tempo-rl report: " + run.name;
  document.getElementById("run-info").textContent = run.algorithm.toUpperCase() + " \u00b7 " +
    run.updates_on_disk + (run.updates_total !== null ? " of " + run.updates_total : "") + " updates on disk \u00b7 " +
    run.records + " trajectory records";
  if (run.partial) {
    const banner = document.getElementById("banner");
    banner.hidden = false;
    banner.append("Partial run: this report shows what was on disk when it was written.",
      el("ul", {}, ...run.reasons.map((r) => el("li", {}, r))));
  }
  document.getElementById("notes").append(...run.notes.map((n) => el("li", {}, n)));
  const gameSel = document.getElementById("f-game");
  for (const g of DATA.games) gameSel.append(el("option", { value: g }, g));
  if (DATA.quarantined_unplaced.length) {
    document.getElementById("unplaced").append(el("h3", {}, "Quarantined during the update in progress"),
      quarantineBox(DATA.quarantined_unplaced));
  }
  let timer = null;
  for (const id of ["f-phase", "f-game", "f-outcome", "f-umin", "f-umax"])
    document.getElementById(id).addEventListener("change", renderUpdates);
  document.getElementById("f-q").addEventListener("input", () => {
    clearTimeout(timer); timer = setTimeout(renderUpdates, 200);
  });
  renderUpdates();
})();
"""
