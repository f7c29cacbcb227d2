// Proves the premise of validate.mjs's unknown-field check for the pinned kubernetes-models: every
// property a model declares (its TypeScript interface) is read by the model's generated validator,
// except the ones UNREAD lists. A property the validator never reads would otherwise be reported
// as an unknown field. `node selfcheck.mjs`: exit 1, naming the types, when that does not hold.
import fs from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";
import { MODELS, UNREAD, track } from "./validate.mjs";

const modules = fileURLToPath(new URL("./node_modules/", import.meta.url));
// The directories of the API versions validate.mjs uses (core "v1" has no group), and ObjectMeta's.
const dirs = new Set(["@kubernetes-models/apimachinery/apis/meta/v1"]);
for (const m of MODELS.values()) {
  dirs.add(`kubernetes-models/${m.apiVersion}`);
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
    const declared = [...iface[1].matchAll(/^ {4}"([^"]+)"\??:/gm)].map((x) => x[1]);
    const mod = await import(pathToFileURL(`${modules}${dir}/${file.replace(/\.d\.ts$/, ".mjs")}`));
    const Model = Object.values(mod).find((v) => typeof v === "function" && v.prototype?.validate);
    if (!Model || declared.length === 0) {
      continue;
    }
    const obj = Object.fromEntries(declared.map((p) => [p, {}]));
    const { proxy, records } = track(obj);
    try {
      Model.prototype.validate.call(proxy);
    } catch {
      // Every property holds {}: most are the wrong type. Only which ones were read matters.
    }
    const rec = records.get(obj);
    const unread = rec.enumerated ? [] : declared.filter((p) => !rec.names.has(p));
    const key = Model.apiVersion && Model.kind ? `${Model.apiVersion} ${Model.kind}` : null;
    const allowed = (MODELS.has(key) && UNREAD.get(key)) || [];
    types++;
    properties += declared.length;
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
