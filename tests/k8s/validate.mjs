// Validates rendered kustomize directories against the Kubernetes schemas of kubernetes-models (and
// the Prometheus Operator's CRD schemas of @kubernetes-models/prometheus-operator), and also
// rejects fields those schemas do not define (the packages' validators accept them).
// `node validate.mjs DIR...`: one line per object, one per problem, a summary; exit 1 on any
// problem (an invalid object, an unknown field, an unknown kind, a directory that does not render).
import { realpathSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Namespace, Service, ServiceAccount, ConfigMap, Secret } from "kubernetes-models/v1";
import { PriorityClass } from "kubernetes-models/scheduling.k8s.io/v1";
import { Deployment, DaemonSet } from "kubernetes-models/apps/v1";
import { Job } from "kubernetes-models/batch/v1";
import { PodDisruptionBudget } from "kubernetes-models/policy/v1";
import {
  Role, RoleBinding, ClusterRole, ClusterRoleBinding,
} from "kubernetes-models/rbac.authorization.k8s.io/v1";
// A custom resource: the Prometheus Operator's CRD schema, compiled the same way.
import { PodMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";
// A custom resource without an npm package: Kubeflow's PyTorchJob, written from its CRD.
import { PyTorchJob } from "./kubeflow.mjs";
import { render } from "./render.mjs";

// The kinds deploy/k8s may use, by "apiVersion kind"; any other kind is a problem, so that a typo
// in apiVersion or kind cannot skip validation. Add a model here to allow a new kind, and its
// package to MODEL_PACKAGES.
export const MODELS = new Map(
  [
    Namespace, Service, ServiceAccount, ConfigMap, Secret, PriorityClass, Deployment, DaemonSet,
    Job, PodDisruptionBudget, Role, RoleBinding, ClusterRole, ClusterRoleBinding, PodMonitor,
    PyTorchJob,
  ].map((m) => [`${m.apiVersion} ${m.kind}`, m]),
);

// Models of this directory (kubeflow.mjs), whose validators read exactly the properties their
// schema defines by construction: selfcheck.mjs checks the generated ones only.
export const LOCAL_MODELS = new Set([PyTorchJob]);

// The npm packages the models come from, each with a directory per API version (selfcheck.mjs).
export const MODEL_PACKAGES = ["kubernetes-models", "@kubernetes-models/prometheus-operator"];

// Properties the schemas define but the generated validators never read (kubernetes-models'
// generator drops properties named "description"), by "apiVersion kind": accepted at the top of
// such an object, unchecked. selfcheck.mjs proves this list complete for the pinned version.
export const UNREAD = new Map([["scheduling.k8s.io/v1 PriorityClass", ["description"]]]);

// A JSON path from ajv's instancePath ("/spec/template/spec/containers/0/name") or from a list of
// keys: "spec.template.spec.containers[0].name".
function jsonPath(keys) {
  let s = "";
  for (const k of keys) {
    s += /^\d+$/.test(k) ? `[${k}]` : s === "" ? k : `.${k}`;
  }
  return s;
}

function pointerKeys(pointer) {
  return pointer.split("/").slice(1).map((k) => k.replace(/~1/g, "/").replace(/~0/g, "~"));
}

// Wraps value so that every object the validator reaches records how it was read: the names it
// looked up (a schema's `properties`, `required`) or whether it enumerated the keys (`for...in`:
// an `additionalProperties` map such as labels, annotations or resources.limits). Returns the
// proxy and the records, keyed by the original objects.
export function track(value) {
  const records = new WeakMap();
  const proxies = new WeakMap();
  const wrap = (v) => {
    if (v === null || typeof v !== "object") {
      return v;
    }
    let p = proxies.get(v);
    if (p) {
      return p;
    }
    const rec = { names: new Set(), enumerated: false };
    records.set(v, rec);
    p = new Proxy(v, {
      get(t, k, receiver) {
        if (typeof k === "string") {
          rec.names.add(k);
        }
        return wrap(Reflect.get(t, k, receiver));
      },
      has(t, k) {
        if (typeof k === "string") {
          rec.names.add(k);
        }
        return Reflect.has(t, k);
      },
      ownKeys(t) {
        rec.enumerated = true;
        return Reflect.ownKeys(t);
      },
    });
    proxies.set(v, p);
    return p;
  };
  return { proxy: wrap(value), records };
}

// The fields of obj that the validator never looked up, as "path: unknown field". An object it
// never reached at all has no schema of its own (a free-form object such as a field under
// x-kubernetes-preserve-unknown-fields, or one whose type was already wrong): it is skipped. An
// object whose keys it enumerated is a map: its keys are all allowed, its values are checked.
function unknownFields(obj, records, keys = [], out = []) {
  if (Array.isArray(obj)) {
    obj.forEach((v, i) => unknownFields(v, records, [...keys, String(i)], out));
    return out;
  }
  if (obj === null || typeof obj !== "object") {
    return out;
  }
  const rec = records.get(obj);
  if (!rec || (rec.names.size === 0 && !rec.enumerated)) {
    return out;
  }
  for (const k of Object.keys(obj)) {
    if (rec.enumerated || rec.names.has(k)) {
      unknownFields(obj[k], records, [...keys, k], out);
    } else {
      out.push(`${jsonPath([...keys, k])}: unknown field`);
    }
  }
  return out;
}

// checkObject(obj): the problems of one rendered object, as messages without its name; empty
// when it is valid. The model's own validate() (ajv, compiled from the Kubernetes OpenAPI schema)
// runs on a tracking proxy of the model, so the same run yields the schema errors and the fields
// the schema has no property for.
export function checkObject(obj) {
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) {
    return ["not an object"];
  }
  const Model = MODELS.get(`${obj.apiVersion} ${obj.kind}`);
  if (!Model) {
    const what = `apiVersion ${obj.apiVersion}, kind ${obj.kind}`;
    return [`unknown kind (${what}): no model in validate.mjs`];
  }
  const model = new Model(obj);
  const { proxy, records } = track(model);
  const problems = [];
  try {
    Model.prototype.validate.call(proxy);
  } catch (e) {
    if (!Array.isArray(e.errors)) {
      throw e;
    }
    for (const err of e.errors) {
      let msg = err.message;
      if (err.params && err.params.allowedValues) {
        msg += ` (${err.params.allowedValues.map((v) => JSON.stringify(v)).join(", ")})`;
      }
      const path = jsonPath(pointerKeys(err.instancePath));
      problems.push(path ? `${path}: ${msg}` : msg);
    }
  }
  for (const name of UNREAD.get(`${Model.apiVersion} ${Model.kind}`) || []) {
    records.get(model).names.add(name);
  }
  problems.push(...unknownFields(model, records));
  return [...new Set(problems)];
}

function label(obj) {
  const kind = obj && typeof obj === "object" && obj.kind ? obj.kind : "(no kind)";
  const name = obj && obj.metadata && obj.metadata.name ? obj.metadata.name : "(no name)";
  return `${kind} ${name}`;
}

// validateDirs(dirs, print): renders and checks every directory; returns the number of problems.
export function validateDirs(dirs, print = console.log) {
  let objects = 0;
  let problems = 0;
  for (const dir of dirs) {
    let rendered;
    try {
      rendered = render(dir);
    } catch (e) {
      print(`FAIL ${dir}: ${e.message}`);
      problems++;
      continue;
    }
    if (rendered.length === 0) {
      print(`FAIL ${dir}: renders no objects`);
      problems++;
    }
    for (const obj of rendered) {
      objects++;
      const found = checkObject(obj);
      if (found.length === 0) {
        print(`ok   ${dir}: ${label(obj)}`);
      }
      for (const p of found) {
        print(`FAIL ${dir}: ${label(obj)}: ${p}`);
      }
      problems += found.length;
    }
  }
  const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;
  print(`validate: ${plural(objects, "object", "objects")} in ` +
    `${plural(dirs.length, "directory", "directories")}, ` +
    `${problems === 0 ? "all valid" : plural(problems, "problem", "problems")}`);
  return problems;
}

if (process.argv[1] && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  if (process.argv.length < 3) {
    process.stderr.write("usage: node validate.mjs DIR...\n");
    process.exit(2);
  }
  process.exit(validateDirs(process.argv.slice(2)) === 0 ? 0 : 1);
}
