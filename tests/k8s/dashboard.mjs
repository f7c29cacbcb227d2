// Checks Grafana dashboards offline: each file parses as JSON, has a uid, takes its Prometheus
// from the `datasource` variable, and every panel (a row's too) other than a row has targets, each
// with a PromQL expr that, after Grafana's variables are replaced as VARIABLES says, uses no other
// variable and names only metrics ringd serves (METRICS).
// `node dashboard.mjs [--rules FILE] JSON...`: one line per problem, a summary; exit 1 on any
// problem. --rules also writes every replaced expr as a Prometheus recording rule, for
// `promtool check rules FILE`, which parses them with Prometheus's own parser (run.sh does).
import { readFileSync, realpathSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

// What each variable a query may use stands for when it is checked (the values the tests that run
// the queries against a live Prometheus use too). Any other $name is a problem.
export const VARIABLES = new Map([
  ["job", ".*"],
  ["__rate_interval", "1m"],
  ["__range", "5m"],
]);

// The metric families of ringd's /metrics; a histogram's also as NAME_bucket, _sum and _count.
const COUNTERS_AND_GAUGES = [
  "ringd_bytes_total", "ringd_ops_total", "ringd_link_bytes_total",
  "ringd_link_throughput_bytes_per_second", "ringd_link_connections",
  "ringd_membership_changes_total", "ringd_job_generation", "ringd_job_ranks",
  "ringd_stall_warnings_total", "ringd_stall_aborts_total", "ringd_clients", "ringd_arena_bytes",
  "ringd_redis_up", "ringd_redis_rtt_seconds", "ringd_gpu_bytes_total", "ringd_ops_in_flight",
  "ringd_build_info",
];
const HISTOGRAMS = [
  "ringd_op_duration_seconds", "ringd_negotiation_wait_seconds", "ringd_ring_pass_ops",
];
export const METRICS = new Set([
  ...COUNTERS_AND_GAUGES,
  ...HISTOGRAMS.flatMap((h) => [`${h}_bucket`, `${h}_sum`, `${h}_count`]),
]);

const DATASOURCE_UID = "${datasource}";

// expr with the variables replaced, and the problems found in it.
export function substitute(expr) {
  const problems = [];
  const out = expr.replace(/\$\{(\w+)\}|\$(\w+)/g, (whole, braced, bare) => {
    const name = braced || bare;
    if (!VARIABLES.has(name)) {
      problems.push(`unknown variable ${whole}`);
      return whole;
    }
    return VARIABLES.get(name);
  });
  const metrics = out.match(/\bringd_\w+/g) || [];
  if (metrics.length === 0) {
    problems.push("no ringd_ metric");
  }
  for (const m of new Set(metrics)) {
    if (!METRICS.has(m)) {
      problems.push(`unknown metric ${m}`);
    }
  }
  return { expr: out, problems };
}

// Every panel, rows' nested panels included.
function allPanels(panels) {
  return (panels || []).flatMap((p) => [p, ...allPanels(p.panels)]);
}

// checkDashboard(d): the problems of one parsed dashboard, and its queries as { where, expr } with
// the variables replaced.
export function checkDashboard(d) {
  const problems = [];
  const queries = [];
  if (d === null || typeof d !== "object" || Array.isArray(d)) {
    return { problems: ["not an object"], queries };
  }
  if (typeof d.uid !== "string" || d.uid === "") {
    problems.push("no uid");
  }
  const vars = (d.templating && d.templating.list) || [];
  const ds = vars.find((v) => v.name === "datasource");
  if (!ds || ds.type !== "datasource" || ds.query !== "prometheus") {
    problems.push("no `datasource` variable of type datasource for prometheus");
  }
  const panels = allPanels(d.panels);
  if (panels.length === 0) {
    problems.push("no panels");
  }
  for (const p of panels) {
    const name = `panel ${p.id} "${p.title}"`;
    if (p.type === "row") {
      continue;
    }
    if (p.datasource && p.datasource.uid !== DATASOURCE_UID) {
      problems.push(`${name}: datasource ${JSON.stringify(p.datasource.uid)}, ` +
        `not ${DATASOURCE_UID}`);
    }
    if (!Array.isArray(p.targets) || p.targets.length === 0) {
      problems.push(`${name}: no targets`);
      continue;
    }
    for (const t of p.targets) {
      const where = `${name} target ${t.refId}`;
      if (t.datasource && t.datasource.uid !== DATASOURCE_UID) {
        problems.push(`${where}: datasource ${JSON.stringify(t.datasource.uid)}, ` +
          `not ${DATASOURCE_UID}`);
      }
      if (typeof t.expr !== "string" || t.expr.trim() === "") {
        problems.push(`${where}: no expr`);
        continue;
      }
      const s = substitute(t.expr);
      problems.push(...s.problems.map((m) => `${where}: ${m}`));
      queries.push({ where, panel: p.id, refId: t.refId, expr: s.expr });
    }
  }
  return { problems, queries };
}

if (process.argv[1] && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  let rulesFile = null;
  if (args[0] === "--rules") {
    rulesFile = args[1];
    args.splice(0, 2);
  }
  if (args.length === 0 || (rulesFile !== null && !rulesFile)) {
    process.stderr.write("usage: node dashboard.mjs [--rules FILE] JSON...\n");
    process.exit(2);
  }
  let problems = 0;
  const rules = [];
  for (const file of args) {
    let d;
    try {
      d = JSON.parse(readFileSync(file, "utf8"));
    } catch (e) {
      console.log(`FAIL ${file}: ${e.message}`);
      problems++;
      continue;
    }
    const r = checkDashboard(d);
    for (const p of r.problems) {
      console.log(`FAIL ${file}: ${p}`);
    }
    if (r.problems.length === 0) {
      console.log(`ok   ${file}: ${r.queries.length} queries`);
    }
    problems += r.problems.length;
    for (const q of r.queries) {
      const uid = String(d.uid).replace(/\W/g, "_");
      rules.push({ record: `dashboard_${uid}:panel_${q.panel}:${q.refId}`, expr: q.expr });
    }
  }
  if (rulesFile) {
    // JSON is YAML: promtool reads it as a rule file.
    writeFileSync(rulesFile, JSON.stringify({ groups: [{ name: "dashboards", rules }] }, null, 2));
  }
  console.log(`dashboard: ${args.length} file${args.length === 1 ? "" : "s"}, ` +
    `${problems === 0 ? "all valid" : `${problems} problem${problems === 1 ? "" : "s"}`}`);
  process.exit(problems === 0 ? 0 : 1);
}
