// Renders a kustomize directory offline (`kubectl kustomize DIR`, no cluster) into plain objects.
// As a command: `node render.mjs DIR` prints the objects as one JSON array on stdout.
// KUBECTL names the kubectl binary (default: kubectl on PATH).
import { spawnSync } from "node:child_process";
import { realpathSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

// render(dir): the objects of `kubectl kustomize dir`, in kustomize's order; empty documents are
// dropped. Throws an Error naming the command and its stderr when kubectl fails or is missing,
// and one naming the document when the YAML does not parse.
export function render(dir) {
  const kubectl = process.env.KUBECTL || "kubectl";
  const r = spawnSync(kubectl, ["kustomize", dir], { encoding: "utf8", maxBuffer: 64 << 20 });
  if (r.error) {
    throw new Error(`${kubectl} kustomize ${dir}: ${r.error.message}`);
  }
  if (r.status !== 0) {
    const why = r.signal ? `killed by ${r.signal}` : `exit ${r.status}`;
    throw new Error(`${kubectl} kustomize ${dir}: ${why}: ${r.stderr.trim()}`);
  }
  const objects = [];
  // YAML 1.1, as kubectl reads it: `0644` is octal and `yes` a boolean.
  parseAllDocuments(r.stdout, { version: "1.1" }).forEach((doc, i) => {
    if (doc.errors.length > 0) {
      throw new Error(`${kubectl} kustomize ${dir}: document ${i}: ${doc.errors[0].message}`);
    }
    const obj = doc.toJS({ maxAliasCount: -1 });
    if (obj !== null && obj !== undefined) {
      objects.push(obj);
    }
  });
  return objects;
}

if (process.argv[1] && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  if (process.argv.length !== 3) {
    process.stderr.write("usage: node render.mjs DIR\n");
    process.exit(2);
  }
  try {
    process.stdout.write(JSON.stringify(render(process.argv[2]), null, 2) + "\n");
  } catch (e) {
    process.stderr.write(`render: ${e.message}\n`);
    process.exit(1);
  }
}
