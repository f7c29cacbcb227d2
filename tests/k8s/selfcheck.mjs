// Proves the premise of validate.mjs's unknown-field check for the pinned model packages: every
// property a model declares (its TypeScript interface) is read by the model's generated validator,
// except the ones UNREAD lists. A property the validator never reads would otherwise be reported
// as an unknown field. Custom resources (the Prometheus Operator's) declare their nested objects
// inline rather than as types of their own, so properties are followed into inline objects and
// arrays of them too. `node selfcheck.mjs`: exit 1, naming the types, when that does not hold.
import fs from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";
import { LOCAL_MODELS, MODELS, MODEL_PACKAGES, UNREAD, track } from "./validate.mjs";

const modules = fileURLToPath(new URL("./node_modules/", import.meta.url));
// The directories of the API versions validate.mjs uses (core "v1" has no group), in the package
// that has them, and ObjectMeta's.
const dirs = new Set(["@kubernetes-models/apimachinery/apis/meta/v1"]);
for (const m of MODELS.values()) {
  if (LOCAL_MODELS.has(m)) {
    continue;
  }
  const pkg = MODEL_PACKAGES.find((p) => fs.existsSync(`${modules}${p}/${m.apiVersion}`));
  if (!pkg) {
    console.log(`FAIL selfcheck: no package of MODEL_PACKAGES has ${m.apiVersion} (${m.kind})`);
    process.exit(1);
  }
  dirs.add(`${pkg}/${m.apiVersion}`);
}

// The properties an interface body declares (lines from index i on, indented by indent), as
// { props, next }: props maps each name to null (a scalar, a union, or a named type, which has a
// file of its own) or to the same shape for an inline object ({ ... }) or an array of them
// (Array<{ ... }>, with array: true); a map's [key: string] line declares no property. next is the
// index of the first line after the body. Throws on a line it does not understand, so that a new
// generator's output cannot hide properties from the check.
function parseProps(lines, i, indent) {
  const pad = " ".repeat(indent);
  const props = new Map();
  for (; i < lines.length && lines[i].startsWith(pad); i++) {
    const line = lines[i].slice(indent);
    const prop = line.match(/^"([^"]+)"\??: (.*)$/);
    if (prop && (prop[2] === "{" || prop[2] === "Array<{")) {
      const array = prop[2] !== "{";
      const sub = parseProps(lines, i + 1, indent + 4);
      if (lines[sub.next] !== pad + (array ? "}>;" : "};")) {
        throw new Error(`expected the end of "${prop[1]}", got ${JSON.stringify(lines[sub.next])}`);
      }
      props.set(prop[1], { ...sub, array });
      i = sub.next;
    } else if (prop && prop[2].endsWith(";")) {
      props.set(prop[1], null);
    } else if (!/^\[key: string\]: [^{]*;$/.test(line)) {
      throw new Error(`cannot read ${JSON.stringify(lines[i])}`);
    }
  }
  return { props, next: i };
}

// An instance with every declared property: inline objects (in arrays of one) so that the
// validator descends into them, {} for everything else (mostly the wrong type: only which
// properties it reads matters).
function sample(node) {
  const obj = {};
  for (const [name, sub] of node.props) {
    obj[name] = sub === null ? {} : sub.array ? [sample(sub)] : sample(sub);
  }
  return obj;
}

// The declared properties of node the validator never read on obj (or below), as paths.
function unreadProps(node, obj, records, path = []) {
  const rec = records.get(obj);
  if (rec && rec.enumerated) {
    return [];
  }
  const out = [];
  for (const [name, sub] of node.props) {
    const p = [...path, name];
    if (!rec || !rec.names.has(name)) {
      out.push(p.join("."));
    } else if (sub !== null) {
      out.push(...unreadProps(sub, sub.array ? obj[name][0] : obj[name], records, p));
    }
  }
  return out;
}

function countProps(node) {
  let n = node.props.size;
  for (const sub of node.props.values()) {
    n += sub === null ? 0 : countProps(sub);
  }
  return n;
}

let types = 0;
let properties = 0;
const problems = [];
for (const dir of [...dirs].sort()) {
  const files = fs.readdirSync(modules + dir).filter((f) => /^[A-Z]\w*\.d\.ts$/.test(f)).sort();
  for (const file of files) {
    const decl = fs.readFileSync(`${modules}${dir}/${file}`, "utf8");
    const iface = decl.match(/^export interface I\w+(?: extends [^{]*)? \{\n([\s\S]*?)^\}/m);
    if (!iface) {
      continue;
    }
    let tree;
    try {
      // Without the doc comments (/** ... */), whose lines say nothing about the shape.
      const lines = iface[1].split("\n").filter((l) => !/^\s*(\/\*\*|\*)/.test(l));
      tree = parseProps(lines, 0, 4);
      const rest = lines.slice(tree.next).find((l) => l.trim() !== "");
      if (rest !== undefined) {
        throw new Error(`cannot read ${JSON.stringify(rest)}`);
      }
    } catch (e) {
      problems.push(`${dir}/${file}: ${e.message}`);
      continue;
    }
    const mod = await import(pathToFileURL(`${modules}${dir}/${file.replace(/\.d\.ts$/, ".mjs")}`));
    const Model = Object.values(mod).find((v) => typeof v === "function" && v.prototype?.validate);
    if (!Model || tree.props.size === 0) {
      continue;
    }
    const obj = sample(tree);
    const { proxy, records } = track(obj);
    try {
      Model.prototype.validate.call(proxy);
    } catch {
      // Most properties hold {}, the wrong type. Only which ones were read matters.
    }
    const unread = unreadProps(tree, obj, records);
    const key = Model.apiVersion && Model.kind ? `${Model.apiVersion} ${Model.kind}` : null;
    const allowed = (MODELS.has(key) && UNREAD.get(key)) || [];
    types++;
    properties += countProps(tree);
    if (unread.join() !== allowed.join()) {
      problems.push(`${dir}/${file}: declared but never read by its validator: ` +
        `[${unread.join(", ")}]; validate.mjs UNREAD lists [${allowed.join(", ")}]`);
    }
  }
}
for (const p of problems) {
  console.log(`FAIL selfcheck: ${p}`);
}
const verdict = problems.length === 0
  ? "every one is read by its validator or listed in UNREAD"
  : `${problems.length} problem${problems.length === 1 ? "" : "s"}`;
console.log(`selfcheck: ${types} model types, ${properties} declared properties ` +
  `in ${dirs.size} API versions: ${verdict}`);
process.exit(problems.length === 0 ? 0 : 1);
